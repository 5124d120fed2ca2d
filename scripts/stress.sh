#!/usr/bin/env bash
# Run the multi-process tests RUNS times in a row beside two CPU burners (a busy machine).
#
#   scripts/stress.sh                     # 10 runs of tests/distributed -m "not slow"
#   scripts/stress.sh 20 tests/distributed/test_agreed_decisions.py -m "not slow"
#
# Stops at the first failing run and says which; prints "N/N runs passed" otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
shift || true
if [ "$#" -eq 0 ]; then set -- tests/distributed -m "not slow"; fi
python="${PYTHON:-.venv/bin/python}"
burners=()
stop_burners() { for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done; }
trap stop_burners EXIT
for _ in 1 2; do "$python" -c 'while 1: pass' & burners+=("$!"); done
for ((i = 1; i <= runs; i++)); do
    if ! "$python" -m pytest -q -p no:cacheprovider "$@"; then
        echo "stress: run $i of $runs FAILED (two CPU burners beside it)"
        exit 1
    fi
    echo "stress: run $i of $runs passed"
done
echo "stress: $runs/$runs runs passed beside two CPU burners"
