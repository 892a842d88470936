"""Self-play Prefect flows. `selfplay-warmstart`: the examiner's demonstrations from a world
dataset (selfplay/warmstart.py), committed as `trajectories` (for SFT) and `tasks` (their
QCPs) to the demonstrations dataset, then, with `out`, the examiner fine-tuned on them by
the SFT stage (train/run.py, the same task the `train` flow runs).

The demonstrations run under a run id hashed from what decides them (dataset, n, hop mix,
draw seed), so a rerun commits nothing twice; the SFT stage resumes with `--resume`.

    forgeplay selfplay warmstart --dataset world --out runs/examiner0 --max-steps 100
    run_warmstart(WarmstartConfig(dataset="world"), TrainConfig(max_steps=100))   # from Python
"""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, task
from prefect.cache_policies import NONE

from flows.common import Stages
from flows.train import stage_task
from selfplay.warmstart import EXAMINER_TOOL, WarmstartConfig, demonstrations
from storage import resolve_root
from storage.resumable import RunWriter
from storage.runs import config_hash
from train.configs import SFTConfig, TrainConfig


@task(name="examiner-demonstrations", cache_policy=NONE)
def demos_task(cfg: WarmstartConfig, root: str) -> dict:
    """Build the demonstrations and commit them; counts of what was made and left out."""
    from generators.synth.synthesize import load_inputs
    from generators.tools.base import base_rows
    from generators.tools.simulator import Simulator

    inputs = load_inputs(root, cfg.dataset)
    tools = base_rows()
    tool = next(t for t in tools if t["name"] == EXAMINER_TOOL)
    sim = Simulator(inputs.documents, seed=cfg.draw_seed, tools=tools)
    demos, skipped = demonstrations(inputs.documents, inputs.triples, sim, tool, hop_mix=cfg.hop_mix, n=cfg.n,
                                    seed=cfg.draw_seed, dataset=cfg.dataset)
    if not demos:
        raise ValueError(f"no triple of {cfg.dataset!r} makes a demonstration (left out: {dict(skipped)})")
    identity = {k: v for k, v in asdict(cfg).items() if k in ("dataset", "n", "hop_mix", "draw_seed")}
    writer = RunWriter(root, f"warmstart-{config_hash(identity)}", {"config_hash": config_hash(identity)})
    ds = cfg.demos_dataset()
    new = writer.commit(ds, "trajectories", [d["trajectory"] for d in demos])
    writer.commit(ds, "tasks", [d["task"] for d in demos])
    hops: dict[int, int] = {}
    for d in demos:
        hops[d["task"]["hop_count"]] = hops.get(d["task"]["hop_count"], 0) + 1
    return {"dataset": ds, "demonstrations": len(demos), "committed_now": new, "by_hop_count": dict(sorted(hops.items())),
            "left_out": dict(sorted(skipped.items())), "triples": len(inputs.triples)}


@flow(name="selfplay-warmstart", log_prints=True)
def warmstart_flow(config: dict, train: dict, data_root: str | None = None, progress: bool = True) -> dict:
    """Demonstrations, then (with `out`) the examiner's SFT on them; the summary of both."""
    cfg, root = WarmstartConfig(**config), str(resolve_root(data_root))
    stages = Stages()
    with stages.stage("demonstrations") as st:
        demos = demos_task(cfg, root)
        st.rows_in, st.rows_out = demos["triples"], demos["demonstrations"]
    summary = {"demos": demos, "training": None}
    if cfg.out:
        sft = SFTConfig(data=demos["dataset"], model=cfg.model, out=cfg.out)
        summary["training"] = stage_task("sft", sft, TrainConfig(**train), root, progress)
        for row in summary["training"]["stages"]:
            stages.add(row["stage"], **{k: v for k, v in row.items() if k != "stage"})
    summary["report"] = stages.publish("selfplay-warmstart", f"examiner warm-start from {cfg.dataset}",
                                       {"left out": demos["left_out"], "by hop count": demos["by_hop_count"]})
    return summary


def run_warmstart(cfg: WarmstartConfig, train: TrainConfig, data_root=None, progress: bool = True) -> dict:
    return warmstart_flow(asdict(cfg), asdict(train), str(data_root) if data_root else None, progress)
