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
