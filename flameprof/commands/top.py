"""``flameprof top PID``: a live view of a running training job, refreshed every second: the last N
steps' phase shares and step time, the top layers and functions, and what the DataLoader workers
do. ``q`` (or Ctrl-C) quits and detaches, leaving the program running as it was; when stdout is not
a terminal, one plain line is printed per refresh instead of a screen.

The job is profiled as ``attach`` does it (an agent injected through ptrace, whose parts are flushed
every second), so the view has the job's layers and steps; nothing of the view runs in the job.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import FlameprofError, InjectUnavailable
from .options import positive_rate, positive_seconds

if TYPE_CHECKING:
    from ..model.profile import Profile

ENTER, LEAVE = "\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l"  # alternate screen, cursor hidden
HOME = "\x1b[H\x1b[2J"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "top",
        help="live view of a running job: phases, step time, top layers and functions (q quits)",
        description="Attach to a running Python process and show, refreshed every second, the last "
        "steps' phase shares and step time, the top layers and functions, and the DataLoader "
        "workers. q or Ctrl-C detaches and leaves the process running.",
        usage="flameprof top [options] PID",
    )
    p.add_argument("pid", type=int, metavar="PID", help="the process to watch")
    p.add_argument(
        "--rate", type=positive_rate, default=100.0, metavar="HZ", help="samples per second (default: 100)"
    )
    p.add_argument(
        "--steps", type=int, default=20, metavar="N", help="steps the shares are taken over (default: 20)"
    )
    p.add_argument(
        "--duration",
        type=positive_seconds,
        metavar="TIME",
        help="detach after TIME (seconds, or 30s, 5m, 1h)",
    )
    p.add_argument(
        "--subprocesses", action="store_true", help="also profile its Python children (DataLoader workers)"
    )
    p.set_defaults(func=top)


class _Screen:
    """The terminal while the view is up: alternate screen, keys read one at a time, restored after."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.keys = sys.stdin.isatty() and self.tty
        self._saved: list[Any] | None = None
        self.notes: list[str] = []

    def __enter__(self) -> _Screen:
        if self.keys:
            import termios
            import tty

            self._saved = termios.tcgetattr(sys.stdin.fileno())
            tty.setcbreak(sys.stdin.fileno())
        if self.tty:
            sys.stdout.write(ENTER)
            sys.stdout.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tty:
            sys.stdout.write(LEAVE)
            sys.stdout.flush()
        if self._saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)

    def quit_pressed(self) -> bool:
        if not self.keys:
            return False
        while select.select([sys.stdin], [], [], 0)[0]:
            key = os.read(sys.stdin.fileno(), 1)
            if key in (b"q", b"Q") or not key:
                return True
        return False

    def note(self, text: str) -> None:
        if self.tty:
            self.notes = (self.notes + [text])[-3:]
        else:
            print(f"flameprof: {text}", file=sys.stderr, flush=True)

    def show(self, lines: list[str]) -> None:
        from ..render.live_view import clip

        size = shutil.get_terminal_size()
        body = clip(lines, size.columns, size.lines - 1)
        sys.stdout.write(HOME + "\n".join(body) + "\n")
        sys.stdout.flush()


def _view(
    pid: int, steps: int, screen: _Screen, started: float
) -> Callable[[Callable[[], Profile | None]], bool]:
    from ..render.live_view import live_line, live_lines

    def draw(so_far: Callable[[], Profile | None]) -> bool:
        if screen.quit_pressed():
            return True
        seconds = time.monotonic() - started
        profile = so_far()
        if screen.tty:
            head = f"flameprof top: process {pid}, {seconds:.0f} s    q: quit and detach"
            body = live_lines(profile, steps, seconds) if profile is not None else ["waiting for samples..."]
            screen.show([head, ""] + body + ([""] + screen.notes if screen.notes else []))
        elif profile is not None:
            print(live_line(profile, steps, seconds), flush=True)
        return False

    return draw


def top(args: argparse.Namespace) -> int:
    from ..collect.attach import inject
    from ..collect.attach.target import inspect, python_descendants

    if args.steps < 1:
        raise FlameprofError(f"--steps must be 1 or more, not {args.steps}")
    target = inspect(args.pid)
    children = python_descendants(target.pid, lambda text: None) if args.subprocesses else []
    with _Screen() as screen:
        try:
            inject.record(
                target,
                args.duration,
                args.rate,
                screen.note,
                children,
                follow_forks=args.subprocesses,
                live=_view(target.pid, args.steps, screen, time.monotonic()),
            )
        except InjectUnavailable as exc:
            raise FlameprofError(f"cannot watch process {target.pid}: {exc}") from None
    print(f"flameprof: detached from process {target.pid}; it runs on", file=sys.stderr)
    return 0
