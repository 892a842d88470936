"""One self-play iteration's data, without Prefect: the examiner builds tasks, the student
attempts them.

`examine`: each of `tasks` examiner prompts gets a start document and a target hop count
drawn from the hop mix (seeded by run seed and iteration), the examiner writes its
conversation through the rollout driver (train/rollout.py; searches answered by the BM25
simulator with no golden ids), and `parse_examiner` turns it into a `tasks` row or a reject
with its reason code. Every examiner output is kept: as a `rollouts` row (role examiner,
reward = the format part of the examiner reward until the attempts are scored) and a
`verdicts` row (check `examiner`, passed or its reason); the accepted ones also as `tasks`.
Given a `reader` backend, the accepted tasks then go through the answerability check
(selfplay/answerable.py): one the reader cannot answer from its path's documents, or answers
without them, becomes a reject too.

`attempt`: every task is put `attempts` times to the student, with the tools offered as in
GRPO (train/grpo.make_prompts) and no golden ids; each attempt is a `rollouts` row (role
student, prompt_id = the task id, reward = the exact-match training reward) whose meta has
`em`. `score` counts k (attempts right) per task and gives the examiner reward
(selfplay/rewards.py), from committed rows alone.

Ids are functions of (run, iteration, index), and the rows of a phase come only from its
inputs and seeds, so a phase redone after a kill writes the rows it had not committed.

    outs = examine(examiner, sim, documents, cfg, run="sp1", iteration=0)
    rows = attempt(student, sim, [o["task"] for o in outs if o["task"]], cfg, run="sp1", iteration=0)
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from generators.llm.kinds import SWAP, kinds_with, require
from generators.llm.openai_http import URL_FORM
from generators.llm.toolcalls import TOOL_STYLES, final_answer, render_tools_block
from generators.tools.banks import HELP as BANK_HELP
from generators.tools.retriever import option as retriever_option
from selfplay.answerable import check_answerable
from selfplay.examiner import examiner_messages, parse_examiner
from selfplay.rewards import FORMAT_WEIGHT, examiner_reward, solve_count
from selfplay.warmstart import examiner_tool, parse_hop_mix, row_messages
from train.configs import RolloutConfig
from validators.verdict import Reject, verdict_id

if TYPE_CHECKING:  # train.rollout imports torch: imported where a rollout runs, not by the command line
    from train.rollout import Prompt


ROLLOUT_BACKENDS = kinds_with(SWAP)


@dataclass
class PlayConfig:
    """What one self-play run makes (every field is a CLI option)."""

    dataset: str = field(default="", metadata={"required": True, "help": "world dataset whose documents the examiner starts from"})
    out: str = field(default="", metadata={"flag": "out-dataset", "aliases": ("out",), "help": "dataset that receives tasks, rollouts and verdicts (default: <dataset>_selfplay)"})
    examiner: str | None = field(default=None, metadata={"help": "examiner model folder or prepared name (default: embedded)"})
    student: str | None = field(default=None, metadata={"help": "student model folder or prepared name (default: embedded)"})
    iterations: int = field(default=1, metadata={"help": "self-play iterations"})
    tasks: int = field(default=16, metadata={"help": "examiner outputs per iteration"})
    attempts: int = field(default=5, metadata={"help": "student attempts per task (n, at least 2)"})
    retriever: str = retriever_option()
    tools: str = field(default="auto", metadata={"help": BANK_HELP + " (the student's tools; the examiner searches "
                                                 "with the bank's general search)"})
    hop_mix: str = field(default="4:3:2:1", metadata={"help": "weights of target hop counts 1:2:3:4"})
    seed: int = field(default=0, metadata={"help": "seed of start documents, hop targets and sampling"})
    examiner_turns: int = field(default=6, metadata={"help": "examiner turns at most (searches + the last one)"})
    student_turns: int = field(default=4, metadata={"help": "student turns at most per attempt"})
    tool_style: str = field(default="full", metadata={
        "choices": TOOL_STYLES, "help": "tools in the student's prompts: full (JSON schemas) or compact (one-line signatures); match the "
                "student's SFT data"})
    max_new_tokens: int = field(default=192, metadata={"help": "tokens per turn at most"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of examiner and student"})
    batch_size: int = field(default=16, metadata={"help": "rollouts generated together in this process; a served backend (--rollout-backend vllm-server) gets every batch of a phase at once, with the same seeds"})
    answerability: bool = field(default=True, metadata={"help": "the filter keeps only tasks the reader answers from their path's documents mixed with distractors and not without them (--no-answerability: skip this check)"})
    reader: str | None = field(default=None, metadata={"help": "model that reads for the answerability check: folder or prepared name (default: the current student)"})
    answer_distractors: int = field(default=3, metadata={"help": "answerability: distractor documents mixed into a task's path documents"})
    answer_f1: float = field(default=0.5, metadata={"help": "answerability: F1 at which the reader's reply counts as the task's answer"})
    demo_tasks: bool = field(default=False, metadata={"help": "iteration 0's --tasks tasks are the world's warm-start demonstrations (drawn with --hop-mix, as `selfplay warmstart` builds them), not the examiner's outputs: for an examiner that cannot pose tasks yet (the 135M base model poses none); later iterations sample the examiner. The examiner did not sample these: its update trains on them explicitly as demonstrations (their negative log-likelihood), never by the policy gradient"})
    train: bool = field(default=True, metadata={"help": "update examiner and student after each iteration (--no-train: only tasks and attempts)"})
    warmstart: bool = field(default=True, metadata={"help": "before iteration 0, fine-tune the examiner on the world's demonstrations (selfplay warmstart); --no-warmstart: start from --examiner as it is. Part of training: --no-train skips it"})
    warmstart_steps: int = field(default=40, metadata={"help": "optimizer steps of the examiner's warm-start"})
    warmstart_lr: float = field(default=5e-5, metadata={"help": "learning rate of the examiner's warm-start"})
    checkpoints: str = field(default="", metadata={"help": "folder of each iteration's examiner, student and teacher (required unless --no-train)"})
    examiner_steps: int = field(default=4, metadata={"help": "optimizer steps of the examiner's update per iteration"})
    student_steps: int = field(default=4, metadata={"help": "optimizer steps of the student's update per iteration"})
    update_batch: int = field(default=4, metadata={"help": "rollouts per optimizer step of an update"})
    lr: float = field(default=1e-5, metadata={"help": "learning rate of both updates"})
    checkpoint_every: int = field(default=0, metadata={"help": "optimizer steps between checkpoints of an update (its model, optimizer and the student's teacher), so --resume continues a killed update from its latest one (0: a killed update starts over)"})
    kl_coef: float = field(default=0.04, metadata={"help": "weight of the examiner's KL to the examiner it started as"})
    distill: str = field(default="on", metadata={"help": "on: the student also learns from the teacher's dense guidance; off: reward only (sparse self-play)"})
    distill_coef: str = field(default="1.0,0.5,0.25", metadata={"help": "lambda per iteration, comma-separated (the last one repeats)"})
    teacher_context: str = field(default="qcp", metadata={"help": "what the teacher reads besides the task: qcp, answer or none"})
    tau: float = field(default=0.05, metadata={"help": "EMA step of the teacher towards the student per student step"})
    train_layers: int = field(default=0, metadata={"help": "update only the last N transformer blocks of each role (0 = all)"})
    rollout_backend: str = field(default="transformers", metadata={
        "choices": ROLLOUT_BACKENDS, "help": "what samples the examiner's, reader's and student's rollouts: transformers (each role's model "
                "in this process) or vllm-server (one vLLM server from .venv-vllm, or --base-url, that each "
                "role's current weights are published to before it samples; the roles must share the "
                "architecture, as checkpoints of one model do). The updates and the teacher run here either way"})
    rollout_url: str = field(default="", metadata={
        "flag": "base-url", "aliases": ("rollout-url",), "help": f"vllm-server: a running server's URL, {URL_FORM} (default: start one on a free port of 127.0.0.1)"})
    resume: bool = field(default=False, metadata={"help": "continue a killed run at its last completed phase"})

    def out_dataset(self) -> str:
        if not self.dataset:
            raise ValueError("--dataset is required (a world dataset: forgeplay corpus world --dataset NAME)")
        return self.out or f"{self.dataset}_selfplay"

    def check(self) -> None:
        from generators.tools.banks import check_option
        from generators.tools.retriever import check_spec

        self.out_dataset()
        parse_hop_mix(self.hop_mix)
        check_spec(self.retriever)
        check_option(self.tools)
        if self.attempts < 2:
            raise ValueError(f"--attempts must be at least 2 (the examiner reward compares attempts), got {self.attempts}")
        if self.tool_style not in TOOL_STYLES:
            raise ValueError(f"--tool-style must be full or compact, not {self.tool_style!r}")
        require(self.rollout_backend, "--rollout-backend", SWAP)
        if self.iterations < 1 or self.tasks < 1:
            raise ValueError("--iterations and --tasks must be at least 1")
        if self.answer_distractors < 0 or not 0 < self.answer_f1 <= 1:
            raise ValueError("--answer-distractors must be >= 0 and --answer-f1 in (0, 1]")
        if self.train:
            if not self.checkpoints:
                raise ValueError("--checkpoints DIR is required to train (or run with --no-train)")
            if self.distill not in ("on", "off"):
                raise ValueError(f"--distill must be on or off, not {self.distill!r}")
            if self.teacher_context not in ("qcp", "answer", "none"):
                raise ValueError(f"--teacher-context must be qcp, answer or none, not {self.teacher_context!r}")
            if min(self.examiner_steps, self.student_steps, self.update_batch) < 1:
                raise ValueError("--examiner-steps, --student-steps and --update-batch must be at least 1")
            if self.checkpoint_every < 0:
                raise ValueError(f"--checkpoint-every must be >= 0, got {self.checkpoint_every}")
            if self.warmstart and self.warmstart_steps < 1:
                raise ValueError("--warmstart-steps must be at least 1 (or --no-warmstart)")
            self.lambdas()

    def lambdas(self) -> list[float]:
        """lambda of each iteration: `distill_coef`'s values, the last repeated; 0 with --distill off."""
        try:
            values = [float(x) for x in self.distill_coef.split(",")]
        except ValueError:
            raise ValueError(f"--distill-coef is comma-separated numbers, got {self.distill_coef!r}") from None
        if any(v < 0 for v in values):
            raise ValueError(f"--distill-coef values must be >= 0, got {self.distill_coef!r}")
        values = [0.0 if self.distill == "off" else v for v in values]
        return [values[min(i, len(values) - 1)] for i in range(self.iterations)]

    def rollout_config(self, turns: int) -> RolloutConfig:
        return RolloutConfig(max_turns=turns, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                             format_weight=0.0)


