#!/usr/bin/env bash
# The test suite: unit tests, then real multi-process tests on 127.0.0.1.
#
# Tests run in 2 pytest processes (pytest-xdist): most multi-process tests spend
# their time waiting on start-up, rendezvous and timeouts, so two at once keep
# 2 cores busy. DISTRIB_TEST_PROCESSES=1 runs them one at a time; extra
# arguments go to pytest (./scripts/test.sh -m slow runs the long tests). The order is
# shuffled by pytest-randomly, a new seed each run (docs/layout.md: replaying one).
# The harness (distrib.testing) forks the tasks it starts from one preloaded
# server per pytest process, so PyTorch is imported once per process, not per
# task; DISTRIB_LAUNCH_FORK=0 makes every task a new process instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/env.sh
# Bytecode for distrib's own modules, written once: the suite starts hundreds of
# worker processes, and where PYTHONDONTWRITEBYTECODE is set (as in many
# containers) each of them would compile every module it imports again.
.venv/bin/python -m compileall -q -j 0 src/distrib examples >/dev/null
processes="${DISTRIB_TEST_PROCESSES:-2}"
parallel=()
if [ "$processes" != "1" ]; then parallel=(-n "$processes" --dist worksteal); fi
say() { printf 'scripts/test.sh: %s\n' "$*"; }
began=$SECONDS
say "running the tests (not those marked slow, unless asked) in $processes pytest process(es), in a"
say "shuffled order (--randomly-seed=N replays one, -p no:randomly keeps file order); the count and"
say "the expected time come before the first dot; a dot per passed test, the percentage done at the"
say "end of each row, the failures' details at the end"
status=0
.venv/bin/python -m pytest tests -q -p no:cacheprovider -m "not slow" "${parallel[@]}" "$@" || status=$?
say "the tests took $(( (SECONDS - began) / 60 )) min $(( (SECONDS - began) % 60 )) s (exit status $status)"
if [ "$status" -ne 0 ]; then exit "$status"; fi
# Where torch sees a GPU (and no arguments were given), the tests marked `cuda` run too, with the GPU visible
# (the run above hides it: its multi-process tests compare CPU runs).
if [ $# -eq 0 ] && .venv/bin/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  DISTRIB_TEST_GPU=1 .venv/bin/python -m pytest tests -q -p no:cacheprovider -m "cuda and not slow" "$@"
fi
