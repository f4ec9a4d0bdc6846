"""How long ``flameprof attach`` stops the process it attaches to, next to py-spy and to no attach.

The target records the gaps between its own loop iterations (each sleeps 0.5 ms); the longest
gap while an attach runs is the pause the attach caused (plus the machine's own scheduling noise,
which the no-attach rounds show). Rounds are interleaved and only medians are compared.

    python scripts/bench_attach.py              # 5 rounds
    python scripts/bench_attach.py --rounds 9
"""

from __future__ import annotations

import argparse
import os
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


def longest_gap(backend: str | None, out: str) -> float:
    target = subprocess.Popen([sys.executable, "-c", TARGET, "4"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    if backend:
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
    args = parser.parse_args()
    configs = {"no attach": None, "inject": "inject", "py-spy": "py-spy"}
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
