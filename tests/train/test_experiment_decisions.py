"""experiments/decisions.py on real `--reasoning plan` trajectories: it finds the tokens where a
chain goes on or ends where the synthesizer's plan says they are, scores them with the model's
own next-token probabilities, and reads only the trajectories an SFT run did not train on."""

from collections import Counter

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from experiments.decisions import main, measure, points, sureness
from generators.corpus.build import WorldConfig, write
from generators.llm.scripted import ScriptedBackend
from generators.synth.synthesize import Session, SynthConfig, load_inputs
from generators.tools.bank import build_bank
from storage import write_rows
from storage.schema import meta_of
from train.sft import assistant_spans


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A data folder of plan-text trajectories (every question type, with the calculator) whose
    system prompt is short, so a tiny model trains on them quickly."""
    root = tmp_path_factory.mktemp("decisions") / "data"
    write(WorldConfig(seed=3, entities=200), root, "w")
    cfg = SynthConfig(dataset="w", n=60, seed=2, reasoning="plan", calculator=True, first_search="general",
                      kinds_in_turn=True)
    s = Session(load_inputs(root, "w"), cfg, build_bank(seed=3, variants_per_tool=0, calculator=True))
    rows, _ = s.trajectories(s.plans(), ScriptedBackend(), "run")
    rows = [{**r, "messages": [{**r["messages"][0], "content": "Answer with the tools."}] + r["messages"][1:]}
            for r in rows]
    write_rows(root, "w", "trajectories", "run", rows)
    return root, rows


def test_the_decisions_are_where_the_plan_goes_on_and_ends(planned, embedded_tokenizer_dir):
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    checked = Counter()
    for row in planned[1]:
        meta = meta_of(row)
        text, spans = assistant_spans(tok, row["messages"])
        found = points(text, spans)
        if row["case"] != "clean" or not any(w.endswith("ends") for _, w in found):
            continue
        items = len(meta["plan"])  # lookup rounds, and the calculator when the answer is computed
        computed = meta["qtype"] == "compositional"
        want = [f"item {k}: goes on" for k in range(1, items)] + [f"item {items}: ends"]
        want += [f"result {k}: next" for k in range(1, items)] + ([] if computed else [f"result {items}: last lookup"])
        assert [w for _, w in found] == want, row["question"]
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        for char, what in found:
            token = next(i for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"]) if a <= char < b)
            assert tok.decode([token]).strip() in {"goes on": ('",', ","), "ends": ('".', "."), "next": ("Next",),
                                                   "last lookup": ("That",)}[what.split(": ")[1]], what
        checked[meta["qtype"]] += 1
    assert checked["bridge"] >= 3 and checked["compositional"] >= 3, checked


def test_sureness_is_the_models_probability_of_the_token_at_the_point(planned, tiny_llama_dir):
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    row = next(r for r in planned[1] if meta_of(r)["qtype"] == "bridge" and r["case"] == "clean")
    text, spans = assistant_spans(tok, row["messages"])
    found = points(text, spans)
    got = sureness(model, tok, text, found)
    assert [w for w, _, _ in got] == [w for _, w in found]
    ids = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    for (char, _), (_, p, first) in zip(found, got):
        t = next(i for i, (a, b) in enumerate(ids["offset_mapping"]) if a <= char < b)
        with torch.no_grad():  # the prefix alone: the model has seen nothing from the point on
            probs = torch.softmax(model(torch.tensor([ids["input_ids"][:t]])).logits[0, -1].float(), -1)
        assert p == pytest.approx(probs[ids["input_ids"][t]].item(), abs=1e-5)
        assert first == (int(probs.argmax()) == ids["input_ids"][t])


@pytest.mark.experiment
def test_a_run_is_read_on_the_trajectories_it_did_not_train_on(planned, tiny_llama_dir, embedded_tokenizer_dir):
    from flows.train import run
    from train.configs import SFTConfig
    from train.trainer import TrainConfig, read_metrics

    data, rows = planned
    out = data.parent / "run"
    run("sft", SFTConfig(data="w", model=str(tiny_llama_dir), out=str(out), max_len=4096),
        TrainConfig(max_steps=2, batch_size=2, lr=1e-3), data, progress=False)
    trained = {i for r in read_metrics(out) for i in r["batch"]}
    assert len(trained) == 4
    got = measure(data.parent, progress=False)
    tok = AutoTokenizer.from_pretrained(embedded_tokenizer_dir)
    per_row = [[w for _, w in points(*assistant_spans(tok, r["messages"], frozenset({"repeated_call"})))] for r in rows]
    assert sum(got["trained"].values()) + sum(n for d in got["unseen"].values() for n, _, _ in d.values()) \
        == sum(map(len, per_row))
    assert sum(got["trained"].values()) == sum(len(per_row[i]) for i in trained)
    assert all(0.0 <= p <= 1.0 and 0.0 <= first <= 1.0 for d in got["unseen"].values() for _, p, first in d.values())


def test_a_folder_that_is_not_a_finished_run_is_refused_by_name(planned, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--root", str(planned[0])])
    assert stop.value.code == 2
    assert "is not a finished experiments/sft_tool_use.py run: it has no data, run/config.json" in capsys.readouterr().err
