"""GRPO on triples with multi-turn tool rollouts (train/rollout.py) and verifiable rewards.

Per optimizer micro-batch: each prompt is rolled out `group_size` times with the current
policy, and the objective (train/objective.py) turns the rollouts into a loss: by default
rewards normalized within the group (`advantage` grpo; or hop-grouped), the clipped surrogate
on the policy's own tokens only (tool output and prompt masked out) and an optional k3 KL
term to a frozen copy of the starting model (`kl_coef` > 0). A stage that needs more passes
its own `Objective` (more terms, per-prompt weights) and keeps this step. With a `labeller`
(label-aware GRPO, train/labelled.py) the rewards are against the labels it gives (`em` stays
the exact match against the data's answers) and each prompt carries its advantage weight. One update per batch
of rollouts, so the "old" log-probabilities are the current policy's, detached (no separate
scoring pass). With `prefix_grouping` each group's shared prompt is encoded once
(train/prefix.py). Rollouts are sampled with the policy in eval mode (activation checkpointing,
which would turn the KV cache off, applies to training passes only).

Memory: `workload` is the largest step for the plan made before the first step
(train/memory.py): batch_size x group_size rollouts of at most the longest prompt plus
`max_turns` replies of `max_new_tokens` and tool turns of `TOOL_TURN_TOKENS`, in one
log-probability pass (packed into one row with `--max-batch-tokens` > 0), plus the frozen
reference and teacher of the objective and the KV cache of sampling. Rollouts longer than planned
are checked again before their pass (`set_plan`), so a step that would not fit stops with the
plan's one-line error.

    session = build_session(root, GRPOConfig(data="demo"), model_path, model)
    Trainer(model, TrainConfig(), run_dir, session.step).fit(session.prompts)

`forgeplay train grpo` runs it through train/run.py (registered in train/stages.py).
"""

from __future__ import annotations

import time

import torch

from train.configs import GRPOConfig  # noqa: F401  (re-exported)
from train.memory import ModelShape, Workload, make_plan
from train.objective import Objective, ReverseKLToTeacher, RolloutBatch, grpo_objective
from train.prefix import grouped_token_logprobs, plain_token_logprobs
from train.rollout import Prompt, rollout
from train.shard import gathered

TOOL_TURN_TOKENS = 1024  # a tool turn in the plan (the simulator's results for a call: up to ~900 tokens)
SETTINGS = "--batch-size, --group-size, --max-turns or --max-new-tokens"


def make_prompts(triples: list[dict], tools: list[dict], tool_style: str = "full") -> list[Prompt]:
    from generators.corpus.questions import question_kind
    from generators.synth.assemble import system_prompt

    system = system_prompt(tools, tool_style)
    return [Prompt([{"role": "system", "content": system}, {"role": "user", "content": t["question"]}],
                   t["answer"], list(t.get("aliases") or []), list(t["golden_doc_ids"]), t["triple_id"],
                   {"kind": question_kind(t),
                    **({"hop_count": t["hop_count"]} if t.get("hop_count") is not None else {})})
            for t in triples]


def _pad(rows: list[list[float]], width: int) -> torch.Tensor:
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.float32)


