#!/usr/bin/env bash
# Soak a 2-worker `distrib launch --elastic` job: a random task (the chief too) SIGKILLed every 30-90 s.
#
#   SOAK_MINUTES=60 SOAK_SEED=0 SOAK_OUT=/tmp/soak scripts/soak.sh
#
# Runs the same job uninterrupted first, then the killed one; prints the kills survived, whether
# every task's final weights are bit-identical to the uninterrupted run's, and the fd/RSS slopes
# (least squares, per hour) of the launcher and the tasks from SOAK_OUT/resources.csv.
# The job runs from a copy of src/ and scripts/ taken at the start (SOAK_OUT/code): a replacement
# imports distrib again, and elastic catch-up names collectives by their call sites, so editing the
# tree during a soak would fail it. Settings and the CSV's columns: scripts/soak.py, docs/elastic.md.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-$PWD/.venv/bin/python}"
export SOAK_OUT="${SOAK_OUT:-$(mktemp -d /tmp/distrib-soak-XXXXXX)}"
mkdir -p "$SOAK_OUT/code"
cp -r src scripts "$SOAK_OUT/code/"
cd "$SOAK_OUT/code"
exec env PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$python" scripts/soak.py
