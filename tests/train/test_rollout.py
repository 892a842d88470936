"""Multi-turn rollouts over the real simulator and real tokenizer/scoring of a tiny model;
the policy's text is scripted (a random model writes no tool calls), so the turn loop, the
policy/tool mask, the logprobs and the reward are what is tested. GRPO steps run with real
sampling from the tiny model."""

import json

import pytest
import torch

from generators.llm.base import Completion
from generators.llm.transformers_backend import TransformersBackend
from generators.tools.bank import build_bank
from generators.tools.simulator import Simulator
from storage import load_table
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401 (fixtures)
from train.grpo import GRPOConfig, build_session, make_prompts
from train.rollout import RolloutConfig, rollout
from train.trainer import Trainer, TrainConfig


@pytest.fixture(scope="module")
def world(world_root):
    root = world_root
    return root, load_table("w", "triples", root).to_pylist(), load_table("w", "documents", root).to_pylist()


class Scripted(TransformersBackend):
    """The tiny model's tokenizer and scoring; the text of each turn comes from a script."""

    def __init__(self, path, script):
        super().__init__(path)
        self.script, self.turn = script, 0

    def generate(self, requests, progress=False):
        text = self.script[min(self.turn, len(self.script) - 1)]
        self.turn += 1
        out, k = [], 0
        for r in requests:  # n samples per request; the script goes by sample position
            samples = []
            for _ in range(r.n):
                full = text[k % len(text)] if isinstance(text, list) else text
                k += 1
                # like the real backend: the text is cut before the stop string
                cut = min((full.find(s) for s in r.stop if s in full), default=len(full))
                samples.append(Completion(text=full[:cut], token_ids=self.tokenizer(full)["input_ids"]))
            out.append(samples)
        return out


def _turn(calls: list[dict]) -> str:
    """A policy turn that makes `calls` in parallel, one `<tool_call>` block each."""
    return "<think>look</think>\n" + "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)


