"""The self-play updates as training stage kinds (train/stages.py): a policy-gradient step over
rollouts an iteration already sampled and scored (selfplay/samples.py), so the Trainer,
checkpoints, the memory plan, metrics and curves are the ones every stage has.

- `selfplay-examiner`: the examiner's outputs of iteration `iteration` of run `run`, HRPO
  advantages, the clipped surrogate plus `kl_coef` times the k3 KL to `reference` (the
  examiner self-play started from). Outputs whose advantage is 0 are left out (no policy
  gradient); `learns` tells the flow when none is left. Only outputs the examiner sampled
  get a policy-gradient term: replayed ones (`--demo-tasks` demonstrations) are trained
  explicitly as demonstrations, `demo_coef` times their tokens' negative log-likelihood
  (0: left out).
- `selfplay-student`: the student's attempts, GRPO advantages on exact match, the clipped
  surrogate plus `distill_coef` (lambda) times the per-token KL(student || teacher) on the
  student's own tokens (tool output masked), where the teacher reads the task with
  `teacher_context` (qcp: the question and its QCP). The teacher is an EMA of the student
  (selfplay/teacher.py): it starts from `teacher` (a teacher an earlier iteration saved; by
  default a copy of the student), moves by `tau` after every optimizer step, is saved with
  each checkpoint (so `--resume` continues the average where it was) and at the end to
  OUT/teacher. With `distill_coef` 0 there is no teacher pass (sparse-reward self-play) and
  attempts whose advantage is 0 are left out.

The rollouts were sampled by the weights this stage starts from; their log-probabilities
under those weights are computed once before the first step (`old_logprobs`), so later
steps' ratios are against the sampling policy, as PPO's. The ratio of the teacher's pass
to a whole step is in the metrics (`teacher_s`, `seconds`).

    run_stage("selfplay-student", StudentUpdateConfig(data="w_selfplay", run=run_id, iteration=0,
              model="runs/sft/final", out="runs/sp/it0/student"), TrainConfig(max_steps=4))

The flow `selfplay` (flows/selfplay.py) runs both after each iteration's attempts; `forgeplay
train selfplay-examiner|selfplay-student` runs one on its own, with `--nproc N` in N ranks
(`python -m selfplay KIND` under torchrun, selfplay/__main__.py) and `--shard full|grad_op`
sharded (train/shard.py), the teacher and the reference sharded with the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from train.stages import Built, StageKind, load_model, register

POLICY_TOKENS = "tokens"  # the token-mean objective is a mean over these (train/trainer.py loss weight)


@dataclass
class UpdateConfig:
    """What both updates read (every field is a CLI option)."""

    data: str = field(default="", metadata={"required": True, "flag": "dataset", "aliases": ("data",), "help": "self-play dataset (tasks and rollouts of the run)"})
    run: str = field(default="", metadata={"help": "self-play run id (the selfplay flow's run_id)"})
    iteration: int = field(default=0, metadata={"help": "iteration whose rollouts to train on"})
    model: str | None = field(default=None, metadata={"help": "model folder to update (default: embedded)"})
    out: str = field(default="", metadata={"required": True, "help": "run folder: checkpoints, metrics.jsonl, curves.png, final/"})
    clip_eps: float = field(default=0.2, metadata={"help": "PPO clip range"})
    train_layers: int = field(default=0, metadata={"help": "train only the last N transformer blocks (0 = all)"})
    max_len: int = field(default=4096, metadata={"help": "leave out conversations longer than this many tokens"})


@dataclass
class ExaminerUpdateConfig(UpdateConfig):
    """The examiner's HRPO update (every field is a CLI option)."""

    reference: str | None = field(default=None, metadata={"help": "the KL reference (default: --model)"})
    kl_coef: float = field(default=0.04, metadata={"help": "weight of the KL to the reference (0 = none)"})
    demo_coef: float = field(default=1.0, metadata={
        "help": "weight of the negative log-likelihood of replayed demonstrations (--demo-tasks): the examiner did "
                "not sample them, so they never get a policy-gradient term; 0 = leave them out"})


