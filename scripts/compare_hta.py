"""Holistic Trace Analysis (HTA) and flameprof side by side on the same GPU traces: the temporal
breakdown, time by kernel type, each stream's idle time by cause, and communication's overlap with
computation, each figure in both tools and their difference in points.

    pip install HolisticTraceAnalysis
    python scripts/compare_hta.py TRACE.json.gz [TRACE ...]

The differences and their reasons are in docs/traced-window.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--show", type=float, default=0.0, help="print figures differing by more points only")
    parser.add_argument(
        "--launched-only",
        action="store_true",
        help="leave out device events whose launching runtime call the trace lacks, as HTA does",
    )
    args = parser.parse_args()
    sys.path.insert(0, REPO)
    from tests.hta_figures import differences, flameprof_figures, hta_figures

    logging.disable(logging.WARNING)  # HTA logs every step of its parsing
    worst_all = 0.0
    for path in args.traces:
        ours = flameprof_figures(path, args.launched_only)
        if ours is None:
            print(f"{os.path.basename(path)}: no device events")
            continue
        theirs = hta_figures(path)
        diff = differences(ours, theirs)
        worst = max((abs(v) for v in diff.values()), default=0.0)
        worst_all = max(worst_all, worst)
        print(f"{os.path.basename(path)}: largest difference {worst:.2f} points")
        for key in sorted(diff):
            if abs(diff[key]) > args.show:
                section, _, rest = key.partition(".")
                mine = _lookup(ours, section, rest)
                hers = _lookup(theirs, section, rest)
                print(f"  {key:<48} flameprof {mine:7.2f}  HTA {hers:7.2f}  {diff[key]:+6.2f}")
    print(f"largest difference over {len(args.traces)} trace(s): {worst_all:.2f} points")
    return 0


def _lookup(figures: dict, section: str, rest: str) -> float:
    if section == "overlap":
        return figures["overlap"] or 0.0
    if section == "idle_streams":
        stream, cause = rest.split(".")
        return figures["idle_streams"].get(int(stream), {}).get(cause, 0.0)
    return figures[section].get(rest, 0.0)


if __name__ == "__main__":
    sys.exit(main())
