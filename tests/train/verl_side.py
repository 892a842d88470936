"""The verl side of tests/train/test_export_verl.py, run with verl's own environment
(.venv-verl, .ci/verl_env.sh), where forgeplay is not installed: it reads a
`forgeplay export verl --tool-agent` folder with verl's loaders and prints what they gave as
one JSON object. Not a pytest module (no test_ prefix).

    PYTHONPATH=EXPORT .venv-verl/bin/python tests/train/verl_side.py EXPORT TOKENIZER CASES.json

CASES.json: {"rewards": [{data_source, solution, ground_truth, extra_info}], "calls": [{id, name,
arguments, active?}], "max_prompt_length": N}. Each call goes through verl's tool agent loop
(ToolAgentLoop._call_tool, which looks up tools_kwargs.get(<called name>, {}), creates the tool
with its create_kwargs and executes it) with the tools_kwargs of the row `id` as verl's RL
dataset returns it, and the tools ToolAgentLoop.run makes active for that row: those of its
tool_selection, or with "active": "every" every configured tool (what run() keeps for a row
without a tool_selection, and what a loop that does not filter per row offers).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import tempfile


def rewards(export: str, cases: list[dict]) -> list:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = OmegaConf.create({"reward": {"custom_reward_function": {"path": f"{export}/reward.py",
                                                                  "name": "compute_score"}}})
    fn = get_custom_reward_fn(cfg)
    return [fn(c["data_source"], c["solution"], c["ground_truth"], c["extra_info"]) for c in cases]


def dataset(export: str, tokenizer, max_prompt_length: int):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": max_prompt_length, "return_raw_chat": True,
                            "filter_overlong_prompts": True, "filter_overlong_prompts_workers": 1,
                            "tool_config_path": f"{export}/tool_config.yaml",
                            "cache_dir": tempfile.mkdtemp(prefix="verl-cache-")})
    return RLHFDataset([f"{export}/train.parquet", f"{export}/test.parquet"], tokenizer, cfg)


async def call_tools(tools: dict, rows: dict, calls: list[dict]) -> list[tuple[str, dict]]:
    from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
    from verl.experimental.agent_loop.tool_parser import FunctionCall

    loop = object.__new__(ToolAgentLoop)  # only _call_tool is used: it needs the tools and two limits
    loop.tools, loop.max_tool_response_length, loop.tool_response_truncate_side = tools, 10 ** 9, "right"
    out = []
    for c in calls:
        row = rows[c["id"]]
        data = object.__new__(AgentData)
        data._active_tools = dict(tools) if c.get("active") == "every" else \
            {n: tools[n] for n in row["extra_info"]["tool_selection"] if n in tools}
        resp, _, metrics = await loop._call_tool(FunctionCall(name=c["name"], arguments=json.dumps(c["arguments"])),
                                                 row["tools_kwargs"], data)
        out.append((resp.text, metrics))
    return out


def main(export: str, tokenizer_dir: str, cases_path: str) -> None:
    cases = json.loads(open(cases_path).read())
    out = {"forgeplay_importable": [m for m in ("generators", "train", "storage", "flows")
                                    if importlib.util.find_spec(m) is not None]}
    out["scores"] = rewards(export, cases["rewards"])

    from transformers import AutoTokenizer
    from verl.tools.tool_registry import initialize_tools_from_config
    from verl.utils.dataset.rl_dataset import collate_fn

    tools = {t.name: t for t in initialize_tools_from_config(f"{export}/tool_config.yaml")}
    out["tool_classes"] = sorted({f"{type(t).__module__}.{type(t).__name__}" for t in tools.values()})
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    ds = dataset(export, tok, cases["max_prompt_length"])
    rows = [ds[i] for i in range(len(ds))]
    out["rows"] = len(rows)
    out["collated"] = len(collate_fn(rows)["dummy_tensor"])
    out["rows_one_token_shorter"] = len(dataset(export, tok, cases["max_prompt_length"] - 1))
    by_id = {r["extra_info"]["id"]: r for r in rows}
    out["tool_rows"] = {i: {"agent_name": r["agent_name"], "roles": [m["role"] for m in r["raw_prompt"]],
                            "tools_kwargs_type": type(r["tools_kwargs"]).__name__, "tools_kwargs": r["tools_kwargs"]}
                        for i, r in by_id.items() if r["agent_name"] == "tool_agent"}
    answered = asyncio.run(call_tools(tools, by_id, cases["calls"]))
    out["results"], out["metrics"] = [t for t, _ in answered], [m for _, m in answered]
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
