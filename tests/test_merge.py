"""Merging profiles of several processes and machines, part files, and the analysis across processes."""

import os
import time
import zipfile

import numpy as np
import pytest
from conftest import assert_one_error_line, run_flameprof
from synthetic import PHASE_STACKS, TORCH, training_profile

from flameprof.analyze.processes import analyze_processes, process_lines, processes_section
from flameprof.collect.jobs.parts import PartWriter, part_files
from flameprof.collect.jobs.tree import ProcessTree
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.merge import merge_profiles
from flameprof.model.profile import Frame, Mark, ProcessInfo
from flameprof.model.validate import check_profile

WORKER_LOOP = Frame("_worker_loop", TORCH + "utils/data/_utils/worker.py", 200)
FETCH = Frame("_MapDatasetFetcher.fetch", TORCH + "utils/data/_utils/fetch.py", 40)
GETITEM = Frame("ImageDataset.__getitem__", "/work/data.py", 12)
QUEUE_GET = Frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 90)


def single(start_time, pid, host, frames_by_tick, role=None, tid=None):
    """A one-process profile: one sample of 10 ms per entry of ``frames_by_tick`` on one thread."""
    b = ProfileBuilder({"start_time": start_time, "pid": pid, "host": host, "argv": ["job.py"]})
    if role is not None:
        b.process(ProcessInfo(pid, role, host, "python job.py", 1))
    thread = b.thread_id(pid, tid or pid, "MainThread")
    for i, frames in enumerate(frames_by_tick):
        b.add_stack_sample(frames, 0.01, thread, time=0.01 * (i + 1))
    b.meta["duration"] = 0.01 * len(frames_by_tick)
    return b.build()


def roots(profile):
    """{root frame name: seconds}."""
    out = {}
    for stack, wall in zip(profile.sample_stack.tolist(), profile.sample_wall.tolist()):
        name = profile.frames[profile.stack_frames(stack)[0]].name if stack >= 0 else ""
        out[name] = out.get(name, 0.0) + wall
    return out


def test_merge_rebases_time_and_roots_each_process():
    main = single(1000.0, 10, "a", [PHASE_STACKS["data"]] * 3)
    worker = single(1002.0, 11, "a", [[WORKER_LOOP, FETCH, GETITEM]] * 2, role="dataloader worker 0")
    merged = merge_profiles([main, worker])
    check_profile(merged)
    assert merged.meta["start_time"] == 1000.0 and merged.meta["process_count"] == 2
    assert merged.duration == pytest.approx(2.02)
    assert roots(merged) == pytest.approx({"main": 0.03, "dataloader worker 0": 0.02})
    worker_times = merged.sample_time[[merged.threads[t].pid == 11 for t in merged.sample_thread]]
    assert worker_times.tolist() == pytest.approx([2.01, 2.02])
    assert all(merged.frames[merged.stack_frames(int(s))[0]].kind == "process" for s in merged.sample_stack)
    assert [p.role for p in merged.processes] == ["main", "dataloader worker 0"]
    # each frame is interned once, and the process frame is the only new one
    assert len(merged.frames) == len(set(merged.frames)) == len(set(main.frames) | set(worker.frames)) + 2


def test_same_pid_and_tid_on_two_hosts_stay_apart_and_remerging_adds_no_roots():
    a = single(1000.0, 1, "node-a", [PHASE_STACKS["encoder"]] * 4)
    b = single(1000.5, 1, "node-b", [PHASE_STACKS["backward"]] * 2)
    merged = merge_profiles([a, b])
    assert len(merged.threads) == 2 and merged.threads[0] == merged.threads[1]  # same pid and tid
    assert roots(merged) == pytest.approx({"main on node-a": 0.04, "main on node-b": 0.02})
    assert merged.meta["hosts"] == ["node-a", "node-b"]
    again = merge_profiles([merged, single(999.0, 7, "node-c", [PHASE_STACKS["head"]])])
    assert roots(again) == pytest.approx(
        {"main on node-a": 0.04, "main on node-b": 0.02, "main on node-c": 0.01}
    )
    assert again.meta["start_time"] == 999.0
    assert again.sample_time.min() == pytest.approx(0.01)


