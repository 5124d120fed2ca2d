#!/usr/bin/env bash
# Re-take the pictures of the documentation site in docs/images/ with a real headless browser: the
# front page, one API reference page, and the Callbacks page scrolled to BackupAndRestore and to
# ModelCheckpoint (scripts/docs_screenshots.py drives the browser; it fails if an entry's signature
# or parameter table is wider than its box).
#   CHROMIUM  the browser to use (default: chromium; Debian: apt-get install chromium). Where no
#             distribution package is at hand, the npm package @sparticuz/chromium bundles a
#             headless Chromium for x86-64 Linux; outside this repository:
#               mkdir /tmp/chrome && cd /tmp/chrome && npm init -y && npm install @sparticuz/chromium
#               node -e "require('@sparticuz/chromium').executablePath().then(console.log)"
#             prints the path it unpacked the browser to (/tmp/chromium): CHROMIUM=/tmp/chromium.
#   MKDOCS, PYTHON  the mkdocs command and the Python to use (default: scripts/env.sh's .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MKDOCS:-}" ]; then bash scripts/env.sh; MKDOCS=.venv/bin/mkdocs; fi   # or MKDOCS="python -m mkdocs"
site=$(mktemp -d)/site
NO_MKDOCS_2_WARNING=1 $MKDOCS build --strict --quiet --site-dir "$site"
"${PYTHON:-.venv/bin/python}" scripts/docs_screenshots.py "${CHROMIUM:-chromium}" "$site" docs/images
