"""``flameprof run``: profile a script or module from start to end, in this interpreter, or any
command (``flameprof run -- torchrun ...``) as a child process.

The target keeps its own output, exit code and signals. The profile is written from an atexit
handler registered before the target runs (so it runs last, after the target's own handlers and
after non-daemon threads end), from ``os._exit``, and after an unhandled Ctrl-C. Every other signal
keeps its default action and ends the process as it would without flameprof: then a watcher
process (run_rescue.py) writes the profile from the part this process flushes every second. Unless
``--no-subprocesses``, every Python process the target starts is profiled too (collect/jobs/tree.py)
and merged into the one profile. ``--native`` records ``perf`` beside the sampler
(collect/perf/record.py) and grafts its native stacks under the Python frames (collect/perf/merge.py);
when perf cannot record, one warning line says why and the profile has Python frames only.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
from typing import TYPE_CHECKING, NoReturn

from ..collect.engine.memory_limit import DEFAULT_MEMORY_LIMIT
from ..collect.jobs import script
from ..errors import FlameprofError
from .options import (
    add_render_options,
    add_sampling_options,
    memory_size,
    output_options,
    positive_seconds,
)
from .run_rescue import Ticker, mark_finishing, start_watcher

if TYPE_CHECKING:
    from ..model.profile import Profile


def _ticker(parts: str, outdir: str, args: argparse.Namespace) -> Ticker | None:
    """The periodic work asked for (--snapshot-every, --live), or None."""
    if not args.snapshot_every and args.live is None:
        return None
    return Ticker(parts, outdir, args.snapshot_every, args.live)


def _trace_steps(text: str) -> tuple[int, int]:
    from ..collect.engine.trace_window import parse_steps

    try:
        return parse_steps(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected FIRST:LAST steps with 0 <= FIRST < LAST, got {text!r}"
        ) from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="profile a Python script or module, or any command, with its subprocesses",
        description="Run a script (or -m module) exactly as python would, sampling every thread; "
        "or, after --, any command. Python subprocesses are profiled too.",
        usage="flameprof run [options] (script.py | -m module) [args ...]\n"
        "       flameprof run [options] -- command [args ...]",
    )
    add_sampling_options(p, "flameprof-out", "profile.flameprof, profile.folded and profile.svg")
    p.add_argument(
        "-m", dest="module", action="store_true", help="run a library module as a script, like python -m"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    p.add_argument(
        "--snapshot-every",
        type=positive_seconds,
        metavar="TIME",
        help="every TIME (seconds, or 30s, 5m, 1h), write the whole job's profile so far to "
        "profile.snapshot.flameprof in the output directory (from outside the program; a killed job "
        "leaves the last one whole)",
    )
    p.add_argument(
        "--max-memory",
        type=memory_size,
        default=DEFAULT_MEMORY_LIMIT,
        metavar="SIZE",
        help="memory each process's profile may hold (default: 64M); past it, older samples are "
        "folded into time windows: totals, phases and layers stay exact (docs/run.md)",
    )
    p.add_argument(
        "--live",
        nargs="?",
        type=int,
        const=20,
        metavar="N",
        help="print a line a second on stderr while the job runs: the last N steps' step time and "
        "phase shares and the top layer (default N: 20; for a full-screen view, flameprof top PID)",
    )
    p.add_argument(
        "--no-subprocesses",
        dest="subprocesses",
        action="store_false",
        help="profile only the first Python process, not the ones it starts "
        "(DataLoader workers, multiprocessing, subprocesses, ranks)",
    )
    p.add_argument(
        "--backward-layers",
        action="store_true",
        help="attribute backward time to the layer whose gradients are computed (autograd hooks; "
        "slows the model's forward and backward, see docs/deep-learning.md)",
    )
    p.add_argument(
        "--trace-steps",
        type=_trace_steps,
        metavar="FIRST:LAST",
        help="also trace steps FIRST..LAST-1 with torch.profiler: ops with shapes and FLOPs, memory, "
        "device kernels and copies, under the samples' layers and phases (docs/deep-learning.md)",
    )
    p.add_argument(
        "--native",
        action="store_true",
        help="also record native (C/C++, PyTorch, MKL) stacks with perf and show them under the Python "
        "frames that called them (Linux, needs perf; see docs/run.md)",
    )
    p.add_argument(
        "--phase",
        action="append",
        default=[],
        metavar="NAME=PATTERN",
        help="add a phase rule, e.g. data=my_loader:next_batch (see docs/deep-learning.md; repeatable)",
    )
    add_render_options(p)
    p.add_argument(
        "target",
        nargs=argparse.REMAINDER,
        metavar="script.py | module",
        help="what to run, then its arguments",
    )
    p.set_defaults(func=run)


def _check_phase_rules(rules: list[str]) -> None:
    """Refuse a malformed --phase before anything runs (loads the analysis, so only when rules are given)."""
    if rules:
        from ..analyze.phases import parse_rule

        for rule in rules:
            parse_rule(rule)


def _write_profile(profile, outdir: str, options, args: argparse.Namespace) -> None:
    if args.phase:
        profile.meta["phase_rules"] = list(args.phase)
    quiet = args.quiet
    try:
        from ..render.formats import Rendering
        from ..render.outputs import write_outputs
        from ..render.summary import format_summary

        rendering = Rendering(profile, options)
        paths = write_outputs(rendering, outdir)
        if not quiet:
            sys.stderr.write(format_summary(rendering, paths))
    except Exception as exc:  # the target's outcome stands; report ours in one line
        sys.stderr.write(f"flameprof: error: could not write the profile: {exc}\n")


def _warn_native(reason: str) -> None:
    sys.stderr.write(f"flameprof: warning: --native: {reason}; the profile has Python frames only\n")


def _start_native(rate: float):
    """A running perf recording of this process, or None (after one warning line) when perf cannot record."""
    from ..collect.perf.record import PerfRecording, PerfUnavailable

    try:
        recording = PerfRecording(os.getpid(), rate)
        recording.start()
    except (PerfUnavailable, OSError) as exc:
        _warn_native(str(exc))
        return None
    return recording


def _add_native(recording, profile, clock_zero: float):
    """``profile`` with perf's native stacks merged in; on any failure, one warning line and ``profile``."""
    from ..collect.importers.perf_profile import read_perf_script
    from ..collect.perf.merge import merge_native
    from ..collect.perf.record import PerfUnavailable

    try:
        recording.stop()
        perf = read_perf_script(recording.script(), "perf script")
        return merge_native(
            profile, perf, recording.pid, float(perf.meta.get("time_origin", 0.0)) - clock_zero
        )
    except (PerfUnavailable, FlameprofError, OSError, ValueError) as exc:
        _warn_native(f"could not merge perf's stacks: {exc}")
        return profile
    finally:
        recording.close()