def test_a_single_process_is_left_without_a_root_and_unused_tables_are_dropped():
    b = ProfileBuilder({"start_time": 5.0, "pid": 3})
    t = b.thread_id(3, 3, "MainThread")
    b.thread_id(2, 2, "parent thread")  # a forked child's part carries its parent's tables
    b.stack_id([b.frame(f) for f in PHASE_STACKS["optimizer"]])
    b.add_stack_sample(PHASE_STACKS["head"], 0.01, t, time=0.01)
    merged = merge_profiles([b.build()])
    assert [f.name for f in merged.frames] == [f.name for f in PHASE_STACKS["head"]]
    assert [t.name for t in merged.threads] == ["MainThread"]


def test_merge_command_keeps_both_hosts(tmp_path, write_script):
    script = write_script(
        "work.py", "import time\nend = time.time() + 0.3\nwhile time.time() < end:\n    pass\n"
    )
    for name in ("a", "b"):
        proc = run_flameprof("run", "-q", "--no-subprocesses", "-o", str(tmp_path / name), script)
        assert proc.returncode == 0, proc.stderr
    other = storage.load(tmp_path / "b" / "profile.flameprof")
    other.meta["host"] = "node-b"  # as if taken on another machine
    storage.save(other, tmp_path / "b" / "profile.flameprof")
    out = tmp_path / "all.flameprof"
    proc = run_flameprof(
        "merge",
        str(tmp_path / "a" / "profile.flameprof"),
        str(tmp_path / "b" / "profile.flameprof"),
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 processes on 2 host(s)" in proc.stderr
    merged = storage.load(out)
    hosts = {p.host for p in merged.processes}
    assert "node-b" in hosts and len(hosts) == 2
    assert set(roots(merged)) == {f"main on {h}" for h in hosts}

    assert_one_error_line(
        run_flameprof("merge", str(tmp_path / "nope.flameprof"), "-o", str(out)), "nope.flameprof"
    )
    (tmp_path / "bad.flameprof").write_bytes(b"PK\x03\x04 truncated")
    assert_one_error_line(
        run_flameprof("merge", str(tmp_path / "bad.flameprof"), "-o", str(out)), "bad.flameprof"
    )
    assert_one_error_line(run_flameprof("merge", str(out), "-o", str(tmp_path / "x.svg")), ".flameprof")


def test_part_writer_writes_new_samples_atomically_readable_by_storage(tmp_path):
    b = ProfileBuilder()
    t = b.thread_id(5, 5, "MainThread")
    b.add_stack_sample(PHASE_STACKS["encoder"], 0.01, t, time=0.01)
    b.marks.append(Mark(0.01, t, "step"))
    b.forget_samples()  # as a forked child does: its parent's samples and marks are not its own
    writer = PartWriter(str(tmp_path), b, "host", 5)
    b.add_stack_sample(PHASE_STACKS["head"], 0.02, t, time=0.03, cpu=0.005)
    b.marks.append(Mark(0.03, t, "step"))
    writer.write(
        ProcessInfo(5, "", "host", "python x.py", 1), {"pid": 5, "start_time": 7.0}, {"rss": ([0.02], [1e6])}
    )
    b.add_stack_sample(PHASE_STACKS["backward"], 0.01, t, time=0.04)
    writer.write(
        ProcessInfo(5, "rank 0", "host", "python x.py", 1), {"pid": 5, "start_time": 7.0}, {}, final=True
    )
    assert part_files(str(tmp_path)) == [str(tmp_path / "part-host-5.flameprof")]
    assert os.listdir(tmp_path) == ["part-host-5.flameprof"]
    part = storage.load(tmp_path / "part-host-5.flameprof")
    assert part.meta["final"] is True and part.processes == [
        ProcessInfo(5, "rank 0", "host", "python x.py", 1)
    ]
    assert part.sample_time.tolist() == [0.03, 0.04] and part.sample_wall.tolist() == [0.02, 0.01]
    assert part.sample_cpu.tolist() == [0.005, 0.01]
    assert [m.name for m in part.marks] == ["step"]
    assert [part.frames[f].name for f in part.stack_frames(int(part.sample_stack[1]))] == [
        f.name for f in PHASE_STACKS["backward"]
    ]


def spin_under_native_sampler(rate: float, seconds: float):
    """(builder, stopped C sampler) after ``seconds`` of a spinning loop sampled at ``rate``."""
    native = pytest.importorskip("flameprof.collect.engine.c_sampler")
    b = ProfileBuilder()
    sampler = native.CSampler(b, rate)
    sampler.start()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    sampler.stop()
    return b, sampler


def test_part_writer_reads_the_native_sampler_without_numpy_and_agrees(tmp_path):
    b, _ = spin_under_native_sampler(500, 0.2)
    writer = PartWriter(str(tmp_path), b, "h", 1)
    writer.write(ProcessInfo(1), {"pid": 1}, {})
    part, built = storage.load(writer.path), b.build()
    assert part.num_samples == built.num_samples > 10
    assert np.allclose(part.sample_time, built.sample_time, atol=1e-6)
    assert np.allclose(part.sample_wall, built.sample_wall, atol=1e-6)
    assert part.sample_stack.tolist() == built.sample_stack.tolist()
    assert part.sample_thread.tolist() == built.sample_thread.tolist()


def test_a_part_is_written_in_few_system_calls_and_checksummed_in_small_pieces(tmp_path, monkeypatch):
    """Each system call of a flush, and each checksum of more than 5 KB (zlib lets the GIL go for
    those), lets the GIL go, and the sampler's thread that flushes waits behind the program's busy
    threads to take it back: a part of a few hundred kilobytes is written in one call, and checksummed
    a few kilobytes at a time, and still reads back whole."""
    from flameprof.collect.jobs import parts

    b, _ = spin_under_native_sampler(2000, 1.0)  # columns of 8-16 KB
    sizes, crcs = [], []
    real_fdopen, real_crc = os.fdopen, zipfile.crc32

    class Counted:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            sizes.append(len(data))
            return self.fh.write(data)

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.fh.__exit__(*exc)

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: Counted(real_fdopen(*a, **k)))
    monkeypatch.setattr(zipfile, "crc32", lambda data, crc=0: crcs.append(len(data)) or real_crc(data, crc))
    writer = PartWriter(str(tmp_path), b, "h", 1)
    writer.write(ProcessInfo(1), {"pid": 1}, {})
    size = os.path.getsize(writer.path)
    assert sizes == [size] and size > 10 * parts.CRC_PIECE  # one write, of the whole part
    # the columns in pieces; only the six JSON tables (a few KB here) may be checksummed whole
    assert len(crcs) > 10 and len([n for n in crcs if n > parts.CRC_PIECE]) <= 6

    monkeypatch.setattr(parts, "WRITE_BLOCK", size // 3)  # a part larger than a block: a write per block
    sizes.clear()
    writer.write(ProcessInfo(1), {"pid": 1}, {}, final=True)
    assert len(sizes) in (3, 4) and sum(sizes) == os.path.getsize(writer.path)
    assert storage.load(writer.path).num_samples == b.build().num_samples


def test_a_part_of_folded_samples_is_the_profile_the_builder_builds(tmp_path):
    """Past its memory limit a process's part holds the folded rows and the raw ones, as a profile
    built in the process would, read from the C buffers in chunks."""
    from flameprof.collect.engine.memory_limit import MemoryLimit
    from flameprof.collect.jobs import parts

    b, sampler = spin_under_native_sampler(2000, 0.3)
    MemoryLimit(b, 2**20).fold(len(sampler) * 12)  # about half the rows
    b.marks.append(Mark(0.01, 0, "step"))
    assert b.windowed.samples and len(sampler)
    chunk, parts.CHUNK_TICKS = parts.CHUNK_TICKS, 7  # many chunks
    try:
        writer = PartWriter(str(tmp_path), b, "h", 1)
        writer.write(ProcessInfo(1), {"pid": 1}, {})
    finally:
        parts.CHUNK_TICKS = chunk
    part, built = storage.load(writer.path), b.build()
    assert part.meta["folded"]["samples"] == b.windowed.samples
    assert part.num_samples == built.num_samples < b.num_samples
    assert np.allclose(part.sample_time, built.sample_time, atol=1e-6)
    assert np.allclose(part.sample_wall, built.sample_wall, atol=1e-6)
    assert np.allclose(part.sample_cpu, built.sample_cpu, atol=2e-6)
    assert part.sample_stack.tolist() == built.sample_stack.tolist()
    assert [m.name for m in part.marks] == [m.name for m in built.marks]


def test_collect_warns_once_per_bad_part_and_keeps_the_rest(tmp_path, capsys):
    tree = ProcessTree(str(tmp_path), 100.0)
    assert (os.stat(tree.directory).st_mode & 0o777) == 0o700
    good = single(10.0, 21, "h", [PHASE_STACKS["head"]] * 2, role="")
    good.meta["final"] = True
    storage.save(good, os.path.join(tree.directory, "part-h-21.flameprof"))
    with open(os.path.join(tree.directory, "part-h-22.flameprof"), "wb") as fh:
        fh.write(b"PK\x03\x04 half a part")
    main = single(9.0, 20, "h", [PHASE_STACKS["data"]] * 3)
    merged = tree.collect(main, main_pid=20)
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith("flameprof: warning:") and "part-h-22" in warnings[0]
    assert roots(merged) == pytest.approx({"main": 0.03, "python job.py": 0.02})  # unnamed: its command line
    assert not os.path.exists(tree.directory)


def worker_profile(start_time, pid, busy_ticks, idle_ticks, role="dataloader worker 0"):
    return single(
        start_time,
        pid,
        "h",
        [[WORKER_LOOP, FETCH, GETITEM]] * busy_ticks + [[WORKER_LOOP, QUEUE_GET]] * idle_ticks,
        role=role,
    )


def test_workers_busy_and_idle_while_main_waits_for_data():
    main = training_profile({"data": 10, "encoder": 5}, steps=4)  # waits 0.1 s per 0.15 s step
    main.processes = [ProcessInfo(100, "main", "h")]
    # worker 0 fetches during the main's first 0.1 s wait, then idles; worker 1 idles throughout
    w0 = worker_profile(main.meta["start_time"], 201, busy_ticks=10, idle_ticks=50)
    w1 = worker_profile(main.meta["start_time"], 202, busy_ticks=0, idle_ticks=60, role="dataloader worker 1")
    result = analyze_processes(merge_profiles([main, w0, w1]))
    (loop,) = result.loops
    assert loop.role == "main" and loop.data_wait == pytest.approx(0.4)
    activity = {w.role: (w.busy, w.idle) for w in loop.workers}
    assert activity["dataloader worker 0"] == pytest.approx((0.1, 0.3))
    assert activity["dataloader worker 1"] == pytest.approx((0.0, 0.4))
    assert "busy 12% of the time" in process_lines(result)[0]
    assert analyze_processes(main) is None


def test_slowest_rank_is_named_with_its_excess():
    ranks = []
    for rank, encoder_ticks in ((0, 5), (1, 7)):
        p = training_profile({"data": 1, "encoder": encoder_ticks, "backward": 4}, steps=8)
        p.processes = [ProcessInfo(300 + rank, f"rank {rank}", "h", "python train.py", 1)]
        p.threads = [type(t)(300 + rank, t.tid, t.name) for t in p.threads]
        ranks.append(p)
    report = processes_section(analyze_processes(merge_profiles(ranks)))
    assert report is not None
    assert report.straggler == "rank 1" and report.fastest_rank == "rank 0"
    assert report.straggler_excess_percent == pytest.approx(20.0, abs=0.5)  # 12 vs 10 ticks a step
    by_role = {loop.role: loop for loop in report.loops}
    assert by_role["rank 1"].phase_per_step["forward"] == pytest.approx(0.07)
    assert by_role["rank 0"].step_p50 == pytest.approx(0.10)
    assert report.straggler_phase == "forward"
    assert report.lines[-1] == (
        "slowest rank: rank 1, 120.0 ms of its own work per step, 20% more than rank 0; its forward is "
        "20.0 ms slower per step than rank 0's; the other ranks wait for it (per step: rank 0 0.0 ms)"
    )
