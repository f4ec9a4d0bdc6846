"""The ``flameprof`` command: parses arguments, dispatches to one module per subcommand, and turns
FlameprofError into one error line and a non-zero exit."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

from . import __version__
from .errors import FlameprofError

# Each name is a module in flameprof.commands with ``register(subparsers)``.
COMMANDS = (
    "run",
    "render",
    "report",
    "check",
    "diff",
    "attach",
    "dump",
    "top",
    "merge",
    "snapshot",
    "import_",
    "collapse",
    "demo",
)


# Commands that read and write profiles and run no program: numpy's BLAS threads, started when
# numpy is imported, only spin in them (a fifth of the CPU time of rendering 100k folded lines); and
# glibc's malloc is tuned for their big arrays (commands/allocator.py).
NO_PROGRAM = frozenset({"render", "report", "check", "diff", "dump", "merge", "import", "collapse"})


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other flameprof error
        raise FlameprofError(f"{self.prog}: {message}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's, or ``only`` that command's (a command's module
    imports what it runs with: collapsing perf text need not import the modules that run programs)."""
    parser = _Parser(prog="flameprof", description="Sampling profiler for deep-learning workloads.")
    parser.add_argument("--version", action="version", version=f"flameprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        if only is None or name.rstrip("_") == only:
            importlib.import_module(f".commands.{name}", __package__).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] in NO_PROGRAM:  # the command line, not a caller's
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # read when numpy loads, below
        from .commands import allocator

        allocator.tune(sys.argv[1])
    words = sys.argv[1:] if argv is None else argv
    named = words[0] if words and words[0] in {name.rstrip("_") for name in COMMANDS} else None
    try:
        args = build_parser(named).parse_args(argv)
        if args.command != "run":  # run's stdout is the profiled program's own
            reconfigure = getattr(sys.stdout, "reconfigure", None)
            if reconfigure is not None:  # a lone surrogate in a name is escaped, not an error
                reconfigure(errors="backslashreplace")
        return int(args.func(args) or 0)
    except FlameprofError as exc:
        print(f"flameprof: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("flameprof: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a write that failed: a full disk, a read-only or special path
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"flameprof: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
