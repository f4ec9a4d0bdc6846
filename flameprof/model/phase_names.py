"""The phase vocabulary of the whole profile: sampled stacks (analyze/phases.py) and traced ops and
kernels (model/trace.py, collect/importers/kineto.py) name their phases from these tuples, so a
report's phase means one thing wherever it came from."""

from __future__ import annotations

# The phases reports list, in their order; ``data`` is ``data.wait`` + ``data.fetch``.
PHASES = ("data", "forward", "backward", "optimizer", "sync", "comm", "eval", "checkpoint", "other")
# A sampled stack's phase: ``data`` split into waiting for a batch and fetching one in this process.
LEAF_PHASES = ("data.wait", "data.fetch", *PHASES[1:])
# A traced event's ``phase`` column indexes PHASES. Files written before the vocabulary was shared
# indexed this tuple, and say nothing of it in trace.json (model/storage.py maps them).
TRACE_PHASES_BEFORE_SHARED = ("data", "forward", "backward", "optimizer", "sync", "other", "comm")