@dataclass
class StudentUpdateConfig(UpdateConfig):
    """The student's GRPO + self-distillation update (every field is a CLI option)."""

    teacher: str | None = field(default=None, metadata={"help": "the teacher's weights (default: a copy of --model)"})
    distill_coef: float = field(default=1.0, metadata={"help": "lambda: weight of KL(student || teacher) (0 = off)"})
    teacher_context: str = field(default="qcp", metadata={"help": "what the teacher reads: qcp, answer or none"})
    tau: float = field(default=0.05, metadata={"help": "EMA step of the teacher towards the student per optimizer step"})


def phase_rows(cfg: UpdateConfig, root) -> tuple[list[dict], list[dict], list[dict]]:
    """(examiner rollouts, tasks, student attempts) the iteration committed."""
    from selfplay.play import phase_run
    from storage import load_table

    def rows(kind: str, phase: str) -> list[dict]:
        try:
            return load_table(cfg.data, kind, root, run_id=phase_run(cfg.run, cfg.iteration, phase)).to_pylist()
        except FileNotFoundError:
            return []

    examiner, tasks, attempts = rows("rollouts", "examine"), rows("tasks", "examine"), rows("rollouts", "attempt")
    if not examiner:
        raise ValueError(f"{cfg.data!r} has no examiner rollouts of run {cfg.run!r} iteration {cfg.iteration}")
    return examiner, tasks, attempts


def learns(kind: str, cfg: UpdateConfig, root) -> bool:
    """Whether stage `kind` has anything to learn: an output with a non-zero advantage (the
    student with a teacher always has: the distillation term)."""
    from selfplay.samples import demonstrations, examiner_scored, student_scored

    examiner, tasks, attempts = phase_rows(cfg, root)
    if kind == "selfplay-examiner":
        return any(examiner_scored(examiner, tasks, attempts)[2]) or (
            getattr(cfg, "demo_coef", 0) > 0 and bool(demonstrations(examiner)))
    return bool(attempts) and (getattr(cfg, "distill_coef", 0) > 0 or any(student_scored(attempts, tasks)[2]))


def _load(cfg: UpdateConfig, tcfg, device):
    from train.packing import use_packed_attention
    from train.sft import train_last_layers

    path, tok, model = load_model(cfg.model, device, tcfg.shard)
    params = train_last_layers(model, cfg.train_layers)
    if tcfg.max_batch_tokens > 0:
        use_packed_attention(model)
    return path, tok, model, params


def _built(model, tok, samples, counts: dict, params: dict, objective, tcfg, path) -> Built:
    from selfplay.step import old_logprobs, update_step, workload
    from train.objective import ReverseKLToTeacher

    if not samples:
        raise ValueError(f"nothing to train on: {counts}")
    counts = {**counts, "trainable_params": params["trainable"], "params": params["total"]}
    frozen = objective.frozen()  # the reference or the teacher
    # the sampling policy's log-probabilities, once the Trainer holds the starting weights (sharded:
    # a rank may have loaded none, train/shard.py) and before it resumes or steps
    ready = lambda trainer: old_logprobs(trainer.model, samples, tok.pad_token_id, tcfg.batch_size)  # noqa: E731
    return Built(model, tok, update_step(objective, tok.pad_token_id), samples, POLICY_TOKENS, counts,
                 f"model {path}", workload=workload(samples, tcfg.batch_size, frozen,
                                                   any(isinstance(t, ReverseKLToTeacher) for t in objective.terms)),
                 on_trainer=ready, frozen=frozen)


