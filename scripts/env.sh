#!/usr/bin/env bash
# Create (or reuse) .venv with distrib and its test, bench and docs tools installed.
# Every install goes through constraints.txt, which pins torch; edit it to use
# another build. Re-running is cheap: nothing is reinstalled unless
# pyproject.toml or constraints.txt changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.distrib-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[test,bench,docs]"
  echo "$want" > "$stamp"
fi
