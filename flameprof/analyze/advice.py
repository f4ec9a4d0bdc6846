"""The verdict (is the loop input-bound?) and concrete advice, from an Analysis.

Thresholds are the field's usual ones: HIGHLY input-bound when data loading (``data.wait`` +
``data.fetch``) is at least 20 % of steady-state step time, MODERATELY at 5 %, otherwise not.
Without steps, the loop thread's whole run is the basis. Each piece of advice is emitted only when
the profile shows the problem, and says how much time it is about; one that names a remedy checks
the profile for what the remedy assumes (more DataLoader workers help only when the workers are
busy while the loop waits; persistent workers only when workers restart during the run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..model.counters import PAGE_FAULTS_PER_S, SYSTEM_CPU_PERCENT
from ..model.merge import counter_key
from ..model.phase_names import LEAF_PHASES
from ..model.profile import Frame, Profile
from .breakdown import Analysis, stack_has
from .device_phases import DeviceTimeSection
from .processes import ProcessAnalysis
from .steps import data_share

HIGHLY = 0.20
MODERATELY = 0.05
SYNC_ADVICE = 0.02  # host syncs worth a note, share of the basis
COMM_ADVICE = 0.10  # collective waits worth a note
DISPATCH_ADVICE = 0.10  # nn.Module call machinery, share of forward
WORKER_START_ADVICE = 0.01
WORKERS_BUSY = 0.5  # workers building batches this share of the loop's waits: more of them would help
KERNEL_ADVICE = 0.10  # the process in the kernel this share of the time, while it page-faults ...
FAULTS_ADVICE = 10_000  # ... this many times a second (40 MB/s of fresh 4 KB pages, more in huge pages)

_LEVEL_TEXT = {
    "highly": "HIGHLY input-bound",
    "moderately": "MODERATELY input-bound",
    "not": "not input-bound",
    "unknown": "no training or inference loop found",
}
_BASIS_TEXT = {"steady-state steps": "steady-state step", "whole run": "the loop thread's"}


@dataclass
class Verdict:
    level: str  # "highly", "moderately", "not" or "unknown"
    data_share: float  # fraction of the basis spent in data
    basis: str  # "steady-state steps", "whole run" or "device time"
    text: str
    advice: list[str] = field(default_factory=list)


def verdict_level(share: float) -> str:
    """``highly`` at >= 20 %, ``moderately`` at >= 5 %, else ``not``."""
    if share >= HIGHLY:
        return "highly"
    if share >= MODERATELY:
        return "moderately"
    return "not"


def basis_seconds(analysis: Analysis) -> tuple[np.ndarray, str]:
    """Seconds per leaf phase the verdict is based on: steady-state steps when there are any."""
    steps = analysis.steps
    if steps.count and steps.steady.any():
        seconds = steps.steady_phase_seconds()
        if seconds.sum() > 0:
            return seconds, "steady-state steps"
    return analysis.phase_seconds, "whole run"


def judge(analysis: Analysis, processes: ProcessAnalysis | None = None) -> Verdict:
    """The verdict and the advice that applies to this profile (``processes``: its cross-process
    analysis, for what the DataLoader workers did while the loop waited)."""
    if not analysis.is_deep_learning:
        return Verdict("unknown", 0.0, "whole run", _LEVEL_TEXT["unknown"])
    seconds, basis = basis_seconds(analysis)
    share = data_share(seconds)
    level = verdict_level(share)
    total = float(seconds.sum())
    pct = {p: 100.0 * float(seconds[i]) / total if total else 0.0 for i, p in enumerate(LEAF_PHASES)}
    text = (
        f"{_LEVEL_TEXT[level]}: {100 * share:.1f}% of {_BASIS_TEXT[basis]} time is data loading "
        f"(wait {pct['data.wait']:.1f}%, fetch {pct['data.fetch']:.1f}%)"
    )
    return Verdict(level, share, basis, text, advise(analysis, share, pct, processes))


def judge_on_device(verdict: Verdict, device: DeviceTimeSection | None) -> Verdict:
    """On a GPU run (device time stamped by CUDA events), input-bound means the device idles while the
    host waits for data: the verdict's level and share come from the device's own time per step,
    the advice stays the samples'. Without CUDA stamps, ``verdict`` as it is."""
    if device is None or device.clock != "cuda" or verdict.level == "unknown":
        return verdict
    share = device.data_wait_percent / 100
    level = verdict_level(share)
    text = (
        f"{_LEVEL_TEXT[level]}: the device idles {100 * share:.1f}% of its step time while the host waits "
        f"for data ({device.steps} steady-state steps of device time)"
    )
    return Verdict(level, share, "device time", text, verdict.advice)


