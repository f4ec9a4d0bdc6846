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


def test_collapse_perf_imports_nothing_of_the_model(tmp_path):
    """``collapse perf`` stands in for a Perl script that starts in milliseconds: a run of it imports
    neither the model nor the subprocess machinery of ``--inline`` (their imports were 20 of its
    280 ms on 200 MB, 7 % of its ratio to stackcollapse-perf.pl)."""
    perf = tmp_path / "perf.txt"
    perf.write_text(
        "python3 4242 [000] 1.000000: 1001001 cpu-clock:ppp:\n\t7f0 work+0x1 (/usr/lib/libc.so.6)\n\n"
    )
    code = (
        "import sys\nfrom flameprof import cli\n"
        f"sys.argv = ['flameprof', 'collapse', 'perf', {str(perf)!r}]\ncli.main()"
    )
    modules = imported_after(code)
    assert "flameprof.commands.collapse" in modules
    assert not {"flameprof.model.builder", "flameprof.model.records", "dataclasses", "subprocess"} & modules
