"""Label-aware GRPO (CARE): the labeller `forgeplay train grpo --labels STRATEGY --budget B`
plugs into GRPO (train/labelled.py), one registry entry per acquisition strategy.

After each step's rollouts (a group of `group_size` per prompt), the labeller:
1. votes each prompt's answers (generators/vote.py): the pseudo-label;
2. takes the label of a prompt already paid for from the ledger, free (an earlier step, run or
   `acquire-labels` bought it);
3. scores the other prompts with the strategy and buys true labels for the top `label_p` of
   them from `--source` (acquire/sources.py: the held-back answers by default, an annotator
   model, or a queue file people fill in, whose labels later steps and runs find in the
   ledger), never past the budget (the ledger
   at `<labels_out>/_ledger.sqlite`, the bought labels in its `labels` shard, with the vote
   they replaced as a pseudo row);
4. lets CARE's probes learn from what was just bought (checkpointed with the policy);
5. recomputes every rollout's reward against its prompt's label (the bought one, else the
   vote; acquire.cag.step_rewards: 0/1 exact match by default, `--label-reward partial` for
   1 / 0.5 F1 plus the format bonus; the strategies' CAG is measured on the same rewards) and sets each prompt's advantage weight as CARE's code does (`advantage_weights`):
   1 for a known label; for a prompt CARE gated as most likely voted right,
   clip(soft_adv * the probes' stage-2 expected CAG, 0, 1); 0 for the rest. Strategies without probes
   train on bought labels only.

The step's metrics gain `labels_bought`, `labels_known`, `label_weight` (mean weight),
`vote_right` (share of votes that match the data's answer), `pseudo_noise` (share of rollouts
whose pseudo reward disagrees with the true one) and `reward_noise` (the same with the labels
used), `budget_left` and, for care, `probe_loss`. The data's answers serve only as the
held-back column and for these simulation metrics.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import asdict, replace

from acquire.buy import buy, labelled_ids, pseudo_rows
from acquire.group import group_of
from acquire.ledger import Ledger
from acquire.session import Prompted
from acquire.sources import SOURCES, make_source
from acquire.strategies import STRATEGIES, Context, choose, get_strategy
from acquire.cag import step_rewards
from generators.answers import match
from generators.vote import rewards
from train.labelled import register_labeller, register_sources


def advantage_weights(prompt_ids: list[str], known: set[str], gated: dict[str, float], soft_adv: float) -> list[float]:
    """Per prompt: 1 with a known label, clip(soft_adv * gap, 0, 1) when gated (gap: its
    stage-2 expected CAG), else 0."""
    return [1.0 if p in known else min(1.0, max(0.0, soft_adv * gated[p])) if p in gated else 0.0
            for p in prompt_ids]


def ledger_path(root, cfg):
    """The ledger of label-aware GRPO's labels dataset (`--out-dataset`, default <data>_labels)."""
    from storage.manifest import dataset_dir

    return dataset_dir(root, cfg.labels_dataset()) / "_ledger.sqlite"


def bought_labels(root, cfg) -> dict[str, str]:
    """prompt id -> label of every label bought so far for `cfg`'s labels dataset ({} without a ledger)."""
    path = ledger_path(root, cfg)
    return {k: v for k, v in Ledger(path).paid().items() if v} if path.exists() else {}


