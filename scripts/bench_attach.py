"""How long ``flameprof attach`` stops the process it attaches to, next to py-spy, to gdb's route
and to no attach.

The target records the gaps between its own loop iterations (each sleeps 0.5 ms); the longest
gap while an attach runs is the pause the attach caused (plus the machine's own scheduling noise,
which the no-attach rounds show). Rounds are interleaved and only medians are compared. "gdb
route" is what flameprof attach did before its own injector (until 2026-11): gdb attaches to every
thread and calls mmap in the process; measured only where gdb is installed.

    python scripts/bench_attach.py              # 5 rounds
    python scripts/bench_attach.py --rounds 9
    python scripts/bench_attach.py --rounds 2 --no-gdb   # quick
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TARGET = r"""
import sys, time
end = time.perf_counter() + float(sys.argv[1])
last = time.perf_counter()
longest = 0.0
while last < end:
    time.sleep(0.0005)
    now = time.perf_counter()
    longest = max(longest, now - last)
    last = now
print(longest)
"""


# gdb as flameprof ran it: no debug info, no symbols beyond libc's and libpython's, one call
GDB_ROUTE = [
    "gdb",
    "-q",
    "-batch",
    "-nx",
    "--readnever",
    "-iex",
    "set auto-load off",
    "-iex",
    "set auto-solib-add off",
    "-iex",
    "set libthread-db-search-path",
    "-iex",
    "set debuginfod enabled off",
    "-ex",
    "sharedlibrary libc",
    "-ex",
    "sharedlibrary libpython",
    "-ex",
    "call (long)((void *(*)(void *, unsigned long, int, int, int, long))mmap)(0, 4096, 3, 0x22, -1, 0)",
]


def longest_gap(backend: str | None, out: str) -> float:
    target = subprocess.Popen([sys.executable, "-c", TARGET, "4"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    if backend == "gdb":
        subprocess.run(GDB_ROUTE + ["-p", str(target.pid)], capture_output=True, check=True)
    elif backend:
        env = dict(os.environ, PYTHONPATH=REPO)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "flameprof",
                "attach",
                str(target.pid),
                "--backend",
                backend,
                "--duration",
                "1",
                "-q",
                "-o",
                out,
            ],
            env=env,
            capture_output=True,
            check=True,
        )
    return float(target.communicate()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-o", "--output", default="/tmp/flameprof-bench-attach")
    parser.add_argument("--no-gdb", action="store_true", help="leave out gdb's route (a quick run)")
    args = parser.parse_args()
    configs = {"no attach": None, "inject": "inject"}
    if shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy"):
        configs["py-spy"] = "py-spy"
    if shutil.which("gdb") and not args.no_gdb:
        configs["gdb route"] = "gdb"
    gaps: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, backend in configs.items():
            gaps[name].append(longest_gap(backend, args.output))
    print(
        f"longest stall of the target, median of {args.rounds} interleaved rounds (load "
        f"{os.getloadavg()[0]:.1f}):"
    )
    for name, values in gaps.items():
        print(
            f"  {name:10s} {1000 * statistics.median(values):7.0f} ms   (all: "
            + " ".join(f"{1000 * v:.0f}" for v in values)
            + ")"
        )


if __name__ == "__main__":
    main()
