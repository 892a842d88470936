#!/usr/bin/env bash
# Create (or refresh) the verl virtual environment in which the `verl`-marked tests check a
# `forgeplay export verl --tool-agent` folder with verl's own loaders (tests/train/verl_side.py).
#
#   bash .ci/verl_env.sh            # -> <repo>/.venv-verl
#   bash .ci/verl_env.sh /some/dir  # -> /some/dir
#
# What it installs, and why:
#   - torch==2.13.0 (+cpu, pip takes it from the wheel on this machine's disk; never a CUDA build);
#   - verl==0.9.1 with --no-deps: its own requirements (ray[default], wandb, tensorboard, peft,
#     torchdata, ...) serve training and would take minutes; the tests only use verl's tool
#     loader, its tool agent's tool call, its RL dataset and its custom reward loader;
#   - exactly the packages those import: ray (plain), tensordict (verl's pin), omegaconf and
#     hydra-core, pydantic, transformers (verl's pin), datasets, pillow, codetiming, cachetools,
#     fastapi and uvicorn (imported by the agent loop module), packaging; torchdata and peft
#     (imported by verl's ray_trainer, whose compute_advantage applies forgeplay's estimators);
#   - what the exported tool adapter imports besides verl (bm25s, jsonschema, fastjsonschema;
#     train/verl_bundle.py WORKER_DEPS), as a user's worker would install them.
# forgeplay itself is NOT installed here: the export has to work without it.
# Re-running it on a complete environment only checks the imports (seconds).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-verl}"
VERL_VERSION="${VERL_VERSION:-0.9.1}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
DEPS=(ray "tensordict>=0.8,<=0.10.0,!=0.9.0" omegaconf hydra-core pydantic "transformers>=5.5.3,<5.11,!=5.6.0"
      datasets pillow codetiming cachetools fastapi uvicorn packaging torchdata peft bm25s jsonschema fastjsonschema)

start=$(date +%s)
LABEL=verl_env
# pip's notes about verl's requirements left out on purpose (see above)
PIPQ_QUIET="^verl [0-9.]* requires\|dependency resolver does not currently take into account"
source "$ROOT/.ci/venv_common.sh"  # the venv, PIP and pipq

check() {
  "$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import bm25s, fastjsonschema, jsonschema  # noqa: F401,E401  (the exported tool adapter's imports)
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop  # noqa: F401
from verl.tools.tool_registry import initialize_tools_from_config  # noqa: F401
from verl.trainer.ppo.reward import get_custom_reward_fn  # noqa: F401
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: F401
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: F401
print("[verl_env] verl", md.version("verl"), "torch", md.version("torch"), "transformers", md.version("transformers"))
PY
}

if ! check >/dev/null 2>&1; then
  echo "[verl_env] installing torch==$TORCH_VERSION + verl==$VERL_VERSION (--no-deps) + what its loaders import"
  pipq install -q "torch==$TORCH_VERSION"
  pipq install -q --no-deps "verl==$VERL_VERSION"
  echo "torch==$TORCH_VERSION" > "$VENV/torch-pin.txt"
  pipq install -q -c "$VENV/torch-pin.txt" "${DEPS[@]}"
fi
check
echo "[verl_env] ready: $VENV ($(( $(date +%s) - start )) s)"
