"""Does the question construction path (QCP) make the self-play teacher a better signal?

pi-Play's teacher reads the QCP of a task (the searches that built the question and the
passages they found; selfplay/qcp.py `teacher_context`) where the student reads the question
alone. Its dense supervision helps only if, with the QCP, it puts its probability where the
answer is. This measures that on tasks with known answers, before any training: the teacher
starts as the student's copy (the EMA starts from the student), so the only difference
measured is what each reads.

Tasks: template trajectories synthesized on a world (forgeplay's own synthesis), one per
question; a trajectory's tool calls and results are the path that answers it
(`qcp_from_messages`). For each task the student answers the question alone, greedily; where
that answer is wrong, the model scores `<answer>right</answer>` and `<answer>wrong</answer>`
twice, teacher-forced: reading the QCP (the teacher) and reading the question alone (the
student), with the same system message. Reported, with 95% bootstrap intervals over tasks:

  prefers right   the share of tasks where the right answer gets more log-probability than
                  the student's wrong one
  right, per token  the mean per-token log-probability of the right answer, and the teacher
                  minus student gap

    .venv/bin/python experiments/qcp_teacher.py --tasks 200 --out experiments/results/qcp_teacher.md
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SYSTEM = "Answer the question. Reply with the answer alone, as <answer>the answer</answer>."
ANSWER = re.compile(r"<answer>\s*(.*?)\s*(?:</answer>|$)", re.S)


def tasks_from_world(n: int, seed: int = 0, entities: int = 1000, root: Path | None = None) -> list[dict]:
    """`n` tasks (question, answer, aliases, qcp) from template trajectories of a new world,
    one per question (fewer when the world has fewer questions)."""
    from generators.corpus.build import WorldConfig, write
    from generators.synth.synthesize import Session, SynthConfig, load_inputs
    from generators.tools.bank import build_bank
    from selfplay.qcp import qcp_from_messages
    from storage.schema import meta_of

    root = Path(root or tempfile.mkdtemp(prefix="qcp_teacher_"))
    write(WorldConfig(seed=seed, entities=entities), root, "w")
    session = Session(load_inputs(root, "w"), SynthConfig(dataset="w", n=3 * n, texts="template", seed=seed),
                      build_bank(seed=seed, variants_per_tool=1))
    rows = session.trajectories(session.plans(), None, "qcp")[0]
    random.Random(seed).shuffle(rows)
    tasks, seen = [], set()
    for r in rows:
        qcp = qcp_from_messages(r["messages"])
        if r["question"] in seen or not qcp.steps:
            continue
        seen.add(r["question"])
        tasks.append({"question": r["question"], "answer": r["answer"], "qcp": qcp.to_json(),
                      "aliases": list(meta_of(r).get("aliases") or [])})
        if len(tasks) == n:
            break
    return tasks


def prompt_ids(tokenizer, task: dict, mode: str) -> list[int]:
    """The chat prompt a reader in `mode` ("qcp": the teacher, "none": the student) gets."""
    from selfplay.qcp import teacher_context

    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": teacher_context(task, mode)}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def answer_of(text: str) -> str:
    """The answer a reply gives: inside <answer>, else its first line."""
    m = ANSWER.search(text)
    return (m.group(1) if m else text.strip().split("\n")[0]).strip()


def measure(backend, tasks: list[dict], max_tokens: int = 24) -> list[dict]:
    """Per task whose student answer is wrong: the log-probabilities of the right and the
    wrong answer under each reader (module docstring)."""
    from generators.answers import match
    from generators.llm.base import ChatRequest

    tok = backend.tokenizer
    replies = backend.generate([ChatRequest(messages=[{"role": "system", "content": SYSTEM},
                                                      {"role": "user", "content": f"Question: {t['question']}"}],
                                            temperature=0.0, max_tokens=max_tokens, seed=0) for t in tasks])
    out = []
    for task, reply in zip(tasks, replies):
        wrong = answer_of(reply[0].text)
        if not wrong or match(wrong, task["answer"], task["aliases"]).em:
            continue
        out.append({"task": task, "wrong": wrong})
    for row in out:
        for mode, reader in (("teacher", "qcp"), ("student", "none")):
            right, wrong = scores(backend, prompt_ids(tok, row["task"], reader),
                                  [tok(f"<answer>{said}</answer>", add_special_tokens=False)["input_ids"]
                                   for said in (row["task"]["answer"], row["wrong"])])
            row[mode] = {"right": sum(right), "wrong": sum(wrong), "right_per_token": sum(right) / len(right)}
    return out


def scores(backend, prompt: list[int], completions: list[list[int]]) -> list[list[float]]:
    """Teacher-forced log-probabilities of each completion after `prompt`, the prompt read once
    (its cache cut back to it before each completion): a QCP prompt is 1,000-2,000 tokens."""
    import torch

    lm = backend.lm
    with torch.no_grad():
        first = lm(input_ids=torch.tensor([prompt]), use_cache=True)
        cache, last = first.past_key_values, torch.log_softmax(first.logits[0, -1].float(), -1)
        out, added = [], 0
        for comp in completions:
            if added:
                cache.crop(-added)
            logits = lm(input_ids=torch.tensor([comp]), past_key_values=cache, use_cache=True).logits[0].float()
            added = len(comp)
            steps = torch.cat([last[None], torch.log_softmax(logits[:-1], -1)])
            out.append(steps.gather(1, torch.tensor(comp)[:, None])[:, 0].tolist())
    return out


def bootstrap(values: list[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95% percentile bootstrap interval."""
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(rounds))
    return statistics.fmean(values), means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


