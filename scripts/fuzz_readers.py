"""The long run of the readers' fuzzing harness (tests/fuzzing.py), for local use: many more cases per
reader than CI's short run, and a count of those that broke the promise (a traceback, a second stderr
line, a wrong exit status, or a run past the time limit), with the first few of each kind.

    python scripts/fuzz_readers.py --examples 2000 [--reader perf] [--seed 1]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from fuzzing import READERS, check_case, mutations  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def fuzz(name: str, examples: int, seed_value: int, keep: str | None) -> tuple[int, collections.Counter]:
    """Run ``examples`` cases on reader ``name``; the count run and the breakages by kind."""
    reader = READERS[name]
    broke: collections.Counter = collections.Counter()
    ran = 0

    @seed(seed_value)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # count every case; a failing one is recorded, not shrunk
        suppress_health_check=list(HealthCheck),
    )
    @given(data=mutations(reader), command=st.sampled_from(reader.commands))
    def case(data: bytes, command: tuple[str, ...]) -> None:
        nonlocal ran
        ran += 1
        with tempfile.TemporaryDirectory() as workdir:
            try:
                check_case(reader, data, command, workdir)
            except Exception as exc:  # every way of breaking the promise, counted by where it happened
                where = traceback.extract_tb(exc.__traceback__)[-1]
                kind = f"{type(exc).__name__} at {os.path.basename(where.filename)}:{where.lineno}"
                broke[kind] += 1
                if keep and broke[kind] == 1:
                    path = os.path.join(keep, f"{name}-{len(broke)}{reader.suffix}")
                    with open(path, "wb") as fh:
                        fh.write(data)
                    print(f"  {kind}: {' '.join(command)} on {path}", file=sys.stderr)

    case()
    return ran, broke


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="cases per reader (default 2000)")
    parser.add_argument("--reader", action="append", choices=sorted(READERS), help="only this reader")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--keep", metavar="DIR", help="save the first input of each kind of breakage here")
    args = parser.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    total = 0
    print(f"{'reader':12s} {'cases':>7s} {'broke':>7s}")
    for name in args.reader or sorted(READERS):
        ran, broke = fuzz(name, args.examples, args.seed, args.keep)
        total += sum(broke.values())
        print(f"{name:12s} {ran:7d} {sum(broke.values()):7d}")
        for kind, count in broke.most_common():
            print(f"    {count:5d}  {kind}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
