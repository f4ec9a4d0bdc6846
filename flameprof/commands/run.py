"""``flameprof run``: profile a script or module from start to end, in this interpreter.

The target keeps its own output, exit code and signals. The profile is written from an atexit
handler registered before the target runs (so it runs last, after the target's own handlers and
after non-daemon threads end), and directly before re-raising a fatal signal.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys

from ..collect import runner
from ..errors import FlameprofError
from .options import add_render_options, output_options, positive_rate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="profile a Python script or module",
                       description="Run a script (or -m module) exactly as python would, sampling every thread.",
                       usage="flameprof run [options] (script.py | -m module) [args ...]")
    p.add_argument("-o", "--output", default="flameprof-out", metavar="DIR",
                   help="directory for profile.flameprof, profile.folded and profile.svg (default: ./flameprof-out)")
    p.add_argument("--rate", type=positive_rate, default=100.0, metavar="HZ", help="samples per second (default: 100)")
    p.add_argument("-m", dest="module", action="store_true", help="run a library module as a script, like python -m")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    add_render_options(p)
    p.add_argument("target", nargs=argparse.REMAINDER, metavar="script.py | module", help="what to run, then its arguments")
    p.set_defaults(func=run)


class _Terminated(BaseException):
    """Raised in the main thread by our SIGTERM handler so the profile can be saved first."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def run(args: argparse.Namespace) -> int:
    rest = list(args.target)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise FlameprofError("run: nothing to run (give a script, or -m module)")
    target = runner.module_target(rest[0], rest[1:]) if args.module else runner.script_target(rest[0], rest[1:])
    from ..outputs import prepare_output_dir

    outdir = prepare_output_dir(args.output)
    options = output_options(args)

    from ..profiler import SESSION, Profiler

    profiler = Profiler(outdir, rate=args.rate, mode=args.mode)
    state = {"signal": None, "saved": False}

    def finish() -> None:
        if state["saved"]:
            return
        state["saved"] = True
        try:
            profile = profiler.stop()
            from ..outputs import write_outputs
            from ..render.summary import format_summary

            paths = write_outputs(profile, outdir, options)
            if not args.quiet:
                sys.stderr.write(format_summary(profile, paths, options.mode))
        except Exception as exc:  # the target's outcome stands; report ours in one line
            sys.stderr.write(f"flameprof: error: could not write the profile: {exc}\n")
        if state["signal"] is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(state["signal"], signal.SIG_DFL)
            os.kill(os.getpid(), state["signal"])

    atexit.register(finish)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    runner.install(target)
    profiler.start()
    assert SESSION.sampler is not None
    SESSION.sampler.boundary_codes.add(runner.exec_target.__code__)
    try:
        runner.exec_target(target)
    except SystemExit:
        raise
    except _Terminated:
        state["signal"] = signal.SIGTERM
        finish()
    except KeyboardInterrupt as exc:
        runner.print_target_exception(exc, target)
        state["signal"] = signal.SIGINT
        raise SystemExit(130) from None
    except BaseException as exc:
        runner.print_target_exception(exc, target)
        raise SystemExit(1) from None
    return 0
