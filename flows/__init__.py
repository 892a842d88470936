"""Prefect flows and the `forgeplay` command line.

Orchestration only: every flow is a thin `@flow` over plain functions from the other
packages, and every CLI command is a thin wrapper over a flow or a library call. No algorithm
lives here. Run `forgeplay --help` for the commands.
"""
