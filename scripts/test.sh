#!/usr/bin/env bash
# Sets up .venv (see setup.sh) with what the tests need, lints, and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The test extra: pytest and its helpers, ruff and mypy, the frameworks the integration tests drive
# (Lightning, Hugging Face, a Jupyter kernel), and the overhead benchmark's comparison
# (pyinstrument). torch stays pinned in the same command, so no framework can ask pip for
# another build.
.venv/bin/pip install -q -e ".[test]" "torch==2.13.0"
# The browser tests (tests/test_browser.py) open flame graphs in Debian's Chromium, and the live
# view's test (tests/test_top.py) drives a real terminal in tmux: install them when missing.
missing=""
[ -x /usr/bin/chromium ] || missing="$missing chromium"
command -v tmux >/dev/null || missing="$missing tmux"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && apt-get install -y -qq $missing >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# the type checker: its settings (strict on the model and the analyses) are in pyproject.toml
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
