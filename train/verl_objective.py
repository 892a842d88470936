"""forgeplay's objectives inside verl 0.9.1: label-aware GRPO with CARE's advantage weights and
HRPO's hop-grouped advantages as verl advantage estimators. Like the reward and the tool adapter
it runs in verl's environment, not forgeplay's: `forgeplay export verl` copies it into the
export's package (forgeplay_verl.train.verl_objective, train/verl_bundle.py).

The hook: verl's advantage-estimator registry (`verl.trainer.ppo.core_algos.register_adv_est`,
looked up by `algorithm.adv_estimator` through `get_adv_estimator_fn`), the narrowest place that
sees a whole batch's groups; the reward function sees one response at a time, so no vote.
verl calls a registered estimator with the token rewards, the response mask, the group ids
(`index`, verl's per-prompt `uid`) and the algorithm config only; every other column reaches
just its own `gdpo`. So this module also registers, with verl's trainer registry, a trainer
(`trainer.v1.trainer_mode=forgeplay`: verl's synchronous trainer) whose advantage step reads
each row's `extra_info` and response as well and hands them to the estimator (`handing`).
Importing the module registers both (`VERL_USE_EXTERNAL_MODULES=forgeplay_verl.train.verl_objective`
makes every verl process import it: verl/__init__.py).

    algorithm.adv_estimator=forgeplay_hrpo     A_i = GRPO normalisation among the batch's rows whose
                                               extra_info.hop_count is h_i (train.losses.hop_grouped_advantages)
    algorithm.adv_estimator=forgeplay_labels   per prompt group (uid): the label is extra_info.label (bought,
                                               from forgeplay's ledger) else the majority vote of the group's
                                               answers (generators.vote); rewards: exact match when
                                               extra_info.label_reward is binary (the default), else
                                               train.reward.label_rewards (+ extra_info.format_weight);
                                               A = w * GRPO(rewards), w = 1 for a bought label, else
                                               extra_info.vote_weight (CARE's weights, acquire/training.py)

Both return verl's (advantages, returns), each [N, T]: the sequence advantage on the response
mask. The columns are extra_info as exported (train/verl_export.py) and ANSWER, each response's
`<answer>` read as train.reward reads it (`answers`).

Not expressible in verl 0.9.1: CARE's probes (they learn from the policy's hidden states at each
step inside forgeplay's trainer; in verl a pseudo-labelled prompt weighs extra_info.vote_weight,
0 by default: bought labels only, as forgeplay's strategies without probes), and π-Play's
distillation from a teacher that reads the QCP: verl's distillation scores the student's own
prompt and response with a served teacher (top-k or sampled log-probs), with no hook to give the
teacher its own context, and the teacher is a fixed model, not an EMA of the student.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import json

import torch

from generators.llm.toolcalls import extract_answer, split_think
from generators.vote import vote
from train.losses import group_advantages, hop_grouped_advantages, weighted_advantages
from train.reward import _aliases, label_rewards

HRPO, LABELS = "forgeplay_hrpo", "forgeplay_labels"
ESTIMATORS = (HRPO, LABELS)
TRAINER = "forgeplay"
ANSWER = "forgeplay_answer"  # the column of each response's answer (None: none)
_COLUMNS: contextvars.ContextVar = contextvars.ContextVar("forgeplay_columns", default=None)


def answers(texts) -> list[str | None]:
    """Each decoded response's `<answer>` after its think block, as the reward reads it; None without one."""
    out = []
    for t in texts:
        try:
            out.append(extract_answer(split_think(t if isinstance(t, str) else str(t or "")).rest)[0])
        except Exception:  # garbage in -> no answer, never a crashed step
            out.append(None)
    return out


def _info(value) -> dict:
    if isinstance(value, str):
        value = json.loads(value or "{}")
    return dict(value or {})


@contextlib.contextmanager
def handing(columns: dict):
    """Within the block, the estimators read `columns` ({"extra_info": [...], ANSWER: [...]}, one
    entry per row of the batch verl computes advantages for) when verl passes them none."""
    token = _COLUMNS.set(columns)
    try:
        yield
    finally:
        _COLUMNS.reset(token)


def _columns(non_tensor_batch, n: int, need_answers: bool) -> tuple[list[dict], list]:
    cols = non_tensor_batch if non_tensor_batch is not None and "extra_info" in non_tensor_batch else _COLUMNS.get()
    if cols is None or "extra_info" not in cols:
        raise ValueError("forgeplay's advantage estimators need each row's extra_info: run verl with "
                         f"trainer.v1.trainer_mode={TRAINER} (train/verl_objective.py)")
    infos = [_info(v) for v in cols["extra_info"]]
    got = list(cols.get(ANSWER, [])) if need_answers else []
    if len(infos) != n or (need_answers and len(got) != n):
        raise ValueError(f"the batch has {n} rows but its columns {len(infos)} extra_info and {len(got)} answers")
    return infos, got


