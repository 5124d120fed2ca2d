#!/usr/bin/env bash
# The main demo: TensorFlow's multi-worker custom training loop tutorial on 2 worker processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/env.sh
# A fresh checkpoint directory, so the demo trains from scratch every time it is run.
export MNIST_CKPT_DIR=${MNIST_CKPT_DIR:-$(mktemp -d)/ckpt}
echo "checkpoints: $MNIST_CKPT_DIR"
exec .venv/bin/distrib launch --workers 2 examples/mnist_ctl.py "$@"
