#!/usr/bin/env bash
# Soak a 2-worker `distrib launch --elastic` job: a random task (the chief too) SIGKILLed every 30-90 s.
#
#   SOAK_MINUTES=60 SOAK_SEED=0 SOAK_OUT=/tmp/soak scripts/soak.sh
#
# Runs the same job uninterrupted first, then the killed one; prints the kills survived, whether
# every task's final weights are bit-identical to the uninterrupted run's, and the fd/RSS slopes
# (least squares, per hour) of the launcher and the tasks from SOAK_OUT/resources.csv.
# Other settings and the CSV's columns: scripts/soak.py and docs/elastic.md ("Soak").
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
exec env PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" "$python" scripts/soak.py