class GRPOSession:
    """Holds the rollout backend (sharing the policy's weights), the simulator, the prompts
    and the objective (default: `grpo_objective(cfg, model)`); `step` is the Trainer step function."""

    def __init__(self, cfg: GRPOConfig, backend, simulator, prompts: list[Prompt], model,
                 objective: Objective | None = None) -> None:
        self.cfg, self.backend, self.simulator, self.prompts, self.model = cfg, backend, simulator, prompts, model
        self.objective = objective if objective is not None else grpo_objective(cfg, model)
        self.calls = 0
        self.plan = None  # train/memory.py Plan of the first step (set_plan); rollouts are checked against it
        self.trainer = None  # the Trainer (attach): its step is the policy version rollouts record
        self.labeller = None  # label-aware GRPO (train/labelled.py): labels, rewards and weights per step
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
        step = self.trainer.step if self.trainer is not None else None
        group = [p for p in prompts for _ in range(self.cfg.group_size)]
        label_stats = {}
        with gathered(model):  # a sharded policy samples with whole weights, no collective (train/shard.py)
            outs = self.sample(model, group, step)
            if self.labeller is not None:  # rewards against voted or bought labels, prompts weighted
                group, relabelled, label_stats = self.labeller(group, outs, step or 0)
                rewards = torch.tensor(relabelled, dtype=torch.float32)
            else:
                rewards = torch.tensor([o.reward for o in outs])
        self.check_memory(model, outs)
        width = max(len(o.token_ids) for o in outs)
        mask = _pad([[float(m) for m in o.mask] for o in outs], width)
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
                      "rollout_s": time.perf_counter() - started, **label_stats})
        if step is not None:  # the optimizer step of the weights that sampled, and turns sampled by others
            stats.update({"policy_version": step, "stale_turns": sum(v != step for o in outs
                                                                     for v in o.stats["policy_versions"])})
        return loss, stats


    def sample(self, model, group: list[Prompt], step: int | None) -> list:
        """The rollouts of `group` with the current weights (pushed to vLLM first when it samples)."""
        self.backend.sync(model, step)  # rollouts with the current weights (pushed to an engine if they changed)
        was = model.training
        model.eval()
        try:
            outs = rollout(self.backend, self.simulator, group, self.cfg, seed=self.seed_base + self.calls,
                           logprobs=False)
        finally:
            model.train(was)
        self.calls += 1
        return outs

    # ---- memory (train/memory.py) ------------------------------------------------------------

    def workload(self, batch_size: int, tokenizer) -> Workload:
        """The largest step: `batch_size` prompts x group_size rollouts of the planned length."""
        from train.sft import template_messages

        render = lambda p: tokenizer.apply_chat_template(template_messages(p.messages), tokenize=False,  # noqa: E731
                                                         add_generation_prompt=True)
        prompt = max(len(tokenizer(render(p), add_special_tokens=False)["input_ids"]) for p in self.prompts)
        turns, new = self.cfg.max_turns, self.cfg.max_new_tokens
        row = prompt + turns * (new + 8) + (turns - 1) * TOOL_TURN_TOKENS
        rows = batch_size * self.cfg.group_size
        return self._work(rows, [row] * rows, rows * turns * new)

    def _work(self, rows: int, lengths: list[int], policy: int) -> Workload:
        tokens = sum(lengths) if self.packed else rows * max(lengths)
        teacher = [t for t in self.objective.terms if isinstance(t, ReverseKLToTeacher)]
        frozen = [(ModelShape.of(m), tokens) for m in self.objective.frozen()]
        gen = min(rows, self.backend.batch_size or rows) * max(lengths)
        if self.backend.turn_cache is not None:  # finished rows' KV kept for their next turn
            gen *= 2
        return Workload(tokens, policy, f"{rows} rollouts of up to {max(lengths)} tokens a micro-batch", SETTINGS,
                        passes=1 + len(teacher), full_logits=policy if teacher else 0, frozen=frozen,
                        generation_tokens=gen, checkpointing_blocked=self.cfg.prefix_grouping and
                        "--prefix-grouping needs the KV cache in training passes")

    @property
    def packed(self) -> bool:
        from train.packing import is_packed

        return is_packed(self.model)

    def set_plan(self, plan) -> None:
        self.plan = plan

    def attach(self, trainer) -> None:
        self.trainer = trainer

    def check_memory(self, model, outs) -> None:
        """Stop with the plan's one-line error when these rollouts' pass would not fit."""
        if self.plan is None:
            return
        lengths = [len(o.token_ids) for o in outs]
        work = self._work(len(outs), lengths, sum(o.stats["policy_tokens"] for o in outs))
        if work.tokens > self.plan.work.tokens or work.logit_positions > self.plan.work.logit_positions:
            make_plan(model, work, None, limit=self.plan.limit, checkpointing=self.plan.checkpointing,
                      shard=self.plan.shard, world=self.plan.world).check()


def build_session(root, cfg: GRPOConfig, model_path, model, objective: Objective | None = None) -> GRPOSession:
    """Load triples + documents of `cfg.data`, the tool bank, the simulator and a rollout
    backend that shares `model`'s weights (`cfg.rollout_backend`: the module itself, or a
    vLLM engine synced from it, train/weight_sync.py); `objective` as GRPOSession's."""
    from generators.llm.transformers_backend import TransformersBackend
    from generators.tools.bank import build_bank
    from generators.tools.banks import bank_rows
    from generators.tools.retriever import index_dir
    from generators.tools.simulator import Simulator
    from storage import load_table
    from train.triples import pick_triples
    from train.weight_sync import SyncedPolicy, check_rollout_backend

    check_rollout_backend(cfg)
    triples = pick_triples(root, cfg.data, cfg.triples, cfg.limit)
    docs = load_table(cfg.data, "documents", root).to_pylist()
    tools = bank_rows(cfg.tools, docs, lambda: build_bank(seed=cfg.tool_seed, variants_per_tool=1))
    if cfg.rollout_backend in ("vllm", "vllm-server"):
        from train.trainer import dist_info

        work = cfg.out and f"{cfg.out}/served-rank{dist_info()[0]}"  # the server's log and published weights
        backend = SyncedPolicy.from_config(model_path, model, cfg, work_dir=work or None)
    else:
        # the policy itself (no second copy); the cache empties itself whenever a step changed the weights
        backend = TransformersBackend(model_path, batch_size=max(8, cfg.group_size), turn_cache_mb=cfg.turn_cache_mb,
                                      lm=model)
    return GRPOSession(cfg, backend, Simulator(docs, seed=cfg.tool_seed, tools=tools, retriever=cfg.retriever,
                                               index_dir=index_dir(root)),
                       make_prompts(triples, tools, cfg.tool_style), model, objective)
