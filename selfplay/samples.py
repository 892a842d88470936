"""What the self-play updates train on: one iteration's committed rollouts as token ids, a
mask of the tokens the policy wrote, a reward and an advantage each.

- `examiner_samples`: every examiner output the examiner sampled itself, a rejected one too.
  Its reward is the examiner reward (selfplay/rewards.py) of its task from the attempts'
  count k, 0 for a reject (no format point, no task). Advantages are HRPO: the reward
  normalised among the outputs of the same target hop count (train.losses.hop_grouped_
  advantages), over the whole iteration, not a micro-batch. Replayed conversations
  (`"replayed": true` in the meta: `--demo-tasks` demonstrations, selfplay/phases.py) are
  not the examiner's samples: they get no reward, no advantage and no policy-gradient term;
  the accepted ones come back as demonstrations (`demo=True`, advantage 0), which the update
  trains by likelihood (selfplay/step.py `DemonstrationNLL`), or are left out.
- `student_samples`: every attempt, its reward the exact match (1 or 0) of its answer. Its
  advantage is GRPO's within its task's attempts. Each carries its task, so a teacher can
  be prompted with the question and its QCP (`teacher_prompt`).

Token ids re-render the stored messages with the chat template as the rollout did
(train.sft.tokenize), so the mask covers exactly the assistant turns; conversations longer
than `max_len` tokens are left out and counted.

    samples, counts = examiner_samples(rollouts, tasks, attempts, tokenizer)
    samples, counts = student_samples(attempts, tasks, tokenizer)
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

import torch

from selfplay.qcp import teacher_context
from selfplay.rewards import examiner_reward
from selfplay.play import score
from train.losses import group_advantages, hop_grouped_advantages
from train.sft import IGNORE, tokenize


@dataclass
class Sample:
    """One stored rollout ready for a policy-gradient step."""

    rollout_id: str
    input_ids: list[int]
    mask: list[int]  # 1 on the tokens the policy wrote
    reward: float
    advantage: float
    task: dict | None = None  # a student attempt's task (question, answer, qcp)
    system: str = ""  # the conversation's system message (a teacher is prompted with it too)
    old_logprobs: list[float] | None = None  # under the policy that sampled it (set before training)
    demo: bool = False  # a replayed demonstration: trained by likelihood, never by the policy gradient


def _encode(tokenizer, row: dict) -> tuple[list[int], list[int]]:
    enc = tokenize(tokenizer, [{"role": m["role"], "content": m.get("content") or ""} for m in row["messages"]])
    return enc["input_ids"], [int(x != IGNORE) for x in enc["labels"]]


def _samples(rows: list[dict], rewards: list[float], advantages: list[float], tokenizer, max_len: int,
             tasks: list[dict] | None, drop_flat: bool) -> tuple[list[Sample], dict]:
    out, counts = [], {"rows": len(rows), "too_long": 0, "no_policy_tokens": 0, "flat": 0}
    for row, r, a, task in zip(rows, rewards, advantages, tasks or [None] * len(rows)):
        if drop_flat and a == 0:
            counts["flat"] += 1
            continue
        ids, mask = _encode(tokenizer, row)
        if len(ids) > max_len:
            counts["too_long"] += 1
        elif not any(mask):
            counts["no_policy_tokens"] += 1
        else:
            first = row["messages"][0] if row["messages"] else {}
            system = first.get("content") or "" if first.get("role") == "system" else ""
            out.append(Sample(row["id"], ids, mask, float(r), float(a), task, system))
    counts["kept"] = len(out)
    return out, counts


def examiner_rewards(rollouts: list[dict], tasks: list[dict], attempts: list[dict]) -> list[float]:
    """Per examiner rollout: the examiner reward of its task (k from the attempts), 0 for a reject."""
    n = attempts_per_task(attempts)
    by_task = {s["task_id"]: s for s in score(tasks, attempts, n)} if n >= 2 else {}
    out = []
    for row in rollouts:
        tid = json.loads(row["meta"]).get("task_id")
        if tid is None:
            out.append(0.0)
        elif tid in by_task:
            out.append(by_task[tid]["examiner_reward"])
        else:  # a task no student attempted: the format point only
            out.append(examiner_reward(True, 0, 2))
    return out


def attempts_per_task(attempts: list[dict]) -> int:
    """n: attempts per task (0 without attempts)."""
    per: dict[str, int] = defaultdict(int)
    for a in attempts:
        per[a["prompt_id"]] += 1
    return max(per.values(), default=0)


def replayed(row: dict) -> bool:
    """Whether an examiner rollout was replayed (given to it, not sampled by it)."""
    return bool(json.loads(row["meta"]).get("replayed"))


def examiner_scored(rollouts: list[dict], tasks: list[dict], attempts: list[dict]) -> tuple[list[dict], list[float], list[float]]:
    """(the examiner's own rollouts sorted by id, examiner rewards, HRPO advantages among
    them), without tokenizing; replayed rollouts are left out."""
    rollouts = sorted((r for r in rollouts if not replayed(r)), key=lambda r: r["id"])
    rewards = examiner_rewards(rollouts, tasks, attempts)
    hops = torch.tensor([int(json.loads(r["meta"])["target_hops"]) for r in rollouts])
    adv = hop_grouped_advantages(torch.tensor(rewards), hops).tolist() if rollouts else []
    return rollouts, rewards, adv


def demonstrations(rollouts: list[dict]) -> list[dict]:
    """The replayed rollouts the parser accepted (they have a task), sorted by id."""
    return sorted((r for r in rollouts if replayed(r) and json.loads(r["meta"]).get("task_id")), key=lambda r: r["id"])


def examiner_samples(rollouts: list[dict], tasks: list[dict], attempts: list[dict], tokenizer,
                     max_len: int = 4096, drop_flat: bool = False,
                     demos: bool = False) -> tuple[list[Sample], dict]:
    """The examiner's own outputs with their rewards and HRPO advantages (module docstring);
    `drop_flat` leaves out outputs whose advantage is 0 (they add no policy gradient). With
    `demos`, the accepted replayed conversations follow as demonstrations (`demo=True`).
    Counts: `replayed` (left out of the policy gradient), `demonstrations` (kept as such)."""
    own, counts = _samples(*examiner_scored(rollouts, tasks, attempts), tokenizer, max_len, None, drop_flat)
    shown = demonstrations(rollouts) if demos else []
    extra, demo_counts = _samples(shown, [0.0] * len(shown), [0.0] * len(shown), tokenizer, max_len, None, False)
    for s in extra:
        s.demo = True
    counts = {**counts, "replayed": sum(map(replayed, rollouts)), "demonstrations": len(extra),
              "kept": counts["kept"] + len(extra)}
    return own + extra, counts


def student_scored(attempts: list[dict], tasks: list[dict]) -> tuple[list[dict], list[float], list[float], list[dict]]:
    """(attempts grouped by task, exact-match rewards, advantages within each task, their tasks)."""
    by_id = {t["task_id"]: t for t in tasks}
    groups: dict[str, list[dict]] = defaultdict(list)
    for a in sorted(attempts, key=lambda r: r["id"]):
        if a["prompt_id"] not in by_id:
            raise ValueError(f"attempt {a['id']} points to task {a['prompt_id']}, which is not among the tasks")
        groups[a["prompt_id"]].append(a)
    rows, rewards, adv = [], [], []
    for tid in sorted(groups):
        em = [float(json.loads(a["meta"])["em"]) for a in groups[tid]]
        rows += groups[tid]
        rewards += em
        adv += group_advantages(torch.tensor(em)).tolist()
    return rows, rewards, adv, [by_id[a["prompt_id"]] for a in rows]


def student_samples(attempts: list[dict], tasks: list[dict], tokenizer, max_len: int = 4096,
                    drop_flat: bool = False) -> tuple[list[Sample], dict]:
    """The attempts with exact-match rewards and advantages within each task's group."""
    rows, rewards, adv, owners = student_scored(attempts, tasks)
    return _samples(rows, rewards, adv, tokenizer, max_len, owners, drop_flat)


def teacher_prompt(tokenizer, sample: Sample, mode: str) -> list[int]:
    """The teacher's prompt tokens for a student sample: the student's system message, then the
    task as `teacher_context` renders it in `mode`, ending with the assistant header (where
    the student's completion starts)."""
    from train.sft import template_messages

    messages = template_messages([{"role": "system", "content": sample.system},
                                  {"role": "user", "content": teacher_context(sample.task, mode)}])
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]
