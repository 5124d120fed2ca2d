#!/usr/bin/env bash
# The checks to run on a lent GPU host, as one command (see docs/performance.md, "On a GPU host"):
#
#   bash scripts/gpu_check.sh [cuda|speed|unit|bench|dist ...]    # default: all five, in that order
#
# 1. cuda:  the tests marked `cuda`, with the GPU visible (DISTRIB_TEST_GPU=1);
# 2. speed: bench/bench_gpu_fit.py: fit (host Dataset, device Dataset, jit_compile, bf16) against
#           the plain loop over GPU-resident data, on the TF tutorials' MNIST CNN and on ResNet-18;
# 3. unit:  the unit tests as CI runs them (the suite hides the GPU: tests/conftest.py);
# 4. bench: the single-GPU systems of bench/run.py (plain loop vs distrib fit), printed only;
# 5. dist:  the default multi-process suite as CI runs it (GPU_CHECK_DIST_TESTS: a subset).
#
# The host's own python3 (with a CUDA build of PyTorch) runs everything; packages
# it lacks travel as wheels in .whl/ (installed into /tmp/site), fetched here with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux_2_28_x86_64 -d .whl keras==3.15.1 namex==0.1.0 optree==0.20.0
# (the host had no Keras on 2026-11-27). Logs and JUnit
# files go to $OUT (default /tmp/gpu-check). Each phase has its own time limit,
# so one slow phase cannot take the others' time.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-check}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site"
fi
export PYTHONPATH="$PWD/src:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 FAILURE_LOG="$OUT/failures.log"
workers="${GPU_CHECK_PROCESSES:-12}"
nvidia-smi -L
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(cuda speed unit bench dist)
for phase in "${phases[@]}"; do
  start=$(date +%s)
  case "$phase" in
    cuda) DISTRIB_TEST_GPU=1 timeout -k 5 "${GPU_CHECK_CUDA_S:-200}" python3 -m pytest tests -q -p no:cacheprovider -m cuda \
            -n 4 --timeout 300 -rfEs -p failure_log --junitxml="$OUT/cuda.xml" >"$OUT/cuda.log" 2>&1 ;;
    speed) { timeout -k 5 "${GPU_CHECK_SPEED_S:-150}" python3 bench/bench_gpu_fit.py --model cnn --rounds 2 \
               --only fit_host,fit_device,fit_host_jit,loop_bf16,fit_host_bf16
             timeout -k 5 "${GPU_CHECK_SPEED_S:-150}" python3 bench/bench_gpu_fit.py --model resnet18 --rounds 2
           } >"$OUT/speed.log" 2>&1 ;;
    unit) timeout -k 5 "${GPU_CHECK_UNIT_S:-150}" python3 -m pytest tests/unit -q -p no:cacheprovider -m "not slow" \
            -n "$workers" --timeout 60 -rfEs -p failure_log --junitxml="$OUT/unit.xml" >"$OUT/unit.log" 2>&1 ;;
    bench) timeout -k 5 "${GPU_CHECK_BENCH_S:-100}" python3 bench/run.py --only torch_loop_cuda,distrib_fit_cuda \
             --reps 3 --no-write >"$OUT/bench.log" 2>&1 ;;
    dist) timeout -k 5 "${GPU_CHECK_DIST_S:-240}" python3 -m pytest ${GPU_CHECK_DIST_TESTS:-tests/distributed} -q -p no:cacheprovider -m "not slow" \
            -n "$workers" --dist worksteal --timeout 180 -rfE -p failure_log --junitxml="$OUT/dist.xml" >"$OUT/dist.log" 2>&1 ;;
    *) echo "gpu_check: unknown phase '$phase' (cuda, speed, unit, bench or dist)"; exit 2 ;;
  esac
  rc=$?
  echo "== $phase: exit $rc after $(( $(date +%s) - start )) s; last lines of $OUT/$phase.log:"
  tail -n 25 "$OUT/$phase.log"
done
