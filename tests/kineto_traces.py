"""Kineto (torch.profiler) traces written here, to the format's documented fields, for the device
paths no machine here can run: one training step on a GPU whose every number is known.

Host thread 1 runs the loop, thread 2 is autograd's device thread. Times are microseconds.
The step [0, 1000): the host waits 300 us for a batch, copies it to the device, runs one Linear
(its GEMM kernel 200 us), autograd runs its backward GEMM (100 us), the optimizer an update
kernel (20 us), and the host then blocks 100 us in ``cudaDeviceSynchronize`` inside ``aten::item``.
"""

from __future__ import annotations

BASE_NS = 1_790_000_000_000_000_000
PID = 4242
LOOP, AUTOGRAD = 1, 2
STREAM = 7

# What a reader must find in GPU_STEP.
DEVICE_BUSY_US = 40 + 200 + 100 + 20  # memcpy, forward GEMM, backward GEMM, optimizer kernel
LINEAR_KERNEL_US = 200 + 100
LINEAR_FLOPS = 2 * 8 * 32 * 16 * 2  # addmm forward + mm backward, 8x32 @ 32x16
IDLE_US = 1000 - DEVICE_BUSY_US
IDLE_DATA_US = 300  # the device idles through the host's wait for data
IDLE_SYNC_US = 100  # and while the host blocks in the sync (nothing left to run)
COPY_BYTES = 4096


def _x(cat: str, name: str, ts: float, dur: float, tid: int = LOOP, pid: int = PID, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _kernel(cat: str, name: str, ts: float, dur: float, correlation: int, **args: object) -> dict:
    return _x(cat, name, ts, dur, tid=STREAM, pid=0, device=0, stream=STREAM, correlation=correlation, **args)


def _memory(ts: float, delta: int, total: int) -> dict:
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": PID,
        "tid": LOOP,
        "ts": ts,
        "args": {"Bytes": delta, "Total Allocated": total, "Device Type": 1, "Device Id": 0, "Addr": 1},
    }


def gpu_step() -> dict:
    """One traced training step on a GPU, as torch.profiler exports it (trimmed to what matters)."""
    events = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
        _x("user_annotation", "ProfilerStep#0", 0, 1000),
        _x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 300),
        _x("cpu_op", "aten::copy_", 300, 20, **{"Input Dims": [[8, 32], [8, 32], []]}),
        _x("cuda_runtime", "cudaMemcpyAsync", 302, 8, correlation=1),
        _kernel("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 310, 40, 1, bytes=COPY_BYTES),
        _x("user_annotation", "flameprof.layer: Net.0 (Linear)", 320, 100),
        _x("cpu_op", "aten::linear", 330, 80, **{"Sequence number": 5, "Fwd thread id": 0}),
        _x(
            "cpu_op",
            "aten::addmm",
            340,
            60,
            **{"Sequence number": 5, "Input Dims": [[16], [8, 32], [32, 16], [], []]},
        ),
        _x("cuda_runtime", "cudaLaunchKernel", 350, 10, correlation=2),
        _kernel("kernel", "sm90_gemm_fwd", 360, 200, 2),
        {"ph": "s", "id": 2, "pid": PID, "tid": LOOP, "ts": 350, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 2, "pid": 0, "tid": STREAM, "ts": 360, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        _memory(345, 512, 512),
        _memory(355, 1024, 1536),
        _x(
            "cpu_op",
            "autograd::engine::evaluate_function: AddmmBackward0",
            600,
            100,
            tid=AUTOGRAD,
            **{"Sequence number": 5, "Fwd thread id": 1},
        ),
        _x("cpu_op", "AddmmBackward0", 605, 90, tid=AUTOGRAD, **{"Sequence number": 5, "Fwd thread id": 1}),
        _x("cpu_op", "aten::mm", 610, 80, tid=AUTOGRAD, **{"Input Dims": [[8, 16], [16, 32]]}),
        _x("cuda_runtime", "cudaLaunchKernel", 620, 10, tid=AUTOGRAD, correlation=3),
        _kernel("kernel", "sm90_gemm_bwd", 630, 100, 3),
        _x("user_annotation", "Optimizer.step#SGD.step", 750, 50),
        _x("cpu_op", "aten::add_", 760, 30),
        _x("cuda_runtime", "cudaLaunchKernel", 770, 10, correlation=4),
        _kernel("kernel", "sgd_update", 800, 20, 4),
        _x("cpu_op", "aten::item", 840, 120),
        _x("cpu_op", "aten::_local_scalar_dense", 845, 110),
        _x("cuda_runtime", "cudaDeviceSynchronize", 850, 100),
        _memory(900, -512, 1024),
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H100",
                "totalGlobalMem": 85000000000,
                "computeMajor": 9,
                "computeMinor": 0,
            }
        ],
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": events,
    }


