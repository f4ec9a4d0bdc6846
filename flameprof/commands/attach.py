"""``flameprof attach PID``: profile a running Python process without restarting it."""

from __future__ import annotations

import argparse
import sys

from ..errors import FlameprofError, InjectUnavailable
from .options import add_render_options, add_sampling_options, output_options, positive_seconds

BACKENDS = ("inject", "py-spy")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attach",
        help="profile a running Python process",
        description="Profile a running CPython 3.10-3.13 process for --duration seconds (or until "
        "Ctrl-C) and write the same outputs as flameprof run. The process keeps running.",
        usage="flameprof attach [options] PID",
    )
    p.add_argument("pid", type=int, metavar="PID", help="the process to profile")
    p.add_argument(
        "--duration",
        type=positive_seconds,
        metavar="TIME",
        help="how long to profile: seconds, or 30s, 5m, 1h (default: until Ctrl-C)",
    )
    add_sampling_options(p, "flameprof-out", "profile.flameprof, profile.folded and profile.svg")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="inject",
        help="inject: run flameprof's sampler inside the process, queued there through ptrace (layers, "
        "phases, CPU time); py-spy: sample from outside, read-only (default: inject, falling back to py-spy "
        "when injection is impossible)",
    )
    p.add_argument(
        "--subprocesses",
        action="store_true",
        help="also profile the process's Python child processes (DataLoader workers), also those "
        "started during the attach",
    )
    p.add_argument(
        "--backward-layers",
        action="store_true",
        help="as for flameprof run (inject only): attribute backward time to layers with autograd hooks",
    )
    p.add_argument(
        "--trace-steps",
        type=_steps,
        metavar="K",
        help="inject only: also trace the next K whole steps with torch.profiler (ops, memory, device "
        "kernels; see run --trace-steps)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    add_render_options(p)
    p.set_defaults(func=attach)


def _steps(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a number of steps (1 or more), got {text!r}")
    return int(text)


def _note(text: str) -> None:
    print(f"flameprof: {text}", file=sys.stderr)


def attach(args: argparse.Namespace) -> int:
    from ..collect.attach.target import inspect, python_descendants
    from ..render.outputs import prepare_output_dir

    target = inspect(args.pid)
    outdir = prepare_output_dir(args.output)
    options = output_options(args)
    profile = None
    if args.backend == "inject":
        from ..collect.attach import inject
        from ..collect.attach.pyspy import find_pyspy

        children = python_descendants(target.pid, _note) if args.subprocesses else []
        try:
            profile = inject.record(
                target,
                args.duration,
                args.rate,
                _note,
                children,
                args.backward_layers,
                follow_forks=args.subprocesses,
                trace_steps=args.trace_steps,
            )
        except InjectUnavailable as exc:
            if find_pyspy() is None:
                raise FlameprofError(
                    f"cannot inject into process {target.pid}: {exc}; and py-spy, the fallback, "
                    "is not installed (pip install py-spy)"
                ) from None
            _note(f"cannot inject into process {target.pid}: {exc}; using py-spy instead")
    if profile is None:
        from ..collect.attach import pyspy

        profile = pyspy.record(target, args.duration, args.rate, args.subprocesses, _note)
    if not profile.num_samples:
        raise FlameprofError(f"no samples were taken from process {target.pid}")
    from ..render.formats import Rendering
    from ..render.outputs import write_outputs
    from ..render.summary import format_summary

    rendering = Rendering(profile, options)
    paths = write_outputs(rendering, outdir)
    if not args.quiet:
        sys.stderr.write(format_summary(rendering, paths))
    return 0
