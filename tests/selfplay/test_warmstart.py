"""Examiner warm-start: demonstrations built from a real world corpus and its BM25
simulator, the task rules and validate flow accept every one, the flow commits them once,
and with --out the SFT stage fine-tunes an examiner on them (tiny random Llama)."""

import json
from collections import Counter

import pytest
from safetensors.torch import load_file

from generators.corpus.build import WorldConfig, write
from generators.llm.toolcalls import parse_tool_calls
from generators.tools.base import base_rows
from generators.tools.simulator import Simulator
from selfplay.qcp import QCP
from selfplay.warmstart import EXAMINER_TOOL, WarmstartConfig, demonstrations, parse_hop_mix
from storage import Catalog, load_table
from tests.generators.conftest import embedded_tokenizer_dir, tiny_llama_dir  # noqa: F401
from train.configs import TrainConfig


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("warm")
    write(WorldConfig(seed=3, entities=200), root, "w")
    docs = load_table("w", "documents", root).to_pylist()
    triples = load_table("w", "triples", root).to_pylist()
    tools = base_rows()
    return root, docs, triples, Simulator(docs, seed=0, tools=tools), next(t for t in tools if t["name"] == EXAMINER_TOOL)


def test_each_demonstration_searches_the_chain_in_order_and_asks_the_triples_question(world):
    root, docs, triples, sim, tool = world
    demos, left_out = demonstrations(docs, triples, sim, tool, dataset="w")
    by_id = {t["triple_id"]: t for t in triples}
    titles = {d["doc_id"]: d["title"] for d in docs}
    assert demos
    for d in demos:
        traj, task = d["trajectory"], d["task"]
        t = by_id[traj["triple_id"]]
        qcp = QCP.from_json(task["qcp"])
        assert qcp.queries() == [titles[g] for g in t["golden_doc_ids"]] and qcp.seed_doc_id == t["golden_doc_ids"][0]
        assert task["hop_count"] == t["hop_count"] and (task["question"], task["answer"]) == (t["question"], t["answer"])
        assert all(step.doc_ids for step in qcp.steps)
        msgs = traj["messages"]
        assert msgs[-1]["content"].endswith(f"<question>{t['question']}</question>\n<answer>{t['answer']}</answer>")
        for call_turn, result in zip(msgs[2:-1:2], msgs[3:-1:2]):  # every result is the simulator's own answer
            (call,) = parse_tool_calls(call_turn["content"]).calls
            assert result["content"] == sim.call(call["name"], call["arguments"])
    # with n = 0 every triple of a hop count in the mix is a demonstration or a counted reject
    parsed_rejects = sum(n for r, n in left_out.items() if not r.startswith(("no_", "short_of_")))
    assert len(demos) + parsed_rejects == sum(1 for t in triples if t["hop_count"] in (1, 2, 3, 4))
    assert left_out["answer_in_question"] > 0  # "Between A and B, whose ...?" names its answer (an "A or B?" may)


def test_the_hop_mix_decides_the_hop_counts(world):
    _, docs, triples, sim, tool = world
    demos, left_out = demonstrations(docs, triples, sim, tool, hop_mix="0:1:1", n=8, seed=5)
    hops = Counter(d["task"]["hop_count"] for d in demos)
    assert set(hops) <= {2, 3} and sum(hops.values()) <= 8 and hops[2] > 0
    again, _ = demonstrations(docs, triples, sim, tool, hop_mix="0:1:1", n=8, seed=5)
    assert [d["task"]["task_id"] for d in again] == [d["task"]["task_id"] for d in demos]
    assert parse_hop_mix("4:3:2:1") == {1: 0.4, 2: 0.3, 3: 0.2, 4: 0.1}
    for bad in ("a:b", "0:0", "-1:2", ""):
        with pytest.raises(ValueError, match="hop-mix"):
            parse_hop_mix(bad)


def test_flow_commits_once_the_filter_accepts_all_and_sft_trains_an_examiner(world, tiny_llama_dir):  # noqa: F811
    from flows.selfplay import run_warmstart
    from flows.validate import run as validate
    from validators.validator import ValidateConfig

    root = world[0]
    cfg = WarmstartConfig(dataset="w", n=12, out=str(root / "examiner"), model=str(tiny_llama_dir))
    s = run_warmstart(cfg, TrainConfig(max_steps=2, batch_size=2, lr=1e-3, checkpoint_every=0), root, progress=False)
    assert s["demos"]["committed_now"] == s["demos"]["demonstrations"] > 0
    again = run_warmstart(WarmstartConfig(dataset="w", n=12), TrainConfig(), root, progress=False)
    assert again["demos"]["committed_now"] == 0 and again["training"] is None
    more = run_warmstart(WarmstartConfig(dataset="w", n=20, hop_mix="0:1"), TrainConfig(), root, progress=False)
    ids = load_table("w_examiner", "trajectories", root).column("id").to_pylist()
    assert len(ids) == len(set(ids)) == s["demos"]["demonstrations"] + more["demos"]["committed_now"]
    with Catalog(root) as cat:
        assert cat.scalar("SELECT count(*) FROM w_examiner_tasks") == cat.scalar(
            "SELECT count(DISTINCT id) FROM w_examiner_trajectories") == len(ids)
    v = validate(ValidateConfig(dataset="w_examiner", kind="tasks", layers="schema,rules"), data_root=root, progress=False)
    assert v["rows_out"] == len(ids)  # the filter's task rules accept every demonstration

    tr = s["training"]
    assert tr["steps"] == 2 and tr["counts"]["kept"] == s["demos"]["demonstrations"]
    before, after = load_file(str(tiny_llama_dir / "model.safetensors")), load_file(f"{tr['final_model']}/model.safetensors")
    assert any(not before[k].equal(after[k]) for k in before)
    assert json.loads((root / "examiner" / "config.json").read_text())["sft"]["data"] == "w_examiner"


def test_fewer_results_per_search_make_shorter_demonstrations_of_most_tasks(world):
    """--top-k 2: every search asks for 2 results and gets at most 2; most triples still make
    demonstrations the filter accepts, under other ids, in fewer characters."""
    _, docs, triples, sim, tool = world
    five = {d["trajectory"]["triple_id"]: d for d in demonstrations(docs, triples, sim, tool)[0]}
    two = {d["trajectory"]["triple_id"]: d for d in demonstrations(docs, triples, sim, tool, top_k=2)[0]}
    both = sorted(set(two) & set(five))
    assert len(both) >= 0.5 * len(five)
    assert not {d["task"]["task_id"] for d in two.values()} & {d["task"]["task_id"] for d in five.values()}
    five, two = [five[t] for t in both], [two[t] for t in both]
    for d in two:
        msgs = d["trajectory"]["messages"]
        for call_turn, result in zip(msgs[2:-1:2], msgs[3:-1:2]):
            (call,) = parse_tool_calls(call_turn["content"]).calls
            assert call["arguments"]["top_k"] == 2 and len(json.loads(result["content"])["results"]) <= 2

    def size(demos):
        return sum(len(m["content"]) for d in demos for m in d["trajectory"]["messages"])

    assert size(two) < 0.9 * size(five)
    assert WarmstartConfig(dataset="w", top_k=2).demos_dataset() == "w_examiner_top2"  # not mixed into SFT's data
    with pytest.raises(ValueError, match="--top-k must be 0"):
        demonstrations(docs, triples, sim, tool, top_k=-1)