def test_multi_turn_rollout_mask_logprobs_reward(world, tiny_llama_dir):
    root, triples, docs = world
    tools = build_bank(seed=0, variants_per_tool=1)
    tri = triples[0]
    name = tools[0]["name"]
    call = f'<think>search</think>\n<tool_call>\n{json.dumps({"name": name, "arguments": {"query": tri["question"]}})}\n</tool_call>'
    final = f"<think>found it</think>\n<answer>{tri['answer']}</answer>"
    be = Scripted(tiny_llama_dir, [call, final])
    sim = Simulator(docs, seed=0, tools=tools)
    [r] = rollout(be, sim, make_prompts([tri], tools), RolloutConfig(max_turns=4))
    roles = [m["role"] for m in r.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert r.messages[2]["content"] == call and r.messages[4]["content"] == final
    # the tool message is exactly what the simulator returns for that call (replayable)
    assert r.messages[3]["content"] == sim.call(name, {"query": tri["question"]})
    assert r.stats["calls"] == 1 and r.stats["finish"] == "answer" and r.stats["em"] == 1.0
    assert r.reward == pytest.approx(1.1)
    # the mask covers exactly the two policy replies (+ end markers), not tool output
    tok = be.tokenizer
    runs, cur = [], []
    for t, m in zip(r.token_ids, r.mask):
        if m:
            cur.append(t)
        elif cur:
            runs.append(tok.decode(cur))
            cur = []
    runs += [tok.decode(cur)] if cur else []
    assert runs == [call + "<|im_end|>", final + "<|im_end|>"]
    # logprobs: the policy's teacher-forced values on policy tokens, 0 elsewhere
    assert len(r.logprobs) == len(r.token_ids)
    assert all(lp == 0.0 for lp, m in zip(r.logprobs, r.mask) if not m)
    assert all(lp < 0.0 for lp, m in zip(r.logprobs, r.mask) if m)
    first = r.mask.index(1)
    direct = be.score(r.token_ids[:first], r.token_ids[first:first + 5])
    assert r.logprobs[first:first + 5] == pytest.approx(direct, abs=1e-4)


def test_wrong_answer_and_no_call_get_low_reward(world, tiny_llama_dir):
    _, triples, docs = world
    tools = build_bank(seed=0, variants_per_tool=1)
    be = Scripted(tiny_llama_dir, ["I do not know."])
    [r] = rollout(be, Simulator(docs, seed=0, tools=tools), make_prompts(triples[:1], tools), RolloutConfig())
    assert r.stats["finish"] == "no_call" and r.reward == 0.0 and len(r.messages) == 3


def test_grpo_steps_on_tiny_model(world, tiny_llama_dir, tmp_path):
    """Real GRPO update: group advantages from varied rewards, clipped surrogate on policy
    tokens, KL to the frozen start model. A group whose rewards are all equal (what a random
    model earns) has zero advantage, so the script gives one right and one wrong answer."""
    from transformers import AutoModelForCausalLM

    root, triples, _ = world
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    cfg = GRPOConfig(data="w", group_size=2, limit=1, max_turns=2, max_new_tokens=8, kl_coef=0.05)
    session = build_session(root, cfg, tiny_llama_dir, model)
    gold = triples[0]["answer"]
    session.backend = Scripted(tiny_llama_dir, [[f"<think>x</think><answer>{gold}</answer>",
                                                 "<think>x</think><answer>nobody</answer>"]])
    before = [p.detach().clone() for p in model.parameters()]
    recs = Trainer(model, TrainConfig(max_steps=1, batch_size=1, lr=1e-3, checkpoint_every=0), tmp_path,
                   session.step).fit(session.prompts, progress=False)
    assert torch.isfinite(torch.tensor(recs[0]["loss"])) and recs[0]["tokens"] > 0
    assert recs[0]["reward"] == pytest.approx((1.1 + 0.1) / 2)  # wrong answer: format bonus only
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert session.backend.lm is model


def test_parallel_calls_of_a_turn_all_run_and_found_counts_those_with_a_needed_page(world, tiny_llama_dir):
    """Two calls in one turn (as synthesized parallel routes make them) both run, in order; the
    general search (it sees every page) finds one of the question's golden pages, the calculator
    finds no page."""
    from train.evaluate import summarize

    _, triples, docs = world
    tools = build_bank(seed=0, variants_per_tool=0, calculator=True)
    tri = triples[0]
    title = next(d["title"] for d in docs if d["doc_id"] == tri["golden_doc_ids"][0])
    general = next(t["name"] for t in tools if t["domain"] == "general")
    calls = [{"name": general, "arguments": {"query": title}}, {"name": "calculate", "arguments": {"expression": "2 - 1"}}]
    turn = _turn(calls)
    be = Scripted(tiny_llama_dir, [turn, "<think>done</think>\n<answer>x</answer>"])
    [r] = rollout(be, Simulator(docs, seed=0, tools=tools), make_prompts([tri], tools), RolloutConfig())
    assert any(d in r.messages[3]["content"] for d in tri["golden_doc_ids"])
    assert r.messages[4]["content"] == '{"expression": "2 - 1", "result": 1}'
    assert r.stats["calls"] == 2 and r.stats["found"] == 1
    assert summarize([r])["found_per_call"] == 0.5


def test_a_call_finds_what_its_query_asks_for_not_the_questions_golden_pages(world, tiny_llama_dir):
    """The simulator answers a rollout's call by its query alone: a search for another page
    returns that page, not the question's golden pages (a search that is handed them finds a
    page for any query), and only the call whose query names a golden page counts as found."""
    _, triples, docs = world
    tools = build_bank(seed=0, variants_per_tool=0)
    tri = triples[0]
    title = {d["doc_id"]: d["title"] for d in docs}
    other = next(d for d in docs if d["doc_id"] not in tri["golden_doc_ids"]
                 and not any(title[g] in d["text"] for g in tri["golden_doc_ids"]))
    general = next(t["name"] for t in tools if t["domain"] == "general")
    calls = [{"name": general, "arguments": {"query": q, "top_k": 1}}
             for q in (other["title"], title[tri["golden_doc_ids"][0]])]
    turn = _turn(calls)
    be = Scripted(tiny_llama_dir, [turn, "<think>done</think>\n<answer>x</answer>"])
    [r] = rollout(be, Simulator(docs, seed=0, tools=tools), make_prompts([tri], tools), RolloutConfig())
    got = [[x["doc_id"] for x in json.loads(r.messages[i]["content"])["results"]] for i in (3, 4)]
    assert got == [[other["doc_id"]], [tri["golden_doc_ids"][0]]]
    assert r.stats["calls"] == 2 and r.stats["found"] == 1
