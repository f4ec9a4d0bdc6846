"""``perf record`` of this process's native stacks, running beside the Python sampler (``run --native``).

perf starts disabled and is enabled through its control FIFO, whose ack says the events are on,
so recording begins at a known moment without a sleep. Stacks are unwound from copies of the
user stack (``--call-graph dwarf``): CPython and most libraries here have no frame pointers, so
frame-pointer stacks stop at the leaf. Timestamps use CLOCK_MONOTONIC, the clock of
``time.perf_counter()``, so perf's samples line up with the Python sampler's. Only the standard
library is imported here: this runs inside the profiled program.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import IO

START_TIMEOUT = 20.0  # seconds perf may take to open its events
STOP_TIMEOUT = 60.0  # seconds perf may take to write its data after SIGINT
STACK_BYTES = 16384  # user stack copied per sample: deep enough for PyTorch's dispatcher layers
# perf samples per Python sample: cpu-clock fires per period of CPU time, so at the same rate a
# thread that is on the CPU for part of each interval is often missed (about half the native time
# under CPU contention); at twice the rate nearly all of it is seen.
RATE_FACTOR = 2
SCRIPT_FIELDS = "comm,pid,tid,time,period,event,ip,sym,dso"


class PerfUnavailable(Exception):
    """perf cannot record here; the message says why, in one line."""


def _paranoid() -> int | None:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _kernel_allowed() -> bool:
    """Kernel frames need root (or CAP_PERFMON) unless perf_event_paranoid is 1 or less."""
    level = _paranoid()
    return os.geteuid() == 0 or (level is not None and level <= 1)


def _why_failed(stderr: str) -> str:
    """One line for a perf that exited before recording: the permission setting if that is the likely
    cause, else perf's own first meaningful line."""
    level = _paranoid()
    if os.geteuid() != 0 and level is not None and level > 2:
        return (
            f"perf is not permitted (kernel.perf_event_paranoid={level}; set it to 2 or less, or run as root)"
        )
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and line.strip() != "Error:"]
    return f"perf could not record: {lines[0] if lines else 'it exited without a message'}"


class PerfRecording:
    """One ``perf record -p PID`` in a private temporary directory, from ``start()`` to ``stop()``, at
    ``RATE_FACTOR`` times the Python sampler's ``rate``."""

    def __init__(self, pid: int, rate: float) -> None:
        self.pid = pid
        self.rate = rate
        self._dir = tempfile.mkdtemp(prefix="flameprof-perf-")  # mode 0700
        self.data = os.path.join(self._dir, "perf.data")
        self._proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start perf and return once its events are enabled; PerfUnavailable when it cannot record."""
        perf = shutil.which("perf")
        if perf is None:
            self.close()
            raise PerfUnavailable("perf is not installed (linux-perf / linux-tools package)")
        ctl, ack = os.path.join(self._dir, "ctl"), os.path.join(self._dir, "ack")
        event = "cpu-clock" if _kernel_allowed() else "cpu-clock:u"
        cmd = [
            perf,
            "record",
            "-q",
            "-B",
            "-N",
            "-e",
            event,
            "-F",
            str(max(1, round(self.rate * RATE_FACTOR))),
            "--call-graph",
            f"dwarf,{STACK_BYTES}",
            "-k",
            "CLOCK_MONOTONIC",
            "-D",
            "-1",
            "--control",
            f"fifo:{ctl},{ack}",
            "-p",
            str(self.pid),
            "-o",
            self.data,
        ]
        err = open(os.path.join(self._dir, "stderr"), "w+")
        try:
            os.mkfifo(ctl, 0o600)
            os.mkfifo(ack, 0o600)
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
            self._enable(ctl, ack)
        except (OSError, PerfUnavailable) as exc:
            err.seek(0)
            reason = str(exc) if isinstance(exc, PerfUnavailable) else f"cannot start perf: {exc}"
            if self._proc is not None and self._proc.poll() is not None:
                reason = _why_failed(err.read())
            self.close()
            raise PerfUnavailable(reason) from None
        finally:
            err.close()

    def _enable(self, ctl: str, ack: str) -> None:
        """Open the control FIFO once perf listens on it, send ``enable`` and wait for the ack."""
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        ack_fd = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
        try:
            while True:
                try:
                    ctl_fd = os.open(ctl, os.O_WRONLY | os.O_NONBLOCK)
                    break
                except OSError:  # ENXIO: perf has not opened its end yet
                    self._check_alive(deadline)
                    time.sleep(0.01)
            try:
                os.write(ctl_fd, b"enable\n")
                while not (select.select([ack_fd], [], [], 0.05)[0] and os.read(ack_fd, 64)):
                    self._check_alive(deadline)
                    time.sleep(0.005)  # a FIFO without its writer yet reads as EOF at once
            finally:
                os.close(ctl_fd)
        finally:
            os.close(ack_fd)

    def _check_alive(self, deadline: float) -> None:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise PerfUnavailable("perf exited at start")
        if time.monotonic() > deadline:
            self._proc.kill()
            self._proc.wait()
            raise PerfUnavailable(f"perf did not start recording within {START_TIMEOUT:.0f} s")

    def stop(self) -> None:
        """Stop perf and let it write its data (killed if it takes too long)."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def script(self) -> Iterator[bytes]:
        """``perf script`` text of this process's samples, in chunks (inline expansion off: it runs
        addr2line per address, minutes on a library the size of libtorch)."""
        from ..importers.perf_script import read_chunks

        perf = shutil.which("perf") or "perf"
        proc = subprocess.Popen(
            [
                perf,
                "script",
                "--no-inline",
                "--ns",
                "-F",
                SCRIPT_FIELDS,
                "--pid",
                str(self.pid),
                "-i",
                self.data,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        stdout: IO[bytes] = proc.stdout  # type: ignore[assignment]
        with stdout:
            yield from read_chunks(stdout)
        if proc.wait() != 0:
            raise PerfUnavailable(f"perf script failed (exit status {proc.returncode})")

    def close(self) -> None:
        """Stop perf if it runs and remove the temporary directory."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