# What a reader must find in DDP_STEP, on the loop thread (microseconds of its own time).
DDP_PHASES_US = {"forward": 300, "backward": 290, "optimizer": 200, "comm": 50, "other": 160}


def ddp_step() -> dict:
    """One DistributedDataParallel step as torch.profiler records it on a GPU, with the program's own
    phase annotations (``## forward ##``) but none around backward. The loop thread's step [0, 1000):
    forward [0, 300), then it waits in ``backward()`` [300, 700) with no event of its own while
    autograd's device thread runs the backward [310, 600) (an autograd node, DDP's bucket copy and
    its all_reduce), the optimizer [700, 900), a broadcast [900, 950), and 50 us of untraced work."""
    events = [
        _x("user_annotation", "ProfilerStep#0", 0, 1000),
        _x("user_annotation", "## forward ##", 0, 300),
        _x("user_annotation", "DistributedDataParallel.forward", 5, 290),
        _x("cpu_op", "aten::linear", 10, 280, **{"Sequence number": 9}),
        _x("cpu_op", "aten::addmm", 20, 260, **{"Sequence number": 9}),
        _x(
            "cpu_op",
            "autograd::engine::evaluate_function: AddmmBackward0",
            310,
            190,
            tid=AUTOGRAD,
            **{"Sequence number": 9, "Fwd thread id": 1},
        ),  # fmt: skip
        _x("cpu_op", "AddmmBackward0", 315, 180, tid=AUTOGRAD, **{"Sequence number": 9}),
        _x("cpu_op", "torch.distributed.ddp.reducer::copy_bucket_to_grad", 500, 20, tid=AUTOGRAD),
        _x("user_annotation", "nccl:all_reduce", 520, 80, tid=AUTOGRAD),
        _x("cpu_op", "c10d::allreduce_", 525, 70, tid=AUTOGRAD),
        _x("user_annotation", "## optimizer ##", 700, 200),
        _x("user_annotation", "Optimizer.step#SGD.step", 710, 180),
        _x("cpu_op", "aten::add_", 720, 160),
        _x("cpu_op", "c10d::broadcast_", 900, 50),
    ]
    return {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": events}


# COMM_STEPS: a data-parallel loop whose all_reduce runs on its own stream. Per step (offset o):
COMM_STREAM = 20
RELU_US = (10, 6, 14)  # the one kernel whose duration changes from step to step
GEMM, ALL_REDUCE = (
    "sm90_gemm_fwd",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
)
ORPHAN = "orphan_kernel"  # in step 0 only, its runtime call (correlation id 999) not in the trace


def comm_steps() -> dict:
    """Three steps of 1000 us. Stream 7: a GEMM [100, 400), a copy [400, 420), a ReLU from 430
    (``RELU_US``), launched early; an update [870, 900) launched at 850. Stream 20: the all_reduce
    [300, 800), launched at 40 inside ``c10d::allreduce_`` [38, 48). Another thread blocks in
    ``cudaStreamSynchronize`` [900, 950). Times are whole microseconds (HTA rounds to them)."""
    events: list[dict] = []
    correlation = 0

    def launched(
        cat: str, name: str, call: str, at: float, start: float, dur: float, stream: int = STREAM
    ) -> None:
        nonlocal correlation
        correlation += 1
        events.append(_x("cuda_runtime", call, at, 5, correlation=correlation))
        events.append(
            _x(cat, name, start, dur, tid=stream, pid=0, device=0, stream=stream, correlation=correlation)
        )

    for step, relu in enumerate(RELU_US):
        o = 1000 * step
        events.append(_x("user_annotation", f"ProfilerStep#{step}", o, 1000))
        events.append(_x("cpu_op", "aten::addmm", o + 10, 25))
        launched("kernel", GEMM, "cudaLaunchKernel", o + 20, o + 100, 300)
        events.append(_x("cpu_op", "c10d::allreduce_", o + 38, 10))
        launched("kernel", ALL_REDUCE, "cudaLaunchKernel", o + 40, o + 300, 500, stream=COMM_STREAM)
        launched("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", "cudaMemcpyAsync", o + 50, o + 400, 20)
        launched("kernel", "relu_kernel", "cudaLaunchKernel", o + 60, o + 430, relu)
        events.append(_x("cpu_op", "aten::add_", o + 845, 20))
        launched("kernel", "sgd_update", "cudaLaunchKernel", o + 850, o + 870, 30)
        events.append(_x("cuda_runtime", "cudaStreamSynchronize", o + 900, 50, tid=3))
    events.append(_x("kernel", ORPHAN, 950, 10, tid=STREAM, pid=0, device=0, stream=STREAM, correlation=999))
    return {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": events}
