"""Label-aware GRPO's extension point (CARE). With `--labels STRATEGY` GRPO trains on prompts
whose answers it does not trust: after each step's rollouts, the labeller registered under
that name gives every prompt the label its rewards are computed against (the majority vote
of its rollouts, or a true label bought within `--budget`) and a weight on its advantages
(train/objective.py `prompt_weights`: 1 for a bought label, the probes' reliability for a
trusted pseudo-label, 0 for the rest). The labellers live above train (acquire/training.py
registers one per acquisition strategy); GRPO only calls the shape below:

    labeller = make_labeller(cfg, root, session)      # cfg.labels names it
    prompts, rewards, stats = labeller(prompts, rollouts, step)  # every prompt's meta["weight"] set
    labeller.state_dict(); labeller.load_state_dict(state)       # checkpointed with the policy

Label-aware GRPO runs in one process: its ledger and probes belong to one process
(`check_labels`).
"""

from __future__ import annotations

from typing import Any, Callable

from train import plugins

# name -> factory(cfg, root, session) -> labeller (module docstring)
LABELLERS: dict[str, Callable[[Any, Any, Any], Any]] = {}


def register_labeller(name: str, factory: Callable[[Any, Any, Any], Any]) -> None:
    LABELLERS[name] = factory


def check_labels(cfg, tcfg) -> None:
    """A readable error before anything loads: an unknown --labels, or --labels with --nproc > 1."""
    if not getattr(cfg, "labels", ""):
        return
    plugins.load()
    if cfg.labels not in LABELLERS:
        known = ", ".join(LABELLERS) or "none registered (is forgeplay installed? train/plugins.py)"
        raise ValueError(f"--labels must be one of {known}, not {cfg.labels!r}")
    if tcfg.nproc > 1:
        raise ValueError(f"label-aware GRPO (--labels) runs in one process (--nproc 1), not {tcfg.nproc}")
    if cfg.budget < 0 or not 0 <= cfg.label_p <= 1 or not 0 <= cfg.label_gate < 1:
        raise ValueError("--labels needs --budget >= 0, 0 <= --label-p <= 1 and 0 <= --label-gate < 1")
    if getattr(cfg, "label_reward", "binary") not in ("binary", "partial"):
        raise ValueError(f"--label-reward must be binary or partial, not {cfg.label_reward!r}")


def make_labeller(cfg, root, session):
    plugins.load()
    return LABELLERS[cfg.labels](cfg, root, session)