class Labeller:
    """Labels, rewards and weights for each GRPO step (module docstring). In N processes each
    rank votes and reads the signals of its own prompts; rank 0 alone holds the ledger, the
    label source and the probes, decides for the micro-batch of every rank at once (`decide`)
    and sends the decision back, so N ranks buy as one process with the whole batch would."""

    def __init__(self, cfg, root, model, prompts: list) -> None:
        from train.trainer import dist_info

        self.cfg, self.model = cfg, model
        self.strategy = get_strategy(cfg.labels)
        self.out = cfg.labels_dataset()
        self.first = dist_info()[0] == 0
        self.probes = None
        if not self.first:  # the ledger, the source and the probes are rank 0's
            return
        from storage.resumable import RunWriter
        from storage.runs import config_hash

        self.ledger = Ledger(ledger_path(root, cfg), budget=cfg.budget)
        self.recovered = self.ledger.recover(labelled_ids(root, self.out))  # a killed run's reservations
        run = f"grpo-labels-{config_hash({k: v for k, v in asdict(cfg).items() if k != 'budget'})}"
        self.writer = RunWriter(root, run, {"config_hash": run})
        self.source = make_source(cfg, root, [_prompted(p) for p in prompts], self.ledger)
        weakref.finalize(self, self.source.close)
        if self.strategy.needs == "states":
            from acquire.probes import Probes

            self.probes = Probes(model.config.hidden_size, cfg.group_size, seed=cfg.tool_seed)

    def __call__(self, prompts: list, rollouts: list, step: int) -> tuple[list, list[float], dict]:
        """(prompts with meta["weight"], rewards, stats) for one micro-batch's rollouts (every rank calls it)."""
        from train import dist

        size, cfg = self.cfg.group_size, self.cfg
        firsts = prompts[::size]
        groups = [group_of(p.key, rollouts[i * size:(i + 1) * size], self.strategy.needs, self.model,
                           p.answer if self.strategy.needs == "true_label" else None, p.aliases,
                           reward=cfg.label_reward, format_weight=cfg.format_weight)
                  for i, p in enumerate(firsts)]
        everyone = dist.gather_to_first(groups)
        labels, weights, stats = dist.from_first(
            self.decide([g for part in everyone for g in part], step) if self.first else None)
        out_prompts, scores_, noise, pseudo_noise = [], [], 0, 0
        for i, (g, p) in enumerate(zip(groups, firsts)):
            label, aliases = (labels[g.prompt_id], p.aliases) if g.prompt_id in labels else (g.vote.label, [])
            weighted = replace(p, meta={**p.meta, "weight": weights[g.prompt_id]})
            voted = rewards(g.vote, g.vote.label)  # exact match against the vote
            used = rewards(g.vote, label, aliases)  # exact match against the label used
            scores_ += step_rewards(g, label, aliases)
            for o, u, v in zip(rollouts[i * size:(i + 1) * size], used, voted):
                noise += u != o.stats["em"]
                pseudo_noise += v != o.stats["em"]
                out_prompts.append(weighted)
        truth = [bool(g.vote.label) and match(g.vote.label, p.answer, list(p.aliases)).em for g, p in zip(groups, firsts)]
        stats = {**stats, "vote_right": sum(truth) / len(truth), "reward_noise": noise / len(rollouts),
                 "pseudo_noise": pseudo_noise / len(rollouts)}
        return out_prompts, scores_, stats

    def decide(self, groups: list, step: int) -> tuple[dict[str, str], dict[str, float], dict]:
        """Rank 0: for the groups of every rank, (the known and bought labels by prompt id, every
        prompt's advantage weight, the stats of the batch): labels reused from the ledger, the
        rest scored, the top `label_p` bought, the probes taught, the gated prompts weighted."""
        cfg = self.cfg
        paid = self.ledger.paid()
        labels = {g.prompt_id: paid[g.prompt_id] for g in groups if paid.get(g.prompt_id) is not None}
        open_ = [g for g in groups if g.prompt_id not in labels]
        scores = self.strategy.score(open_, Context(step=step, seed=cfg.tool_seed, probes=self.probes,
                                                    warmup=cfg.label_warmup, gate=cfg.label_gate)) if open_ else []
        chosen = choose(open_, scores, cfg.label_p, self.ledger.summary()["left"], self.source.cost) if open_ else []
        stats = {"labels_known": float(len(labels)), "labels_bought": 0.0}
        if chosen:
            self.writer.commit(self.out, "labels", pseudo_rows(self.out, chosen, step=step))
            got = buy(self.ledger, self.source, [g.prompt_id for g in chosen], self.writer, self.out, cfg.labels,
                      scores={g.prompt_id: s for g, s in zip(open_, scores)})
            labels.update(got["labels"])
            stats["labels_bought"] = float(got["bought"])
            if self.probes is not None and got["labels"]:
                loss = self.probes.learn_labels(groups, got["labels"])
                if loss is not None:  # None: one example so far, kept for the next step
                    stats["probe_loss"] = loss
        gated = [g for g, s in zip(open_, scores) if s == -math.inf]
        gaps = dict(zip((g.prompt_id for g in gated), self.probes.gaps(gated)[1])) if gated else {}
        ids = [g.prompt_id for g in groups]
        weights = dict(zip(ids, advantage_weights(ids, set(labels), gaps, cfg.soft_adv)))
        stats.update({"label_weight": sum(weights[i] for i in ids) / len(ids),
                      "budget_left": float(self.ledger.summary()["left"])})
        return labels, weights, stats

    def state_dict(self) -> dict:
        return {"probes": self.probes.state_dict() if self.probes is not None else None}

    def load_state_dict(self, state: dict) -> None:
        if self.probes is not None and state.get("probes") is not None:
            self.probes.load_state_dict(state["probes"])


def _prompted(prompt) -> Prompted:
    """A GRPO prompt as a label source reads it: its id, question and held-back answer."""
    question = next((m["content"] for m in reversed(prompt.messages) if m["role"] == "user"), "")
    return Prompted(prompt.key, question, prompt.answer, list(prompt.aliases))


def _factory(cfg, root, session) -> Labeller:
    return Labeller(cfg, root, session.model, session.prompts)


for _name in STRATEGIES:
    register_labeller(_name, _factory)
register_sources(SOURCES)
