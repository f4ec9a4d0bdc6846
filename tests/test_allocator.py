"""The commands that read whole traces map their big arrays apart, so that freeing one gives its
memory back (commands/allocator.py)."""

import platform
import subprocess
import sys

import pytest

# Blocks of 9.6 MB, each followed by a small allocation that stays, are freed together; the first
# 16 MB block, mapped and freed, is what makes glibc raise its threshold past the later ones.
FREED = """
import sys, numpy as np, psutil
if sys.argv[1] == "fixed":
    from flameprof.commands.allocator import map_big_arrays
    assert map_big_arrays()
proc = psutil.Process()
np.ones(2_000_000)
blocks, kept = [], []
for _ in range(30):
    blocks.append(np.ones(1_200_000))
    kept.append(bytearray(64 << 10))
before = proc.memory_info().rss
del blocks
print((before - proc.memory_info().rss) >> 20)
"""


def _freed_mb(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", FREED, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the C library is not glibc")
def test_freed_big_arrays_leave_the_process_only_with_the_threshold_fixed():
    assert _freed_mb("fixed") >= 250  # 30 x 9.6 MB = 274 MB
    assert _freed_mb("default") < 50  # glibc's own threshold: they stay in its heap


def test_the_reading_commands_fix_it_and_run_does_not(tmp_path):
    """Only commands that run no program: ``run`` runs the program in its own process."""
    probe = (
        "import sys, flameprof.commands.allocator as a, flameprof.cli as cli\n"
        "calls = []\n"
        "a.map_big_arrays = lambda: calls.append(1) or True\n"
        "sys.argv = ['flameprof', sys.argv[1], '--help']\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('calls', len(calls), file=sys.stderr)\n"
    )
    for command, calls in (("import", 1), ("report", 1), ("run", 0)):
        out = subprocess.run([sys.executable, "-c", probe, command], capture_output=True, text=True)
        assert f"calls {calls}" in out.stderr, (command, out.stderr)
