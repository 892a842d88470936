"""Real HTTP servers on 127.0.0.1 for the backend tests (no mocked client).

- `FlakyServer(plan)`: an OpenAI-shaped `/v1/chat/completions` whose behaviour per attempt
  is scripted by `plan(nonce, attempt) -> action`. The nonce is the last message's content;
  a good answer echoes it in every choice as "<nonce>#<k>" (choices sent in shuffled order),
  so a test can check that nothing was lost, duplicated or reordered. Actions: ok, garbage,
  no_choices, few (n-1 choices), dup (a repeated index), drop (closes the socket mid-body),
  hangup (closes before answering), 500, 429 (with Retry-After), 400, slow (sleeps
  `slow_seconds`, then ok); `reject_token_ids=True` answers 400 to `return_token_ids` as
  OpenAI's API does. Server-side counters: `attempts[nonce]`, `actions`, `arrivals`,
  `max_inflight`.
- `UvicornThread(app)`: runs an ASGI app (generators.llm.server.create_app) in a thread on
  a free port; `.url`, `.stop()`; both are context managers.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections import Counter, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

import uvicorn

Plan = Callable[[str, int], str]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        owner = self.server.owner
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        nonce = str(body["messages"][-1]["content"])
        n = int(body.get("n", 1))
        action, inflight_done = owner.enter(nonce, body)
        try:
            self._act(action, nonce, n, body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            inflight_done()

    def _act(self, action: str, nonce: str, n: int, body: dict) -> None:
        owner = self.server.owner
        if owner.delay:
            time.sleep(owner.delay)
        if owner.reject_token_ids and body.get("return_token_ids"):
            self._send(400, json.dumps({"error": {"message": "Unrecognized request argument supplied: "
                                                             "return_token_ids"}}).encode())
            return
        if action == "slow":
            time.sleep(owner.slow_seconds)
            action = "ok"
        if action in ("ok", "few", "dup"):
            k_list = list(range(n - 1 if action == "few" else n))
            if action == "dup":  # index 0 twice: n entries with a hole, or n + 1 when n == 1
                k_list = k_list[:-1] + [0] if n > 1 else [0, 0]
            choices = []
            for k in k_list:
                choice = {"index": k, "message": {"role": "assistant", "content": f"{nonce}#{k}"},
                          "finish_reason": "length" if k % 2 else "stop"}
                if body.get("return_token_ids"):
                    choice["token_ids"] = [k, k + 1, k + 2]
                if body.get("logprobs"):
                    choice["logprobs"] = {"content": [{"token": "t", "logprob": -0.5 * (k + 1)}] * 3}
                choices.append(choice)
            random.Random(nonce).shuffle(choices)
            out = {"object": "chat.completion", "choices": choices,
                   "usage": {"prompt_tokens": 7, "completion_tokens": 3 * len(choices)}}
            self._send(200, json.dumps(out).encode())
        elif action == "garbage":
            self._send(200, b"<html>definitely not json")
        elif action == "no_choices":
            self._send(200, json.dumps({"object": "chat.completion"}).encode())
        elif action == "drop":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "4096")
            self.end_headers()
            self.wfile.write(b'{"choices": [{"index": 0, "mess')
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif action == "hangup":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif action == "500":
            self._send(500, json.dumps({"error": {"message": "boom, internal"}}).encode())
        elif action == "429":
            self._send(429, json.dumps({"error": {"message": "slow down"}}).encode(),
                       {"Retry-After": owner.retry_after})
        elif action == "400":
            self._send(400, json.dumps({"error": {"message": "max_tokens is too large: 999999"}}).encode())
        else:
            raise ValueError(f"unknown action {action!r}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: "FlakyServer"


class FlakyServer:
    """Scripted OpenAI-compatible server (see the module docstring)."""

    def __init__(self, plan: Plan, delay: float = 0.0, retry_after: str = "1", slow_seconds: float = 2.0,
                 reject_token_ids: bool = False):
        self.plan, self.delay, self.retry_after, self.slow_seconds = plan, delay, retry_after, slow_seconds
        self.reject_token_ids = reject_token_ids  # answer 400 to `return_token_ids`, as OpenAI does
        self.attempts: Counter[str] = Counter()
        self.actions: Counter[str] = Counter()
        self.arrivals: dict[str, list[float]] = defaultdict(list)
        self.bodies: list[dict] = []
        self.inflight = 0
        self.max_inflight = 0
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def enter(self, nonce: str, body: dict) -> tuple[str, Callable[[], None]]:
        with self._lock:
            attempt = self.attempts[nonce]
            self.attempts[nonce] += 1
            self.arrivals[nonce].append(time.monotonic())
            self.bodies.append(body)
            action = self.plan(nonce, attempt)
            self.actions[action] += 1
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)

        def done() -> None:
            with self._lock:
                self.inflight -= 1

        return action, done

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> "FlakyServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class UvicornThread:
    """Serve an ASGI app on 127.0.0.1:<free port> from a background thread."""

    def __init__(self, app, startup_timeout: float = 60.0):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + startup_timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=15)
        self._sock.close()

    def __enter__(self) -> "UvicornThread":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
