"""Command-line options shared by several subcommands, so each is spelled one way."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..render.options import OutputOptions


def positive_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid rate {text!r}") from None
    if not 0 < value <= 10_000:
        raise argparse.ArgumentTypeError(f"rate must be between 0 and 10000 Hz, not {text}")
    return value


_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|min|s|m|h|d)", re.IGNORECASE)


def positive_seconds(text: str) -> float:
    """A duration as people write it: ``30`` or ``30s``, ``500ms``, ``5m``, ``1.5h``, ``1h30m``, ``2d``;
    a plain number is seconds."""
    compact = text.strip().replace(" ", "")
    try:
        value = float(compact)
    except ValueError:
        parts = _DURATION_PART.findall(compact)
        if not parts or "".join(number + unit for number, unit in parts) != compact:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r} (write seconds, or with units: 30s, 500ms, 5m, 1h30m)"
            ) from None
        value = sum(float(number) * _DURATION_UNITS[unit.lower()] for number, unit in parts)
    if not 0 < value < 10**7:
        raise argparse.ArgumentTypeError(f"duration must be positive and under 10^7 s, not {text}")
    return value


_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def memory_size(text: str) -> int:
    """A size in bytes: ``64M``, ``1g``, ``500k`` or a number of bytes; at least 1 MiB."""
    number, unit = text.strip(), ""
    if number[-1:].lower() in "kmg" and number[-1:]:
        number, unit = number[:-1], number[-1].lower()
    elif number[-2:].lower() in ("kb", "mb", "gb"):
        number, unit = number[:-2], number[-2].lower()
    try:
        value = int(float(number) * _UNITS[unit])
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (e.g. 64M, 1G)") from None
    if value < 2**20:
        raise argparse.ArgumentTypeError(f"size must be at least 1M, not {text}")
    return value


def export_formats(text: str) -> tuple[str, ...]:
    """Output format names (``all``: every one), in the order given, each once."""
    from ..render.formats import FORMATS

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FORMATS and n != "all"]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown output format {', '.join(unknown) or repr(text)} "
            f"(expected a comma-separated list of {', '.join(FORMATS)}, or all)"
        )
    expanded = [f for n in names for f in (FORMATS if n == "all" else (n,))]
    return tuple(dict.fromkeys(expanded))


def add_sampling_options(parser: argparse.ArgumentParser, output: str, holds: str) -> None:
    """``-o/--output DIR`` (default ``output``; ``holds`` says what it receives) and ``--rate``: the
    options of every command that samples (run, attach, demo)."""
    parser.add_argument(
        "-o", "--output", default=output, metavar="DIR", help=f"directory for {holds} (default: ./{output})"
    )
    parser.add_argument(
        "--rate", type=positive_rate, default=100.0, metavar="HZ", help="samples per second (default: 100)"
    )


def add_render_options(
    parser: argparse.ArgumentParser, modes: tuple[str, ...] = ("wall", "cpu", "gil")
) -> None:
    """How profiles are shown: weight, folded counts, flame graph look."""
    parser.add_argument(
        "--mode",
        choices=modes,
        default="wall",
        help="weight shown: wall time (idle time visible), CPU time"
        + (", sample counts" if "samples" in modes else "")
        + ", or gil: the time threads waited for the GIL (C sampler only) (default: wall)",
    )
    parser.add_argument(
        "--count",
        choices=("samples", "ms"),
        default="samples",
        help="unit of the counts in folded output (default: samples)",
    )
    parser.add_argument("--title", help="flame graph title")
    parser.add_argument(
        "--minwidth",
        type=float,
        default=0.1,
        metavar="PX",
        help="omit frames narrower than PX pixels (default: 0.1)",
    )
    parser.add_argument("--icicle", action="store_true", help="draw the flame graph top-down")
    parser.add_argument(
        "--color",
        choices=("kind", "phase"),
        default="kind",
        help="colour flame graph frames by kind of code (default) or by the phase of their samples",
    )
    parser.add_argument(
        "--raw-stacks",
        action="store_true",
        help="flame graphs show the stacks as recorded: the importlib chains, the interpreter's bootstrap "
        "frames, startup inside the program's own stacks (default: one frame per imported module, no "
        "bootstrap frames, startup under its own root)",
    )
    parser.add_argument(
        "--format",
        dest="formats",
        type=export_formats,
        default=(),
        metavar="LIST",
        help="also write these formats, comma-separated: speedscope, chrome, pprof, firefox, html, memory "
        "(svg, folded and flameprof are accepted too), or all",
    )


def output_options(args: argparse.Namespace) -> OutputOptions:
    from ..render.options import OutputOptions

    return OutputOptions(
        mode=args.mode,
        count=args.count,
        view=getattr(args, "view", "code"),
        title=args.title,
        minwidth=args.minwidth,
        icicle=args.icicle,
        color=args.color,
        raw_stacks=args.raw_stacks,
        formats=args.formats,
    )
