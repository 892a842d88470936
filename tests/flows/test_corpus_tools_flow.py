"""`synthesize --tools corpus` on a corpus imported as HotpotQA records (the real importer,
`synthesize` and `validate` flows; template texts, no model): the bank is the corpus's own,
every kind-specific search returns passages of its kind, and validation's replay accepts
the trajectories. Self-play and label acquisition offer the same bank on such a corpus (by
default, `--tools auto`), with a tiny random model; on the world they keep the world's."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.synthesize import run as synthesize
from flows.validate import run as validate
from generators.corpus.build import WorldConfig, write
from generators.corpus.importer import import_file
from generators.llm.registry import BackendConfig
from generators.synth.synthesize import SynthConfig
from generators.tools.simulator import Simulator
from generators.tools.snippets import split_sentences
from storage import load_table
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401 (fixtures)
from validators.validator import ValidateConfig


def _hotpot_file(root, path, n: int = 40):
    """The world's questions written as HotpotQA records (context, supporting_facts by index)."""
    write(WorldConfig(seed=5, entities=150), root, "w")
    docs = {d["doc_id"]: d for d in load_table("w", "documents", root).to_pylist()}
    lines = []
    for t in load_table("w", "triples", root).to_pylist()[:n]:
        sents = {g: split_sentences(docs[g]["text"]) for g in t["golden_doc_ids"]}
        facts = []
        for f in t["supporting_facts"]:
            idx = next((i for i, s in enumerate(sents[f["doc_id"]]) if f["sentence"].strip() in s), 0)
            facts.append([docs[f["doc_id"]]["title"], idx])
        lines.append(json.dumps({"_id": t["triple_id"], "question": t["question"], "answer": t["answer"],
                                 "type": t["qtype"], "context": [[docs[g]["title"], sents[g]] for g in sents],
                                 "supporting_facts": facts}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_synthesize_with_the_corpus_tools_validates(tmp_path):
    root = tmp_path / "data"
    report = import_file(_hotpot_file(root, tmp_path / "hotpot.jsonl"), root, "h")
    assert report.imported == 40 and not report.rejects
    cfg = SynthConfig(dataset="h", n=40, chunk=20, texts="template", tools="corpus")
    out = synthesize(cfg, BackendConfig(), root, progress=False)
    assert out["written"] == 40
    tools = load_table("h", "tools", root, run_id=out["run_id"]).to_pylist()
    kinds = [t for t in tools if json.loads(t["meta"]).get("source") == "corpus"]
    assert len(kinds) >= 2 and "search_person" not in {t["name"] for t in tools}  # not the world's bank
    by_name = {t["name"]: t for t in tools}

    docs = load_table("h", "documents", root).to_pylist()
    sim = Simulator(docs, seed=cfg.seed, tools=tools)
    rows = load_table("h", "trajectories", root, run_id=out["run_id"]).to_pylist()
    kind_calls = 0
    for r in rows:
        assert {t["name"] for t in r["tools"]} <= set(by_name) | {"general_search"}
        results = {m["tool_call_id"]: m["content"] for m in r["messages"] if m["role"] == "tool"}
        for m in r["messages"]:
            for c in m["tool_calls"] or []:
                tool = by_name.get(c["name"])
                if tool is None or tool["domain"] == "general":
                    continue
                kind_calls += 1
                got = json.loads(results[c["id"]]).get("results", [])
                assert all(sim.corpus_domains[sim.index_of[x["doc_id"]]] in (tool["domain"], None) for x in got)
    assert kind_calls > 0

    summary = validate(ValidateConfig(dataset="h"), data_root=root, progress=False)
    verdicts = load_table("h", "verdicts", root).to_pylist()
    replays = [v for v in verdicts if v["check"] == "replay"]
    assert len(replays) == 40 and all(v["passed"] for v in replays), [v["reason"] for v in replays if not v["passed"]]
    assert load_table("h_valid", "trajectories", root).num_rows > 0, summary

    # the command line: by default (auto) an imported corpus gets its own bank; --tools names another
    res = CliRunner().invoke(app, ["--data-root", str(root), "synthesize", "--dataset", "h", "--n", "8",
                                   "--texts", "template"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    runs = {t["run_id"] for t in load_table("h", "tools", root).to_pylist() if "corpus" in (t["meta"] or "")}
    assert len(runs) == 2
    res = CliRunner().invoke(app, ["--data-root", str(root), "synthesize", "--dataset", "h", "--n", "4",
                                   "--texts", "template", "--tools", "nope"], env={"COLUMNS": "200"})
    assert res.exit_code != 0 and "--tools must be one of" in res.output


def _offered(rollouts: list[dict]) -> set[str]:
    """The tool names the system prompts of `rollouts` offer (full style: one JSON function a line)."""
    names = set()
    for r in rollouts:
        block = r["messages"][0]["content"].split("<tools>\n", 1)[1].split("</tools>", 1)[0]
        for line in block.splitlines():
            fn = json.loads(line)
            names.add(fn.get("function", fn)["name"])
    return names


def test_selfplay_and_acquisition_offer_the_corpus_tools(tmp_path, tiny_llama_dir):  # noqa: F811
    from acquire.session import AcquireConfig
    from flows.acquire import run_acquire
    from flows.selfplay import run_selfplay
    from generators.tools.corpus_bank import corpus_bank
    from selfplay.play import PlayConfig

    root = tmp_path / "data"
    import_file(_hotpot_file(root, tmp_path / "hotpot.jsonl", n=12), root, "h")
    bank = {t["name"] for t in corpus_bank(load_table("h", "documents", root).to_pylist())}
    assert "general_search" in bank and len(bank) >= 3 and "search_person" not in bank

    play = PlayConfig(dataset="h", examiner=str(tiny_llama_dir), student=str(tiny_llama_dir), tasks=2, attempts=2,
                      examiner_turns=2, student_turns=2, max_new_tokens=12, batch_size=8, train=False,
                      demo_tasks=True)  # iteration 0 poses demonstrations: the random examiner poses none
    run_selfplay(play, root, progress=False)
    rows = [r for r in load_table("h_selfplay", "rollouts", root).to_pylist() if json.loads(r["meta"])["role"] == "student"]
    assert rows and _offered(rows) == bank  # every tool of the corpus's bank, none of the world's

    acq = AcquireConfig(dataset="h", strategy="random", model=str(tiny_llama_dir), n=2, batch=2, label_p=0.5, limit=2,
                        budget=1, max_turns=2, max_new_tokens=12)
    run_acquire(acq, root, progress=False)
    assert _offered(load_table("h_labels", "rollouts", root).to_pylist()) == bank

    with pytest.raises(ValueError, match="--tools must be one of"):
        PlayConfig(dataset="h", tools="nope").check()
    with pytest.raises(ValueError, match="--tools must be one of"):
        AcquireConfig(dataset="h", tools="nope").check()