def table(rows: list[dict], tasks: int) -> str:
    """The figures as a Markdown table."""
    def cell(values):
        mean, low, high = bootstrap(values)
        return f"{mean:.3f} [{low:.3f}, {high:.3f}]"

    prefers = {m: [float(r[m]["right"] > r[m]["wrong"]) for r in rows] for m in ("teacher", "student")}
    per_token = {m: [r[m]["right_per_token"] for r in rows] for m in ("teacher", "student")}
    gap = [t - s for t, s in zip(per_token["teacher"], per_token["student"])]
    lines = [f"{tasks} tasks; the student answered {tasks - len(rows)} right and {len(rows)} wrong (those are scored).",
             "", "| reader | prefers right over the student's wrong answer | right answer, log-probability per token |",
             "|---|---:|---:|",
             f"| teacher (question and QCP) | {cell(prefers['teacher'])} | {cell(per_token['teacher'])} |",
             f"| student (question alone) | {cell(prefers['student'])} | {cell(per_token['student'])} |",
             f"| teacher - student | {cell([a - b for a, b in zip(prefers['teacher'], prefers['student'])])} "
             f"| {cell(gap)} |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=200, help="tasks put to the student")
    ap.add_argument("--entities", type=int, default=1000, help="world size the tasks come from")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None, help="model folder or prepared name (default: the embedded one)")
    ap.add_argument("--out", type=Path, default=None, help="also write the command, date and table here")
    args = ap.parse_args(argv)
    from generators.llm.transformers_backend import TransformersBackend

    t0 = time.time()
    tasks = tasks_from_world(args.tasks, args.seed, args.entities)
    backend = TransformersBackend(args.model, batch_size=16)
    rows = measure(backend, tasks)
    text = table(rows, len(tasks))
    print(text)
    print(f"({time.time() - t0:.0f} s)")
    if args.out:
        cmd = "python experiments/qcp_teacher.py " + " ".join(sys.argv[1:] if argv is None else argv)
        args.out.write_text(f"# Does the QCP make the teacher a better signal?\n\nCommand: `{cmd}`\n\n"
                            f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {time.time() - t0:.0f} s "
                            f"on this machine.\n\n{text}\n")


if __name__ == "__main__":
    main()
