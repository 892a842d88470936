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

`vote_features(vote, lengths)` is the vote vector CARE's probes read besides the hidden
states: the valid-answer ratio, the cluster sizes over n sorted (padded with 0 to n) and the
response lengths over the longest, sorted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from acquire.vote import Vote, vote


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

    @property
    def n(self) -> int:
        return self.vote.n


def vote_features(vote: Vote, lengths: list[int]) -> torch.Tensor:
    """[1 + 2n]: valid ratio, sorted cluster sizes / n, sorted lengths / longest (module docstring)."""
    n = vote.n
    sizes = sorted(vote.sizes, reverse=True) + [0] * (n - len(vote.sizes))
    longest = max(lengths, default=0) or 1
    lens = sorted((x / longest for x in lengths), reverse=True) + [0.0] * (n - len(lengths))
    return torch.tensor([vote.valid] + [s / n for s in sizes] + lens[:n], dtype=torch.float32)


@torch.no_grad()
def signals(model, prompt_ids: list[int], responses: list[list[int]], masks: list[list[int]] | None = None) -> dict:
    """Hidden states, token log-probabilities and self-certainty of `responses` after the
    prompt; with `masks` (1 = a token the policy wrote), only those tokens count (a
    multi-turn response holds tool output too)."""
    states, logps, certainty = [], [], []
    prompt_state = None
    for j, resp in enumerate(responses):
        ids = torch.tensor([list(prompt_ids) + list(resp)], device=next(model.parameters()).device)
        out = model(input_ids=ids, output_hidden_states=True)
        hidden = out.hidden_states[-1][0]  # after the final norm
        if prompt_state is None:
            prompt_state = hidden[len(prompt_ids) - 1].float().cpu()
        states.append(hidden[-1].float().cpu())
        logits = out.logits[0, len(prompt_ids) - 1:-1].float()
        lp = torch.log_softmax(logits, dim=-1)
        keep = torch.tensor(masks[j] if masks is not None else [1] * len(resp), dtype=torch.bool, device=lp.device)
        token_lp = lp.gather(1, ids[0, len(prompt_ids):, None]).squeeze(1)
        logps.append(token_lp[keep].cpu().tolist())
        per_token = -math.log(lp.shape[-1]) - lp.mean(dim=-1)
        certainty.append(float(per_token[keep].mean()) if bool(keep.any()) else 0.0)
    return {"prompt_state": prompt_state, "response_states": torch.stack(states) if states else None,
            "token_logprobs": logps, "self_certainty": certainty, "lengths": [len(r) for r in responses]}


def group_of(prompt_id: str, rollouts: list, needs: str = "", model=None, true_label: str | None = None,
             aliases=()) -> Group:
    """One prompt's rollouts as a Group (module docstring); `true_label` only for a simulation."""
    from generators.llm.toolcalls import final_answer

    g = Group(prompt_id, vote([final_answer(o.messages) for o in rollouts]), true_label=true_label,
              aliases=tuple(aliases))
    if needs in ("logprobs", "states"):
        first = rollouts[0].mask
        start = max(1, first.index(1) if 1 in first else len(first))
        sig = signals(model, rollouts[0].token_ids[:start], [o.token_ids[start:] for o in rollouts],
                      [o.mask[start:] for o in rollouts])
        g.prompt_state, g.response_states = sig["prompt_state"], sig["response_states"]
        g.token_logprobs, g.self_certainty, g.lengths = sig["token_logprobs"], sig["self_certainty"], sig["lengths"]
    return g
