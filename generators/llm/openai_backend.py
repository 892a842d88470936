"""`openai` backend: any OpenAI-compatible `/v1/chat/completions` server over async HTTP.

Works with `vllm serve` / `python -m vllm.entrypoints.openai.api_server`, with
`python -m generators.llm.server` (this project's own server over any backend) and with
hosted APIs. Requests go out concurrently (at most `max_concurrency` in flight); each one is
retried with exponential backoff and jitter on 429, 5xx, timeouts, dropped connections and
malformed answers ("bad_response": not JSON, no `choices`, fewer or other choices than `n`),
honouring `Retry-After`. Any other 4xx fails at once with the server's message. The result
has exactly `request.n` completions per request, in request order, or the call raises
`BackendError` naming the request index and the reason.

    from generators.llm.base import ChatRequest
    from generators.llm.openai_backend import OpenAIBackend
    b = OpenAIBackend("http://127.0.0.1:8000/v1", "smollm2")
    b.generate([ChatRequest(messages=[{"role": "user", "content": "Hi"}], n=2)])

`Usage.failures` counts requests that failed for good, `Usage.retries` every re-send.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import json
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Sequence

import aiohttp
from tqdm.auto import tqdm

from generators.llm.base import BackendError, ChatRequest, Completion, Usage

RETRY_STATUS = {408, 409, 425, 429}  # plus every 5xx


class _Retryable(Exception):
    """One attempt failed in a way worth retrying."""

    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


@dataclass
class _Result:
    completions: list[Completion]
    prompt_tokens: int
    completion_tokens: int


def chat_url(base_url: str) -> str:
    """`http://h:p`, `http://h:p/v1` or the full endpoint -> the chat completions URL."""
    url = base_url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if not url.endswith("/v1"):
        url += "/v1"
    return url + "/chat/completions"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_message(text: str, limit: int = 500) -> str:
    """The human part of an error body: OpenAI's {"error": {"message"}}, FastAPI's
    {"detail"}, else the raw text (cut to `limit` characters)."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return text.strip()[:limit] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:limit]
        if isinstance(err, str):
            return err[:limit]
        if data.get("detail"):
            return str(data["detail"])[:limit]
        if data.get("message"):
            return str(data["message"])[:limit]
    return text.strip()[:limit]


def _finish_reason(value: Any) -> str:
    if value == "length":
        return "length"
    if value in ("abort", "error"):
        return "error"
    return "stop"


def parse_response(text: str, n: int, want_logprobs: bool) -> _Result:
    """Map a chat completion body to exactly `n` Completions, or raise _Retryable."""
    try:
        return _parse(text, n, want_logprobs)
    except (TypeError, ValueError, AttributeError) as e:  # wrong types inside the JSON
        raise _Retryable(f"bad_response: {type(e).__name__}: {e}") from None


def _parse(text: str, n: int, want_logprobs: bool) -> _Result:
    try:
        data = json.loads(text)
    except ValueError:
        raise _Retryable(f"bad_response: not JSON: {text[:80]!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise _Retryable(f"bad_response: no choices in {text[:80]!r}")
    choices = data["choices"]
    if len(choices) != n:
        raise _Retryable(f"bad_response: {len(choices)} choices for n={n}")
    if not all(isinstance(c, dict) for c in choices):
        raise _Retryable("bad_response: a choice is not an object")
    indices = [c.get("index") for c in choices]
    if all(isinstance(i, int) for i in indices):
        if sorted(indices) != list(range(n)):
            raise _Retryable(f"bad_response: choice indices {sorted(indices)} for n={n}")
        choices = sorted(choices, key=lambda c: c["index"])
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)

    out: list[Completion] = []
    for c in choices:
        message = c.get("message") if isinstance(c.get("message"), dict) else {}
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise _Retryable("bad_response: message content is not a string")
        token_ids = c.get("token_ids") or []
        if not isinstance(token_ids, list):
            raise _Retryable("bad_response: token_ids is not a list")
        logprobs = None
        if want_logprobs:
            lp = c.get("logprobs")
            entries = lp.get("content") if isinstance(lp, dict) else None
            if isinstance(entries, list):
                logprobs = [float(e.get("logprob", 0.0)) for e in entries if isinstance(e, dict)]
        out.append(Completion(text=content or "", token_ids=[int(t) for t in token_ids],
                              logprobs=logprobs, finish_reason=_finish_reason(c.get("finish_reason")),
                              prompt_tokens=prompt_tokens,
                              completion_tokens=len(token_ids) or len(logprobs or [])))
    total = int(usage.get("completion_tokens") or 0) or sum(c.completion_tokens for c in out)
    if total and not any(c.completion_tokens for c in out):  # only the total is known: split it
        share, extra = divmod(total, n)
        for k, c in enumerate(out):
            c.completion_tokens = share + (1 if k < extra else 0)
    return _Result(out, prompt_tokens, total)


