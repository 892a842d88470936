"""SFT: exactly the assistant spans are trained (checked against the rendered text of real
synthesized trajectories), and a few steps on a tiny random model lower the loss."""

import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from generators.corpus.build import WorldConfig, write
from generators.llm.scripted import ScriptedBackend
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.tools.bank import build_bank
from storage import write_rows
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401 (fixtures)
from train.sft import (IGNORE, SFTConfig, context_of, load_examples, longest_turn, make_step, template_messages,
                       tokenize, turn_warning)
from train.trainer import Trainer, TrainConfig


@pytest.fixture(scope="module")
def traj_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write(WorldConfig(seed=3, entities=200), root, "w")
    s = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=12, seed=2), build_bank(seed=3, variants_per_tool=1))
    rows, _ = s.trajectories(s.plans(), ScriptedBackend(), "run")
    # the real system prompt lists every tool (~4k tokens a conversation); a short one keeps
    # the tiny-model training test cheap
    short = [{**r, "messages": [{**r["messages"][0], "content": "Answer with the tools."}] + r["messages"][1:]}
             for r in rows]
    write_rows(root, "w", "trajectories", "run", short)
    return root, rows


def test_labels_cover_exactly_the_assistant_replies(traj_root, embedded_tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    _, rows = traj_root
    for row in rows[:6]:
        msgs = row["messages"]
        assert any(m["role"] == "tool" for m in msgs)
        ex = tokenize(tok, msgs)
        assert len(ex["labels"]) == len(ex["input_ids"])
        # contiguous trained runs, decoded, are the assistant replies + end marker, in order
        runs, cur = [], []
        for t, l in zip(ex["input_ids"], ex["labels"]):
            if l != IGNORE:
                assert l == t
                cur.append(t)
            elif cur:
                runs.append(cur)
                cur = []
        if cur:
            runs.append(cur)
        replies = [m["content"] for m in msgs if m["role"] == "assistant"]
        assert [tok.decode(r) for r in runs] == [c + "<|im_end|>" for c in replies]
        text = tok.decode(ex["input_ids"])
        assert "<|im_start|>tool" not in text and "<tool_response>" in text
        assert text.count("<tool_call>") == sum(m["content"].count("<tool_call>") for m in msgs)


@pytest.mark.parametrize("case,flag,after", [("repeat", "repeated_call", "is the same page about"),
                                              ("unknown_tool", "unknown_tool", "There is no tool named")])
def test_a_flagged_mistake_is_context_not_a_target(traj_root, embedded_tokenizer_dir, case, flag, after):
    """A turn flagged `repeated_call` (the repeat case) or `unknown_tool` (a call of a tool that is
    not offered) is read but not trained; the turn after it (which says what went wrong) is trained,
    and SFTConfig's default keeps it so."""
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    root, _ = traj_root
    s = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=6, seed=2, case_mix=f"{case}=1", texts="template"),
                build_bank(seed=3, variants_per_tool=1))
    rows, _ = s.trajectories(s.plans(), None, "run")
    rows = [r for r in rows if r["case"] == case]
    assert rows
    context = context_of(SFTConfig())
    for row in rows:
        msgs = row["messages"]

        def trained(ctx):
            ex = tokenize(tok, msgs, ctx)
            return tok.decode([t for t, l in zip(ex["input_ids"], ex["labels"]) if l != IGNORE])

        replies = [m for m in msgs if m["role"] == "assistant"]
        flagged = [m for m in replies if any(c["injected_error"] == flag for c in m["tool_calls"] or [])]
        assert len(flagged) == 1
        assert trained(frozenset()) == "".join(m["content"] + "<|im_end|>" for m in replies)
        assert trained(context) == "".join(m["content"] + "<|im_end|>" for m in replies if m is not flagged[0])
        assert after in replies[replies.index(flagged[0]) + 1]["content"]


def test_cases_keeps_only_the_named_reflection_cases(traj_root, embedded_tokenizer_dir):
    """`--cases` takes comma-separated names (spaces allowed); the other cases are counted, not kept;
    a name no trajectory has is a readable error."""
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    root, rows = traj_root
    by_case = {c: sum(r["case"] == c for r in rows) for c in {r["case"] for r in rows}}
    assert len(by_case) >= 2, by_case  # the default mix gives clean and error cases
    one = sorted(by_case)[0]
    cfg = SFTConfig(data="w", max_len=100_000, validated_only=False)
    _, counts = load_examples(root, "w", tok, replace(cfg, cases=f" {one} ,"))
    assert (counts["kept"], counts["other_case"]) == (by_case[one], len(rows) - by_case[one])
    _, counts = load_examples(root, "w", tok, replace(cfg, cases=", ".join(by_case)))
    assert counts["kept"] == len(rows) and "other_case" not in counts
    assert context_of(replace(cfg, context_errors=" repeated_call, wrong_args,")) == {"repeated_call", "wrong_args"}
    with pytest.raises(ValueError, match=rf"--cases names cleen, which no trajectory of 'w' has \(its cases: {one}, "):
        load_examples(root, "w", tok, replace(cfg, cases=f"{one},cleen"))  # a typo is an error, not an empty filter


