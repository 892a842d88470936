"""GRPO on triples with multi-turn tool rollouts (train/rollout.py) and verifiable rewards.

Per optimizer micro-batch: each prompt is rolled out `group_size` times with the current
policy, rewards are normalized within the group (train.losses.group_advantages), and the
clipped surrogate (train.losses.clipped_surrogate) is applied to the policy's own tokens
only (tool output and prompt masked out), with an optional k3 KL term to a frozen copy of
the starting model (`kl_coef` > 0). One update per batch of rollouts, so the "old"
log-probabilities are the current policy's, detached (no separate scoring pass). With
`prefix_grouping` each group's shared prompt is encoded once (train/prefix.py).

    session = build_session(root, GRPOConfig(data="demo"), model_path, model)
    Trainer(model, TrainConfig(), run_dir, session.step).fit(session.prompts)

The `forgeplay train grpo` Prefect flow is flows/train.py.
"""

from __future__ import annotations

import copy
import time

import torch

from train.configs import GRPOConfig  # noqa: F401  (re-exported)
from train.losses import clipped_surrogate, group_advantages
from train.prefix import grouped_token_logprobs, plain_token_logprobs
from train.rollout import Prompt, rollout




def make_prompts(triples: list[dict], tools: list[dict], tool_style: str = "full") -> list[Prompt]:
    from generators.synth.assemble import system_prompt

    system = system_prompt(tools, tool_style)
    return [Prompt([{"role": "system", "content": system}, {"role": "user", "content": t["question"]}],
                   t["answer"], list(t.get("aliases") or []), list(t["golden_doc_ids"]), t["triple_id"])
            for t in triples]


def _pad(rows: list[list[float]], width: int) -> torch.Tensor:
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.float32)


class GRPOSession:
    """Holds the rollout backend (sharing the policy's weights), the simulator, the prompts
    and the optional frozen reference; `step` is the Trainer step function."""

    def __init__(self, cfg: GRPOConfig, backend, simulator, prompts: list[Prompt], model) -> None:
        self.cfg, self.backend, self.simulator, self.prompts = cfg, backend, simulator, prompts
        self.ref = None
        if cfg.kl_coef > 0:
            self.ref = copy.deepcopy(model).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
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
        adv = group_advantages(rewards.view(len(prompts), self.cfg.group_size)).reshape(-1)
        seqs, pad = [o.token_ids for o in outs], self.backend.pad_id
        start = max(1, min(o.mask.index(1) if 1 in o.mask else len(o.mask) for o in outs))
        logp = self.logprobs(model, seqs, pad, start)
        # one update per batch of rollouts: the sampling policy is the current one, so the
        # "old" log-probabilities are the current ones, detached (ratio 1, as TRL with
        # num_iterations=1); this saves a teacher-forced scoring pass after sampling
        old = logp.detach()
        ref = None
        if self.ref is not None:
            with torch.no_grad():
                ref = self.logprobs(self.ref, seqs, pad, start)
        dev = logp.device
        loss, stats = clipped_surrogate(logp, old, adv.to(dev), mask.to(dev), clip_eps=self.cfg.clip_eps,
                                        ref_logprobs=ref, kl_coef=self.cfg.kl_coef)
        n = len(outs)
        stats.update({"reward": float(rewards.mean()), "em": sum(o.stats["em"] for o in outs) / n,
                      "format": sum(o.stats["format"] for o in outs) / n,
                      "calls": sum(o.stats["calls"] for o in outs) / n,
                      "tokens": sum(o.stats["policy_tokens"] for o in outs),
                      "rollout_s": time.perf_counter() - started})
        return loss, stats


def build_session(root, cfg: GRPOConfig, model_path, model) -> GRPOSession:
    """Load triples + documents of `cfg.data`, the tool bank, the simulator and a rollout
    backend that shares `model`'s weights (`cfg.rollout_backend`: the module itself, or a
    vLLM engine synced from it, train/weight_sync.py)."""
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
    return GRPOSession(cfg, backend, Simulator(docs, seed=cfg.tool_seed, tools=tools), make_prompts(triples, tools, cfg.tool_style), model)