# what samples, not what is sampled: a run resumed on another backend keeps its id
UNHASHED = ("resume", "iterations", "out", "rollout_backend", "rollout_url", "checkpoint_every")
LATER_DEFAULTS = {"demo_tasks": False, "retriever": "bm25", "tools": "auto"}  # options added after runs were made, with the default they had
PATHS = ("examiner", "student", "reader", "checkpoints")  # fields that may name a folder under the data root


def run_id(cfg: PlayConfig, root: str | Path) -> str:
    """A self-play run's id: a hash of what decides its rows (not --resume, --iterations, --out-dataset,
    nor what samples the rollouts), so a longer run continues a shorter one. A model or
    checkpoint folder inside `root` counts by its path relative to `root`, so the same run in
    another data root (a copied or moved one) has the same id, and so have its rows."""
    from dataclasses import asdict

    from storage.runs import config_hash, without_later_defaults

    fields = without_later_defaults({k: v for k, v in asdict(cfg).items() if k not in UNHASHED}, LATER_DEFAULTS)
    base = Path(root).resolve()
    for k in PATHS:
        path = Path(fields[k]).resolve() if fields[k] else None
        if path and path.is_relative_to(base):
            fields[k] = "<data>/" + path.relative_to(base).as_posix()
    return f"selfplay-{config_hash(fields)}"