def advise(
    analysis: Analysis, share: float, pct: dict[str, float], processes: ProcessAnalysis | None = None
) -> list[str]:
    out: list[str] = []
    if share >= MODERATELY:
        out += _data_advice(analysis, pct, processes)
    if pct["sync"] >= 100 * SYNC_ADVICE:
        out.append(
            f"Host synchronisation takes {pct['sync']:.1f}% of the loop: avoid per-step .item(), .cpu(), "
            "printing tensors and torch.cuda.synchronize(); accumulate metrics on the device and read "
            "them every N steps. (.item()/.to() without native stacks show up in the calling line.)"
        )
    if pct["comm"] >= 100 * COMM_ADVICE:
        out.append(
            f"Collectives take {pct['comm']:.1f}% of the loop: time this rank waits in all_reduce, "
            "broadcast, barrier or gathers, mostly for slower ranks. Compare the ranks' phases "
            "(flameprof report on the merged job profile names the slowest) and balance their work; "
            "fewer, larger collectives (bucketing, gradient accumulation) cut the rest."
        )
    out += _forward_advice(analysis)
    out += _page_fault_advice(analysis)
    return out


def _counter(profile: Profile, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The main process's series ``name`` (a merged job's counters are named ``main: <name>``)."""
    return profile.counters.get(name) or profile.counters.get(counter_key("main", name))


def fresh_memory(analysis: Analysis) -> tuple[float, float] | None:
    """The share of its time the process spends in the kernel and its page faults a second, when it
    faults fresh memory in all the time: an allocator that gives freed blocks back to the system
    (glibc does for blocks of megabytes, a CPU model's activations) and takes them again for the next
    tensors, each page zeroed by the kernel. Over the steady-state steps (or the run); None when it
    does not."""
    profile = analysis.profile
    kernel, faults = _counter(profile, SYSTEM_CPU_PERCENT), _counter(profile, PAGE_FAULTS_PER_S)
    if kernel is None or faults is None or not len(kernel[0]) or not len(faults[0]):
        return None
    steps = analysis.steps
    steady = np.flatnonzero(steps.steady) if steps.count else np.zeros(0, dtype=np.int64)
    if len(steady):
        start, end = float(steps.bounds[steady[0]]), float(steps.bounds[steady[-1] + 1])
    else:
        start, end = -np.inf, np.inf
    in_kernel = kernel[1][(kernel[0] > start) & (kernel[0] <= end)]
    per_second = faults[1][(faults[0] > start) & (faults[0] <= end)]
    if not len(in_kernel) or not len(per_second):
        return None
    share, rate = float(in_kernel.mean()) / 100, float(per_second.mean())
    return (share, rate) if share >= KERNEL_ADVICE and rate >= FAULTS_ADVICE else None


def _page_fault_advice(analysis: Analysis) -> list[str]:
    """Keep the memory, where the process faults it in afresh all the time (``fresh_memory``)."""
    found = fresh_memory(analysis)
    if found is None:
        return []
    share, rate = found
    steps = analysis.steps
    step = ""
    if steps.count and steps.steady.any():
        step = f", {rate * float(np.median(steps.walls[steps.steady])):,.0f} a step"
    return [
        f"The process spends {100 * share:.0f}% of its time in the kernel and takes {rate:,.0f} page faults "
        f"a second{step}: memory its tensors free goes back to the system and is faulted in again, "
        "zeroed, for the next ones. Keep it: preload jemalloc or tcmalloc (LD_PRELOAD), or run with "
        "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=268435456 (glibc); that saves up to "
        f"the {100 * share:.0f}%."
    ]


def _file_is(*suffixes: str) -> Callable[[Frame], bool]:
    return lambda f: f.file.replace("\\", "/").endswith(suffixes)


def _named(*names: str) -> Callable[[Frame], bool]:
    return lambda f: f.name in names


def _data_advice(analysis: Analysis, pct: dict[str, float], processes: ProcessAnalysis | None) -> list[str]:
    p = analysis.profile
    out = []
    single = stack_has(p, _named("_SingleProcessDataLoaderIter._next_data"))
    if analysis.seconds_where(single) > 0:
        out.append(
            f"Batches are built in the training process ({pct['data.fetch']:.1f}% in dataset, collate and "
            "transforms): set DataLoader(num_workers=N) (start with the number of CPU cores, e.g. 4) so "
            "workers prepare batches in parallel with compute."
        )
    if pct["data.wait"] >= 100 * MODERATELY:
        out.append(_wait_advice(analysis, pct["data.wait"], processes))
    starts = stack_has(
        p,
        _named("_MultiProcessingDataLoaderIter.__init__", "_MultiProcessingDataLoaderIter._shutdown_workers"),
    )
    # restarts during the steps (a new epoch's iterator), not the first start before them
    restarting = analysis.loop_mask() & np.append(starts, False)[p.sample_stack]
    restarting &= p.sample_time > analysis.steps.start if analysis.steps.count else False
    start_s = float(p.sample_wall[restarting].sum())
    if analysis.loop_seconds and start_s / analysis.loop_seconds >= WORKER_START_ADVICE:
        out.append(
            f"Restarting DataLoader workers during the run took {start_s:.2f} s: set persistent_workers=True "
            "so workers survive between epochs."
        )
    if _sampled(p, _uses_cuda) and not _sampled(p, _file_is("torch/utils/data/_utils/pin_memory.py")):
        out.append(
            "The model uses CUDA but batches are not pinned: set pin_memory=True and copy with "
            ".to(device, non_blocking=True)."
        )
    return out


def _wait_advice(analysis: Analysis, wait_pct: float, processes: ProcessAnalysis | None) -> str:
    """What to do about the loop waiting for worker batches: more workers when they were busy
    building batches meanwhile, cheaper hand-over when they idled."""
    busy, idle, workers = _worker_activity(processes)
    if workers and busy + idle > 0:
        share = busy / (busy + idle)
        if share < WORKERS_BUSY:
            return (
                f"The loop waits {wait_pct:.1f}% of the time for worker batches while its {workers} "
                f"DataLoader worker(s) were busy building batches only {100 * share:.0f}% of that time: the "
                "cost is handing batches over (pickling through the worker queue, rebuilding tensors, "
                "collate, pin_memory), not making them, and more workers will not help. Return a few large "
                "tensors per batch rather than numpy arrays, lists or dicts of small ones (those are "
                "pickled); send compact dtypes (uint8 images, normalise on the device); use "
                "pin_memory=True only when copying to a GPU."
            )
        return (
            f"The loop waits {wait_pct:.1f}% of the time for worker batches while its {workers} DataLoader "
            f"worker(s) were busy building them {100 * share:.0f}% of that time: raise num_workers and "
            "prefetch_factor (default 2), and make Dataset.__getitem__ cheaper (decode, resize, augment "
            "less per sample or cache preprocessed data)."
        )
    return (
        f"The loop waits {wait_pct:.1f}% of the time for worker batches; the workers are not in this "
        "profile (profile with flameprof run to see them). If they are busy meanwhile, raise num_workers "
        "and prefetch_factor and make Dataset.__getitem__ cheaper; if they idle, the cost is handing "
        "batches over (pickling, collate, pin_memory): return fewer, larger tensors."
    )


def _worker_activity(processes: ProcessAnalysis | None) -> tuple[float, float, int]:
    """(seconds building batches, seconds otherwise, workers) of the DataLoader workers of the loop
    that waited longest for them, inside its waits; zeros when no worker was profiled."""
    loops = [loop for loop in (processes.loops if processes else []) if loop.workers]
    if not loops:
        return 0.0, 0.0, 0
    loop = max(loops, key=lambda each: each.data_wait)
    return sum(w.busy for w in loop.workers), sum(w.idle for w in loop.workers), len(loop.workers)


def _sampled(profile: Profile, predicate: Callable[[Frame], bool]) -> bool:
    """Did any sample, on any thread, run inside a frame for which ``predicate`` is true?"""
    stacks = profile.sample_stack[profile.sample_stack >= 0]
    return bool(stack_has(profile, predicate)[stacks].any())


def _uses_cuda(frame: Frame) -> bool:
    """A frame only a program that runs on a GPU has: CUDA initialisation, synchronisation, streams
    (importing torch.cuda or seeding it happens on CPU-only machines too)."""
    path = frame.file.replace("\\", "/")
    if "/torch/cuda/" not in path:
        return False
    return frame.name in ("_lazy_init", "synchronize") or path.endswith("/torch/cuda/streams.py")


def _forward_advice(analysis: Analysis) -> list[str]:
    p = analysis.profile
    forward = float(analysis.phase_seconds[LEAF_PHASES.index("forward")])
    if forward <= 0:
        return []
    out = []
    # Leaf in nn.Module's call machinery = time in Python dispatch and hooks, not in an op.
    in_module_py = _file_is("torch/nn/modules/module.py")
    leaf_module = np.asarray([in_module_py(f) for f in p.frames], dtype=bool)[p.stack_frame]
    dispatch = analysis.seconds_where(leaf_module, ["forward"])
    if dispatch / forward >= DISPATCH_ADVICE:
        out.append(
            f"{100 * dispatch / forward:.0f}% of forward is Python overhead in nn.Module calls (hooks, "
            "_call_impl): use fewer, larger modules, larger batches, or torch.compile to fuse them."
        )
    return out  # what to change in the model's graph: graph_advice.py
