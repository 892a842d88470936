"""`forgeplay train grpo ... --engine verl`: the same GRPO run as a verl 0.9.1 job. The run's data
is exported for verl (train/verl_export.py: the dataset's trajectory prompts with their tools
for verl's tool agent when it has trajectories, else its triples as plain questions), with
forgeplay's reward and its objective registered in verl (train/verl_objective.py), and the
verl command is written beside it:

    OUT/verl/                     the export (train.parquet, test.parquet, reward.py, forgeplay_verl/, ...)
    OUT/verl/overrides.txt        verl's Hydra overrides of its ppo_trainer config, one a line
    OUT/verl/run.sh               the command: python -m verl.trainer.main_ppo $(overrides)

    plan = prepare(cfg, tcfg, root, labels)    # writes them; plan.command: the argv, plan.env: its env
    launch(plan)                               # runs it (needs verl and GPUs: check_launch)

What maps onto verl: --advantage hop-grouped -> algorithm.adv_estimator=forgeplay_hrpo, --labels
-> forgeplay_labels (the labels bought so far ride in the rows; verl buys none), else grpo;
--group-size -> rollout.n; --clip-eps, --kl-coef (verl's low_var_kl is the k3 estimate), --lr,
--max-steps, --batch-size x --grad-accum x --nproc prompts a step, --temperature, --top-p,
--max-turns, --max-new-tokens, --seed, --format-weight; --nproc is the GPUs of the one node. A
forgeplay estimator runs under the trainer `trainer.v1.trainer_mode=forgeplay`, which
VERL_USE_EXTERNAL_MODULES registers in every verl process.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from storage.files import write_text
from train import verl_bundle
from train.configs import ENGINES
from train.verl_export import Labels, VerlExport

TOOL_TURN_TOKENS = 1024  # a tool answer in a multi-turn response (train/grpo.py plans the same)


@dataclass
class Plan:
    """A verl run written to `folder`: its overrides, command line and environment additions."""

    folder: Path
    overrides: list[str]
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    export: VerlExport | None = None

    def env_line(self) -> str:
        return "".join(f"{k}={shlex.quote(v)} " for k, v in self.env.items())

    def shell(self) -> str:
        """The command as one shell line."""
        return self.env_line() + shlex.join(["python", *self.command[1:]])


def estimator(cfg) -> str:
    """verl's algorithm.adv_estimator for a GRPOConfig."""
    from train.verl_objective import HRPO, LABELS

    if getattr(cfg, "labels", ""):
        return LABELS
    return HRPO if cfg.advantage == "hop-grouped" else "grpo"


