#!/usr/bin/env bash
# Creates .venv with flameprof (editable, C extension built) and what the demo needs: torch, numpy,
# psutil and py-spy. scripts/test.sh adds what only the tests and benchmarks need.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch is pinned: this exact CPU build is what the machines here provide.
.venv/bin/pip install -q -e "." "torch==2.13.0" py-spy psutil numpy
.venv/bin/python -c "import flameprof, flameprof._native, torch, numpy, psutil"