def test_context_errors_count_the_turns_read_as_context(traj_root, embedded_tokenizer_dir):
    """The assistant turns `--context-errors` reads as context are counted (`context_turns`), so a
    name no call carries shows as none read rather than passing unseen."""
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    root, rows = traj_root
    wrong = sum(1 for r in rows for m in r["messages"] if m["role"] == "assistant"
                and any(str(c.get("injected_error") or "").startswith("wrong_args") for c in m.get("tool_calls") or []))
    assert wrong > 0  # the default mix injects wrong arguments
    cfg = SFTConfig(data="w", max_len=100_000, validated_only=False)
    _, read = load_examples(root, "w", tok, replace(cfg, context_errors="wrong_args"))
    _, typo = load_examples(root, "w", tok, replace(cfg, context_errors="wrong_argz"))
    assert read["context_turns"] == wrong and "context_turns" not in typo
    assert read["trained_tokens"] < typo["trained_tokens"]  # those turns are not trained


def test_template_messages_tool_as_user_turn():
    out = template_messages([{"role": "assistant", "content": "x", "tool_calls": []},
                             {"role": "tool", "content": "{\"r\": 1}", "tool_call_id": "c1", "name": "f"}])
    assert out == [{"role": "assistant", "content": "x"},
                   {"role": "user", "content": "<tool_response>\n{\"r\": 1}\n</tool_response>"}]


def test_longest_turn_counts_the_longest_assistant_reply(traj_root, tiny_llama_dir):
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)

    def longest(words: int) -> int:
        msgs = [{"role": "user", "content": "Which?"}, {"role": "assistant", "content": "look " * 5},
                {"role": "tool", "content": "{}", "name": "f"}, {"role": "assistant", "content": "look " * words}]
        return longest_turn(tokenize(tok, msgs)["labels"])

    assert longest(60) - longest(20) == 40  # one token per " look": the long reply, not the short one
    assert longest_turn([IGNORE, 5, 6, IGNORE, 7, 8, 9, IGNORE]) == 3 and longest_turn([IGNORE]) == 0
    root, _ = traj_root
    examples, counts = load_examples(root, "w", tok, SFTConfig(data="w", max_len=4096))
    assert counts["longest_turn"] == max(longest_turn(e["labels"]) for e in examples) > 0
    # each example names the trajectory it was tokenized from
    from generators.corpus.questions import question_kind
    from storage import load_table

    by_id = {r["id"]: r for r in load_table("w", "trajectories", root).to_pylist()}
    assert all(e["input_ids"] == tokenize(tok, by_id[e["id"]]["messages"])["input_ids"] for e in examples)
    # and its kind of question (what --order kinds takes turns by), from the triple it was built on
    triples = {t["triple_id"]: t for t in load_table("w", "triples", root).to_pylist()}
    kinds = [e["kind"] for e in examples]
    assert kinds == [question_kind(triples[by_id[e["id"]]["triple_id"]]) for e in examples] and len(set(kinds)) > 1


def test_few_sft_steps_lower_loss_on_assistant_tokens(traj_root, tiny_llama_dir, tmp_path):
    root, _ = traj_root
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    examples, counts = load_examples(root, "w", tok, SFTConfig(data="w", max_len=2048, limit=2))
    assert counts["kept"] == len(examples) > 0 and counts["trained_tokens"] > 50
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    step = make_step(tok.pad_token_id)
    t = Trainer(model, TrainConfig(max_steps=4, lr=3e-3, batch_size=1, schedule="constant", checkpoint_every=0),
                tmp_path, step)
    recs = t.fit(examples, progress=False)
    assert recs[-1]["loss"] < recs[0]["loss"]
    assert all(r["trained_tokens"] < r["tokens"] for r in recs)


