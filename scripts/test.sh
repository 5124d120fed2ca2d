#!/usr/bin/env bash
# The test suite: unit tests, then real multi-process tests on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/env.sh
# Tests marked slow are left out unless asked for: ./scripts/test.sh -m slow
exec .venv/bin/python -m pytest tests -q -p no:cacheprovider -m "not slow" "$@"
