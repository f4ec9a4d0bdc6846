"""``flameprof render``: draw a ``.flameprof`` profile or any collapsed-stack file as a flame graph (or
folded text), so flameprof can stand in for flamegraph.pl in a pipeline."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import FlameprofError
from .options import add_render_options, output_options

FOLDED_SUFFIXES = (".folded", ".collapsed")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "render",
        help="draw a profile or folded stacks as an SVG flame graph",
        description="Render a .flameprof profile or collapsed stacks (flamegraph.pl's input; '-' reads "
        "stdin) as an interactive SVG flame graph, or as folded text when OUT ends in "
        ".folded or .collapsed.",
    )
    p.add_argument("input", metavar="INPUT", help="a .flameprof file, a folded-stacks file, or - for stdin")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="output file (.svg, .folded; - for stdout)"
    )
    add_render_options(p, modes=("wall", "cpu", "samples", "gil"))
    p.add_argument(
        "--view",
        default="code",
        help="which stacks to show: code (default), layers, phases, or ops (a traced window's ops "
        "under their layers, with their kernels)",
    )
    p.set_defaults(func=render)


def render(args: argparse.Namespace) -> int:
    from ..analyze.views import VIEWS
    from ..collect.importers.load import load_input
    from ..model import storage
    from ..render.formats import FORMATS, Rendering, write_formats

    if args.minwidth < 0:
        raise FlameprofError(f"--minwidth must be 0 or more, not {args.minwidth:g}")
    if args.view not in VIEWS:
        raise FlameprofError(f"unknown view {args.view!r} (expected one of {', '.join(VIEWS)})")
    if args.formats and args.output == "-":
        raise FlameprofError("--format writes files next to -o OUT, so OUT cannot be - (stdout)")
    profile = load_input(args.input, strict=True)
    if args.mode == "gil" and not profile.has_gil_states:
        raise FlameprofError(
            f"{args.input} has no GIL states (only flameprof's C sampler records them): --mode gil "
            "has nothing to draw"
        )
    if args.view == "ops" and profile.trace is None:
        raise FlameprofError(
            f"{args.input} has no traced window: record one with 'run --trace-steps', "
            "or import a torch.profiler trace"
        )
    if "flameprof" in args.formats:  # refused before any file is written: one error line
        try:
            storage.check_storable(profile)
        except ValueError as exc:
            raise FlameprofError(f"{args.input}: {exc}") from None
    rendering = Rendering(profile, output_options(args))
    fmt = FORMATS["folded" if args.output.endswith(FOLDED_SUFFIXES) else "svg"]
    if args.output == "-":
        assert fmt.text is not None  # folded and svg are text formats
        sys.stdout.write(fmt.text(rendering))
        return 0
    try:
        fmt.write(rendering, args.output)
    except OSError as exc:
        raise FlameprofError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"flameprof: wrote {args.output} ({os.path.getsize(args.output) / 1e3:.0f} kB)", file=sys.stderr)
    base = os.path.splitext(args.output)[0]
    source = os.path.realpath(args.input)
    others = tuple(  # neither the file just written nor the input is written again
        n for n in args.formats if n != fmt.name and os.path.realpath(base + FORMATS[n].suffix) != source
    )
    for path in write_formats(rendering, base, others):
        print(f"flameprof: wrote {path}", file=sys.stderr)
    return 0