def overrides(cfg, tcfg, folder: Path, export: VerlExport, model: str) -> list[str]:
    """verl's Hydra overrides for the run (module docstring)."""
    from train.verl_objective import ESTIMATORS, TRAINER

    adv, tools = estimator(cfg), bool(export.tools_in)
    prompts = tcfg.batch_size * tcfg.grad_accum * tcfg.nproc
    response = cfg.max_turns * cfg.max_new_tokens + (cfg.max_turns - 1) * TOOL_TURN_TOKENS if tools else cfg.max_new_tokens
    out = [f"algorithm.adv_estimator={adv}",
           f"data.train_files={folder}/train.parquet", f"data.val_files={folder}/test.parquet",
           "data.prompt_key=prompt", "data.return_raw_chat=True",
           f"data.max_prompt_length={export.lengths.get('max_prompt_length', 2048)}",
           f"data.max_response_length={response}", f"data.train_batch_size={prompts}", f"data.seed={tcfg.seed}",
           f"actor_rollout_ref.model.path={model}",
           f"actor_rollout_ref.actor.optim.lr={tcfg.lr}", f"actor_rollout_ref.actor.clip_ratio={cfg.clip_eps}",
           f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
           f"actor_rollout_ref.actor.use_kl_loss={cfg.kl_coef > 0}", f"actor_rollout_ref.actor.kl_loss_coef={cfg.kl_coef}",
           "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
           "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.mode=async",
           f"actor_rollout_ref.rollout.n={cfg.group_size}", f"actor_rollout_ref.rollout.temperature={cfg.temperature}",
           f"actor_rollout_ref.rollout.top_p={cfg.top_p}",
           f"reward.custom_reward_function.path={folder}/reward.py", "reward.custom_reward_function.name=compute_score",
           f"trainer.total_training_steps={tcfg.max_steps}", f"trainer.n_gpus_per_node={tcfg.nproc}", "trainer.nnodes=1",
           "trainer.project_name=forgeplay", f"trainer.experiment_name={Path(cfg.out).name or 'grpo'}",
           f"trainer.default_local_dir={Path(cfg.out).resolve()}/verl-checkpoints", "trainer.logger=[console]",
           f"trainer.save_freq={tcfg.checkpoint_every or -1}", "trainer.val_before_train=False",
           f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES={verl_bundle.OBJECTIVE_MODULE}"]
    if tools:
        out += ["actor_rollout_ref.rollout.multi_turn.enable=True", "actor_rollout_ref.rollout.multi_turn.format=hermes",
                f"actor_rollout_ref.rollout.multi_turn.tool_config_path={folder}/tool_config.yaml",
                f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={cfg.max_turns}"]
    if adv in ESTIMATORS:
        out.append(f"trainer.v1.trainer_mode={TRAINER}")
    return out




def check(cfg, tcfg, root) -> None:
    """One-line ValueErrors before anything loads: the options, --dataset's rows, --model, and
    without --dry-run verl and the GPUs (`check_launch`)."""
    from generators.llm.model_store import check_model
    from storage.reader import require_rows
    from train.labelled import LABELLERS

    if cfg.engine not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}, not {cfg.engine!r}")
    if cfg.engine != "verl":
        raise ValueError("--dry-run writes a verl run: it needs --engine verl")
    if not cfg.data or not cfg.out:
        raise ValueError("--engine verl needs --dataset and --out (the verl run is written to OUT/verl)")
    if cfg.labels and cfg.labels not in LABELLERS:
        raise ValueError(f"--labels must be one of {', '.join(LABELLERS)}, not {cfg.labels!r}")
    if tcfg.nproc < 1 or cfg.group_size < 2:
        raise ValueError("--engine verl needs --nproc >= 1 (GPUs) and --group-size >= 2")
    require_rows(root, cfg.data, ("triples", "trajectories"), "--dataset")
    check_model(cfg.model)
    if not cfg.dry_run:
        check_launch(tcfg.nproc)


def check_launch(gpus: int) -> None:
    """ValueError in one line unless verl imports here and `gpus` GPUs are visible (nvidia-smi)."""
    if importlib.util.find_spec("verl") is None:
        raise ValueError(f"--engine verl needs verl in this Python ({sys.executable}); install verl==0.9.1, or "
                         "write the command with --dry-run and run it where verl is")
    smi = shutil.which("nvidia-smi")
    found = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout.count("GPU ") if smi else 0
    if found < gpus:
        raise ValueError(f"--engine verl needs {gpus} GPU(s) (--nproc), found {found}; write the command with "
                         "--dry-run and run it on a GPU machine")


def prepare(cfg, tcfg, root, labels: Labels | None = None) -> Plan:
    """Export the run's data to OUT/verl and write overrides.txt and run.sh there (module docstring)."""
    from generators.llm.model_store import resolve_model
    from storage import reader
    from train.verl_export import export_verl

    folder = (Path(cfg.out) / "verl").resolve()
    model = str(resolve_model(cfg.model))
    kinds = ("trajectories",) if reader.entries(root, cfg.data, "trajectories") else ("triples",)
    result = export_verl(cfg.data, folder, root, kinds=kinds, tool_agent=kinds == ("trajectories",),
                         tokenizer=model, labels=labels)
    found = overrides(cfg, tcfg, folder, result, model)
    plan = Plan(folder, found, [sys.executable, "-m", "verl.trainer.main_ppo", *found],
                {"PYTHONPATH": str(folder), "VERL_USE_EXTERNAL_MODULES": verl_bundle.OBJECTIVE_MODULE}, result)
    write_text(folder / "overrides.txt", "".join(f"{o}\n" for o in found))
    write_text(folder / "run.sh", "#!/usr/bin/env bash\n# the verl run of forgeplay train grpo --engine verl; "
               "more overrides may follow on its command line\nset -euo pipefail\n"
               f"cd {shlex.quote(str(folder))}\nmapfile -t overrides < overrides.txt\n"
               + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in plan.env.items())
               + "exec python -m verl.trainer.main_ppo \"${overrides[@]}\" \"$@\"\n")
    return plan


def launch(plan: Plan) -> int:
    """Run the verl command (its output goes to the terminal); its exit code."""
    return subprocess.run(plan.command, env={**os.environ, **plan.env}, cwd=plan.folder).returncode
