"""Supervised fine-tuning on trajectories: render with the model's chat template, train on the
assistant tokens only.

Tool messages: chat templates without a tool role (SmolLM2's renders any role name
verbatim, which the model never saw) get each tool message as a *user* turn holding
`<tool_response>\\n{json}\\n</tool_response>` (the Qwen/Hermes convention); tool calls stay
in the assistant content as `<tool_call>` blocks. `template_messages` does this conversion
and the rollouts (train/rollout.py) use the same one, so training and sampling agree.

Labels: the characters of each assistant message's content plus its end-of-turn marker
(`<|im_end|>` for SmolLM2) are found by rendering the conversation prefix by prefix; every
token whose characters lie inside such a span is trained, all others get label -100. An
assistant turn whose call carries an injected error named in `context` (SFTConfig
`context_errors`, by default the repeat case's `repeated_call` and the unknown_tool case's
`unknown_tool`) is not a span: the model reads the mistake and learns the turn after it, not the
mistake.

    from train.sft import SFTConfig, load_examples, sft_step
    examples, stats = load_examples(root, "demo", tokenizer, SFTConfig(dataset="demo"))
    Trainer(model, TrainConfig(), run_dir, sft_step).fit(examples)

The `forgeplay train sft` Prefect flow is flows/train.py.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch

from generators.llm.model_store import MARKER
from storage.files import atomic_path
from train.configs import SFTConfig  # noqa: F401  (re-exported)

IGNORE = -100




def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as the chat template gets them: {role, content}, tool -> user <tool_response>."""
    out = []
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
        else:
            out.append({"role": m["role"], "content": content})
    return out


def _render(tokenizer, messages: list[dict], gen: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)


def _error_of(message: dict) -> set[str]:
    """The injected errors of a message's calls, without their detail ("wrong_args:type" -> wrong_args)."""
    return {str(c["injected_error"]).split(":")[0] for c in message.get("tool_calls") or []
            if isinstance(c, dict) and c.get("injected_error")}


def _is_context(message: dict, context: frozenset[str]) -> bool:
    """An assistant message whose calls carry an injected error named in `context`: read, not trained."""
    return message["role"] == "assistant" and bool(_error_of(message) & context)


def assistant_spans(tokenizer, messages: list[dict], context: frozenset[str] = frozenset()) -> tuple[str, list[tuple[int, int]]]:
    """(rendered text, [(start, end) character span of each assistant reply incl. end marker]);
    replies whose calls carry an injected error in `context` have no span."""
    msgs = template_messages(messages)
    text = _render(tokenizer, msgs)
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant" or _is_context(messages[i], context):
            continue
        start = len(_render(tokenizer, msgs[:i], gen=True))
        upto = _render(tokenizer, msgs[:i + 1])
        if not text.startswith(upto) or not upto[start:].startswith(m["content"]):
            raise ValueError("the chat template does not render prefixes consistently")
        end = len(upto.rstrip("\n"))
        spans.append((start, end))
    return text, spans


def tokenize(tokenizer, messages: list[dict], context: frozenset[str] = frozenset()) -> dict:
    """{"input_ids", "labels"}: labels equal input_ids on assistant spans, else IGNORE."""
    text, spans = assistant_spans(tokenizer, messages, context)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, labels = enc["input_ids"], []
    for tok, (a, b) in zip(ids, enc["offset_mapping"]):
        inside = b > a and any(s <= a and b <= e for s, e in spans)
        labels.append(tok if inside else IGNORE)
    return {"input_ids": ids, "labels": labels}


def names(option: str) -> frozenset[str]:
    """The names in a comma-separated option ("repeated_call, wrong_args" -> both; "" -> none)."""
    return frozenset(x.strip() for x in option.split(",") if x.strip())


def context_of(cfg: SFTConfig) -> frozenset[str]:
    """The injected errors whose assistant turns are read as context, not trained (`context_errors`)."""
    return names(cfg.context_errors)


