"""``flameprof demo``: profile one of the small PyTorch examples shipped with flameprof, then say
where the flame graph is. The example runs under ``flameprof run`` in a child process, exactly as a
user's script would."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys

from ..errors import FlameprofError
from .options import add_sampling_options

EXAMPLES = {"cnn": "flameprof.examples.cnn_train", "inference": "flameprof.examples.inference"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="profile a built-in PyTorch example (CPU only, a few seconds)",
        description="Profile a built-in example: a small CNN training loop with a DataLoader "
        "(cnn) or an inference loop (inference). Arguments after -- go to the "
        "example, e.g. flameprof demo -- --slow-data --workers 2.",
        usage="flameprof demo [--example cnn|inference] [-o DIR] [--rate HZ] [-- example args ...]",
    )
    p.add_argument("--example", choices=tuple(EXAMPLES), default="cnn", help="which example (default: cnn)")
    add_sampling_options(p, "flameprof-demo", "the profile and flame graph")
    p.add_argument(
        "example_args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="arguments for the example"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("torch") is None:
        raise FlameprofError("demo: the examples need PyTorch (pip install torch==2.13.0)")
    extra = list(args.example_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    from ..render.outputs import prepare_output_dir

    outdir = prepare_output_dir(args.output)
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    command = [
        sys.executable,
        "-m",
        "flameprof",
        "run",
        "-o",
        outdir,
        "--rate",
        str(args.rate),
        "-m",
        EXAMPLES[args.example],
        *extra,
    ]
    code = subprocess.call(command, env=env)
    svg = os.path.join(outdir, "profile.svg")
    if not os.path.exists(svg):
        raise FlameprofError(f"demo: the {args.example} example wrote no profile (exit status {code})")
    print(f"\nflame graph: {svg}")
    print(f"report:      flameprof report {os.path.join(outdir, 'profile.flameprof')}")
    if args.example == "cnn" and "--slow-data" not in extra:
        print("try an input-bound run: flameprof demo -- --slow-data")
    return code
