"""A loop of light (1 ms) and heavy (3 ms) Python work beside 16 mostly idle threads, timing both
parts itself: run past a small ``--max-memory`` (many rows a tick), the profile folds its oldest
samples while the loop runs, and its shares are checked against the loop's own timers
(tests/test_memory_limit.py, ``scripts/bench_memory.py accuracy``):

    flameprof run --rate 2000 --max-memory 1M -m flameprof.examples.budget_loop 6 truth.json

It writes its step count and the seconds spent in ``light`` and ``heavy`` to the JSON file named.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import TYPE_CHECKING

import flameprof

if TYPE_CHECKING:
    from flameprof.model.profile import Profile


def light() -> None:
    end = time.perf_counter() + 0.001
    while time.perf_counter() < end:
        pass


def heavy() -> None:
    end = time.perf_counter() + 0.003
    while time.perf_counter() < end:
        pass


def run(seconds: float) -> dict[str, float]:
    """The loop, for ``seconds``: its steps and the seconds it spent in each part."""
    stop = threading.Event()

    def idle() -> None:
        while not stop.is_set():
            time.sleep(0.01)

    helpers = [threading.Thread(target=idle) for _ in range(16)]  # rows: one per thread and tick
    for t in helpers:
        t.start()
    spent = {"steps": 0.0, "light": 0.0, "heavy": 0.0}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        light()
        t1 = time.perf_counter()
        heavy()
        t2 = time.perf_counter()
        spent["light"] += t1 - t0
        spent["heavy"] += t2 - t1
        flameprof.step()
        spent["steps"] += 1
    stop.set()
    for t in helpers:
        t.join()
    return spent


def sampled_seconds(profile: Profile, thread: int) -> dict[str, float]:
    """The wall seconds ``thread``'s samples give ``light`` and ``heavy``."""
    import numpy as np

    names = np.array([frame.name for frame in profile.frames] + [""])
    leaf = names[np.where(profile.sample_stack >= 0, profile.stack_frame[profile.sample_stack], -1)]
    mine = profile.sample_thread == thread
    return {part: float(profile.sample_wall[mine & (leaf == part)].sum()) for part in ("light", "heavy")}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    with open(args[1], "w") as fh:
        json.dump(run(float(args[0])), fh)


if __name__ == "__main__":
    main()
