"""Acquiring labels for prompts without trusted ones, batch by batch, without Prefect: sample
n answers per prompt from the policy (multi-turn tool rollouts, train/rollout.py), vote
(generators/vote.py), score the groups with a strategy (acquire/strategies.py), buy labels for
the chosen ones within the budget (acquire/buy.py), let CARE's probes learn from what was
bought, and commit the batch's `rollouts` and its pseudo-labels (`labels`, source pseudo,
cost 0). Prompts are a dataset's triples treated as unlabelled: their answers are held back
and revealed only by the `column` source when bought; the `queue` and `llm` sources
(acquire/sources.py) label them by people or by an annotator model instead.

    source = make_source(cfg, root, prompts, ledger)
    session = Session(cfg, root, backend, simulator, tools, ledger, writer, source, probes, lm)
    counts = session.run_batch(prompts[:cfg.batch], step=0)

`lm` is the model whose teacher-forced pass gives the strategies' token probabilities and
hidden states (acquire/group.py): the backend's own in process, or `acquire.group.scorer`
beside a served backend (`--rollout-backend vllm-server`) that samples faster.

A batch whose rollouts are committed is done: a rerun (same config) skips it, and the ledger
never pays twice for a prompt. The probes' state is saved after each batch.

A backend that serves concurrent requests samples the next batches while one is scored,
bought and committed (`Session.rolled`): a batch's rollouts do not depend on what earlier
batches bought, so the engine keeps working through the steps that run here.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from acquire.buy import buy, pseudo_rows
from acquire.group import Group, group_of
from acquire.strategies import STRATEGIES, Context, choose, get_strategy
from generators.llm.kinds import ROLLOUT, kinds_with, require
from generators.llm.openai_http import URL_FORM
from generators.llm.toolcalls import TOOL_STYLES
from generators.tools.banks import HELP as BANK_HELP
from train.configs import TRIPLE_SETS, TRIPLES_HELP
from train.labelled import LabelConfig


@dataclass
class AcquireConfig(LabelConfig):
    """What one acquisition run does (every field is a CLI option)."""

    dataset: str = field(default="", metadata={"required": True, "help": "dataset whose triples are the prompts (their answers held back)"})
    out: str = field(default="", metadata={"flag": "out-dataset", "aliases": ("out",), "help": "dataset that receives rollouts and labels (default: <dataset>_labels)"})
    strategy: str = field(default="care", metadata={"choices": lambda: tuple(STRATEGIES),
                                                    "help": "how the prompts to buy labels for are chosen"})
    budget: float = field(default=200.0, metadata={"help": "what labels may cost in all, in --label-cost units (the ledger's total; raise it to buy more)"})
    model: str | None = field(default=None, metadata={"help": "policy model folder or prepared name (default: embedded)"})
    backend: str = field(default="transformers", metadata={
        "flag": "rollout-backend", "aliases": ("backend",), "choices": kinds_with(ROLLOUT),
        "help": "what samples the answers: transformers (in this process), vllm-server (vLLM's server from "
                ".venv-vllm, or the one at --base-url; every answer in flight at once) or openai (any "
                "OpenAI-compatible server at --base-url serving --model); token probabilities and hidden "
                "states, when the strategy reads them, come from one teacher-forced pass of --model in this process"})
    url: str = field(default="", metadata={"flag": "base-url", "aliases": ("rollout-url", "url"),
                                           "help": f"vllm-server / openai: the server's URL, {URL_FORM}"})
    served_model: str = field(default="policy", metadata={"help": "openai: the model name the server knows"})
    n: int = field(default=8, metadata={"help": "answers sampled per prompt"})
    batch: int = field(default=16, metadata={"flag": "batch-size", "aliases": ("batch",), "help": "prompts per batch"})
    limit: int = field(default=0, metadata={"help": "prompts at most (0 = all)"})
    triples: str = field(default="all", metadata={"choices": TRIPLE_SETS, "help": TRIPLES_HELP})
    max_turns: int = field(default=4, metadata={"help": "assistant turns per answer at most"})
    max_new_tokens: int = field(default=192, metadata={"help": "tokens per turn at most"})
    tools: str = field(default="auto", metadata={"help": BANK_HELP})
    tool_style: str = field(default="full", metadata={
        "choices": TOOL_STYLES, "help": "tools in the system prompt: full (JSON schemas) or compact (one-line signatures); match the policy's SFT data"})
    turn_cache_mb: int = field(default=2048, metadata={
        "help": "MB of KV kept so an answer's next turn encodes only the tool result (0 = re-encode every turn)"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature"})
    seed: int = field(default=0, metadata={"help": "sampling and strategy seed"})

    def label_strategy(self) -> str:
        return self.strategy

    def labels_dataset(self) -> str:
        if not self.dataset:
            raise ValueError("--dataset is required")
        return self.out or f"{self.dataset}_labels"

    def check(self) -> None:
        from generators.tools.banks import check_option

        self.labels_dataset()
        get_strategy(self.strategy)
        check_option(self.tools)
        require(self.backend, "--rollout-backend", ROLLOUT)
        if self.backend == "openai" and not self.url:
            raise ValueError("--rollout-backend openai needs --base-url (the server's address)")
        self.check_labelling()
        if self.n < 2 or self.batch < 1 or self.budget < 0:
            raise ValueError("need --n >= 2, --batch-size >= 1 and --budget >= 0")


def _id(*parts) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:24]


@dataclass
class Prompted:
    """One prompt: its id, question, hop count and the held-back answer (never shown to a strategy
    but `oracle_cag`, which is for simulations)."""

    prompt_id: str
    question: str
    answer: str
    aliases: list[str]
    hop_count: int | None = None


def load_prompts(root, cfg: AcquireConfig) -> list[Prompted]:
    from train.triples import pick_triples

    rows = pick_triples(root, cfg.dataset, cfg.triples, cfg.limit, by_id=True)
    return [Prompted(t["triple_id"], t["question"], t["answer"], list(t.get("aliases") or []), t.get("hop_count"))
            for t in rows]


AHEAD = 64  # batches a server samples at once at most (each a thread, its conversations threads of their own)


class Session:
    """The acquisition loop's state: backend, simulator, tools, ledger, source, probes (module docstring)."""

    def __init__(self, cfg: AcquireConfig, root, backend, simulator, tools: list[dict], ledger, writer, source,
                 probes=None, lm=None) -> None:
        self.cfg, self.root, self.backend, self.sim, self.tools = cfg, root, backend, simulator, tools
        self.ledger, self.writer, self.source, self.probes = ledger, writer, source, probes
        self.lm = lm if lm is not None else backend.lm  # the model the signals come from
        self.strategy = get_strategy(cfg.strategy)
        self.out = cfg.labels_dataset()

    def roll(self, prompts: list[Prompted], step: int, ended: Callable[[], None] | None = None) -> list:
        """The n rollouts of each prompt of batch `step`, in prompt order (the batch's seed);
        `ended()` as each is done (train.rollout.rollout)."""
        from train.configs import RolloutConfig
        from train.grpo import make_prompts
        from train.rollout import rollout

        triples = [{"question": p.question, "answer": "", "aliases": [], "golden_doc_ids": [],
                    "triple_id": p.prompt_id} for p in prompts]
        asked = [q for q in make_prompts(triples, self.tools, self.cfg.tool_style) for _ in range(self.cfg.n)]
        rc = RolloutConfig(max_turns=self.cfg.max_turns, max_new_tokens=self.cfg.max_new_tokens,
                           temperature=self.cfg.temperature, format_weight=0.0)
        return rollout(self.backend, self.sim, asked, rc, seed=self.cfg.seed * 7919 + step, logprobs=False, ended=ended)

    def rolled(self, batches: list[tuple[int, list[Prompted]]], ahead: int | None = None):
        """(step, prompts, rollouts) of each of `batches` ((step, prompts) pairs), in order. A
        backend that serves concurrent requests (a server) samples the batches after the one
        given out too, so that it stays busy while a batch is scored, bought and committed:
        `ahead` batches' conversations in flight (default: `IN_FLIGHT` conversations, at least
        two batches and at most AHEAD), the next batch started as soon as that many of them
        are done, not when the batch given out is (a batch's conversations end among the
        others', so the first to be given out is seldom the first done); at most AHEAD
        batches are held. The rollouts are those each batch gets alone (its own seed)."""
        import threading

        from train.rollout import IN_FLIGHT

        per_batch = max(1, self.cfg.batch * self.cfg.n)
        if ahead is None:
            ahead = min(AHEAD, max(2, IN_FLIGHT // per_batch))
            ahead = ahead if self.backend.concurrent else 1
        if ahead == 1:
            for step, prompts in batches:
                yield step, prompts, self.roll(prompts, step)
            return
        pool, waiting, todo = ThreadPoolExecutor(AHEAD), deque(), iter(batches)
        lock, state = threading.Lock(), {"open": 0, "closed": False}  # conversations not done yet

        def fill() -> None:  # start batches while their conversations fit in `ahead` batches' worth
            with lock:
                while not state["closed"] and len(waiting) < AHEAD and (
                        not waiting or state["open"] + per_batch <= ahead * per_batch):
                    nxt = next(todo, None)
                    if nxt is None:
                        return
                    step, prompts = nxt
                    state["open"] += len(prompts) * self.cfg.n
                    waiting.append((step, prompts, pool.submit(self.roll, prompts, step, ended)))

        def ended() -> None:
            with lock:
                state["open"] -= 1
            fill()

        try:
            fill()
            while True:
                with lock:
                    if not waiting:
                        return
                    step, prompts, outs = waiting[0]
                result = outs.result()
                with lock:
                    waiting.popleft()
                yield step, prompts, result
                fill()
        finally:
            with lock:
                state["closed"] = True
            pool.shutdown(wait=False, cancel_futures=True)

    def sample(self, prompts: list[Prompted], step: int, outs: list | None = None) -> tuple[list[Group], list[dict]]:
        """n rollouts per prompt (`outs`, else sampled now); the groups (with the signals the
        strategy needs) and the rollout rows."""
        if outs is None:
            outs = self.roll(prompts, step)
        groups, rows = [], []
        for k, p in enumerate(prompts):
            mine = outs[k * self.cfg.n:(k + 1) * self.cfg.n]
            g = group_of(p.prompt_id, mine, self.strategy.needs, self.lm,
                         p.answer if self.strategy.needs == "true_label" else None, p.aliases)
            g.formats = [float(o.stats.get("format", 0.0)) for o in mine]  # read only by partial rewards
            groups.append(g)
            for i, (o, a) in enumerate(zip(mine, g.vote.answers)):
                rid = _id(self.out, p.prompt_id, i, self.cfg.seed)
                rows.append({"id": rid, "rollout_id": rid, "prompt_id": p.prompt_id, "policy_version": 0,
                             "messages": [{"role": m["role"], "content": m.get("content") or "", "tool_calls": None,
                                           "tool_call_id": None, "name": m.get("name")} for m in o.messages],
                             "answer": a, "reward": 0.0, "num_tokens": int(o.stats["policy_tokens"]),
                             "meta": json.dumps({"sample": i, "strategy": self.cfg.strategy})})
        return groups, rows

    def run_batch(self, prompts: list[Prompted], step: int, learned: Callable[[], None] | None = None,
                  outs: list | None = None) -> dict:
        """Sample (unless given the rollouts, `outs`), vote, score, buy, teach the probes,
        commit; counts of the batch. `learned` is called once the probes have learned, before
        the commits (the flow saves them there)."""
        groups, rows = self.sample(prompts, step, outs)
        ctx = Context(step=step, seed=self.cfg.seed, probes=self.probes, warmup=self.cfg.label_warmup, gate=self.cfg.label_gate)
        scores = self.strategy.score(groups, ctx)
        ledger = self.ledger.summary()  # what is queued for people is held for their labels
        chosen = choose(groups, scores, self.cfg.label_p, ledger["left"] - ledger["held"], self.source.cost)
        bought = buy(self.ledger, self.source, [g.prompt_id for g in chosen], self.writer, self.out, self.cfg.strategy,
                     scores={g.prompt_id: s for g, s in zip(groups, scores)})
        if self.probes is not None and bought["labels"]:
            self.probes.learn_labels(groups, bought["labels"])
        if learned is not None:
            learned()
        self.writer.commit(self.out, "labels", pseudo_rows(self.out, groups))
        self.writer.commit(self.out, "rollouts", rows)  # last: a batch with its rollouts is done
        return {"prompts": len(prompts), "chosen": len(chosen), **{k: v for k, v in bought.items() if k != "labels"}}
