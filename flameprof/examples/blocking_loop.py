"""A loop that alternates Python work with a blocking call, and times both itself.

This is the shape of most real loops: Python between waits on a queue, a socket, a lock, a file,
or a C call that lets the GIL go (a big tensor op; on a GPU, every synchronisation). A sampler
that records a thread where it next lets the GIL go, instead of where it is at the tick, sees such
a loop blocked nearly all the time. The loop's own timers are the truth that the profile's shares
are checked against (tests/test_blocking.py, scripts/bench_blocking.py):

    python -m flameprof.examples.blocking_loop --block queue --burst-ms 1 --block-ms 2
    flameprof run -m flameprof.examples.blocking_loop --block zlib

Samples in ``burst`` are the work, samples in ``block`` the wait.
"""

from __future__ import annotations

import argparse
import queue
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flameprof.model.profile import Profile

BLOCKS = ("sleep", "condition", "queue", "socket", "zlib", "torch")


def burst(seconds: float) -> tuple[float, float]:
    """Python work (the GIL held throughout) for ``seconds``; the wall and CPU seconds it took."""
    cpu = time.thread_time()
    start = now = time.perf_counter()
    while now < start + seconds:
        now = time.perf_counter()
    return now - start, time.thread_time() - cpu


def _until(seconds: float, call: Callable[[], object]) -> None:
    """Repeat a short C call that lets the GIL go until ``seconds`` have passed."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        call()


def blocker(kind: str) -> Callable[[float], None]:
    """A function that blocks for about the given seconds in the way ``kind`` names."""
    if kind == "sleep":
        return time.sleep
    if kind == "condition":
        cond = threading.Condition()

        def wait(seconds: float) -> None:
            with cond:
                cond.wait(seconds)

        return wait
    if kind == "queue":
        q: queue.Queue = queue.Queue()

        def get(seconds: float) -> None:
            try:
                q.get(timeout=seconds)
            except queue.Empty:
                pass

        return get
    if kind == "socket":
        reader, writer = socket.socketpair()

        def recv(seconds: float) -> None:
            reader.settimeout(seconds)
            try:
                reader.recv(1)
            except TimeoutError:
                pass

        # the function keeps the writer open: closed, it would end every read at once
        recv.keep = (reader, writer)  # type: ignore[attr-defined]
        return recv
    if kind == "zlib":
        data = bytes(range(256)) * 256  # 64 KiB: zlib lets the GIL go while it compresses
        return lambda seconds: _until(seconds, lambda: zlib.compress(data, 6))
    if kind == "torch":
        import torch

        a, b = torch.randn(96, 96), torch.randn(96, 96)
        return lambda seconds: _until(seconds, lambda: torch.mm(a, b))
    raise ValueError(f"unknown block kind {kind!r} (one of {', '.join(BLOCKS)})")


def block(block_for: Callable[[float], None], seconds: float) -> tuple[float, float]:
    """The wait, in its own frame; the wall and CPU seconds it took."""
    cpu = time.thread_time()
    start = time.perf_counter()
    block_for(seconds)
    return time.perf_counter() - start, time.thread_time() - cpu


def loop(kind: str, burst_ms: float, block_ms: float, seconds: float) -> dict[str, dict[str, float]]:
    """Alternate ``burst`` and ``block`` for ``seconds``: the wall and the CPU seconds spent in each,
    as measured inside them, and in all (the loop's own lines, between them, are neither)."""
    block_for = blocker(kind)
    spent = {mode: {"burst": 0.0, "block": 0.0} for mode in ("wall", "cpu")}
    cpu = time.thread_time()
    start = now = time.perf_counter()
    while now < start + seconds:
        for part, (wall, cpu_part) in (
            ("burst", burst(burst_ms / 1000)),
            ("block", block(block_for, block_ms / 1000)),
        ):
            spent["wall"][part] += wall
            spent["cpu"][part] += cpu_part
        now = time.perf_counter()
    spent["wall"]["total"] = now - start
    spent["cpu"]["total"] = time.thread_time() - cpu
    return spent


def shares(spent: dict[str, float]) -> dict[str, float]:
    """The share of the total that ``burst`` and ``block`` each took."""
    return {part: spent[part] / spent["total"] for part in ("burst", "block")}


def sampled_shares(profile: Profile, thread_name: str, mode: str = "wall") -> dict[str, float]:
    """The share of ``thread_name``'s samples (weighted by ``mode``) in ``burst`` and in ``block``;
    also in neither (``other``), and the largest share one sample holds (``largest``: a clock held
    up for a while gives the sample after it the whole wait)."""
    names = {i for i, t in enumerate(profile.threads) if t.name == thread_name}
    weights = profile.weights(mode)
    found = {"burst": 0.0, "block": 0.0, "other": 0.0, "largest": 0.0, "total": 0.0}
    for stack, thread, weight in zip(
        profile.sample_stack.tolist(), profile.sample_thread.tolist(), weights.tolist()
    ):
        if thread not in names:
            continue
        functions = {profile.frames[f].name for f in profile.stack_frames(stack)}
        parts: list[str] = [part for part in ("burst", "block") if part in functions] or ["other"]
        for part in parts:
            found[part] += weight
        found["largest"] = max(found["largest"], weight)
        found["total"] += weight
    total = found.pop("total") or 1.0
    return {part: value / total for part, value in found.items()}


def compare(
    kind: str,
    *,
    rate: float,
    seconds: float,
    burst_ms: float = 1.0,
    block_ms: float = 2.0,
    in_thread: bool = False,
    others: int = 0,
    mode: str = "wall",
) -> tuple[dict, dict]:
    """Profile one run of ``loop``, in the main thread or another one, while ``others`` threads run
    loops of their own: (its own shares, the profile's shares)."""
    from flameprof.profiler import Profiler

    stop = threading.Event()

    def other() -> None:  # a background thread: mostly waiting, a little Python between
        while not stop.is_set():
            loop("socket", 0.2, 2.0, 0.05)

    background = [threading.Thread(target=other, name=f"other-{i}") for i in range(others)]
    result: dict = {}

    def measured() -> None:
        result["spent"] = loop(kind, burst_ms, block_ms, seconds)

    loop(kind, burst_ms, block_ms, 0.01)  # imports and first calls outside the window
    profiler = Profiler(rate=rate).start()
    for thread in background:
        thread.start()
    if in_thread:
        worker = threading.Thread(target=measured, name="blocking-loop")
        worker.start()
        worker.join()
    else:
        measured()
    # stopped before the background threads are joined: the measured loop is over, and the main
    # thread's wait in join (up to a background loop's 50 ms) would count as neither burst nor block
    profile = profiler.stop()
    stop.set()
    for thread in background:
        thread.join()
    name = "blocking-loop" if in_thread else threading.main_thread().name
    return shares(result["spent"][mode]), sampled_shares(profile, name, mode)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", choices=BLOCKS, default="sleep")
    parser.add_argument("--burst-ms", type=float, default=1.7)
    parser.add_argument("--block-ms", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    spent = loop(args.block, args.burst_ms, args.block_ms, args.seconds)["wall"]
    share = shares(spent)
    print(
        f"burst {100 * share['burst']:.1f} %  block {100 * share['block']:.1f} %  "
        f"(the loop's own timers, {spent['total']:.1f} s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
