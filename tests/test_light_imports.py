"""flameprof runs inside the profiled program: what it imports there before the target starts must stay
light."""

import subprocess
import sys

from conftest import REPO

HEAVY = ("numpy", "torch", "psutil", "flameprof.model.profile", "flameprof.model.storage")


def imported_after(code: str) -> set:
    probe = code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    return set(out.stdout.split())


def test_import_flameprof_is_light():
    assert not set(HEAVY) & imported_after("import flameprof")


def test_cli_parser_and_sampler_are_light():
    modules = imported_after(
        "from flameprof.cli import build_parser\nbuild_parser()\n"
        "import flameprof.profiler, flameprof.collect.engine.python_sampler"
    )
    assert not set(HEAVY) & modules