def _run_command(argv: list[str], args: argparse.Namespace) -> int:
    """``flameprof run -- command ...``: the command's Python processes profile themselves into parts."""
    from ..collect.jobs.command import exit_like, run_command
    from ..collect.jobs.tree import ProcessTree, warn
    from ..render.outputs import prepare_output_dir

    _check_phase_rules(args.phase)
    outdir = prepare_output_dir(args.output)
    options = output_options(args)
    tree = ProcessTree(
        outdir,
        args.rate,
        whole_tree=args.subprocesses,
        trace_steps=args.trace_steps,
        max_memory=args.max_memory,
    )
    try:
        ticker = _ticker(tree.directory, outdir, args)
        interval = ticker.interval if ticker else None
        pid, returncode = run_command(argv, tree.environment(os.environ), interval, ticker)
    except BaseException:
        tree.remove()
        raise
    profile = tree.collect(main_pid=pid)
    if profile is None:
        warn(f"no Python process was profiled ({argv[0]} started none, or only with python -E/-I)")
    else:
        _write_profile(profile, outdir, options, args)
    return exit_like(returncode)


def run(args: argparse.Namespace) -> int:
    rest = list(args.target)
    command = len(rest) > 1 and rest[0] == "--" and not args.module and not rest[1].endswith(".py")
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise FlameprofError("run: nothing to run (give a script, -m module, or -- command)")
    if args.live is not None and args.live < 1:
        raise FlameprofError(f"--live takes a number of steps (1 or more), not {args.live}")
    if command:
        if args.native:
            _warn_native("native stacks are recorded for a script or -m module, not a -- command")
        return _run_command(rest, args)
    target = (
        script.module_target(rest[0], rest[1:]) if args.module else script.script_target(rest[0], rest[1:])
    )
    from ..render.outputs import prepare_output_dir

    _check_phase_rules(args.phase)
    outdir = prepare_output_dir(args.output)
    options = output_options(args)

    from ..collect.jobs import child
    from ..collect.jobs.tree import ProcessTree
    from ..profiler import SESSION, Profiler

    # The parts directory holds this process's own part too: the profile so far, flushed every
    # second or so, is what the watcher writes out when a signal ends the program.
    tree = ProcessTree(outdir, args.rate, whole_tree=args.subprocesses, max_memory=args.max_memory)
    main_pid = os.getpid()
    start_watcher(
        main_pid,
        tree.directory,
        lambda profile: _write_profile(profile, outdir, options, args),
        _ticker(tree.directory, outdir, args),
    )
    native = _start_native(args.rate) if args.native else None  # before sampling: perf takes a while to start
    profiler = Profiler(
        outdir,
        rate=args.rate,
        mode=args.mode,
        backward_layers=args.backward_layers,
        trace_steps=args.trace_steps,
        max_memory=args.max_memory,
    )
    state: dict[str, signal.Signals | bool | None] = {"signal": None, "saved": False}
    if args.subprocesses:
        tree.profile_children_of_this_process()

    def finish() -> None:
        if state["saved"] or os.getpid() != main_pid:  # a forked child inherits this atexit handler
            return
        state["saved"] = True
        mark_finishing(tree.directory)
        try:
            profile: Profile | None = profiler.stop()
        except Exception as exc:
            sys.stderr.write(f"flameprof: error: could not write the profile: {exc}\n")
        else:
            child.discard_this_process()
            if native is not None:
                profile = _add_native(native, profile, clock_zero)
            if args.subprocesses:
                profile = tree.collect(profile)
            else:  # nothing to merge: only this process's part, just removed
                tree.remove()
            _write_profile(profile, outdir, options, args)
        if state["signal"] is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(state["signal"], signal.SIG_DFL)
            os.kill(os.getpid(), state["signal"])

    real_exit = os._exit

    def exit_after_profile(status: int) -> NoReturn:
        """``os._exit`` in the program: atexit does not run, so the profile is written here."""
        finish()
        real_exit(status)

    atexit.register(finish)
    script.install(target)
    SESSION.add_boundary_codes(script.boundary_codes())
    profiler.start()
    assert SESSION.sampler is not None
    child.record_this_process(tree.directory)
    os._exit = exit_after_profile
    clock_zero = SESSION.sampler.t0  # perf_counter reading of the profile's time 0
    try:
        script.exec_target(target)
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        script.print_target_exception(exc, target)
        state["signal"] = signal.SIGINT
        raise SystemExit(130) from None
    except BaseException as exc:
        script.print_target_exception(exc, target)
        raise SystemExit(1) from None
    return 0
