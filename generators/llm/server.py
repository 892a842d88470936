"""A minimal OpenAI-compatible HTTP server over any forgeplay Backend.

Puts the embedded model (or any backend) behind `/v1/chat/completions`, `/v1/models` and
`/health`, so the `openai` backend, curl or any OpenAI client can use it:

    python -m generators.llm.server --backend transformers --port 8000
    python -m generators.llm.server --backend transformers --model DIR --port 8000 --max-batch 16
    curl -s localhost:8000/v1/chat/completions -H 'content-type: application/json' \\
        -d '{"messages": [{"role": "user", "content": "Hi"}], "n": 2, "max_tokens": 16}'

Concurrent requests are batched: a single worker takes up to `--max-batch` queued requests
and makes one `backend.generate` call for them (backends are not thread-safe, so this also
serialises them); a request whose client hangs up while it waits in the queue is dropped,
so a client's timeout-and-retry does not make the server generate twice. Accepted body fields: messages, n, temperature, top_p, max_tokens (or
max_completion_tokens), stop, seed, logprobs, top_logprobs, return_token_ids; `stream` is
refused with 400. Each choice carries `token_ids` when `return_token_ids` is true (as vLLM).
In tests: `create_app(backend)` and run it with uvicorn in a thread.

`--api-key KEY` (or $FORGEPLAY_API_KEY) makes every /v1 route require `Authorization:
Bearer KEY` (401 otherwise; /health stays open for probes), as vLLM's server does; the
`openai` backend sends its `api_key`. Binding anything but a loopback address needs a key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, Optional, Union

import hmac
import ipaddress
import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from generators.llm.base import Backend, ChatRequest, Completion

log = logging.getLogger("forgeplay.server")


class ChatBody(BaseModel):
    """The part of the OpenAI chat completions request this server understands."""

    model_config = ConfigDict(extra="ignore")

    model: Optional[str] = None
    messages: list[dict] = Field(min_length=1)
    n: int = Field(1, ge=1, le=128)
    temperature: float = Field(0.7, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    stop: Union[str, list[str], None] = None
    seed: Optional[int] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    return_token_ids: bool = False
    stream: bool = False

    def to_request(self, default_max_tokens: int) -> ChatRequest:
        for i, m in enumerate(self.messages):
            if not isinstance(m.get("role"), str):
                raise ValueError(f"messages[{i}] has no string 'role'")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return ChatRequest(messages=self.messages, n=self.n, temperature=self.temperature,
                           top_p=self.top_p,
                           max_tokens=self.max_completion_tokens or self.max_tokens or default_max_tokens,
                           stop=stop, seed=self.seed, logprobs=self.logprobs)


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


class Batcher:
    """Queue of (request, future); one worker drains it in batches of up to `max_batch`."""

    def __init__(self, backend: Backend, max_batch: int = 16, wait: float = 0.005):
        self.backend, self.max_batch, self.wait = backend, max_batch, wait
        self.queue: asyncio.Queue = asyncio.Queue()
        self.batches: list[int] = []  # sizes of the batches run so far (for tests and logs)
        self.dropped = 0  # requests whose client hung up before getting an answer

    async def submit(self, req: ChatRequest) -> list[Completion]:
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((req, fut))
        return await fut

    async def run(self) -> None:
        while True:
            items = [await self.queue.get()]
            if self.wait:
                await asyncio.sleep(self.wait)  # let concurrent arrivals join this batch
            while len(items) < self.max_batch and not self.queue.empty():
                items.append(self.queue.get_nowait())
            items = [(r, f) for r, f in items if not f.cancelled()]
            if not items:
                continue
            self.batches.append(len(items))
            try:
                outs = await asyncio.to_thread(self.backend.generate, [r for r, _ in items])
            except Exception as e:
                if len(items) == 1:
                    log.warning("backend failed: %s: %s", type(e).__name__, e)
                    if not items[0][1].done():
                        items[0][1].set_exception(e)
                    continue
                # one bad request must not fail its neighbours: run them one by one
                for item in items:
                    await self._run_one(*item)
                continue
            for (_, f), out in zip(items, outs):
                if not f.done():
                    f.set_result(out)

    async def _run_one(self, req: ChatRequest, fut: asyncio.Future) -> None:
        if fut.done():
            return
        try:
            out = (await asyncio.to_thread(self.backend.generate, [req]))[0]
        except Exception as e:
            log.warning("backend failed: %s: %s", type(e).__name__, e)
            if not fut.done():
                fut.set_exception(e)
        else:
            if not fut.done():
                fut.set_result(out)


def _token_strings(backend: Backend, ids: list[int]) -> list[str]:
    tok = backend.tokenizer
    if tok is not None:
        try:
            return [tok.decode([i]) for i in ids]
        except Exception:
            pass
    return [f"token_id:{i}" for i in ids]


def completion_body(backend: Backend, model: str, body: ChatBody, outs: list[Completion]) -> dict:
    """OpenAI chat.completion JSON for one request's completions."""
    choices = []
    for k, c in enumerate(outs):
        choice: dict[str, Any] = {"index": k, "message": {"role": "assistant", "content": c.text},
                                  "finish_reason": c.finish_reason, "logprobs": None}
        if body.logprobs and c.logprobs is not None:
            toks = _token_strings(backend, c.token_ids) if c.token_ids else [""] * len(c.logprobs)
            choice["logprobs"] = {"content": [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
                                              for t, lp in zip(toks, c.logprobs)]}
        if body.return_token_ids:
            choice["token_ids"] = list(c.token_ids)
        choices.append(choice)
    prompt = outs[0].prompt_tokens if outs else 0
    completion = sum(c.completion_tokens or len(c.token_ids) for c in outs)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices,
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def create_app(backend: Backend, model_name: str | None = None, max_batch: int = 16,
               default_max_tokens: int = 256, batch_wait: float = 0.005,
               disconnect_poll: float = 0.5, close_backend: bool = False, api_key: str | None = None) -> FastAPI:
    """The FastAPI app serving `backend`; `app.state.batcher` holds the batching worker.
    With `close_backend`, the app's shutdown closes the backend (stops vLLM's engine).
    With `api_key`, /v1 requests without `Authorization: Bearer <api_key>` get 401."""
    name = model_name or str(backend.model or "forgeplay")
    batcher = Batcher(backend, max_batch=max_batch, wait=batch_wait)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker = asyncio.create_task(batcher.run())
        try:
            yield
        finally:
            worker.cancel()
            if close_backend:  # here, not after uvicorn.run: uvicorn re-raises SIGTERM on exit
                await asyncio.to_thread(backend.close)

    app = FastAPI(title="forgeplay OpenAI-compatible server", lifespan=lifespan)
    app.state.batcher = batcher

    if api_key:
        expected = f"Bearer {api_key}".encode()

        @app.middleware("http")
        async def require_key(request: Request, call_next):
            if request.url.path.startswith("/v1") and not hmac.compare_digest(
                    request.headers.get("authorization", "").encode(), expected):
                return _error(401, "missing or wrong API key (send Authorization: Bearer <key>)",
                              "authentication_error")
            return await call_next(request)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": name}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "forgeplay"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        try:
            raw = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "body is not valid JSON")
        if not isinstance(raw, dict):
            return _error(400, "body must be a JSON object")
        try:
            body = ChatBody.model_validate(raw)
            req = body.to_request(default_max_tokens)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            return _error(400, f"{where}: {first.get('msg')}")
        except ValueError as e:
            return _error(400, str(e))
        if body.stream:
            return _error(400, "stream=true is not supported by this server")
        job = asyncio.ensure_future(batcher.submit(req))
        while True:  # a client that hung up (timed out) while queued is dropped from the queue
            done, _ = await asyncio.wait({job}, timeout=disconnect_poll)
            if done:
                break
            if await request.is_disconnected():
                job.cancel()
                batcher.dropped += 1
                return _error(499, "client closed the request")
        try:
            outs = job.result()
        except ValueError as e:  # the backend refused this request's input
            return _error(400, f"{type(e).__name__}: {e}")
        except Exception as e:
            return _error(500, f"backend error: {type(e).__name__}: {e}", "server_error")
        return completion_body(backend, name, body, outs)

    return app


