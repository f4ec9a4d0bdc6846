#!/usr/bin/env bash
# Creates .venv with flameprof (editable, C extension built) and everything its tests and demo need.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch is pinned: this exact CPU build is what the machines here provide.
.venv/bin/pip install -q -e ".[test]" "torch==2.13.0" py-spy pyinstrument psutil numpy pytest
.venv/bin/python -c "import flameprof, torch, numpy, psutil"
# The browser tests (tests/test_browser.py) open flame graphs in Debian's Chromium: install it when missing.
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