def hrpo(scores: torch.Tensor, infos: list[dict], eps: float = 1e-6) -> torch.Tensor:
    """[N] HRPO advantages of sequence scores, grouped by each row's extra_info.hop_count."""
    missing = [i for i, info in enumerate(infos) if info.get("hop_count") is None]
    if missing:
        raise ValueError(f"{HRPO} needs extra_info.hop_count on every row; row {missing[0]} has none")
    hops = torch.tensor([int(info["hop_count"]) for info in infos])
    return hop_grouped_advantages(scores.float(), hops, eps)


def label_aware(index, infos: list[dict], got: list) -> tuple[torch.Tensor, torch.Tensor]:
    """([N] rewards against each group's label, [N] weighted GRPO advantages); groups by `index`."""
    groups: dict = {}
    for i, uid in enumerate(index):
        groups.setdefault(uid, []).append(i)
    rewards, adv = torch.zeros(len(got)), torch.zeros(len(got))
    for rows in groups.values():
        info, answered = infos[rows[0]], [got[i] for i in rows]
        bought = info.get("label") or ""
        label, aliases = (bought, _aliases(info.get("aliases"))) if bought else (vote(answered).label, [])
        r, em = label_rewards(answered, label, aliases, [a is not None for a in answered],
                              float(info.get("format_weight") or 0.0))
        if (info.get("label_reward") or "binary") == "binary":  # exact match only, as GRPOConfig.label_reward
            r = [float(x) for x in em]
        weight = torch.tensor([1.0 if bought else float(info.get("vote_weight") or 0.0)])
        a = weighted_advantages(group_advantages(torch.tensor(r)).view(1, -1), weight).view(-1)
        rows_t = torch.tensor(rows)
        rewards, adv = rewards.index_copy(0, rows_t, torch.tensor(r)), adv.index_copy(0, rows_t, a)
    return rewards, adv


def _on_mask(adv: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out = adv.to(response_mask.device).unsqueeze(-1) * response_mask
    return out, out


def hrpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, epsilon: float = 1e-6,
                   config=None, non_tensor_batch=None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator `forgeplay_hrpo` (module docstring)."""
    infos, _ = _columns(non_tensor_batch, token_level_rewards.shape[0], need_answers=False)
    with torch.no_grad():
        return _on_mask(hrpo(token_level_rewards.sum(dim=-1).cpu(), infos, epsilon), response_mask)


def label_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, config=None,
                    non_tensor_batch=None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator `forgeplay_labels` (module docstring); verl's token rewards are not used:
    the rewards are against the labels."""
    if index is None:
        raise ValueError(f"{LABELS} needs the group ids (verl's uid)")
    infos, got = _columns(non_tensor_batch, token_level_rewards.shape[0], need_answers=True)
    with torch.no_grad():
        return _on_mask(label_aware(list(index), infos, got)[1], response_mask)


def decoded(tokenizer, responses: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Each response's text up to its last response token (what verl's reward manager decodes)."""
    out = []
    for ids, mask in zip(responses, response_mask):
        on = mask.nonzero()
        out.append(tokenizer.decode(ids[:int(on[-1]) + 1] if len(on) else ids[:0], skip_special_tokens=True))
    return out


def _register_trainer() -> None:
    """verl's synchronous v1 trainer, its advantage step handing the estimators their columns."""
    try:
        import transfer_queue as tq
        from verl.protocol import DataProto
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
        from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    except ImportError:  # a verl install without its trainer's requirements (the loaders alone)
        return
    if TRAINER in TRAINER_REGISTRY:
        return

    class ForgeplayTrainer(PPOTrainerSync):
        def _compute_advantage(self, batch, metrics: dict):
            if self.config.algorithm.adv_estimator not in ESTIMATORS:
                return super()._compute_advantage(batch, metrics)
            got = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                  select_fields=["extra_info", "responses", "response_mask"])
            rows = DataProto(batch=got.to_padded_tensor()).batch
            infos = rows.pop("extra_info").tolist()
            texts = decoded(self.tokenizer, rows["responses"], rows["response_mask"])
            with handing({"extra_info": infos, ANSWER: answers(texts)}):
                return super()._compute_advantage(batch, metrics)

    register_trainer(TRAINER)(ForgeplayTrainer)


def register() -> None:
    """Register the estimators (and the trainer, where verl's trainer can be imported) with verl."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    for name, fn in ((HRPO, hrpo_advantage), (LABELS, label_advantage)):
        if ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            register_adv_est(name)(fn)
    _register_trainer()


if importlib.util.find_spec("verl") is not None:  # in verl's environment (forgeplay's tests import it without)
    register()
