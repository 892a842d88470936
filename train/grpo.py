"""GRPO on triples with multi-turn tool rollouts (train/rollout.py) and verifiable rewards.

Per optimizer micro-batch: each prompt is rolled out `group_size` times with the current
policy, and the objective (train/objective.py) turns the rollouts into a loss: by default
rewards normalized within the group (`advantage` grpo; or hop-grouped), the clipped surrogate
on the policy's own tokens only (tool output and prompt masked out) and an optional k3 KL
term to a frozen copy of the starting model (`kl_coef` > 0). A stage that needs more passes
its own `Objective` (more terms, per-prompt weights) and keeps this step. One update per batch
of rollouts, so the "old" log-probabilities are the current policy's, detached (no separate
scoring pass). With `prefix_grouping` each group's shared prompt is encoded once
(train/prefix.py).

    session = build_session(root, GRPOConfig(data="demo"), model_path, model)
    Trainer(model, TrainConfig(), run_dir, session.step).fit(session.prompts)

`forgeplay train grpo` runs it through train/run.py (registered in train/stages.py).
"""

from __future__ import annotations

import time

import torch

from train.configs import GRPOConfig  # noqa: F401  (re-exported)
from train.objective import Objective, RolloutBatch, grpo_objective
from train.prefix import grouped_token_logprobs, plain_token_logprobs
from train.rollout import Prompt, rollout




def make_prompts(triples: list[dict], tools: list[dict], tool_style: str = "full") -> list[Prompt]:
    from generators.synth.assemble import system_prompt

    system = system_prompt(tools, tool_style)
    return [Prompt([{"role": "system", "content": system}, {"role": "user", "content": t["question"]}],
                   t["answer"], list(t.get("aliases") or []), list(t["golden_doc_ids"]), t["triple_id"],
                   {"hop_count": t["hop_count"]} if t.get("hop_count") is not None else {})
            for t in triples]


def _pad(rows: list[list[float]], width: int) -> torch.Tensor:
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.float32)


class GRPOSession:
    """Holds the rollout backend (sharing the policy's weights), the simulator, the prompts
    and the objective (default: `grpo_objective(cfg, model)`); `step` is the Trainer step function."""

    def __init__(self, cfg: GRPOConfig, backend, simulator, prompts: list[Prompt], model,
                 objective: Objective | None = None) -> None:
        self.cfg, self.backend, self.simulator, self.prompts = cfg, backend, simulator, prompts
        self.objective = objective if objective is not None else grpo_objective(cfg, model)
        self.calls = 0
        from train.trainer import dist_info

        # ranks sample different continuations of their (different) prompts
        self.seed_base = cfg.tool_seed * 7919 + dist_info()[0] * 1_000_003

    def logprobs(self, model, seqs: list[list[int]], pad_id: int, start: int) -> torch.Tensor:
        """Per-token log-probabilities of the rollouts (groups of `group_size` consecutive rows),
        sharing each group's prompt pass when `cfg.prefix_grouping` (train/prefix.py)."""
        if self.cfg.prefix_grouping:
            return grouped_token_logprobs(model, seqs, pad_id, self.cfg.group_size, start=start)
        return plain_token_logprobs(model, seqs, pad_id, start=start)

    def step(self, model, prompts: list[Prompt]) -> tuple[torch.Tensor, dict]:
        started = time.perf_counter()
        sync = getattr(self.backend, "sync", None)
        if sync is not None:  # vLLM (train/weight_sync.py): push the weights if an optimizer step changed them
            sync(model)
        else:
            self.backend.lm = model  # rollouts with the current weights
        group = [p for p in prompts for _ in range(self.cfg.group_size)]
        outs = rollout(self.backend, self.simulator, group, self.cfg, seed=self.seed_base + self.calls,
                       logprobs=False)
        self.calls += 1
        width = max(len(o.token_ids) for o in outs)
        mask = _pad([[float(m) for m in o.mask] for o in outs], width)
        rewards = torch.tensor([o.reward for o in outs])
        seqs, pad = [o.token_ids for o in outs], self.backend.pad_id
        start = max(1, min(o.mask.index(1) if 1 in o.mask else len(o.mask) for o in outs))
        # one update per batch of rollouts: the sampling policy is the current one, so the
        # "old" log-probabilities are the current ones, detached (ratio 1, as TRL with
        # num_iterations=1; old_logprobs None); this saves a teacher-forced scoring pass
        batch = RolloutBatch(group, seqs, mask, rewards, self.cfg.group_size, pad,
                             lambda m: self.logprobs(m, seqs, pad, start))
        loss, stats = self.objective(model, batch)
        n = len(outs)
        stats.update({"reward": float(rewards.mean()), "em": sum(o.stats["em"] for o in outs) / n,
                      "format": sum(o.stats["format"] for o in outs) / n,
                      "calls": sum(o.stats["calls"] for o in outs) / n,
                      "tokens": sum(o.stats["policy_tokens"] for o in outs),
                      "rollout_s": time.perf_counter() - started})
        return loss, stats


def build_session(root, cfg: GRPOConfig, model_path, model, objective: Objective | None = None) -> GRPOSession:
    """Load triples + documents of `cfg.data`, the tool bank, the simulator and a rollout
    backend that shares `model`'s weights (`cfg.rollout_backend`: the module itself, or a
    vLLM engine synced from it, train/weight_sync.py); `objective` as GRPOSession's."""
    from generators.llm.transformers_backend import TransformersBackend
    from generators.tools.bank import build_bank
    from generators.tools.simulator import Simulator
    from storage import load_table
    from train.weight_sync import SyncedVLLM, check_rollout_backend

    check_rollout_backend(cfg)
    triples = load_table(cfg.data, "triples", root).to_pylist()
    if cfg.limit:
        triples = triples[:cfg.limit]
    if not triples:
        raise ValueError(f"dataset {cfg.data!r} has no triples")
    docs = load_table(cfg.data, "documents", root).to_pylist()
    tools = build_bank(seed=cfg.tool_seed, variants_per_tool=1)
    if cfg.rollout_backend == "vllm":
        backend = SyncedVLLM.from_config(model_path, model, cfg)
    else:
        backend = TransformersBackend(model_path, batch_size=max(8, cfg.group_size))
        backend.lm = model
    return GRPOSession(cfg, backend, Simulator(docs, seed=cfg.tool_seed, tools=tools),
                       make_prompts(triples, tools, cfg.tool_style), model, objective)