def phase_run(run: str, iteration: int, phase: str) -> str:
    """The run id a phase commits its rows under (and whose record marks it done)."""
    return f"{run}-it{iteration}-{phase}"


def _id(*parts) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:24]


def draw_seeds(documents: list[dict], cfg: PlayConfig, iteration: int) -> list[tuple[dict, int]]:
    """(start document, target hop count) for each examiner prompt of an iteration."""
    mix = parse_hop_mix(cfg.hop_mix)
    rng = random.Random(f"{cfg.seed}|{iteration}")
    docs = sorted(documents, key=lambda d: d["doc_id"])
    hops = rng.choices(list(mix), weights=list(mix.values()), k=cfg.tasks)
    return [(rng.choice(docs), h) for h in hops]


def _rollouts(backend, simulator, prompts: list[Prompt], cfg: PlayConfig, turns: int, seed: int,
              progress: bool) -> list:
    """The prompts' rollouts in batches of `cfg.batch_size` (a batch's seed: `seed` + its
    start). A backend that serves concurrent requests (a vLLM server) gets the batches at once
    (IN_FLIGHT conversations at most), each conversation on its own (train/rollout.py), so the
    server is never left with one batch's stragglers; any other takes the batches one after
    another. The rows are the same either way."""
    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    from train.rollout import IN_FLIGHT, rollout

    starts = list(range(0, len(prompts), cfg.batch_size))

    def batch(start: int, shown: bool) -> list:
        return rollout(backend, simulator, prompts[start:start + cfg.batch_size], cfg.rollout_config(turns),
                       seed=seed + start, progress=shown, logprobs=False)

    if not backend.concurrent or len(starts) < 2:
        return [r for start in starts for r in batch(start, progress)]
    with tqdm(total=len(prompts), desc="rollouts", unit="rollout", disable=not progress) as bar, \
            ThreadPoolExecutor(max_workers=min(len(starts), max(1, IN_FLIGHT // cfg.batch_size))) as pool:
        def counted(start: int) -> list:
            out = batch(start, False)
            bar.update(len(out))
            return out
        return [r for part in pool.map(counted, starts) for r in part]  # (in order; re-raises a batch's failure)


def examine(backend, simulator, documents: list[dict], tools: list[dict], cfg: PlayConfig, run: str,
            iteration: int, progress: bool = False, timings: dict | None = None, reader=None) -> list[dict]:
    """The examiner's outputs of one iteration: per prompt its conversation (`rollout`),
    and either its `task` row or its reject `reason` (module docstring); with `reader` and
    `cfg.answerability`, the accepted tasks are also checked for answerability. `timings`
    gets the seconds of generation (`generation_s`) and of parsing and filtering (`filter_s`)."""
    from train.rollout import Prompt

    started = time.perf_counter()
    block = render_tools_block([examiner_tool(tools)])
    seeds = draw_seeds(documents, cfg, iteration)
    prompts = [Prompt(examiner_messages(doc, h, block), "", key=doc["doc_id"]) for doc, h in seeds]
    outs = _rollouts(backend, simulator, prompts, cfg, cfg.examiner_turns, cfg.seed * 1009 + iteration * 97, progress)
    generated = time.perf_counter()
    texts = {d["doc_id"]: (d["title"], d["text"]) for d in documents}
    rows = [examined(o.messages, doc, h, cfg, run, iteration, j, texts, o.stats["policy_tokens"])
            for j, (o, (doc, h)) in enumerate(zip(outs, seeds))]
    if reader is not None and cfg.answerability:
        check_answerable(rows, reader, texts, cfg, iteration)
    if timings is not None:
        timings.update(generation_s=generated - started, filter_s=time.perf_counter() - generated)
    return rows


def examined(messages: list[dict], doc: dict, hops: int, cfg: PlayConfig, run: str, iteration: int, j: int,
             documents: dict, num_tokens: int = 0, replayed: bool = False) -> dict:
    """One examiner output as rows: its `rollouts` row, its `verdicts` (the parser's) and its
    `tasks` row when the parser accepts it (a function of the conversation alone). A
    `replayed` conversation (given, not sampled) says so in its rollout's meta."""
    rid, tid = _id(run, iteration, "examiner", j), _id(run, iteration, "task", j)
    try:
        task, reason, detail = parse_examiner(messages, hops, tid, cfg.dataset, seed_doc_id=doc["doc_id"],
                                              examiner_step=iteration, documents=documents), None, None
        task["id"] = tid
    except Reject as r:
        task, reason, detail = None, r.reason, r.detail
    answer = final_answer(messages)
    meta = {"role": "examiner", "iteration": iteration, "target_hops": hops, "seed_doc_id": doc["doc_id"],
            "task_id": tid if task else None, "reject": reason, **({"replayed": True} if replayed else {})}
    row = {"id": rid, "rollout_id": rid, "prompt_id": doc["doc_id"], "policy_version": iteration,
           "messages": row_messages(messages), "answer": answer, "reward": FORMAT_WEIGHT * (task is not None),
           "num_tokens": int(num_tokens), "meta": json.dumps(meta, sort_keys=True)}
    verdict = {"id": verdict_id(rid, "rollouts", "rules", "examiner"), "record_id": rid, "record_kind": "rollouts", "layer": "rules",
               "check": "examiner", "passed": task is not None, "reason": reason or "ok",
               "detail": json.dumps(detail, sort_keys=True, default=str) if detail else None}
    return {"rollout": row, "verdicts": [verdict], "task": task, "reason": reason}


def attempt(backend, simulator, tasks: list[dict], tools: list[dict], cfg: PlayConfig, run: str, iteration: int,
            progress: bool = False) -> list[dict]:
    """`cfg.attempts` student `rollouts` rows per task (module docstring)."""
    from train.grpo import make_prompts

    triples = [{"question": t["question"], "answer": t["answer"], "aliases": t.get("aliases") or [],
                "golden_doc_ids": [], "triple_id": t["task_id"], "hop_count": t["hop_count"]} for t in tasks]
    prompts = [p for p in make_prompts(triples, tools, cfg.tool_style) for _ in range(cfg.attempts)]
    outs = _rollouts(backend, simulator, prompts, cfg, cfg.student_turns, cfg.seed * 1013 + iteration * 89, progress)
    rows = []
    for i, (p, o) in enumerate(zip(prompts, outs)):
        rid = _id(run, iteration, "attempt", p.key, i % cfg.attempts)
        answer = final_answer(o.messages)
        meta = {"role": "student", "iteration": iteration, "task_id": p.key, "attempt": i % cfg.attempts,
                "em": o.stats["em"], "f1": o.stats["f1"], "turns": o.stats["turns"], "finish": o.stats["finish"]}
        rows.append({"id": rid, "rollout_id": rid, "prompt_id": p.key, "policy_version": iteration,
                     "messages": row_messages(o.messages), "answer": answer, "reward": float(o.reward),
                     "num_tokens": int(o.stats["policy_tokens"]), "meta": json.dumps(meta, sort_keys=True)})
    return rows


def score(tasks: list[dict], attempts: list[dict], n: int) -> list[dict]:
    """Per task: k of n attempts right and the examiner reward (a well-formed task: format 1)."""
    by_task: dict[str, list] = {}
    for a in attempts:
        by_task.setdefault(a["prompt_id"], []).append(a["answer"])
    out = []
    for t in tasks:
        k = solve_count(by_task.get(t["task_id"], []), t["answer"], t.get("aliases") or [])
        out.append({"task_id": t["task_id"], "hop_count": t["hop_count"], "k": k, "n": n,
                    "examiner_reward": examiner_reward(True, k, n)})
    return out
