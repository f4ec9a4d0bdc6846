"""``flameprof import``: turn torch.profiler (Kineto), py-spy, speedscope, perf script or folded output
into a ``.flameprof`` profile, so every renderer and report works on what the tools people already
use recorded."""

from __future__ import annotations

import argparse
import sys

from ..collect.importers.detect import FORMATS
from .options import positive_rate

IMPORT_FORMATS = tuple(f for f in FORMATS if f != "flameprof")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="convert torch.profiler traces, py-spy, speedscope, perf script or folded stacks into a profile",
        description="Read a torch.profiler (Kineto) trace (.json or .json.gz), py-spy raw or speedscope "
        "output, perf script text or collapsed stacks "
        "(format detected unless --from is given) and write a .flameprof profile.",
    )
    p.add_argument("input", metavar="INPUT", help="file to import, - for stdin")
    p.add_argument("--from", dest="fmt", choices=IMPORT_FORMATS, help="input format (default: detected)")
    p.add_argument(
        "-o",
        "--output",
        default="profile.flameprof",
        metavar="FILE",
        help="profile to write (default: profile.flameprof)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="stop at the first malformed line instead of skipping it with a warning",
    )
    p.add_argument(
        "--rate",
        type=positive_rate,
        metavar="HZ",
        help="sampling rate of count-weighted input (py-spy --rate), to turn counts into seconds",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..collect.importers.load import load_input

    source = "<stdin>" if args.input == "-" else args.input
    # a trace is streamed into the file as it is read, folded text read a chunk at a time: either
    # may be gigabytes. Counts become seconds before anything is written
    profile = load_input(args.input, args.strict, args.fmt, output=args.output, rate=args.rate)
    print(
        f"flameprof: imported {profile.num_samples} samples of {len(profile.threads)} thread(s) from "
        f"{source} "
        f"({profile.meta.get('collector', args.fmt)}, weights in "
        f"{profile.meta.get('weight_unit', 'seconds')}) "
        f"into {args.output}",
        file=sys.stderr,
    )
    return 0
