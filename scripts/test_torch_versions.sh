#!/usr/bin/env bash
# Run the unit tests and the README's example against the oldest and the newest torch distrib supports.
#
#   scripts/test_torch_versions.sh                 # the floor in pyproject.toml and the newest torch release
#   scripts/test_torch_versions.sh 2.3.1 2.14.1    # these releases
#
# Each version gets its own virtual environment, .venvs/torch-VERSION (kept, so a rerun only tests),
# with distrib and its test extra installed through a constraints file that pins torch==VERSION
# (constraints.txt pins the one build the project's own .venv uses). A release is checked with this
# script first; docs/compatibility.md records the results. PYTEST_WORKERS=1 runs the tests in one
# pytest process (default 2); extra pytest arguments: PYTEST_ARGS="-x"; other tests than tests/unit:
# PYTEST_PATHS="tests/unit/test_losses.py tests/unit/test_loss_fast_paths.py". PIP_FIND_LINKS=DIR
# (pip's own variable) installs a wheel downloaded before.
# Note: PyPI's Linux torch wheels bundle CUDA (several GB per environment); they run on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'jobs -p | xargs -r kill 2>/dev/null || true' EXIT
PY=${PYTHON:-python3}
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  floor=$(sed -n 's/^ *"torch>=\([0-9.]*\)".*/\1/p' pyproject.toml)
  oldest=$("$PY" -m pip index versions torch 2>/dev/null | sed -n 's/^Available versions: //p' | tr ',' '\n' \
           | tr -d ' ' | grep -E "^${floor//./\\.}(\.|$)" | head -1)
  newest=$("$PY" -m pip index versions torch 2>/dev/null | sed -n 's/^Available versions: //p' | cut -d, -f1)
  versions=("${oldest:?no torch release matches the floor $floor}" "${newest:?pip found no torch release}")
fi
example=$(mktemp -d)/train.py
# The README's first example: Model.fit on 2 workers.
awk '/^```python$/ {on=1; next} /^```$/ {if (on) exit} on' README.md > "$example"
summary=()
status=0
for version in "${versions[@]}"; do
  venv=.venvs/torch-$version
  start=$SECONDS
  echo "== torch $version: $venv"
  if [ ! -x "$venv/bin/python" ]; then
    "$PY" -m venv "$venv"
  fi
  pins=$(mktemp)
  echo "torch==$version" > "$pins"
  echo "   installing distrib[test] with torch==$version (minutes the first time: the wheel is large)"
  step=$SECONDS
  # A line every 30 s while pip works, so a long install is never silent.
  ( while sleep 30 >/dev/null 2>&1 </dev/null; do
      echo "   ... still installing ($((SECONDS - step)) s; $(tail -1 "$venv/install.log" 2>/dev/null | cut -c1-60))"
    done ) &
  beat=$!
  if ! "$venv/bin/python" -m pip install -c "$pins" -e ".[test]" > "$venv/install.log" 2>&1; then
    kill "$beat" 2>/dev/null || true
    grep -v "is ignored" "$venv/install.log" | tail -5
    summary+=("torch $version: could not be installed (see $venv/install.log)")
    status=1
    continue
  fi
  kill "$beat" 2>/dev/null || true
  echo "   installed in $((SECONDS - step)) s"
  got=$("$venv/bin/python" -c "import torch; print(torch.__version__)")
  echo "   torch $got installed; running ${PYTEST_PATHS:-tests/unit} in ${PYTEST_WORKERS:-2} pytest processes"
  set +e
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pytest ${PYTEST_PATHS:-tests/unit} -q -p no:cacheprovider -n "${PYTEST_WORKERS:-2}" ${PYTEST_ARGS:-} \
    > "$venv/unit.log" 2>&1
  unit=$?
  "$venv/bin/distrib" launch --workers 2 "$example" > "$venv/example.log" 2>&1
  ex=$?
  set -e
  tail -1 "$venv/unit.log"
  line="torch $got: unit tests exit $unit ($(tail -1 "$venv/unit.log" | tr -d '='  | xargs)); README example on 2 workers exit $ex; $((SECONDS - start)) s"
  echo "   $line"
  summary+=("$line")
  if [ $unit -ne 0 ] || [ $ex -ne 0 ]; then status=1; fi
done
echo
echo "summary (logs: .venvs/torch-*/unit.log, example.log):"
printf '  %s\n' "${summary[@]}"
exit $status
