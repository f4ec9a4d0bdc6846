#!/usr/bin/env bash
# Renders the README's pictures from the demo: docs/images/flamegraph.svg (the demo's flame graph)
# and docs/images/report.png (its HTML report, screenshotted by Debian's Chromium).
#   bash scripts/readme_images.sh        (after scripts/setup.sh; needs chromium for the PNG)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
.venv/bin/flameprof demo -o "$out/demo" >/dev/null 2>&1
.venv/bin/flameprof render "$out/demo/profile.flameprof" -o "$out/report.svg" --format html \
  --title "flameprof demo: a small CNN training loop" 2>/dev/null
mkdir -p docs/images
cp "$out/report.svg" docs/images/flamegraph.svg
chromium --headless --no-sandbox --disable-gpu --disable-background-networking --hide-scrollbars \
  --window-size=1200,1100 --screenshot="$PWD/docs/images/report.png" "file://$out/report.html" \
  >/dev/null 2>&1
ls -l docs/images
