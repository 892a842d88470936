"""`python -m train sft|grpo [options]`: the training stage without Prefect, runnable under
torchrun. Options are those of `forgeplay train sft|grpo` (SFTConfig/GRPOConfig and
TrainConfig, built by storage/configcli.py); `--help` lists them.

    torchrun --nproc-per-node 2 -m train sft --data demo --out runs/sft1 --max-steps 50
    python -m train sft --nproc 2 --data demo --out runs/sft1     # starts torchrun itself

Each rank initialises torch.distributed from the torchrun environment (nccl on
cuda:LOCAL_RANK, gloo on CPU), trains its share of every global batch with the code the
flows run (train/stage.py) and tears the process group down. Rank 0 alone writes
config.json, metrics.jsonl, the checkpoints, curves.png and the final model OUT/final.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict

import typer

from storage.configcli import USER_ERRORS, config_command
from train.configs import GRPOConfig, SFTConfig, TrainConfig

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
                  help="The training stage without Prefect (run it under torchrun, or give --nproc N).")


def _run(kind: str, cfg, tcfg: TrainConfig, data_root) -> None:
    from storage import resolve_root
    from train import dist, stage
    from train.trainer import read_metrics

    root = resolve_root(data_root)
    dist.check_nproc(tcfg.nproc)
    under_torchrun = "WORLD_SIZE" in os.environ
    if under_torchrun:  # the process count is torchrun's (config.json records it)
        tcfg.nproc = int(os.environ["WORLD_SIZE"])
    if tcfg.nproc > 1 and not under_torchrun:  # start the ranks; their rank 0 reports
        stage.prepare_run(cfg, {kind: asdict(cfg), "train": asdict(tcfg)})
        try:
            return dist.launch(kind, [cfg, tcfg], root, tcfg.nproc)
        except dist.LaunchFailed as e:
            print(f"train {kind} failed: {e}", file=sys.stderr)
            raise typer.Exit(1) from None
    try:
        device = dist.init_from_env()
        rank = int(os.environ.get("RANK", "0"))
        if rank == 0:
            stage.prepare_run(cfg, {kind: asdict(cfg), "train": asdict(tcfg)})
        run = stage.run_sft if kind == "sft" else stage.run_grpo
        _, model, tok = run(cfg, tcfg, root, device)
        if rank == 0:
            stage.finish(kind, model, tok, cfg.out)
    except BaseException as e:
        if under_torchrun and not isinstance(e, (SystemExit, KeyboardInterrupt)):
            print(dist.rank_error_line(e), file=sys.stderr, flush=True)
        raise
    finally:
        dist.teardown()
    recs = read_metrics(cfg.out)
    if rank == 0 and recs:
        print(f"{recs[-1]['step']} steps in {cfg.out}; loss {recs[0]['loss']:.4f} -> {recs[-1]['loss']:.4f}; "
              f"model: {os.path.join(cfg.out, 'final')}")


@config_command(app, "sft", SFTConfig, TrainConfig, errors=USER_ERRORS, label="train sft")
def sft(sft: SFTConfig, train: TrainConfig, data_root=None) -> None:
    """Fine-tune on a dataset's trajectories, as `forgeplay train sft` does; under torchrun
    every process trains its share of each global batch."""
    _run("sft", sft, train, data_root)


@config_command(app, "grpo", GRPOConfig, TrainConfig, errors=USER_ERRORS, label="train grpo")
def grpo(grpo: GRPOConfig, train: TrainConfig, data_root=None) -> None:
    """GRPO on a dataset's triples, as `forgeplay train grpo` does; under torchrun every
    process rolls out its own prompts (a whole group stays on one process)."""
    _run("grpo", grpo, train, data_root)


if __name__ == "__main__":
    app()
