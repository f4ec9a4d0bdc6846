#!/usr/bin/env bash
# Sets up .venv (see setup.sh) and profiles the built-in example; prints where the flame graph is.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/flameprof demo "$@"
