# Sourced by .ci/vllm_env.sh and .ci/verl_env.sh: creates the virtual environment $VENV if it is
# missing (with $PYTHON, default python3) and defines PIP (its pip) and pipq (pip without the
# notes about this machine's local index folders, nor the lines matching $PIPQ_QUIET, a grep
# pattern the caller may set). Needs LABEL (the log prefix) and VENV.
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[$LABEL] creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
pipq() {
  local rc=0
  "${PIP[@]}" "$@" 2>&1 | { grep -v -e "is ignored: it is neither a file nor a directory" \
    -e "${PIPQ_QUIET:-is ignored: it is neither a file nor a directory}" || true; } || rc=$?
  return $rc
}
