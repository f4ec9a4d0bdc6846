"""glibc's malloc tuned per command (commands/allocator.py): import's big arrays leave the process
when freed; the readers' stay, and the next ones reuse them."""

import platform
import subprocess
import sys

import pytest

# COUNT blocks of SIZE doubles, each followed by a small allocation that stays, are freed, then as
# many made again and written. The first block, twice as big, mapped and freed, is what makes glibc
# raise its threshold past the blocks (as far as 32 MB).
BLOCKS = """
import sys, numpy as np, psutil
mode, size, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if mode != "-":
    from flameprof.commands.allocator import tune
    assert tune(mode)
proc = psutil.Process()
rss = lambda: proc.memory_info().rss
np.ones(2 * size)
blocks, kept = [], []
for _ in range(count):
    blocks.append(np.ones(size))
    kept.append(bytearray(64 << 10))
before = rss()
del blocks
freed = before - rss()
blocks = [np.empty(size) for _ in range(count)]
start = rss()
for block in blocks:
    block[:] = 2.0
print(freed >> 20, (rss() - start) >> 20)
"""


def _blocks(mode: str, size: int, count: int) -> tuple[int, int]:
    """MB that freeing the blocks gave back, and MB of new pages the next ones took."""
    out = subprocess.run(
        [sys.executable, "-c", BLOCKS, mode, str(size), str(count)],
        capture_output=True,
        text=True,
        check=True,
    )
    freed, grown = out.stdout.split()
    return int(freed), int(grown)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the C library is not glibc")
def test_import_gives_freed_arrays_back():
    small = (1_200_000, 30)  # 30 blocks of 9.6 MB: 274 MB
    assert _blocks("import", *small)[0] >= 250
    assert _blocks("-", *small)[0] < 50  # glibc's own threshold: they stay in its heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the C library is not glibc")
def test_readers_reuse_freed_arrays():
    big = (5_000_000, 8)  # 8 blocks of 40 MB: 305 MB
    assert _blocks("report", *big)[1] < 50
    assert _blocks("-", *big)[1] >= 250  # glibc maps them afresh, page by page


def test_the_commands_tune_it_and_run_does_not():
    """Each command that runs no program, as its own; never ``run``, which runs the program in its
    own process."""
    probe = (
        "import sys, flameprof.commands.allocator as a, flameprof.cli as cli\n"
        "a.tune = lambda command: print('tuned', command, file=sys.stderr) or True\n"
        "sys.argv = ['flameprof', sys.argv[1], '--help']\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    for command in ("import", "report", "run"):
        out = subprocess.run([sys.executable, "-c", probe, command], capture_output=True, text=True)
        tuned = [line for line in out.stderr.splitlines() if line.startswith("tuned")]
        assert tuned == ([] if command == "run" else [f"tuned {command}"]), (command, out.stderr)
