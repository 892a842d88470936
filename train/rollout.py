"""Multi-turn tool-use rollouts: the policy writes a turn (until its end-of-turn token or
`</answer>`), every `<tool_call>` of the turn runs in the BM25 simulator in order (parallel
calls, as the synthesized data makes them, like verl's tool agent loop), their tool messages
are appended, and the policy continues, up to `max_turns` assistant turns.

A call is a search by its own arguments, as a real search tool answers it: the question's
golden pages are not handed to the simulator (a call finds one only if its query does), they
only count the calls that found one (`stats["found"]`).

Each rollout returns the conversation, its token ids (the conversation rendered with the
chat template exactly as SFT renders it, train/sft.py: tool output as a user
`<tool_response>` turn), a mask (1 = token the policy wrote, 0 = prompt and tool tokens),
per-token log-probabilities under the policy at sampling time (teacher-forced, 0 where the
mask is 0), and the reward: train.reward.score_answer of the final reply (1 for an exact
match, 0.5 * F1 otherwise, 0 without a well-formed `<answer>`) plus `format_weight` when
every tool call parsed and the reply ended with one answer.

    from train.rollout import Prompt, RolloutConfig, rollout
    outs = rollout(backend, simulator, [Prompt(messages, "Paris", [], ["doc1"])], RolloutConfig(), seed=0)

`backend` is a generators.llm TransformersBackend (CPU; in GRPO it wraps the policy module
itself, so updates are visible at once) or any backend with `generate` plus a `tokenizer`
and `score` (a vLLM engine or server, weights synced by the trainer: train/weight_sync.py).
A backend with `concurrent = True` gets one request per conversation turn, all in flight at
once (up to IN_FLIGHT conversations, each a thread; the backend's own limit decides what
reaches the server); its `policy_version` (the optimizer step of the weights it holds) is
recorded per turn in `Rollout.stats["policy_versions"]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from generators.llm.base import ChatRequest
from generators.llm.toolcalls import parse_tool_calls
from train.reward import score_answer
from train.configs import RolloutConfig  # noqa: F401  (re-exported)
from train.sft import IGNORE, tokenize

IN_FLIGHT = 1024  # conversations a concurrent backend is given at once at most (each a thread)
STOPS = ["</answer>"]  # not `</tool_call>`: that would cut a turn's second parallel call


@dataclass
class Prompt:
    """One question with what the simulator and the reward need."""

    messages: list[dict]  # system (with the tools block) + user question
    answer: str
    aliases: list[str] = field(default_factory=list)
    golden_doc_ids: list[str] = field(default_factory=list)
    key: str = ""
    meta: dict = field(default_factory=dict)  # what objectives read per prompt (train/objective.py)


@dataclass
class Rollout:
    messages: list[dict]
    token_ids: list[int]
    mask: list[int]
    logprobs: list[float]
    reward: float
    stats: dict


def _with_stop(text: str, token_text: str) -> str:
    """Completion text is cut before the stop string; put the stop string back."""
    for s in STOPS:
        at = token_text.find(s)
        if at >= 0 and token_text[:at].rstrip() == text.rstrip():
            return text + s
    return text


def _take(backend, simulator, prompt: Prompt, conv: list[dict], st: dict, c) -> bool:
    """Append completion `c` (and the results of its tool calls) to `conv`; True when the
    conversation goes on (it called a tool), False when it ended (an answer, or no call)."""
    text = _with_stop(c.text, backend.tokenizer.decode(c.token_ids, skip_special_tokens=True))
    st["turns"] += 1
    st["policy_versions"].append(backend.policy_version)
    conv.append({"role": "assistant", "content": text})
    if "<answer>" in text:
        st["finish"] = "answer"
        return False
    parsed = parse_tool_calls(text)
    st["bad_calls"] += len(parsed.errors)
    if not parsed.calls:
        st["finish"] = "no_call"
        return False
    for call in parsed.calls:
        st["calls"] += 1
        result = simulator.call(call["name"], call["arguments"])  # by its query alone (module docstring)
        st["tool_errors"] += '"error"' in result[:40]
        st["found"] += any(d in result for d in prompt.golden_doc_ids)  # a page the question needs
        conv.append({"role": "tool", "content": result, "name": call["name"]})
    return True


def _request(conv: list[dict], n: int, cfg: RolloutConfig, seed: int):
    from train.sft import template_messages

    return ChatRequest(messages=template_messages(conv), n=n, temperature=cfg.temperature, top_p=cfg.top_p,
                       max_tokens=cfg.max_new_tokens, stop=list(STOPS), seed=seed)


def _finish(backend, prompt: Prompt, conv: list[dict], st: dict, cfg: RolloutConfig) -> Rollout:
    """The ended conversation `conv` as a Rollout: its tokens and mask (as SFT renders it), its
    reward and stats (module docstring); the log-probabilities come later (`rollout`)."""
    enc = tokenize(backend.tokenizer, conv)
    mask = [int(x != IGNORE) for x in enc["labels"]]
    parts = score_answer(conv[-1]["content"] if conv[-1]["role"] == "assistant" else "", prompt.answer, prompt.aliases)
    well_formed = st["finish"] == "answer" and st["bad_calls"] == 0 and parts["format"] == 1.0
    reward = parts["score"] + (cfg.format_weight if well_formed else 0.0)
    st.update({"em": parts["em"], "f1": parts["f1"], "format": float(well_formed), "policy_tokens": sum(mask)})
    return Rollout(conv, enc["input_ids"], mask, [], reward, st)


def _lockstep(backend, simulator, prompts, convs, calls, cfg, seed, progress) -> list[Rollout]:
    """All conversations advance one turn per batch (one `generate` call per turn)."""
    active = list(range(len(prompts)))
    for turn in range(cfg.max_turns):
        if not active:
            break
        # rollouts whose conversations are still identical (a GRPO group's first turn) share one
        # request with n samples: the backend encodes their prompt once
        same: dict[str, list[int]] = {}
        for i in active:
            same.setdefault(json.dumps(convs[i], sort_keys=True), []).append(i)
        groups = list(same.values())
        outs = backend.generate([_request(convs[g[0]], len(g), cfg, seed * 100003 + g[0] * 101 + turn)
                                 for g in groups], progress=progress)
        completion = {}
        for g, out in zip(groups, outs):
            if len(out) != len(g):
                raise RuntimeError(f"the backend returned {len(out)} samples for a request of n={len(g)}")
            completion.update(zip(g, out))
        active = [i for i in active if _take(backend, simulator, prompts[i], convs[i], calls[i], completion[i])]
    return [_finish(backend, p, conv, st, cfg) for p, conv, st in zip(prompts, convs, calls)]


def _asynchronous(backend, simulator, prompts, convs, calls, cfg, seed, progress, ended=None) -> list[Rollout]:
    """Each conversation in its own thread: a turn that ended goes straight to its tool call
    and its next turn, and an ended conversation is tokenized and scored in its thread at once;
    none waits for the others (the server batches what is in flight, and the client's own work
    on one conversation overlaps the server's on the others instead of following them all).
    `ended()` is called as each conversation is done (a caller keeping a server full)."""
    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    bar = tqdm(total=len(prompts), desc="rollouts", unit="rollout", disable=not progress)

    def one(i: int) -> Rollout:
        for turn in range(cfg.max_turns):
            out = backend.generate([_request(convs[i], 1, cfg, seed * 100003 + i * 101 + turn)])[0]
            if not _take(backend, simulator, prompts[i], convs[i], calls[i], out[0]):
                break
        done = _finish(backend, prompts[i], convs[i], calls[i], cfg)
        bar.update(1)
        if ended is not None:
            ended()
        return done

    # (not the backend's limit as it stands now: an adaptive one grows past it while they run)
    workers = max(1, min(len(prompts), max(IN_FLIGHT, backend.max_concurrency)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, range(len(prompts))))  # re-raises the first failure
    bar.close()
    return results


def rollout(backend, simulator, prompts: list[Prompt], cfg: RolloutConfig, seed: int = 0,
            progress: bool = False, logprobs: bool = True, ended=None) -> list[Rollout]:
    """One rollout per prompt (repeat a prompt G times for a group). A backend that serves
    concurrent requests (`backend.concurrent`, e.g. a vLLM server) runs every conversation
    on its own; any other advances them in lockstep, one batch per turn. `logprobs=False`
    skips the teacher-forced scoring pass (`Rollout.logprobs` stays empty). `ended`, when
    given, is called once for each conversation as it is done (a concurrent backend's: each
    as it ends; in lockstep: all at the end)."""
    convs = [list(p.messages) for p in prompts]
    calls = [{"calls": 0, "bad_calls": 0, "tool_errors": 0, "found": 0, "turns": 0, "finish": "turn_limit",
              "policy_versions": []} for _ in prompts]
    if backend.concurrent:
        results = _asynchronous(backend, simulator, prompts, convs, calls, cfg, seed, progress, ended)
    else:
        results = _lockstep(backend, simulator, prompts, convs, calls, cfg, seed, progress)
        for _ in results if ended is not None else ():
            ended()
    if not logprobs:
        return results
    lps = backend.score([r.token_ids[:1] for r in results], [r.token_ids[1:] for r in results])
    for r, lp in zip(results, lps):
        r.logprobs = [0.0] + [v if m else 0.0 for v, m in zip(lp, r.mask[1:])]
    return results
