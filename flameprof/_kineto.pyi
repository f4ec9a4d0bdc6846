# Types of flameprof._kineto, the C reader of torch.profiler traces and its walks (native/kineto.c).
from typing import final

import numpy as np

@final  # a C type: not subclassable
class Scanner:
    """The events of a traceEvents array, fed a buffer at a time, as columns."""

    def __init__(self, categories: dict[str, int]) -> None: ...
    def feed(self, buffer: bytes, pos: int, /) -> tuple[int, int]: ...
    def take(self, column: int, /) -> memoryview: ...  # a buffer: numpy's frombuffer reads it
    def counts(self) -> tuple[int, int]: ...
    def strings(self) -> tuple[list[bytes], list[bytes]]: ...

def nest(
    order: np.ndarray,
    new_thread: np.ndarray,
    time: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    memory_event: np.ndarray,
    /,
) -> None: ...
def attribute(
    order: np.ndarray,
    parent: np.ndarray,
    kind: np.ndarray,
    declared: np.ndarray,
    mode: np.ndarray,
    layer_name: np.ndarray,
    pid: np.ndarray,
    seq: np.ndarray,
    engine: np.ndarray,
    layer: np.ndarray,
    phase: np.ndarray,
    codes: np.ndarray,
    /,
) -> list[tuple[int, int]]: ...
def stacks(
    order: np.ndarray,
    parent: np.ndarray,
    frames: np.ndarray,
    waited: np.ndarray,
    sid: np.ndarray,
    wait_sid: np.ndarray,
    engine: np.ndarray,
    /,
) -> tuple[bytearray, bytearray]: ...
