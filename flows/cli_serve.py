"""`forgeplay serve`: the flows of a schedules file (flows/schedules.py) as Prefect
deployments with their cron or interval schedules, served by Prefect's Runner (what
`Flow.serve` runs) until Ctrl-C or SIGTERM (which pause the schedules). Needs a Prefect
server:

    prefect server start
    PREFECT_API_URL=http://127.0.0.1:4200/api forgeplay serve --config schedules.yaml
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from storage.configcli import DataRoot, fail

SERVER_HINT = "run `prefect server start` and set PREFECT_API_URL=http://127.0.0.1:4200/api"


def server_error() -> str | None:
    """Why the Prefect API cannot take schedules (none set, or not answering), else None."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        return f"schedules need a Prefect server: {SERVER_HINT}"
    with get_client(sync_client=True) as client:
        err = client.api_healthcheck()
    return f"the Prefect server at {url} does not answer ({type(err).__name__}: {err}); {SERVER_HINT}" if err else None


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(config: Path = typer.Option(..., "--config", help="The schedules file (YAML; see README, Schedules)."),
              limit: Optional[int] = typer.Option(None, help="Flow runs at once at most (default: Prefect's)."),
              log_level: str = typer.Option("INFO", help="Level of the log lines flow runs send to the Prefect "
                                                         "server (PREFECT_LOGGING_LEVEL)."),
              data_root: DataRoot = None) -> None:
        """Serve flows on schedules: each entry of --config (flow, name, cron or interval,
        parameters named as the command's options) becomes a Prefect deployment; runs, their
        logs and artifacts show in the Prefect UI. A malformed file is one error line naming
        the field; Ctrl-C or SIGTERM stops serving and pauses the schedules."""
        os.environ["PREFECT_LOGGING_LEVEL"] = log_level.upper()  # read when prefect is first imported
        from flows.schedules import ScheduleError, load
        from storage import resolve_root

        try:
            schedules = load(config)
        except ScheduleError as e:
            fail(str(e), "serve failed")
        problem = server_error()
        if problem:
            fail(problem, "serve failed")
        serve_schedules(schedules, resolve_root(data_root).absolute(), limit)


def serve_schedules(schedules: list, root: Path, limit: int | None = None) -> None:
    """Prefect's serve for several flows, as `Flow.serve` does for one: a Runner holding the
    flow objects themselves (a run starts the flow in a subprocess as configured, e.g. the
    validate flow's task runner) until Ctrl-C or SIGTERM, which pause the schedules."""
    import asyncio

    from prefect.runner import Runner

    class StopOnTerm(Runner):
        def handle_sigterm(self, *args) -> None:
            """SIGTERM stops as Ctrl-C does, through the runner's own `astop` run on its event
            loop: it cancels the runs and the polling loops, and leaving `start` pauses the
            schedules. (Prefect's handler exits without awaiting the runner's stop; a SIGINT
            raised here, which asyncio turns into cancelling the main task, was now and then
            lost inside the runner's task groups and serve went on.) A second SIGTERM ends
            the process at once."""
            if self.stopping:
                raise KeyboardInterrupt
            self.stopping = True
            loop = asyncio.get_running_loop()
            loop.call_soon_threadsafe(lambda: stops.append(loop.create_task(self.astop())))

    stops: list = []  # the stop task, kept referenced until it ends
    runner = StopOnTerm(name="forgeplay-serve", pause_on_shutdown=True, **({"limit": limit} if limit else {}))
    for s in schedules:
        runner.add_flow(**s.options(root))
    console = Console()
    for s in schedules:
        when = f"cron {s.cron}" if s.cron else f"every {s.interval:g} s"
        console.print(f"serving {s.flow}/{s.name} ({when}{', ' + s.timezone if s.timezone else ''})", soft_wrap=True)
    try:
        asyncio.run(runner.start())
    except KeyboardInterrupt:
        pass
    console.print("stopped; the schedules are paused until the next forgeplay serve")
