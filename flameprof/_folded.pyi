# Types of flameprof._folded, the C reader of folded stacks (native/folded.c).
from collections.abc import Callable
from typing import final

from _typeshed import ReadableBuffer

@final  # a C type: not subclassable
class FoldedParser:
    """Collapsed-stack text fed in chunks -> stack table and lines."""

    def __init__(self, frame_id: Callable[[str], int], strict: bool = True) -> None: ...
    def feed(self, data: ReadableBuffer, /) -> bool: ...
    def finish(
        self,
    ) -> tuple[bytearray, bytearray, bytearray, bytearray, int, int, tuple[int, bytes] | None]: ...