def test_sft_flow_writes_metrics_curves_model_and_resumes(traj_root, tiny_llama_dir, tmp_path):
    """The Prefect flow end to end on the tiny model; a second call with resume=True and a
    higher max_steps continues from the checkpoint instead of starting over."""
    from flows.train import run
    from train.sft import SFTConfig
    from train.trainer import read_metrics

    root, _ = traj_root
    out = tmp_path / "run"
    sft = SFTConfig(data="w", model=str(tiny_llama_dir), out=str(out), max_len=2048, limit=2)
    s1 = run("sft", sft, TrainConfig(max_steps=1, batch_size=1, lr=1e-3, keep_checkpoints=True), root, progress=False)
    assert s1["steps"] == 1 and (out / "curves.png").exists() and (out / "final" / "config.json").exists()
    # the final model records its longest trained turn; an evaluation whose turns are shorter is warned
    longest = json.loads((out / "final" / "forgeplay-model.json").read_text())["longest_turn"]
    assert longest == s1["counts"]["longest_turn"] > 0
    assert f"up to {longest} tokens, more than --max-new-tokens {longest - 1}" in turn_warning(out / "final", longest - 1)
    assert turn_warning(out / "final", longest) is None and turn_warning(tiny_llama_dir, 1) is None  # no record
    s2 = run("sft", sft, TrainConfig(max_steps=2, batch_size=1, lr=1e-3, resume=True, keep_checkpoints=True), root,
             progress=False)
    assert [r["step"] for r in read_metrics(out)] == [1, 2] and s2["steps"] == 2
    assert (out / "checkpoints" / "latest").read_text() == "step-00000002"


def test_loss_on_assistant_positions_only_equals_full_projection(traj_root, tiny_llama_dir):
    """sft_loss projects only positions that predict a labelled token: same loss and gradients
    as projecting every position."""
    from train.sft import collate, sft_loss

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    examples, _ = load_examples(traj_root[0], "w", tok, SFTConfig(data="w", limit=3))
    batch = collate(examples, tok.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    fast = sft_loss(model, batch)
    fast.backward()
    g_fast = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    full = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             batch["labels"][:, 1:].reshape(-1), ignore_index=IGNORE)
    full.backward()
    assert torch.allclose(fast, full, atol=1e-6)
    for n, p in model.named_parameters():
        assert torch.allclose(g_fast[n], p.grad, atol=1e-6, rtol=1e-4), n


def test_dft_loss_is_cross_entropy_scaled_by_the_token_probability(traj_root, tiny_llama_dir):
    """`--loss-type dft`: the mean over labelled tokens of -sg(p) log p, computed from the full
    logits by hand; its gradient differs from cross entropy's."""
    from train.sft import collate, make_step, sft_loss

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    examples, _ = load_examples(traj_root[0], "w", tok, SFTConfig(data="w", limit=3))
    batch = collate(examples, tok.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    dft = sft_loss(model, batch, loss_type="dft")
    dft.backward()
    g_dft = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    target = batch["labels"][:, 1:]
    keep = target != IGNORE
    logp = torch.log_softmax(logits[:, :-1], -1)[keep].gather(-1, target[keep].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(dft, -(logp.detach().exp() * logp).mean(), atol=1e-6)
    assert float(dft) < float(-logp.mean())  # every p < 1 lowers the token's share
    model.zero_grad()
    sft_loss(model, batch).backward()
    assert any(not torch.allclose(g_dft[n], p.grad, atol=1e-6) for n, p in model.named_parameters())
    with pytest.raises(ValueError, match="--loss-type must be one of nll, dft"):
        sft_loss(model, batch, loss_type="focal")
    loss, stats = make_step(tok.pad_token_id, loss_type="dft")(model, examples)  # it logs the cross entropy too
    assert torch.allclose(loss, dft, atol=1e-6) and stats["nll"] == pytest.approx(float(-logp.mean()), abs=1e-5)
    assert "nll" not in make_step(tok.pad_token_id)(model, examples)[1]


def test_an_unknown_loss_type_stops_sft_before_anything_is_loaded(tmp_path):
    from train.configs import TrainConfig
    from train.stages import build_sft

    cfg = SFTConfig(data="none", model=str(tmp_path / "no-such-model"), loss_type="focal")
    with pytest.raises(ValueError, match="--loss-type must be one of nll, dft, not 'focal'"):
        build_sft(cfg, TrainConfig(), tmp_path)


def test_train_last_layers_freezes_the_rest(tiny_llama_dir):
    from train.sft import train_last_layers

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    n_blocks = model.config.num_hidden_layers
    counts = train_last_layers(model, 1)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(f"layers.{n_blocks - 1}." in n or n.endswith("model.norm.weight") for n in trainable)
    assert counts["trainable"] == sum(p.numel() for n, p in model.named_parameters() if n in trainable) < counts["total"]
    with pytest.raises(ValueError, match="blocks"):
        train_last_layers(model, n_blocks + 1)
    assert train_last_layers(model, 0)["total"] == counts["total"]
