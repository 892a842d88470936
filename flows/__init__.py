"""Prefect flows and the `forgeplay` command line.

Orchestration only: every flow is a thin `@flow` over plain functions from the other
packages, and every CLI command is a thin wrapper over a flow or a library call. No algorithm
lives here. Run `forgeplay --help` for the commands. Whether a flow runs as a Prefect flow
run or in the process without Prefect is flows/engine.py's.
"""

import os as _os

# Prefect reads its settings when it is first imported, so the defaults for its runs (offline,
# on a temporary local server when none is configured) are set here, before prefect is imported.
for _k, _v in {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # no network
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",  # first start is slow on 2 busy cores
    "PREFECT_LOGGING_LEVEL": "WARNING",
}.items():
    _os.environ.setdefault(_k, _v)
