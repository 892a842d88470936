"""Answer rewards for external trainers: verl's custom reward function and a TRL reward function.

verl (config `reward.custom_reward_function.path=<file>`, `.name=compute_score`; verl loads the
file by path: `forgeplay export verl` writes a copy that needs only the standard library, so this
module and what it imports must stay standard-library only, train/verl_bundle.py checks it):

    compute_score(data_source, solution_str, ground_truth, extra_info=None) -> {"score": ..., ...}

TRL (`GRPOTrainer(reward_funcs=answer_reward, ...)` on a `forgeplay export trl` file):

    answer_reward(completions, answer, aliases=None, **kwargs) -> list[float]

Score: the answer is the single `<answer>...</answer>` after the `<think>` block. 1.0 when it
matches the gold answer or an alias after normalization (generators.answers), else
F1_WEIGHT * best token F1 (partial credit), and 0.0 when there is no single well-formed
`<answer>` (the format reward: malformed output earns nothing). Never raises on bad input.
"""

from __future__ import annotations

import json
from typing import Any

from generators.answers import match
from generators.llm.toolcalls import extract_answer, split_think

F1_WEIGHT = 0.5


def _aliases(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value]
    if isinstance(value, (list, tuple)):
        return [str(a) for a in value if a]
    try:  # numpy arrays from pandas-backed loaders
        return [str(a) for a in list(value) if a]
    except TypeError:
        return []


def score_answer(solution: str, gold: str, aliases: list[str] = ()) -> dict[str, float]:
    """Reward parts for one completion: score, em, f1, format (all floats)."""
    try:
        text = solution if isinstance(solution, str) else str(solution or "")
        return score_parsed(extract_answer(split_think(text).rest)[0], gold, aliases)
    except Exception:  # garbage in -> zero reward, never a crashed training step
        return dict(NO_ANSWER)


NO_ANSWER = {"score": 0.0, "em": 0.0, "f1": 0.0, "format": 0.0}


def score_parsed(answer: str | None, gold: str, aliases: list[str] = ()) -> dict[str, float]:
    """`score_answer`'s parts for an answer already read from its completion (None: none)."""
    if answer is None:
        return dict(NO_ANSWER)
    m = match(answer, str(gold or ""), list(aliases))
    score = 1.0 if m.em else F1_WEIGHT * m.f1
    return {"score": float(score), "em": float(m.em), "f1": float(m.f1), "format": 1.0}


def label_rewards(answers: list, label: str | None, aliases: list[str], well_formed: list[bool],
                  format_weight: float) -> tuple[list[float], list[float]]:
    """Label-aware GRPO's rewards for one prompt's rollouts (acquire/training.py, and inside verl
    train/verl_objective.py): each answer (None: none) scored against the prompt's label (a bought
    one with the data's aliases, else the vote, no aliases; no label: 0), plus `format_weight` for
    a well-formed rollout. Returns (rewards, exact matches)."""
    parts = [score_parsed(a, label, aliases) if label else dict(NO_ANSWER) for a in answers]
    return ([p["score"] + (format_weight if ok else 0.0) for p, ok in zip(parts, well_formed)],
            [p["em"] for p in parts])


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **kwargs) -> dict[str, float]:
    """verl custom reward. ground_truth is the gold answer string (a JSON object
    {"answer", "aliases"} is accepted too); aliases come from extra_info["aliases"]; with
    extra_info["format_weight"] (`forgeplay train grpo --engine verl`) a response with one
    well-formed answer scores that much more, as forgeplay's GRPO rewards it (train/rollout.py)."""
    info = extra_info if isinstance(extra_info, dict) else {}
    parts = _score(solution_str, ground_truth, _aliases(info.get("aliases")))
    try:
        bonus = float(info.get("format_weight") or 0.0)
    except (TypeError, ValueError):
        bonus = 0.0
    if bonus and parts["format"] == 1.0:
        parts["score"] += bonus
    return parts


def _score(solution_str: str, ground_truth: str, aliases: list[str]) -> dict[str, float]:
    gold = ground_truth
    if isinstance(ground_truth, str) and ground_truth.lstrip().startswith("{"):
        try:
            obj = json.loads(ground_truth)
            gold, aliases = obj.get("answer", ground_truth), aliases + _aliases(obj.get("aliases"))
        except (ValueError, AttributeError):
            pass
    return score_answer(solution_str, gold, aliases)


def _completion_text(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, dict):
        return str(c.get("content") or "")
    if isinstance(c, (list, tuple)):  # conversational: the last assistant message
        for m in reversed(c):
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant":
                return str(m.get("content") or "")
    return ""


def answer_reward(completions: list, answer: list[str], aliases: list | None = None, **kwargs) -> list[float]:
    """TRL reward function: one score per completion (strings or chat lists)."""
    aliases = aliases if aliases is not None else [None] * len(completions)
    return [score_answer(_completion_text(c), g, _aliases(a))["score"]
            for c, g, a in zip(completions, answer, aliases)]
