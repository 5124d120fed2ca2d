#!/usr/bin/env bash
# Re-take the pictures of the documentation site in docs/images/ with a real headless
# browser (Debian: apt-get install chromium): the front page, one API reference page, and the
# Callbacks page at BackupAndRestore and at ModelCheckpoint (the page scrolled to each entry).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${MKDOCS:-}" ]; then bash scripts/env.sh; MKDOCS=.venv/bin/mkdocs; fi   # or MKDOCS="python -m mkdocs"
site=$(mktemp -d)/site
NO_MKDOCS_2_WARNING=1 $MKDOCS build --strict --quiet --site-dir "$site"
shoot() {  # shoot OUTPUT.png PAGE
  chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
    --user-data-dir="$(mktemp -d)" --window-size=1280,900 --virtual-time-budget=10000 \
    --screenshot="$1" "file://$site/$2"
}
shoot docs/images/site-home.png index.html
shoot docs/images/site-api-data.png api/data/index.html
# An entry far down a page: headless Chromium draws a page scrolled to a #fragment blank, so the
# page is drawn whole, as tall as needed, and the picture cut out at the entry's place, which the
# page itself reports (a copy of it with a script that writes each entry's offset into the DOM).
entries=(BackupAndRestore ModelCheckpoint)
callbacks="$site/api/callbacks"
"${PYTHON:-.venv/bin/python}" - "$callbacks/index.html" "$callbacks/probe.html" "${entries[@]}" <<'PY'
import sys
page, probe, names = sys.argv[1], sys.argv[2], sys.argv[3:]
script = "".join(
    f"document.body.setAttribute('data-{n.lower()}', Math.round(document.getElementById("
    f"'distrib.callbacks.{n}').getBoundingClientRect().top + window.scrollY));" for n in names)
html = open(page, encoding="utf-8").read()
open(probe, "w", encoding="utf-8").write(
    html.replace("</body>", f"<script>window.addEventListener('load', () => {{{script}}});</script></body>"))
PY
offsets=$(chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --no-first-run --user-data-dir="$(mktemp -d)" --window-size=1280,900 \
  --virtual-time-budget=10000 --dump-dom "file://$callbacks/probe.html" 2>/dev/null | grep -o 'data-[a-z]*="[0-9]*"')
tall=$(mktemp -d)/callbacks.png
height=$(( $(echo "$offsets" | grep -o '[0-9]*' | sort -n | tail -1) + 1000 ))
chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
  --disable-sync --no-first-run --hide-scrollbars --user-data-dir="$(mktemp -d)" --window-size=1280,$height \
  --virtual-time-budget=10000 --screenshot="$tall" "file://$callbacks/index.html"
for name in "${entries[@]}"; do
  lower=$(echo "$name" | tr 'A-Z' 'a-z')
  top=$(echo "$offsets" | sed -n "s/data-$lower=\"\([0-9]*\)\"/\1/p")
  out=docs/images/site-api-callbacks-$(echo "$name" | sed 's/\([a-z]\)\([A-Z]\)/\1-\2/g' | tr 'A-Z' 'a-z').png
  "${PYTHON:-.venv/bin/python}" -c "import sys; from PIL import Image; top = max(int(sys.argv[2]) - 40, 0); \
Image.open(sys.argv[1]).crop((0, top, 1280, top + 900)).save(sys.argv[3])" "$tall" "$top" "$out"
done
echo "pictures: docs/images/site-home.png docs/images/site-api-data.png" \
  "docs/images/site-api-callbacks-backup-and-restore.png docs/images/site-api-callbacks-model-checkpoint.png"
