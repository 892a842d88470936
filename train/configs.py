"""Config dataclasses of the training stages, kept free of torch so the CLI can build its
options (and `forgeplay --help`) without importing it. Every field is a CLI option."""

from __future__ import annotations

from dataclasses import dataclass, field

from generators.llm.kinds import FOLLOW, kinds_with
from generators.llm.openai_http import URL_FORM
from generators.tools.retriever import option as retriever_option
from train.labelled import LabelConfig, labellers
from train.memory import CHECKPOINTING, SHARDS

TRIPLE_SETS = ("all", "trained")
ORDERS = ("shuffle", "kinds")  # --order (train/trainer.py)
ROLLOUT_BACKENDS = kinds_with(FOLLOW)  # --rollout-backend (train/weight_sync.py)
ENGINES = ("trainer", "verl")  # --engine (train/verl_launch.py)
TRIPLES_HELP = ("which triples give the prompts: all, or trained (only those the dataset's trajectories were "
                "built from, so the held-out triples `train eval` asks stay unseen)")


@dataclass
class TrainConfig:
    """Optimisation and checkpointing settings (every field is a CLI option)."""

    max_steps: int = field(default=100, metadata={"help": "optimizer steps to run in total"})
    lr: float = field(default=1e-5, metadata={"help": "peak learning rate (AdamW)"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    warmup_steps: int = field(default=0, metadata={"help": "linear warmup steps"})
    schedule: str = field(default="cosine", metadata={"help": "after warmup: constant, linear or cosine decay"})
    batch_size: int = field(default=4, metadata={"help": "examples per micro-batch (per process); with "
                                                     "--max-batch-tokens, examples per optimizer step (x --grad-accum)"})
    grad_accum: int = field(default=1, metadata={"help": "micro-batches per optimizer step"})
    max_batch_tokens: int = field(default=8192, metadata={
        "help": "SFT: pack each step's conversations into micro-batches of at most this many tokens, one row "
                "each without padding (a longer conversation alone); 0 = --batch-size padded examples"})
    activation_checkpointing: str = field(default="auto", metadata={
        "choices": CHECKPOINTING, "help": "recompute each block's activations in the backward pass: auto (when activations would "
                "outweigh weights and optimizer state, or to fit), on or off"})
    memory_gb: float = field(default=0.0, metadata={"help": "GB the run may use; a plan needing more stops it "
                                                            "before training (0 = what is available)"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm (0 = off)"})
    seed: int = field(default=0, metadata={"help": "seed of the data order and of torch"})
    order: str = field(default="shuffle", metadata={
        "choices": ORDERS, "help": "each epoch's data order: shuffle (a seeded permutation) or kinds (each kind of example shuffled "
                "on its own, the kinds taking turns, so every stretch of steps holds the kinds about equally; "
                "SFT's trajectories and GRPO's questions: the question type and hop count)"})
    checkpoint_every: int = field(default=50, metadata={"help": "steps between checkpoints (0 = only at the end)"})
    checkpoints_kept: int = field(default=2, metadata={"help": "complete checkpoints kept while training (the newest)"})
    keep_checkpoints: bool = field(default=False, metadata={
        "help": "keep the checkpoints (model, optimizer, scheduler and RNG state of each saved step) once the "
                "final model is written; by default they are removed and a finished run keeps final/ "
                "(then --resume trains it again)"})
    resume: bool = field(default=False, metadata={"help": "continue from the run folder's latest checkpoint"})
    bf16: bool = field(default=True, metadata={"help": "bf16 autocast on GPU (ignored on CPU)"})
    threads: int | None = field(default=None, metadata={"help": "torch CPU threads per process (default: the cores "
                                                              "divided among the model processes running on this machine)"})
    shard: str = field(default="none", metadata={
        "choices": SHARDS, "help": "FSDP sharding across the processes (torch's fully_shard): full (parameters, gradients and AdamW "
                "state split over the ranks, a block's weights gathered for its forward and again for its "
                "backward), grad_op (the same, but parameters kept unsharded after forward until the "
                "backward: fewer gathers, more memory) or none (a whole copy per process); bf16 compute on GPU"})
    nproc: int = field(default=1, metadata={"help": "data-parallel processes (torchrun; one per GPU, gloo on CPU); "
                                                    "batch_size is per process"})


@dataclass
class SFTConfig:
    """What to fine-tune on (every field is a CLI option)."""

    data: str = field(default="", metadata={"required": True, "flag": "dataset", "aliases": ("data",), "help": "dataset whose trajectories to train on"})
    model: str | None = field(default=None, metadata={"help": "model folder or prepared name (default: embedded)"})
    out: str = field(default="", metadata={"required": True, "help": "run folder: checkpoints, metrics.jsonl, curves.png, final/"})
    max_len: int = field(default=8192, metadata={"help": "drop conversations longer than this many tokens"})
    validated_only: bool = field(default=True, metadata={"help": "when the dataset has verdicts, skip trajectories that failed any"})
    cases: str = field(default="", metadata={"help": "comma-separated cases to keep (empty = all; a case no trajectory of the dataset has is an error)"})
    context_errors: str = field(default="repeated_call,unknown_tool", metadata={"help": "comma-separated injected errors (a call's `injected_error`, before any ':') whose assistant turns are context, not trained: the model reads them but is not taught to make them (empty = train every assistant turn)"})
    limit: int = field(default=0, metadata={"help": "use at most this many trajectories (0 = all)"})
    train_layers: int = field(default=0, metadata={"help": "train only the last N transformer blocks and the final norm, embeddings frozen (0 = every parameter); about 2x faster on CPU"})
    loss_type: str = field(default="nll", metadata={"help": "per-token loss of the assistant tokens: nll (cross entropy) or dft (cross entropy scaled by the token's probability, held constant: Dynamic Fine-Tuning, TRL's loss_type dft)"})
    neftune_alpha: float = field(default=0.0, metadata={"help": "NEFTune: uniform noise of size alpha / sqrt(length x width) on the input embeddings while training (TRL's neftune_noise_alpha; the paper uses 5; 0 = off)"})


@dataclass
class RolloutConfig:
    """How rollouts are sampled (every field is a CLI option)."""

    max_turns: int = field(default=4, metadata={"help": "assistant turns per rollout at most"})
    max_new_tokens: int = field(default=192, metadata={"help": "tokens per assistant turn at most"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of rollouts"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling of rollouts"})
    format_weight: float = field(default=0.1, metadata={"help": "reward bonus for well-formed calls and answer"})
    tool_style: str = field(default="full", metadata={"help": "tools in the system prompt: full (JSON schemas) or compact (one-line signatures); match the SFT data"})
    turn_cache_mb: int = field(default=2048, metadata={
        "help": "transformers rollouts: MB of KV kept so a conversation's next turn encodes only the tool "
                "result (0 = re-encode the whole conversation every turn)"})
    retriever: str = retriever_option()


@dataclass
class GRPOConfig(LabelConfig, RolloutConfig):
    """GRPO settings (every field is a CLI option)."""

    data: str = field(default="", metadata={"required": True, "flag": "dataset", "aliases": ("data",), "help": "dataset whose triples give the questions"})
    model: str | None = field(default=None, metadata={"help": "model folder or prepared name (default: embedded)"})
    out: str = field(default="", metadata={"required": True, "help": "run folder: checkpoints, metrics.jsonl, curves.png, final/"})
    group_size: int = field(default=4, metadata={"help": "rollouts per prompt (a GRPO group)"})
    clip_eps: float = field(default=0.2, metadata={"help": "PPO clip range"})
    train_layers: int = field(default=0, metadata={"help": "train only the last N transformer blocks and the final norm, embeddings frozen (0 = every parameter); faster on CPU, as for SFT"})
    kl_coef: float = field(default=0.0, metadata={"help": "weight of the KL term to the frozen start model (0 = none)"})
    advantage: str = field(default="grpo", metadata={
        "help": "advantages: grpo (rewards normalised within each prompt's group) or hop-grouped (HRPO: "
                "within the rollouts of a micro-batch whose questions have the same hop count)"})
    limit: int = field(default=0, metadata={"help": "use at most this many triples (0 = all)"})
    triples: str = field(default="all", metadata={"choices": TRIPLE_SETS, "help": TRIPLES_HELP})
    tool_seed: int = field(default=0, metadata={"help": "seed of the offered tool bank"})
    tools: str = field(default="auto", metadata={
        "help": "the tool bank offered: world, corpus or a JSON Lines file of tools, as `forgeplay synthesize "
                "--tools` (generators/tools/banks.py); auto: corpus for an imported corpus, world for the world"})
    rollout_backend: str = field(default="transformers", metadata={
        "choices": ROLLOUT_BACKENDS, "help": "what samples rollouts: transformers (the policy module itself), vllm (an in-process vLLM "
                "engine, the policy's weights loaded into it after every optimizer step; needs vllm) or "
                "vllm-server (vLLM's server from .venv-vllm, or --base-url; weights published after every "
                "optimizer step, every rollout in flight at once)"})
    rollout_url: str = field(default="", metadata={
        "flag": "base-url", "aliases": ("rollout-url",),
        "help": f"vllm-server: a running server's URL, {URL_FORM}, one started with `python -m "
                "generators.llm.vllm_server` (default: start one on a free port of 127.0.0.1)"})
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata={
        "help": "vllm: share of GPU memory for the engine's weights and KV cache (the trainer uses the rest; "
                "on CPU the KV cache is VLLM_CPU_KVCACHE_SPACE GiB)"})
    vllm_dtype: str = field(default="auto", metadata={
        "help": "vllm: engine dtype (auto: float32 on CPU, the model's dtype on GPU)"})
    vllm_max_model_len: int = field(default=0, metadata={
        "help": "vllm: longest conversation in tokens (0 = the model's context length)"})
    prefix_grouping: bool = field(default=False, metadata={
        "help": "encode a group's shared prompt once for its rollouts' log-probabilities (same loss and "
                "gradients; faster on long prompts in isolation, slower in full steps so far: see bench_train)"})
    # label-aware GRPO (train/labelled.py; the labellers are acquire/training.py's)
    labels: str = field(default="", metadata={
        "choices": labellers,
        "help": "label-aware GRPO: the triples' answers are held back; each step takes the majority vote of a "
                "prompt's rollouts as its pseudo-label and buys true labels for the prompts this acquisition "
                "strategy chooses within --budget; advantages are weighted per prompt as CARE's (empty = train "
                "on the answers)"})
    budget: float = field(default=0.0, metadata={
        "help": "--labels: labels to buy at most (the labels dataset's ledger total; a label bought before is free)"})
    labels_out: str = field(default="", metadata={
        "flag": "out-dataset", "aliases": ("labels-out",), "help": "--labels: dataset that keeps the bought labels and the ledger (default: <data>_labels)"})
    label_reward: str = field(default="binary", metadata={
        "help": "--labels: each rollout's reward against its prompt's label: binary (1 for an exact match, else 0, "
                "no format bonus: the rewards CARE's CAG assumes) or partial (1 for an exact match, else 0.5 x F1, "
                "plus --format-weight when well-formed); the strategies' CAG is computed on the rewards used"})
    soft_adv: float = field(default=1.0, metadata={
        "help": "--labels care: a gated prompt's weight is clip(soft_adv * stage-2 expected CAG, 0, 1)"})
    # another engine (train/verl_launch.py)
    engine: str = field(default="trainer", metadata={
        "choices": ENGINES, "help": "trainer (forgeplay's own) or verl: export the data, reward and objective (--advantage, --labels) "
                "to OUT/verl and run verl 0.9.1's PPO trainer there on --nproc GPUs of this machine (needs verl "
                "and GPUs; not expressible there: CARE's probes (a voted prompt weighs 0) and a teacher with its "
                "own prompt)"})
    dry_run: bool = field(default=False, metadata={
        "help": "--engine verl: write OUT/verl (data, reward, objective, overrides.txt, run.sh) and print the "
                "command without running it"})

    def label_strategy(self) -> str:
        return self.labels

    def labels_dataset(self) -> str:
        """--labels: the dataset of the bought labels and their ledger."""
        return self.labels_out or f"{self.data}_labels"
