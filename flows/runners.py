"""The task runner of the flows that fan out (validation chunks, synthesis chunks), chosen in
one place: `--task-runner KIND [--address ADDR]` on their commands. A kind is an entry of
RUNNERS: `default` (the flow's own: threads in the flow process for one worker, else a pool
of `--workers` processes), `dask` (prefect-dask's DaskTaskRunner, `pip install
'forgeplay[dask]'`) and `ray` (prefect-ray's RayTaskRunner, `pip install 'forgeplay[ray]'`).

A distributed kind runs each submitted task in another process, possibly on another
machine: a task there gets only its (pickled) arguments and the data root, so the data
root must be the same path wherever a worker runs. With `--address` the flow connects to
that cluster; without it a local cluster of `--workers` single-threaded workers starts on
127.0.0.1 for the flow run (no dashboard) and stops with it.

    make_task_runner("dask", None, 2)                   # a local 2-worker Dask cluster
    make_task_runner("dask", "tcp://127.0.0.1:8786", 2)  # an existing scheduler
    RunnerConfig(task_runner="ray").make(2)
"""

from __future__ import annotations

import importlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # prefect is imported when a runner is built, not by the command line's start
    from prefect.task_runners import TaskRunner


@dataclass
class RunnerConfig:
    """Which task runner a flow's fanned-out tasks use. No part of a run's config nor of its
    run id: the results do not depend on it."""

    task_runner: str = field(default="default", metadata={
        "help": "Where the fanned-out tasks run: default (threads for 1 worker, else a pool of --workers "
                "processes), dask or ray (each needs the forgeplay extra of the same name)."})
    address: str | None = field(default=None, metadata={
        "help": "dask or ray only: the cluster to use (e.g. tcp://127.0.0.1:8786 for Dask, 127.0.0.1:6379 for Ray); "
                "default: a local cluster of --workers workers on 127.0.0.1."})

    def kind(self) -> "Kind":
        if self.task_runner not in RUNNERS:
            raise ValueError(f"unknown --task-runner {self.task_runner!r}: choose one of {', '.join(RUNNERS)}")
        kind = RUNNERS[self.task_runner]
        if self.address and not kind.distributed:
            raise ValueError(f"--address needs --task-runner {' or '.join(k for k in RUNNERS if RUNNERS[k].distributed)}")
        return kind

    def make(self, workers: int) -> TaskRunner:
        return make_task_runner(self.task_runner, self.address, workers)

    def fans_out(self, workers: int) -> bool:
        """Whether a flow submits its per-chunk tasks to the runner (else it calls them in
        the flow thread, one after another): always on a distributed runner, and on the
        default one with more than one worker."""
        return self.kind().distributed or workers > 1


def _default(address: str | None, workers: int) -> TaskRunner:
    from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=1) if workers == 1 else ProcessPoolTaskRunner(max_workers=workers)


def _dask(address: str | None, workers: int) -> TaskRunner:
    from prefect_dask import DaskTaskRunner

    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True,
                                          "host": "127.0.0.1", "dashboard_address": None})


def _ray(address: str | None, workers: int) -> TaskRunner:
    from prefect_ray import RayTaskRunner

    if address:
        return RayTaskRunner(address=address)
    return RayTaskRunner(init_kwargs={"num_cpus": workers, "include_dashboard": False,
                                      "_node_ip_address": "127.0.0.1"})


@dataclass(frozen=True)
class Kind:
    """A task runner kind: how to build it, whether its tasks run in other processes, and
    the module (and extra) it needs beyond Prefect."""

    build: Callable[[str | None, int], TaskRunner]
    distributed: bool = False
    module: str | None = None
    extra: str | None = None


# name -> kind; a new task runner is a builder plus an entry here
RUNNERS: dict[str, Kind] = {
    "default": Kind(_default),
    "dask": Kind(_dask, distributed=True, module="prefect_dask", extra="dask"),
    "ray": Kind(_ray, distributed=True, module="prefect_ray", extra="ray"),
}


@contextmanager
def workers_report_here(runner: RunnerConfig, workers: int):
    """While a flow that fans out runs (`runner.fans_out(workers)`) with no Prefect server
    configured: this process's temporary server is started first and its address is given
    to the processes started meanwhile (worker processes of a pool, a local Dask or Ray
    cluster). Without it each worker process, finding no server configured, started a
    temporary server of its own to report its task runs to (one more process and about ten
    seconds on two cores per worker). The address is taken back afterwards."""
    if not runner.fans_out(workers):  # no worker processes (and no Prefect flow run unless wanted)
        yield
        return
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # the one Prefect's client starts in this process (tied, flows/common.py)
    server.start()
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before


def cancel(futures) -> None:
    """Tasks still queued after an error need not run: cancels what a runner's futures can
    cancel (a pool's or Dask's future, a local flow run's (flows/engine.py); a Ray object ref
    cannot be, it runs out)."""
    for f in futures:
        stop = getattr(getattr(f, "wrapped_future", f), "cancel", None)
        if stop is not None:
            stop()


def make_task_runner(kind: str, address: str | None, workers: int) -> TaskRunner:
    """The task runner `kind` (a RUNNERS key) for `workers` workers, connected to `address`
    when given; a one-line ValueError for an unknown kind, bad workers or a missing extra."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    k = RunnerConfig(kind, address).kind()
    if k.module:
        try:
            importlib.import_module(k.module)
        except ImportError:
            raise ValueError(f"--task-runner {kind} needs {k.module.replace('_', '-')}: "
                             f"pip install 'forgeplay[{k.extra}]'") from None
    return k.build(address, workers)
