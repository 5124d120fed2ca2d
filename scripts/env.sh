#!/usr/bin/env bash
# Create (or reuse) .venv with distrib and its test, bench and docs tools installed.
# Every install goes through constraints.txt, which pins torch; edit it to use
# another build. Re-running is cheap: nothing is reinstalled unless
# pyproject.toml or constraints.txt changed. Each step says what it does and how
# long it took; pip's own output is kept in .venv/pip.log.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { printf 'scripts/env.sh: %s\n' "$*"; }
began=$SECONDS
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1) ($PY)"
  "$PY" -m venv .venv
fi
stamp=.venv/.distrib-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  say ".venv is up to date (pyproject.toml and constraints.txt unchanged since its install)"
  exit 0
fi
pin=$(grep -E '^torch' constraints.txt | head -1)
say "installing distrib with its test, bench and docs tools into .venv, through constraints.txt ($pin):"
say "1 to 5 minutes the first time; pip's output goes to .venv/pip.log"
step=$SECONDS
# A line every 30 s while pip works, so a long install is never silent.
( while sleep 30 >/dev/null 2>&1 </dev/null; do say "... still installing ($((SECONDS - step)) s)"; done ) &
beat=$!
trap 'kill "$beat" 2>/dev/null || true' EXIT
{
  .venv/bin/python -m pip install --upgrade pip || true
  .venv/bin/python -m pip install -c constraints.txt -e ".[test,bench,docs]"
} > .venv/pip.log 2>&1 || {
  kill "$beat" 2>/dev/null || true
  say "pip failed after $((SECONDS - step)) s; the last lines of .venv/pip.log:"
  grep -v "is ignored" .venv/pip.log | tail -15
  exit 1
}
kill "$beat" 2>/dev/null || true
echo "$want" > "$stamp"
versions=$(.venv/bin/python -c "import importlib.metadata as m; print('distrib', m.version('distrib') + ',', 'torch', m.version('torch'))")
say "installed in $((SECONDS - step)) s ($versions); $((SECONDS - began)) s in all"