def load_examples(root, dataset: str, tokenizer, cfg: SFTConfig) -> tuple[list[dict], dict]:
    """Tokenized training examples from the dataset's trajectories (each with the `id` of its
    trajectory), and counts of what was kept."""
    from storage import load_table, rejected_ids

    rows = load_table(dataset, "trajectories", root).to_pylist()
    failed = rejected_ids(dataset, "trajectories", root) if cfg.validated_only else set()
    cases = names(cfg.cases)
    present = {r["case"] for r in rows}
    if cases - present:  # a typo would otherwise keep nothing of that case, silently
        raise ValueError(f"--cases names {', '.join(sorted(cases - present))}, which no trajectory of {dataset!r} has "
                         f"(its cases: {', '.join(sorted(map(str, present))) or 'none'})")
    context = context_of(cfg)
    counts: Counter = Counter(rows=len(rows))
    out = []
    for r in rows:
        if r["id"] in failed:
            counts["failed_validation"] += 1
            continue
        if cases and r["case"] not in cases:
            counts["other_case"] += 1
            continue
        ex = tokenize(tokenizer, r["messages"], context)
        if len(ex["input_ids"]) > cfg.max_len:
            counts["too_long"] += 1
            continue
        out.append({**ex, "id": r["id"], "kind": kind_of(r)})  # the trajectory it came from, its kind
        read = sum(1 for m in r["messages"] if _is_context(m, context))
        if read:  # assistant turns read as context, not trained: 0 says --context-errors matched no call
            counts["context_turns"] += read
        if cfg.limit and len(out) >= cfg.limit:
            break
    counts["kept"] = len(out)
    counts["trained_tokens"] = sum(sum(1 for x in e["labels"] if x != IGNORE) for e in out)
    counts["longest_turn"] = max((longest_turn(e["labels"]) for e in out), default=0)
    return out, dict(counts)


def kind_of(row: dict) -> str:
    """A trajectory's kind of question, its type and hop count from its meta ("comparison/4"),
    what `--order kinds` takes turns by."""
    from generators.corpus.questions import question_kind

    meta = json.loads(row.get("meta") or "{}")
    return question_kind(meta if isinstance(meta, dict) else {})


def longest_turn(labels: list[int]) -> int:
    """Tokens of the longest assistant turn (its end marker included) of a tokenized example:
    the longest run of trained labels. A rollout whose `max_new_tokens` is below it cannot
    write that turn whole (a turn of parallel calls is cut mid-call)."""
    best = run = 0
    for x in labels:
        run = run + 1 if x != IGNORE else 0
        best = max(best, run)
    return best


