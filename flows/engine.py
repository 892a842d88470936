"""How a flow of this package runs: as a Prefect flow run, or in this process without
Prefect's API. Flows and tasks are declared with this module's `flow` and `task`, which take
Prefect's options and keep the function; the choice is made at each call.

    from flows.engine import flow, task

    @task(name="load-inputs", retries=1)
    def load_task(root, dataset): ...

    @flow(name="synthesize", log_prints=True)
    def synthesize_flow(config, backend, data_root=None): ...

    synthesize_flow(config, backend, root)                         # Prefect or local (below)
    synthesize_flow.with_options(task_runner=runner)(config, ...)  # a task runner: Prefect

A flow runs as a Prefect flow run (recorded with its task runs, logs and artifacts) when a
Prefect API is configured (PREFECT_API_URL in the environment or in the active Prefect
profile), when FORGEPLAY_PREFECT is set (`forgeplay --prefect`; with no API configured
Prefect starts its temporary local server), when the flow is given a task runner (the flows
that fan out to a process pool, Dask or Ray: `--workers N`, `--task-runner`), and inside a
Prefect flow run (a subflow; a run `forgeplay serve` started). Otherwise it runs locally:
the body is called in this process, each task called in it is a plain call that honours the
task's `retries` and `retry_delay_seconds`, and `task.submit` runs the task on one thread of
the flow's own (what the flows submit without fanning out, e.g. the validate flow's commits
overlapping the next chunk's checks). A local run starts no server and does not import
Prefect; its artifacts are not published (flows/common.py) and its run records on disk are
the same. Tasks never cache results (the flows resume from committed shards instead).

`Flow.prefect()` is the Prefect flow itself (what `forgeplay serve` deploys); its entrypoint,
`<module file>:<name>.prefect_flow`, loads it again in another process.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import sys
import time
import types
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

try:
    import tomllib
except ImportError:  # Python 3.10: the toml package Prefect itself depends on (its errors are ValueErrors)
    import toml as tomllib

PREFECT_ENV = "FORGEPLAY_PREFECT"  # set (1, true, yes): every flow runs as a Prefect flow run
_log = logging.getLogger(__name__)


def _on(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def profile_api_url() -> str | None:
    """PREFECT_API_URL of the active Prefect profile (PREFECT_PROFILE, else the profiles
    file's `active`), read from the profiles file without importing Prefect."""
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return None
    name = os.environ.get("PREFECT_PROFILE") or doc.get("active")
    profile = (doc.get("profiles") or {}).get(name) or {}
    return profile.get("PREFECT_API_URL") or None


def api_configured() -> bool:
    """Whether a Prefect API is configured (PREFECT_API_URL, in the environment or profile)."""
    if "PREFECT_API_URL" in os.environ:
        return bool(os.environ["PREFECT_API_URL"])
    return profile_api_url() is not None


def in_prefect_run() -> bool:
    """Whether this code runs inside a Prefect flow run (never when Prefect is not imported)."""
    context = sys.modules.get("prefect.context")
    return context is not None and context.FlowRunContext.get() is not None


def prefect_wanted() -> bool:
    """Whether a flow called now runs as a Prefect flow run (module docstring)."""
    return in_prefect_run() or _on(os.environ.get(PREFECT_ENV)) or api_configured()


class _LocalRun:
    """A local flow run: the one thread its submitted tasks run on, made on first use."""

    def __init__(self, name: str) -> None:
        self.name, self.pool = name, None

    def submit(self, task: "Task", args: tuple, kwargs: dict) -> Future:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-task")
        return self.pool.submit(contextvars.copy_context().run, task.call_local, args, kwargs)

    def close(self, failed: bool) -> None:
        """Wait for the submitted tasks; after an error, drop those not started."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=failed)


_local: contextvars.ContextVar[_LocalRun | None] = contextvars.ContextVar("forgeplay_local_flow", default=None)


class Task:
    """A task: called in a Prefect flow run it is a Prefect task run, otherwise a plain call
    (with retries); `fn` is the function (a test may replace it)."""

    def __init__(self, fn: Callable, options: dict) -> None:
        functools.update_wrapper(self, fn)
        self.fn, self.options = fn, options
        self._prefect: tuple[Callable, Any] | None = None

    @property
    def name(self) -> str:
        return self.options.get("name") or self.fn.__name__

    def prefect(self):
        """The Prefect task of the current `fn` (no result caching)."""
        if self._prefect is None or self._prefect[0] is not self.fn:
            from prefect import task
            from prefect.cache_policies import NONE

            self._prefect = (self.fn, task(cache_policy=NONE, **self.options)(self.fn))
        return self._prefect[1]

    def __call__(self, *args, **kwargs):
        if in_prefect_run():
            return self.prefect()(*args, **kwargs)
        return self.call_local(args, kwargs)

    def submit(self, *args, **kwargs):
        """A future of the task: Prefect's on the flow run's task runner, else on the local
        flow run's thread."""
        if in_prefect_run():
            return self.prefect().submit(*args, **kwargs)
        run = _local.get()
        if run is None:
            raise RuntimeError(f"task {self.name} submitted outside a flow")
        return run.submit(self, args, kwargs)

    def call_local(self, args: tuple, kwargs: dict):
        """The function, retried as Prefect would: `retries` more times after an exception,
        `retry_delay_seconds` apart (a number, or one per retry)."""
        retries = int(self.options.get("retries") or 0)
        delays = self.options.get("retry_delay_seconds") or 0
        for attempt in range(retries + 1):
            try:
                return self.fn(*args, **kwargs)
            except Exception as e:
                if attempt == retries:
                    raise
                delay = delays[min(attempt, len(delays) - 1)] if isinstance(delays, (list, tuple)) else delays
                _log.info("task %s failed (%s: %s); retry %d of %d in %s s", self.name, type(e).__name__, e,
                          attempt + 1, retries, delay)
                time.sleep(delay)


class Flow:
    """A flow: a Prefect flow run when `prefect_wanted()` or it has a task runner, otherwise
    its body called here (module docstring)."""

    def __init__(self, fn: Callable, options: dict, task_runner=None) -> None:
        functools.update_wrapper(self, fn)
        self.fn, self.options, self.task_runner = fn, options, task_runner
        self._prefect = None

    @property
    def name(self) -> str:
        return self.options.get("name") or self.fn.__name__

    def with_options(self, *, task_runner=None, **options) -> "Flow":
        """The flow with other Prefect options; given a task runner, it always runs on it (Prefect)."""
        return Flow(self.fn, {**self.options, **options}, task_runner if task_runner is not None else self.task_runner)

    def prefect(self):
        """The Prefect flow (with this flow's task runner, when it has one). Its function is a
        copy of `fn` whose qualified name points at `prefect_flow` beside this object, so the
        deployment entrypoint Prefect derives from it loads the Prefect flow."""
        if self._prefect is None:
            from prefect import flow

            fn = self.fn
            copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
            copy = functools.update_wrapper(copy, fn)
            del copy.__wrapped__  # Prefect reads the signature of the copy itself
            copy.__kwdefaults__ = fn.__kwdefaults__
            copy.__qualname__ = f"{fn.__qualname__}.prefect_flow"
            options = dict(self.options)
            if isinstance(options.get("task_runner"), types.FunctionType):
                options["task_runner"] = options["task_runner"]()  # a function that makes the runner
            if self.task_runner is not None:
                options["task_runner"] = self.task_runner
            self._prefect = flow(**options)(copy)
        return self._prefect

    @property
    def prefect_flow(self):
        """`prefect()` as an attribute: what the deployment entrypoint names."""
        return self.prefect()

    def __call__(self, *args, **kwargs):
        if self.task_runner is not None or prefect_wanted():
            return self.prefect()(*args, **kwargs)
        run = _LocalRun(self.name)
        token = _local.set(run)
        failed = True
        try:
            result = self.fn(*args, **kwargs)
            failed = False
            return result
        finally:
            _local.reset(token)
            run.close(failed)


def flow(**options) -> Callable[[Callable], Flow]:
    """Declare a flow with Prefect's flow options (`task_runner` may be a function that makes
    one, so Prefect is imported only when the flow runs as a Prefect flow run)."""
    return lambda fn: Flow(fn, options)


def task(**options) -> Callable[[Callable], Task]:
    """Declare a task with Prefect's task options (`retries`, `retry_delay_seconds`, `name`, ...)."""
    return lambda fn: Task(fn, options)


def one_thread():
    """Prefect's task runner of one thread (the validate flow's commits run on it in order)."""
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=1)