class OpenAIBackend:
    """Client for an OpenAI-compatible chat completions server (see the module docstring)."""

    name = "openai"

    def __init__(self, base_url: str, model: str, max_concurrency: int = 8, max_retries: int = 4,
                 timeout: float = 60, api_key: str | None = None, backoff: float = 0.5,
                 max_backoff: float = 30.0, return_token_ids: bool = True,
                 extra_body: dict | None = None):
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.base_url = base_url
        self.url = chat_url(base_url)
        self.model = model
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout = float(timeout)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.return_token_ids = return_token_ids  # switched off if the server rejects it
        self.extra_body = dict(extra_body or {})
        self.usage = Usage()

    # -- request building ------------------------------------------------------------------
    def body(self, req: ChatRequest) -> dict:
        """The JSON body sent for one request."""
        body: dict[str, Any] = {"model": self.model, "messages": req.messages, "n": req.n,
                                "temperature": req.temperature, "top_p": req.top_p,
                                "max_tokens": req.max_tokens}
        if req.stop:
            body["stop"] = list(req.stop)
        if req.seed is not None:
            body["seed"] = req.seed
        if req.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = 0
        if self.return_token_ids:
            body["return_token_ids"] = True
        body.update(self.extra_body)
        return body

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, max(self.max_backoff, self.timeout)) + random.uniform(0, 0.1)
        base = min(self.max_backoff, self.backoff * (2 ** attempt))
        return base * random.uniform(0.5, 1.5)

    # -- one request -------------------------------------------------------------------------
    async def _attempt(self, session: aiohttp.ClientSession, index: int, req: ChatRequest) -> _Result:
        asked_token_ids = self.return_token_ids
        try:
            async with session.post(self.url, json=self.body(req)) as resp:
                status, text = resp.status, (await resp.read()).decode("utf-8", errors="replace")
                retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        except asyncio.TimeoutError:
            raise _Retryable(f"timeout after {self.timeout:g} s") from None
        except aiohttp.ClientError as e:
            raise _Retryable(f"connection: {type(e).__name__}: {e}") from None
        if status == 200:
            return parse_response(text, req.n, req.logprobs)
        msg = error_message(text)
        if status in RETRY_STATUS or status >= 500:
            raise _Retryable(f"HTTP {status}: {msg}", retry_after)
        if status == 400 and asked_token_ids and "return_token_ids" in msg:
            self.return_token_ids = False  # a server without vLLM's extension: resend, free
            return await self._attempt(session, index, req)
        raise BackendError(f"request {index}: HTTP {status} (not retried): {msg}")

    async def _request(self, session: aiohttp.ClientSession, index: int, req: ChatRequest,
                       usage: Usage) -> list[Completion]:
        if req.n < 1:
            raise BackendError(f"request {index}: n must be >= 1, got {req.n}")
        attempt = 0
        while True:
            try:
                result = await self._attempt(session, index, req)
            except _Retryable as e:
                if attempt >= self.max_retries:
                    usage.failures += 1
                    raise BackendError(f"request {index}: gave up after {attempt + 1} attempts; "
                                       f"last error: {e.reason}") from None
                await asyncio.sleep(self._delay(attempt, e.retry_after))
                attempt += 1
                usage.retries += 1
                continue
            except BackendError:
                usage.failures += 1
                raise
            usage.requests += 1
            usage.prompt_tokens += result.prompt_tokens
            usage.completion_tokens += result.completion_tokens
            return result.completions

    # -- public API --------------------------------------------------------------------------
    async def agenerate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        """Async `generate`: one list of `request.n` completions per request, in order."""
        usage = Usage()
        t0 = time.perf_counter()
        sem = asyncio.Semaphore(self.max_concurrency)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        connector = aiohttp.TCPConnector(limit=self.max_concurrency)
        bar = tqdm(total=len(requests), desc=f"openai {self.model}", unit="req", disable=not progress)

        async def one(i: int, req: ChatRequest) -> list[Completion]:
            async with sem:
                out = await self._request(session, i, req, usage)
            bar.update(1)
            return out

        try:
            async with aiohttp.ClientSession(headers=headers, timeout=timeout, connector=connector) as session:
                tasks = [asyncio.ensure_future(one(i, r)) for i, r in enumerate(requests)]
                try:
                    return list(await asyncio.gather(*tasks))
                except BaseException:
                    for t in tasks:
                        t.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    raise
        finally:
            bar.close()
            usage.seconds = time.perf_counter() - t0
            self.usage.add(usage)

    def generate(self, requests: Sequence[ChatRequest], progress: bool = False) -> list[list[Completion]]:
        """One list of `request.n` completions per request, in request order (blocking)."""
        coro_fn = lambda: self.agenerate(requests, progress)  # noqa: E731
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro_fn())
        # Called from inside a running event loop (notebook, async flow): use a fresh thread.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(lambda: asyncio.run(coro_fn())).result()

    def close(self) -> None:
        """Nothing to release: each `generate` call opens and closes its own session."""
