"""`forgeplay export verl --tool-agent` (train/verl_export.py, train/verl_bundle.py): rows verl's
tool agent reads, tools listed once, prompt lengths from the model's tokenizer, the corpus of a
validated dataset, a reward module that runs on the standard library alone, and (marker `verl`)
verl's own loaders reading the export in .venv-verl, where forgeplay is not installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from generators.llm.toolcalls import parse_tool_calls
from generators.tools.simulator import Simulator
from storage import load_table, write_rows
from storage.runs import save_run_config
from storage.schema import SHARED_COLUMNS
from tests.train.test_export import root  # noqa: F401  (module fixture: a small dataset with tools)
from train.reward import compute_score
from train.verl_bundle import TOOL_CLASS
from train.verl_export import corpus_of, export_verl

SIDE = Path(__file__).with_name("verl_side.py")
_TOOLS_TEMPLATE = ("{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>"
                   "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                   "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def exported(root, embedded_tokenizer_dir, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("verl")
    return out, export_verl("w", out, root, test_fraction=0.2, tool_agent=True, tokenizer=embedded_tokenizer_dir)


def _rows(out: Path) -> list[dict]:
    return pq.read_table(out / "train.parquet").to_pylist() + pq.read_table(out / "test.parquet").to_pylist()


def _trajectories(root) -> dict:  # noqa: F811
    return {t["traj_id"]: t for t in load_table("w", "trajectories", root).to_pylist()}


def test_tool_rows_name_every_offered_tool_with_its_create_kwargs(root, exported):  # noqa: F811
    out, r = exported
    trajs = _trajectories(root)
    rows = _rows(out)
    tool_rows = [x for x in rows if x["ability"] == "tool_use"]
    assert {x["extra_info"]["split"] for x in tool_rows} == {"train", "test"}  # the test split has tool rows too
    assert len(tool_rows) == len(trajs) - 1 and r.corpus == "w" and r.tools_in == "system"  # SmolLM2 ignores tools=
    config = yaml.safe_load((out / "tool_config.yaml").read_text())["tools"]
    assert [t["tool_schema"]["function"]["name"] for t in config] == r.tool_names
    assert {t["class_name"] for t in config} == {TOOL_CLASS}
    json_type = pq.read_schema(out / "train.parquet").field("extra_info").type.field("tools_kwargs").type
    assert json_type == pa.json_()  # Parquet's JSON type: verl's loader (HF datasets) gives a dict
    for x in tool_rows:
        traj, info = trajs[x["extra_info"]["id"]], x["extra_info"]
        meta = json.loads(traj["meta"])
        assert x["agent_name"] == "tool_agent" and info["need_tools_kwargs"]
        assert info["tool_selection"] == [t["name"] for t in traj["tools"]]
        kwargs = json.loads(info["tools_kwargs"])  # the offered tools and no other, no null entry
        assert list(kwargs) == info["tool_selection"] and set(kwargs) <= set(r.tool_names)
        assert all(v["create_kwargs"] == {"golden_doc_ids": meta["golden_doc_ids"], "seed": meta["seed"]}
                   for v in kwargs.values())
        system = x["prompt"][0]["content"]  # listed once: one <tools> block, each offered tool in it once
        assert system.count("<tools>\n") == 1 and all(system.count(f'"name": "{n}"') == 1 for n in info["tool_selection"])
    longest = max(len(x["prompt"][0]["content"]) + len(x["prompt"][1]["content"]) for x in rows)
    assert r.lengths["rows"] == len(rows) and longest / 8 < r.lengths["max"] <= r.lengths["max_prompt_length"]
    readme = (out / "README.md").read_text()
    for flag in (f"data.max_prompt_length={r.lengths['max_prompt_length']}", "data.return_raw_chat=True",
                 "rollout.mode=async", "multi_turn.enable=True", "multi_turn.format=hermes",
                 f"multi_turn.tool_config_path={out.resolve()}/tool_config.yaml", f"PYTHONPATH={out.resolve()}",
                 "pip install bm25s=="):
        assert flag in readme, flag


REWARD_CASES = [("forgeplay/w/bridge", "<think>hm</think>\n<answer>The 1887</answer>", "1887", {"aliases": ["x"]}),
                ("d", "<answer>the 1887 Edition.</answer>", "1887", {"aliases": ["the 1887 edition"]}),
                ("d", "<answer>Lake Tana north</answer>", "Lake Tana", None),
                ("d", "<answer>1887</answer><answer>1887</answer>", "1887", None),
                ("d", "<answer>Ada L.</answer>", json.dumps({"answer": "Ada", "aliases": ["Ada L."]}), None)]


def test_exported_reward_runs_on_the_standard_library_alone(exported, tmp_path):
    out, _ = exported
    code = ("import importlib.util, json, sys\n"
            "spec = importlib.util.spec_from_file_location('custom_module', sys.argv[1])\n"
            "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
            "print(json.dumps([mod.compute_score(*c) for c in json.loads(sys.argv[2])]))")
    # -I: no PYTHONPATH, no script folder; -S: no site-packages, so nothing but the standard library
    res = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(out / "reward.py"), json.dumps(REWARD_CASES)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [compute_score(*c) for c in REWARD_CASES]


def test_a_template_that_lists_tools_gets_them_instead_of_the_system_prompt(root, embedded_tokenizer_dir,  # noqa: F811
                                                                              tmp_path):
    tok_dir = tmp_path / "tok"
    shutil.copytree(embedded_tokenizer_dir, tok_dir)
    (tok_dir / "chat_template.jinja").write_text(_TOOLS_TEMPLATE)
    r = export_verl("w", tmp_path / "out", root, tool_agent=True, tokenizer=tok_dir, kinds=("trajectories",))
    rows = _rows(tmp_path / "out")
    assert r.tools_in == "template" and rows
    systems = [x["prompt"][0]["content"] for x in rows]
    assert not any("<tools>" in s for s in systems) and all("<tool_call>" in s for s in systems)  # how to call stays
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    tools = [t["tool_schema"] for t in yaml.safe_load((tmp_path / "out" / "tool_config.yaml").read_text())["tools"]]
    # counted as verl's filter counts them: with the schemas of every configured tool
    assert r.lengths["max"] == max(len(tok(tok.apply_chat_template(x["prompt"], tools=tools, tokenize=False,
                                                                   add_generation_prompt=True))["input_ids"])
                                   for x in rows)
    assert "listed once, by the chat template" in (tmp_path / "out" / "README.md").read_text().replace("\n", " ")


def test_a_validated_dataset_searches_the_corpus_it_came_from(root, embedded_tokenizer_dir, tmp_path):  # noqa: F811
    trajs = [{k: v for k, v in t.items() if k not in SHARED_COLUMNS} for t in load_table("w", "trajectories", root).to_pylist()]
    write_rows(root, "w_checked", "trajectories", "validate-0123", trajs)  # --out w_checked: found by its run
    save_run_config(root, "w", "validate-0123", {"validate": {"dataset": "w", "corpus": None, "out": "w_checked"}})
    write_rows(root, "w_valid", "trajectories", "validate-4567", trajs)  # no run record: the suffix says it
    write_rows(root, "lonely", "trajectories", "x", trajs)
    assert corpus_of(root, "w") == "w" and corpus_of(root, "w_checked") == "w" and corpus_of(root, "w_valid") == "w"
    with pytest.raises(ValueError, match="pass --corpus"):
        corpus_of(root, "lonely")
    doc = {k: v for k, v in load_table("w", "documents", root).to_pylist()[0].items() if k not in SHARED_COLUMNS}
    write_rows(root, "other", "documents", "x", [doc])
    for wrong, error in (("lonely", "has no documents"), ("other", "name golden documents that 'other' lacks")):
        with pytest.raises(ValueError, match=error):
            export_verl("lonely", tmp_path, root, tool_agent=True, tokenizer=embedded_tokenizer_dir, corpus=wrong)
    r = export_verl("lonely", tmp_path, root, tool_agent=True, tokenizer=embedded_tokenizer_dir, corpus="w")
    docs = pq.read_table(tmp_path / "forgeplay_verl" / "corpus" / "documents.parquet")
    assert r.corpus == "w" and docs.num_rows == load_table("w", "documents", root).num_rows


@pytest.mark.verl
def test_verl_loads_the_tools_rows_and_reward_of_the_export(root, exported, embedded_tokenizer_dir,  # noqa: F811
                                                            verl_python, tmp_path):
    out, r = exported
    trajs = _trajectories(root)
    tool_rows = [x for x in _rows(out) if x["ability"] == "tool_use"]
    calls = []
    for x in tool_rows[:4]:  # each row's first synthesized call, as the model would write it
        msgs = trajs[x["extra_info"]["id"]]["messages"]
        call = next(c for m in msgs if m["role"] == "assistant" for c in parse_tool_calls(m["content"]).calls)
        calls.append({"id": x["extra_info"]["id"], **call})
    first = tool_rows[0]["extra_info"]
    calls += [{"id": first["id"], "name": first["tool_selection"][0], "arguments": {"top_k": "many"}},
              {"id": first["id"], "name": "no_such_tool", "arguments": {"query": "x"}}]
    # a tool of tool_config.yaml that the row does not offer: filtered out by the row's tool_selection
    # (verl's run()), and, where every configured tool is active, looked up in tools_kwargs and called
    unoffered = next(n for n in r.tool_names if n not in first["tool_selection"])
    offered_call = dict(calls[0], active="every")  # an offered tool still runs with every tool active
    calls += [{"id": first["id"], "name": unoffered, "arguments": {"query": "x"}},
              {"id": first["id"], "name": unoffered, "arguments": {"query": "x"}, "active": "every"}, offered_call]
    cases = {"rewards": [dict(zip(("data_source", "solution", "ground_truth", "extra_info"), c)) for c in REWARD_CASES],
             "calls": calls, "max_prompt_length": r.lengths["max"]}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    res = subprocess.run([str(verl_python), str(SIDE), str(out), str(embedded_tokenizer_dir), str(tmp_path / "cases.json")],
                         cwd=tmp_path, env={**env, "PYTHONPATH": str(out)}, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["forgeplay_importable"] == []  # the export stands alone
    assert got["scores"] == [compute_score(*c) for c in REWARD_CASES]
    assert got["tool_classes"] == [TOOL_CLASS]
    n = len(_rows(out))
    assert got["rows"] == got["collated"] == n  # max_prompt_length = the measured max keeps every row...
    assert got["rows_one_token_shorter"] < n  # ...and one token less drops the longest: verl counts as we do
    assert set(got["tool_rows"]) == {x["extra_info"]["id"] for x in tool_rows}
    for x in tool_rows:
        seen = got["tool_rows"][x["extra_info"]["id"]]
        assert seen["agent_name"] == "tool_agent" and seen["roles"] == ["system", "user"]
        assert seen["tools_kwargs_type"] == "dict"  # as verl's dataset gives it: a dict of the offered tools only
        assert seen["tools_kwargs"] == json.loads(x["extra_info"]["tools_kwargs"])
        assert list(seen["tools_kwargs"]) == x["extra_info"]["tool_selection"]
    *_, filtered, every, still = zip(calls, got["results"], got["metrics"], strict=True)
    assert filtered[1].startswith(f"Unknown function '{unoffered}'")  # verl's per-row filter answers
    assert json.loads(every[1]) == {"error": "unknown_tool", "detail": f"no tool named {unoffered!r}"}
    assert every[2] == {"tool_error": 1.0, "found": 0.0}  # a tool error message, not an exception
    assert still[1:] == (got["results"][0], got["metrics"][0])
    sims, found = {}, []
    for c, text, metrics in zip(calls[:-3], got["results"], got["metrics"]):
        if c["name"] == "no_such_tool":
            assert text.startswith("Unknown function 'no_such_tool'")
            continue
        meta = json.loads(trajs[c["id"]]["meta"])
        sim = sims.get(meta["seed"]) or sims.setdefault(meta["seed"], Simulator(
            load_table("w", "documents", root), seed=meta["seed"], tools=load_table("w", "tools", root).to_pylist()))
        assert text == sim.call(c["name"], c["arguments"]), c  # a search by the call's query alone
        # the golden pages only say whether the search found one
        assert metrics["found"] == float(any(g in text for g in meta["golden_doc_ids"])), c
        found.append(metrics["found"])
    assert 0.0 in found and 1.0 in found  # the synthesized calls find their pages; a bad call finds none
    assert '"invalid_arguments"' in got["results"][-5] and '"results"' in got["results"][0]  # the bad arguments
