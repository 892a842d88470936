"""The wire format of OpenAI-compatible chat completions, for the `openai` backend
(generators/llm/openai_backend.py): the endpoint URL, Retry-After, error bodies, and a
response mapped to exactly `n` Completions or `_Retryable` ("bad_response: ...")."""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass
from typing import Any

from generators.llm.base import Completion

RETRY_STATUS = {408, 409, 425, 429}  # plus every 5xx


class _Retryable(Exception):
    """One attempt failed in a way worth retrying."""

    def __init__(self, reason: str, retry_after: float | None = None, overload: bool = False, down: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.overload = overload  # 429, 503 or a timeout: the server may be asked too much
        self.down = down  # a refused or dropped connection: the server is not there (restarting, gone)


@dataclass
class _Result:
    completions: list[Completion]
    prompt_tokens: int
    completion_tokens: int


def split_urls(base_url: str) -> list[str]:
    """`--base-url` as a list of endpoints: comma-separated, blanks dropped, order kept."""
    urls = [u.strip() for u in str(base_url).split(",") if u.strip()]
    if not urls:
        raise ValueError("no endpoint in --base-url")
    return urls


# how every --*-url option reads a server's address (one form, said once in the help texts)
URL_FORM = "http://host:port (a /v1 ending is accepted)"


def api_url(url: str) -> str:
    """A server's address in any of the accepted forms (`http://h:p`, `http://h:p/v1`, the full
    chat completions endpoint) -> its OpenAI API root `http://h:p/v1`."""
    url = url.strip().rstrip("/").removesuffix("/chat/completions")
    return url if url.endswith("/v1") else url + "/v1"


def chat_url(base_url: str) -> str:
    """`http://h:p`, `http://h:p/v1` or the full endpoint -> the chat completions URL."""
    return api_url(base_url) + "/chat/completions"


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
