#!/usr/bin/env bash
# Builds flameprof (with its C sampler) and runs the tests that do not need PyTorch under every
# CPython 3.10-3.13 found in ~/.pyenv/versions, each in its own venv under .venvs/ (kept between
# runs, so a second run only rebuilds the extension). Fails when a version is missing, its C
# sampler does not build or import, or a test fails.
#   bash scripts/test_pythons.sh            all four versions
#   PYTHONS="3.12 3.13" bash scripts/test_pythons.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONS=${PYTHONS:-"3.10 3.11 3.12 3.13"}
PYENV_ROOT=${PYENV_ROOT:-$HOME/.pyenv}

# Tests that need torch run only in the main .venv (scripts/test.sh): a test module whose import
# fails for want of torch is left out here, and scripts/pytest_no_torch.py deselects single tests.
NON_TORCH_TESTS='
import importlib, pathlib, sys
sys.path.insert(0, "tests")
for path in sorted(pathlib.Path("tests").glob("test_*.py")):
    try:
        importlib.import_module(path.stem)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "torch":
            continue
    except Exception:
        pass  # pytest reports it
    print(path)
'

status=0
for minor in $PYTHONS; do
  # the newest installed patch release of this minor version
  interp=$(ls -d "$PYENV_ROOT"/versions/"$minor".*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$interp" ]; then
    echo "test_pythons: CPython $minor not found in $PYENV_ROOT/versions" >&2
    status=1
    continue
  fi
  venv=.venvs/py$minor
  echo "== CPython $minor ($interp)"
  if [ ! -x "$venv/bin/python" ] || [ ! -x "$venv/bin/py-spy" ] \
     || ! "$venv/bin/python" -c "import hypothesis, numpy, orjson, psutil, pytest, setuptools, websocket" 2>/dev/null; then
    rm -rf "$venv"
    "$interp" -m venv "$venv"
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "setuptools>=64" wheel numpy "orjson>=3.9" psutil py-spy \
         "pytest>=7" "hypothesis>=6.100" "websocket-client>=1.6" \
         > "$venv/setup.log" 2>&1; then
      cat "$venv/setup.log" >&2
      rm -rf "$venv"
      status=1
      continue
    fi
  fi
  # Rebuild only when a C source changed: the build rewrites flameprof/_native.<abi>.so in
  # place, which would pull it from under any process of this tree that has it loaded.
  so=flameprof/_native$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  if [ ! -f "$so" ] || [ -n "$(find native setup.py -newer "$so" -print -quit)" ] \
     || ! (cd "$venv" && bin/python -c "import flameprof" 2>/dev/null); then
    # The extensions are optional (a failed build is only a warning): remove the old ones first,
    # so a failed build shows as a failed import below instead of leaving a stale library.
    # Removing (not overwriting) also leaves any process that has them loaded unharmed.
    for ext in _native _folded _inject _perf; do rm -f "flameprof/$ext${so#flameprof/_native}"; done
    # no build isolation: the venv already has setuptools, and nothing needs fetching per run
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . \
         > "$venv/install.log" 2>&1; then
      cat "$venv/install.log" >&2
      status=1
      continue
    fi
  fi
  if ! (cd "$venv" && bin/python -c "import flameprof._native, flameprof._folded, flameprof._inject, flameprof._perf"); then
    echo "test_pythons: CPython $minor: a C extension of flameprof did not build or import" >&2
    cat "$venv/install.log" >&2
    status=1
    continue
  fi
  mapfile -t tests < <("$venv/bin/python" -c "$NON_TORCH_TESTS")
  if ! PYTHONPATH=scripts "$venv/bin/python" -m pytest -q -p no:cacheprovider -p pytest_no_torch "${tests[@]}"; then
    status=1
  fi
done
exit $status
