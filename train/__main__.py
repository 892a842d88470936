"""`python -m train KIND [options]`: a training stage without Prefect, runnable under torchrun.
One command per kind registered in train/stages.py (sft, grpo); its options are those of
`forgeplay train KIND` (the kind's config and TrainConfig, built by storage/configcli.py);
`--help` lists them.

    torchrun --nproc-per-node 2 -m train sft --dataset demo --out runs/sft1 --max-steps 50
    python -m train sft --nproc 2 --dataset demo --out runs/sft1     # starts torchrun itself

Every command calls train/run.py `run_stage`, as the Prefect flow does: each rank initialises
torch.distributed from the torchrun environment (nccl on cuda:LOCAL_RANK, gloo on CPU), trains
its share of every global batch and tears the process group down. Rank 0 alone writes
config.json, metrics.jsonl, the checkpoints, curves.png and the final model OUT/final.
"""

from __future__ import annotations

import os
import sys

import typer

from train.stages import add_stage_commands

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
                  help="The training stage without Prefect (run it under torchrun, or give --nproc N).")


def _run(kind: str, cfg, tcfg, data_root) -> None:
    from train.dist import LaunchFailed
    from train.run import run_stage

    try:
        s = run_stage(kind, cfg, tcfg, data_root)
    except LaunchFailed as e:
        print(f"train {kind} failed: {e}", file=sys.stderr)
        raise typer.Exit(1) from None
    trained_here = "WORLD_SIZE" in os.environ or tcfg.nproc == 1  # a launcher leaves it to its rank 0
    if trained_here and s["rank"] == 0 and s["last"]:
        print(f"{s['steps']} steps in {s['run_dir']}; loss {s['first']['loss']:.4f} -> {s['last']['loss']:.4f}; "
              f"model: {s['final_model']}")


add_stage_commands(app, _run)

if __name__ == "__main__":
    app()
