"""One prompt's sampled group as the acquisition strategies see it: the vote over its n
answers, each response's token log-probabilities and self-certainty, the policy's hidden
states (at the last prompt token and at each response's last token) and, in a simulation,
the held-back true label.

`signals(model, prompt_ids, responses)` computes the model-side parts in one forward pass per
response: the final-norm hidden states, the sampled tokens' log-probabilities, and the
self-certainty of each token's distribution, KL(uniform || p) = -log V - mean_v log p_v,
averaged over the response (high: the model is sure).

`group_of(prompt_id, rollouts, needs, model)` builds a Group from one prompt's rollouts
(train/rollout.py): their final answers voted, and the model-side signals when the strategy
`needs` them ("logprobs" or "states").

`scorer(model)` loads a model for `signals` alone, beside a backend that samples elsewhere
(a vLLM server): the same weights, in this process, in evaluation mode.

`vote_features(vote, lengths)` is the vote vector CARE's probes read besides the hidden
states: the valid-answer ratio, the cluster sizes over n sorted (padded with 0 to n) and the
response lengths over the longest, sorted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from generators.vote import Vote, vote

if TYPE_CHECKING:  # torch is imported where a tensor is made: the command line reads this module's users
    import torch


@dataclass
class Group:
    """A prompt's n responses and what the strategies read of them."""

    prompt_id: str
    vote: Vote
    token_logprobs: list[list[float]] = field(default_factory=list)  # per response, its tokens
    self_certainty: list[float] = field(default_factory=list)  # per response
    prompt_state: torch.Tensor | None = None  # [H]
    response_states: torch.Tensor | None = None  # [n, H]
    lengths: list[int] = field(default_factory=list)  # tokens per response
    true_label: str | None = None  # only in a simulation (oracle strategies, evaluation)
    aliases: tuple[str, ...] = ()
    reward: str = "binary"  # the step's rewards (acquire.cag.step_rewards): binary or partial
    formats: list[float] = field(default_factory=list)  # partial: per response, 1.0 if well-formed
    format_weight: float = 0.0  # partial: the format bonus

    @property
    def n(self) -> int:
        return self.vote.n


def vote_features(vote: Vote, lengths: list[int]) -> torch.Tensor:
    """[1 + 2n]: valid ratio, sorted cluster sizes / n, sorted lengths / longest (module docstring)."""
    import torch

    n = vote.n
    sizes = sorted(vote.sizes, reverse=True) + [0] * (n - len(vote.sizes))
    longest = max(lengths, default=0) or 1
    lens = sorted((x / longest for x in lengths), reverse=True) + [0.0] * (n - len(lengths))
    return torch.tensor([vote.valid] + [s / n for s in sizes] + lens[:n], dtype=torch.float32)


def signals(model, prompt_ids: list[int], responses: list[list[int]], masks: list[list[int]] | None = None) -> dict:
    """Hidden states, token log-probabilities and self-certainty of `responses` after the
    prompt; with `masks` (1 = a token the policy wrote), only those tokens count (a
    multi-turn response holds tool output too). The prompt is encoded once: each response
    continues from its keys and values, which are cut back to the prompt afterwards (a model
    that returns no cache reads prompt and response whole). A policy in training mode (GRPO's,
    with activation checkpointing, which turns the cache off) is read in evaluation mode
    without gradients, and left in the mode it was in."""
    import torch

    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            return _signals(model, prompt_ids, responses, masks)
    finally:
        model.train(was)


def _signals(model, prompt_ids: list[int], responses: list[list[int]], masks: list[list[int]] | None) -> dict:
    import torch

    device = next(model.parameters()).device
    pre = model(input_ids=torch.tensor([list(prompt_ids)], device=device), use_cache=True, output_hidden_states=True)
    prompt_state = pre.hidden_states[-1][0, -1].float().cpu()  # after the final norm
    first = pre.logits[0, -1:].float()  # predicts each response's first token
    cache, states, logps, certainty = pre.past_key_values, [], [], []
    for j, resp in enumerate(responses):
        if not resp:
            states.append(prompt_state)
            logps.append([])
            certainty.append(0.0)
            continue
        ids = torch.tensor([list(resp)], device=device)
        if cache is not None:
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, output_hidden_states=True)
            cache.crop(-len(resp))  # back to the prompt alone
            logits = out.logits[0, :-1]
        else:  # a model that keeps no cache (training with activation checkpointing): the whole sequence
            out = model(input_ids=torch.cat([torch.tensor([list(prompt_ids)], device=device), ids], dim=1),
                        output_hidden_states=True)
            logits = out.logits[0, len(prompt_ids):-1]
        states.append(out.hidden_states[-1][0, -1].float().cpu())
        lp = torch.log_softmax(torch.cat([first, logits.float()]), dim=-1)
        keep = torch.tensor(masks[j] if masks is not None else [1] * len(resp), dtype=torch.bool, device=lp.device)
        token_lp = lp.gather(1, ids[0, :, None]).squeeze(1)
        logps.append(token_lp[keep].cpu().tolist())
        per_token = -math.log(lp.shape[-1]) - lp.mean(dim=-1)
        certainty.append(float(per_token[keep].mean()) if bool(keep.any()) else 0.0)
    return {"prompt_state": prompt_state, "response_states": torch.stack(states) if states else None,
            "token_logprobs": logps, "self_certainty": certainty, "lengths": [len(r) for r in responses]}


def scorer(model):
    """`model` (a folder or prepared name) loaded here for `signals` (module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM

    from generators.llm.model_store import resolve_model

    return AutoModelForCausalLM.from_pretrained(str(resolve_model(model)), dtype=torch.float32).eval()


def group_of(prompt_id: str, rollouts: list, needs: str = "", model=None, true_label: str | None = None,
             aliases=(), reward: str = "binary", format_weight: float = 0.0) -> Group:
    """One prompt's rollouts as a Group (module docstring); `true_label` only for a simulation;
    `reward` and `format_weight` as the step rewards them (acquire.cag.step_rewards)."""
    from generators.llm.toolcalls import final_answer

    g = Group(prompt_id, vote([final_answer(o.messages) for o in rollouts]), true_label=true_label,
              aliases=tuple(aliases), reward=reward, format_weight=format_weight if reward == "partial" else 0.0,
              formats=[float(o.stats.get("format", 0.0)) for o in rollouts] if reward == "partial" else [])
    if needs in ("logprobs", "states"):
        first = rollouts[0].mask
        start = max(1, first.index(1) if 1 in first else len(first))
        sig = signals(model, rollouts[0].token_ids[:start], [o.token_ids[start:] for o in rollouts],
                      [o.mask[start:] for o in rollouts])
        g.prompt_state, g.response_states = sig["prompt_state"], sig["response_states"]
        g.token_logprobs, g.self_certainty, g.lengths = sig["token_logprobs"], sig["self_certainty"], sig["lengths"]
    return g
