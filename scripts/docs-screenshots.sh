#!/usr/bin/env bash
# Re-take the pictures of the documentation site in docs/images/ with a real headless
# browser (Debian: apt-get install chromium): the front page and one API reference page.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MKDOCS:-}" ]; then bash scripts/env.sh; MKDOCS=.venv/bin/mkdocs; fi   # or MKDOCS="python -m mkdocs"
site=$(mktemp -d)/site
NO_MKDOCS_2_WARNING=1 $MKDOCS build --strict --quiet --site-dir "$site"
shoot() {  # shoot OUTPUT.png PAGE
  chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
    --user-data-dir="$(mktemp -d)" --window-size=1280,900 --screenshot="$1" "file://$site/$2"
}
shoot docs/images/site-home.png index.html
shoot docs/images/site-api-data.png api/data/index.html
echo "pictures: docs/images/site-home.png docs/images/site-api-data.png"