def build_examiner(cfg: ExaminerUpdateConfig, tcfg, root, device=None) -> Built:
    from selfplay.samples import examiner_samples
    from selfplay.step import DemonstrationNLL, SampledPG
    from train.objective import KLToReference, Objective, given_advantages

    path, tok, model, params = _load(cfg, tcfg, device)
    examiner, tasks, attempts = phase_rows(cfg, root)
    samples, counts = examiner_samples(examiner, tasks, attempts, tok, cfg.max_len, drop_flat=True,
                                       demos=cfg.demo_coef > 0)
    terms = [SampledPG(cfg.clip_eps)]
    if any(s.demo for s in samples):
        terms.append(DemonstrationNLL(cfg.demo_coef))
    if cfg.kl_coef > 0:
        reference = load_model(cfg.reference or cfg.model, device, tcfg.shard)[2].eval().requires_grad_(False)
        terms.append(KLToReference(reference, cfg.kl_coef))
    return _built(model, tok, samples, counts, params, Objective(given_advantages, terms), tcfg, path)


def build_student(cfg: StudentUpdateConfig, tcfg, root, device=None) -> Built:
    from selfplay.qcp import MODES
    from selfplay.samples import student_samples, teacher_prompt
    from selfplay.teacher import EMATeacher
    from train.objective import ClippedPG, Objective, ReverseKLToTeacher, given_advantages

    if cfg.teacher_context not in MODES:
        raise ValueError(f"--teacher-context must be one of {', '.join(MODES)}, not {cfg.teacher_context!r}")
    path, tok, model, params = _load(cfg, tcfg, device)
    _, tasks, attempts = phase_rows(cfg, root)
    samples, counts = student_samples(attempts, tasks, tok, cfg.max_len, drop_flat=cfg.distill_coef == 0)
    terms, teacher = [ClippedPG(cfg.clip_eps)], None
    if cfg.distill_coef > 0:
        start = load_model(cfg.teacher, device, tcfg.shard)[2] if cfg.teacher else None
        teacher = EMATeacher(model, cfg.tau, start=start)
        prefixes = {s.rollout_id: teacher_prompt(tok, s, cfg.teacher_context) for s in samples}
        terms.append(ReverseKLToTeacher(teacher.module, cfg.distill_coef, lambda p: prefixes[p.key]))
    built = _built(model, tok, samples, counts, params, Objective(given_advantages, terms), tcfg, path)
    if teacher is not None:
        built.extras["teacher"] = teacher  # in every checkpoint: --resume goes on from the average, not the start
        ready = built.on_trainer
        built.on_trainer = lambda trainer: (ready(trainer), follow(trainer, teacher, tok, Path(cfg.out) / "teacher"))
    return built


def follow(trainer, teacher, tokenizer, out: Path) -> None:
    """After each optimizer step the teacher moves towards the student (on every rank, alike);
    after the last, it is saved (rank 0 writes)."""
    def on_step(rec: dict) -> None:
        teacher.update(trainer.model)
        if trainer.step == trainer.cfg.max_steps:
            teacher.save(out, tokenizer, trainer.rank)

    trainer.on_step = on_step


register(StageKind(
    "selfplay-examiner", ExaminerUpdateConfig, build_examiner, curves=("loss", "reward", "kl"), module="selfplay",
    reads=("rollouts",),
    help="""Update a self-play examiner from one iteration's outputs: the examiner reward of
    each output (0.5 for a well-formed task plus (n-k)/(n-1) when 0<k<n of the student's n
    attempts solved it), advantages normalised within equal target hop counts (HRPO), the
    clipped surrogate plus a KL to the reference. Replayed demonstrations (--demo-tasks) get
    no policy-gradient term: --demo-coef times their negative log-likelihood (0: left out).
    Writes OUT/final."""))

register(StageKind(
    "selfplay-student", StudentUpdateConfig, build_student, curves=("loss", "reward", "teacher_kl"), module="selfplay",
    reads=("rollouts",),
    help="""Update a self-play student from one iteration's attempts: GRPO on exact match plus
    lambda times KL(student || teacher) on its own tokens, where the teacher (an EMA of the
    student) also reads the task's question construction path. Writes OUT/final and the
    teacher to OUT/teacher."""))