def build_backend(kind: str, model: str | None, options: dict) -> Backend:
    """A backend through the registry; `options` are the kind's options (batch_size, dtype,
    base_url, ...: generators/llm/registry.py); for vllm, any other key goes to vllm.LLM (e.g.
    max_model_len)."""
    from dataclasses import fields

    from generators.llm.registry import BACKENDS, BackendConfig, make_backend

    names = {f.name for f in fields(BACKENDS[kind].options)} - {"model"} if kind in BACKENDS else set()
    known = {k: v for k, v in options.items() if k in names}
    extra = {k: v for k, v in options.items() if k not in names}
    if extra and kind != "vllm":
        raise ValueError(f"unknown --option {', '.join(sorted(extra))} for {kind}; known: {', '.join(sorted(names))}")
    cfg = BackendConfig(backend=kind, model=model, **known)
    cfg.engine_kwargs = {**cfg.engine_kwargs, **extra}
    return make_backend(cfg)


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or name to bind) is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parse_options(pairs: list[str]) -> dict:
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep:
            raise ValueError(f"--option wants KEY=VALUE, got {p!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m generators.llm.server",
                                 description="Serve a forgeplay backend as an OpenAI-compatible HTTP API.")
    ap.add_argument("--backend", default="transformers", choices=["transformers", "vllm", "openai"],
                    help="Backend that generates (default: transformers, the embedded model on CPU).")
    ap.add_argument("--model", default=None,
                    help="Model folder or name (default: the embedded SmolLM2-135M-Instruct).")
    ap.add_argument("--served-model-name", default=None, help="Name shown by /v1/models (default: --model).")
    ap.add_argument("--host", default="127.0.0.1", help="Address to bind (default 127.0.0.1).")
    ap.add_argument("--port", type=int, default=8000, help="Port to bind (default 8000).")
    ap.add_argument("--api-key", default=os.environ.get("FORGEPLAY_API_KEY"),
                    help="Require `Authorization: Bearer KEY` on /v1 routes (default $FORGEPLAY_API_KEY); "
                         "needed when --host is not a loopback address.")
    ap.add_argument("--max-batch", type=int, default=16, help="Most queued requests per generate call.")
    ap.add_argument("--max-tokens", type=int, default=256, help="max_tokens when a request gives none.")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="Backend setting (a BackendConfig field, JSON value), repeatable, e.g. batch_size=8, "
                         "base_url=http://h:8000/v1; for vllm also any vllm.LLM argument, e.g. max_model_len=2048.")
    ap.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                    help="Generate one token before serving, so /health answers only when ready.")
    args = ap.parse_args(argv)
    if not args.api_key and not is_loopback(args.host):
        ap.error(f"--host {args.host} is reachable from other machines: give --api-key (or $FORGEPLAY_API_KEY)")

    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        backend = build_backend(args.backend, args.model, _parse_options(args.option))
    except (ValueError, TypeError) as e:  # bad model, option or setting: exit code 2
        ap.error(f"cannot start the {args.backend} backend: {e}")
    if args.warmup:  # start lazy engines (vLLM: ~40 s on CPU) before /health says ok
        log.info("warming up the %s backend", args.backend)
        backend.generate([ChatRequest(messages=[{"role": "user", "content": "Hi"}], temperature=0.0, max_tokens=1)])
    app = create_app(backend, model_name=args.served_model_name, max_batch=args.max_batch,
                     default_max_tokens=args.max_tokens, close_backend=True, api_key=args.api_key)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