def collate(batch: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(e["input_ids"]) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for r, e in enumerate(batch):
        n = len(e["input_ids"])
        ids[r, :n] = torch.tensor(e["input_ids"])
        labels[r, :n] = torch.tensor(e["labels"])
        mask[r, :n] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def sft_loss(model, batch: dict[str, torch.Tensor], neftune_alpha: float = 0.0,
             loss_type: str = "nll") -> torch.Tensor:
    """Mean next-token cross entropy (or another per-token loss, `loss_type`: train.losses.SFT_LOSSES)
    over the labelled (assistant) tokens of a padded batch (`collate`: input_ids, labels,
    attention_mask) or a packed one (train/packing.py `pack`: input_ids, labels, position_ids; the
    model runs packed attention). `neftune_alpha` > 0 adds NEFTune's noise to the input embeddings
    (train/neftune.py)."""
    from train.losses import sft_loss_fn

    per_token = sft_loss_fn(loss_type)
    return per_token(labelled_logprobs(model, batch, neftune_alpha)).mean()


def labelled_logprobs(model, batch: dict[str, torch.Tensor], neftune_alpha: float = 0.0) -> torch.Tensor:
    """The log-probability of every labelled token of `batch` (`sft_loss`), one per token.

    Only positions that predict a labelled token are projected to the vocabulary, in chunks
    (train.packing.token_logprobs_at): the prompt and tool tokens, most of a tool-use
    conversation, get no logits. Same loss and gradients as projecting every position."""
    from train.neftune import noisy_inputs
    from train.packing import token_logprobs_at

    dev = next(model.parameters()).device
    target = batch["labels"][:, 1:].to(dev)
    rows, cols = (target != IGNORE).nonzero(as_tuple=True)  # position t predicts token t + 1
    if rows.numel() == 0:
        raise ValueError("a micro-batch with no labelled (assistant) tokens")
    inputs = {k: batch[k].to(dev) for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
    from train.shard import in_forward

    if neftune_alpha <= 0:
        return token_logprobs_at(model, inputs, rows, cols, target[rows, cols])
    # NEFTune reads the input embeddings outside the model's forward: one call of a sharded root
    return in_forward(model, lambda: token_logprobs_at(model, noisy_inputs(model, inputs, neftune_alpha), rows, cols,
                                                       target[rows, cols]))


def train_last_layers(model, n: int) -> dict:
    """Freeze every parameter except the last `n` decoder blocks and the final norm
    (n = 0: train everything). Returns {"trainable": count, "total": count}.
    Backward then stops at the lowest trainable block, which is where the saving comes from."""
    total = sum(p.numel() for p in model.parameters())
    if n > 0:
        blocks = next((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)
                       and len(m) == getattr(model.config, "num_hidden_layers", -1)), None)
        if blocks is None:
            raise ValueError("--train-layers: cannot find the model's list of decoder blocks")
        if n > len(blocks):
            raise ValueError(f"--train-layers {n}: the model has {len(blocks)} blocks")
        model.requires_grad_(False)
        blocks[-n:].requires_grad_(True)
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        norm = getattr(decoder, "norm", None)
        if isinstance(norm, torch.nn.Module):
            norm.requires_grad_(True)
    return {"trainable": sum(p.numel() for p in model.parameters() if p.requires_grad), "total": total}


def make_step(pad_id: int, packed: bool = False, neftune_alpha: float = 0.0, loss_type: str = "nll"):
    """A Trainer step function: (model, examples) -> (loss, {"tokens", "trained_tokens"}); the
    examples of a micro-batch packed into one row (`packed`; the model runs packed attention,
    train/packing.py) or padded to the longest; NEFTune's noise when `neftune_alpha` > 0; the
    per-token loss `loss_type` (`sft_loss`; with a loss other than nll the stats add the cross
    entropy, `nll`)."""
    from train.losses import sft_loss_fn
    from train.packing import pack

    per_token = sft_loss_fn(loss_type)

    def step(model, examples: list[dict]):
        batch = pack(examples) if packed else collate(examples, pad_id)
        logp = labelled_logprobs(model, batch, neftune_alpha)
        tokens = batch["input_ids"].numel() if packed else int(batch["attention_mask"].sum())
        stats = {"tokens": tokens, "trained_tokens": int((batch["labels"] != IGNORE).sum())}
        if loss_type != "nll":  # the loss is not the cross entropy: log that too
            stats["nll"] = float(-logp.detach().mean())
        return per_token(logp).mean(), stats

    return step


def save_final(model, tokenizer, run_dir: str | Path, longest_turn: int | None = None,
               state_dict: dict | None = None) -> Path:
    """Save the trained model + tokenizer as a Hugging Face folder `run_dir/final` (atomic); its
    `forgeplay-model.json` records what it was trained from and, when known, the longest assistant
    turn it was trained on (`longest_turn`, what an evaluation's `max_new_tokens` must fit).
    `state_dict`: the weights to save instead of the model's own (a sharded model's, gathered)."""
    final = Path(run_dir) / "final"
    meta = {"trained_from": str(getattr(model, "name_or_path", ""))}
    if longest_turn:
        meta["longest_turn"] = int(longest_turn)
    with atomic_path(final, folder=True) as tmp:
        model.save_pretrained(tmp, state_dict=state_dict)
        tokenizer.save_pretrained(tmp)
        (tmp / MARKER).write_text(json.dumps(meta))
    return final


def trained_turn(model: str | Path) -> int | None:
    """The longest assistant turn `model` (a folder `save_final` wrote) was trained on, in tokens;
    None when it has no such record."""
    try:
        return int(json.loads((Path(model) / MARKER).read_text()).get("longest_turn") or 0) or None
    except (OSError, ValueError, AttributeError):
        return None


def turn_warning(model: str | Path, max_new_tokens: int) -> str | None:
    """A warning when `model` was trained on assistant turns longer than `max_new_tokens`
    (`trained_turn`): such a turn is cut when sampled, a call mid-way. None otherwise."""
    return cut_warning(model, trained_turn(model), max_new_tokens)


def cut_warning(model: str | Path, longest: int | None, max_new_tokens: int) -> str | None:
    """`turn_warning` given the longest trained turn already read (`trained_turn`; None: no record)."""
    if longest is None or longest <= max_new_tokens:
        return None
    return (f"{model} was trained on assistant turns of up to {longest} tokens, more than --max-new-tokens "
            f"{max_new_tokens}: such turns are cut when sampled (pass --max-new-tokens {longest} or more)")
