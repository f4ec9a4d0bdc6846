"""Whole jobs: every Python process a profiled program starts is profiled and merged into one profile.

These run real jobs: subprocesses, multiprocessing (spawn and fork), DataLoader workers, torchrun.
"""

import json
import os
import sys

import pytest
from conftest import REPO, run_flameprof

from flameprof.model import storage
from flameprof.model.frames import Labeler

CHILD = """
import sys, time

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def child_work():
    spin(0.4)

def crash_work():
    spin(0.3)
    raise RuntimeError("child fails on purpose")

def linger_work():
    spin(1.3)
    time.sleep(25)  # still running when the profiled program ends

def terminated_work():
    spin(1.8)  # more than one flush interval, as doomed_work
    import signal
    print("ready, default SIGTERM:", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
    spin(60)

def doomed_work():
    spin(1.8)  # more than one flush interval: the part on disk has most of these samples
    print("ready", flush=True)
    spin(60)

if __name__ == "__main__":
    import sitecustomize
    print("user sitecustomize:", getattr(sitecustomize, "MARK", None), flush=True)
    {"ok": child_work, "crash": crash_work, "doomed": doomed_work, "linger": linger_work,
     "terminated": terminated_work}[sys.argv[1]]()
    print("numpy in child:", "numpy" in sys.modules)  # profiling (and its flushes) must not import it
"""

JOB = """
import multiprocessing, os, subprocess, sys, time

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def spawned_work():
    spin(0.8)

def forked_work():
    spin(0.4)

def main():
    spin(0.2)
    subprocess.Popen([sys.executable, CHILD, "linger"], stdout=subprocess.DEVNULL)  # never waited for
    subprocess.run([sys.executable, CHILD, "ok"], check=True)
    crashed = subprocess.run([sys.executable, CHILD, "crash"], capture_output=True, text=True)
    print("crash exit", crashed.returncode, "RuntimeError" in crashed.stderr, "still here" in crashed.stdout)
    process = multiprocessing.get_context("spawn").Process(target=spawned_work)
    process.start()
    process.join()
    pid = os.fork()
    if pid == 0:
        forked_work()
        os._exit(0)
    os.waitpid(pid, 0)
    terminated = subprocess.Popen([sys.executable, CHILD, "terminated"], stdout=subprocess.PIPE, text=True)
    terminated.stdout.readline()
    print("terminated says", terminated.stdout.readline().strip())
    terminated.terminate()
    print("terminated exit", terminated.wait())
    doomed = subprocess.Popen([sys.executable, CHILD, "doomed"], stdout=subprocess.PIPE, text=True)
    print("doomed says", doomed.stdout.readline().strip())
    doomed.stdout.readline()
    doomed.kill()
    doomed.wait()
    print("job done")

if __name__ == "__main__":
    main()
"""

USER_SITECUSTOMIZE = "MARK = 'still here'\n"


def seconds_by_process(profile, mode="wall"):
    """{process frame label: {function name: seconds}} of a merged profile."""
    out = {}
    weights = profile.weights(mode)
    for stack, weight in zip(profile.sample_stack.tolist(), weights.tolist()):
        if stack < 0:
            continue
        frames = [profile.frames[f] for f in profile.stack_frames(stack)]
        assert frames[0].kind == "process", frames[0]
        functions = out.setdefault(frames[0].name, {})
        for frame in {f.name for f in frames[1:]}:
            functions[frame] = functions.get(frame, 0.0) + weight
    return out


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """One profiled run of JOB (a Python job of many kinds of children), shared by the tests below."""
    root = tmp_path_factory.mktemp("job")
    (root / "child.py").write_text(CHILD)
    (root / "job.py").write_text(JOB)
    usersite = root / "usersite"
    usersite.mkdir()
    (usersite / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    out = root / "out"
    proc = run_flameprof(
        "run",
        "-q",
        "-o",
        str(out),
        "--rate",
        "200",
        str(root / "job.py"),
        cwd=root,
        env={"PYTHONPATH": os.pathsep.join([REPO, str(usersite)])},
    )
    profile = storage.load(out / "profile.flameprof")
    return proc, profile, out


def test_job_keeps_its_outcome_and_leaves_no_parts(job):
    proc, profile, out = job
    assert proc.returncode == 0, proc.stderr
    assert "crash exit 1 True" in proc.stdout and "job done" in proc.stdout
    assert sorted(os.listdir(out)) == ["profile.flameprof", "profile.folded", "profile.svg"]


def test_every_python_child_is_profiled_under_its_process_frame(job):
    proc, profile, out = job
    by_process = seconds_by_process(profile)
    labels = set(by_process)
    assert "main" in labels
    ok = next(label for label in labels if label.endswith("child.py ok"))
    # (sample counts vary on a loaded machine: each child's own work must be there, in its own process)
    assert by_process[ok]["child_work"] > 0
    crash = next(label for label in labels if label.endswith("child.py crash"))
    assert by_process[crash]["crash_work"] > 0
    assert by_process["SpawnProcess-1"]["spawned_work"] > 0  # multiprocessing, spawn
    forked = next(label for label in labels if label.startswith("fork of pid"))
    assert by_process[forked]["forked_work"] > 0  # os.fork, ended by os._exit
    assert "child_work" not in by_process["main"] and "main" in by_process["main"]
    # the resource tracker multiprocessing starts is an idle helper: not profiled
    assert not any("resource_tracker" in label for label in labels)
    pids = {p.pid for p in profile.processes}
    assert len(pids) == len(profile.processes) >= 8
    assert {t.pid for t in profile.threads} <= pids


def test_a_killed_or_hanging_child_keeps_the_samples_it_had_flushed(job):
    proc, profile, out = job
    by_process = seconds_by_process(profile)
    doomed = next(label for label in by_process if label.endswith("child.py doomed"))
    assert by_process[doomed]["doomed_work"] > 0.3
    linger = next(label for label in by_process if label.endswith("child.py linger"))
    assert by_process[linger]["linger_work"] > 0.3
    warnings = sorted(line for line in proc.stderr.splitlines() if "did not end cleanly" in line)
    assert len(warnings) == 3, proc.stderr
    for child in ("doomed", "linger", "terminated"):
        assert any(f"child.py {child}" in w for w in warnings), proc.stderr


def test_a_terminated_child_keeps_its_own_sigterm_and_the_samples_it_had_flushed(job):
    """SIGTERM ends a child as it would unprofiled (flameprof sets no handler); its part is the last flush."""
    proc, profile, out = job
    assert "terminated says ready, default SIGTERM: True" in proc.stdout
    assert "terminated exit -15" in proc.stdout
    by_process = seconds_by_process(profile)
    terminated = next(label for label in by_process if label.endswith("child.py terminated"))
    assert by_process[terminated]["terminated_work"] > 0.3
    assert "Traceback" not in proc.stderr.replace("Traceback (most recent call last):\n  File", "")


def test_a_users_own_sitecustomize_still_runs(job):
    proc, profile, out = job
    assert "user sitecustomize: still here" in proc.stdout.splitlines()  # the ok child
    assert "crash exit 1 True True" in proc.stdout
    assert "doomed says user sitecustomize: still here" in proc.stdout


def test_children_stay_light(job):
    proc, profile, out = job
    assert "numpy in child: False" in proc.stdout.splitlines()


def test_times_share_one_clock(job):
    proc, profile, out = job
    assert profile.sample_time.min() >= -0.05
    assert profile.sample_time.max() <= profile.duration + 0.05
    assert (profile.sample_time[1:] >= profile.sample_time[:-1]).all()


def test_no_subprocesses_profiles_only_the_main_process(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    script = tmp_path / "main.py"
    script.write_text(
        f"import subprocess, sys, time\nend = time.time() + 0.5\nwhile time.time() < end:\n    pass\n"
        f"subprocess.run([sys.executable, {str(tmp_path / 'child.py')!r}, 'ok'])\n"
    )
    for mode, target in (("script", [str(script)]), ("command", ["--", sys.executable, str(script)])):
        out = tmp_path / mode
        proc = run_flameprof("run", "-q", "--no-subprocesses", "-o", str(out), *target)
        assert proc.returncode == 0, proc.stderr
        profile = storage.load(out / "profile.flameprof")
        assert len(profile.processes) <= 1 and not any(f.kind == "process" for f in profile.frames), mode
        assert any(f.name == "<module>" and f.file == str(script) for f in profile.frames), (
            mode,
            profile.frames,
        )
        assert not any(f.name == "child_work" for f in profile.frames), mode
        assert sorted(os.listdir(out)) == ["profile.flameprof", "profile.folded", "profile.svg"], mode


def test_run_any_command_passes_its_outcome_through(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    out = tmp_path / "out"
    proc = run_flameprof(
        "run", "-q", "-o", str(out), "--", sys.executable, str(tmp_path / "child.py"), "crash"
    )
    assert proc.returncode == 1 and "child fails on purpose" in proc.stderr
    profile = storage.load(out / "profile.flameprof")
    assert profile.processes[0].role == "main"
    assert Labeler(profile.meta).label(profile.frames[0])  # a readable profile
    assert any(f.name == "crash_work" for f in profile.frames)

    proc = run_flameprof("run", "-q", "-o", str(tmp_path / "out2"), "--", "sh", "-c", "kill -TERM $$")
    assert proc.returncode == -15  # killed by the same signal
    assert "no Python process was profiled" in proc.stderr
    assert os.listdir(tmp_path / "out2") == []

    proc = run_flameprof("run", "-o", str(tmp_path / "out3"), "--", "no-such-command-xyz")
    assert (
        proc.returncode != 0
        and proc.stderr.strip() == "flameprof: error: command not found: no-such-command-xyz"
    )


DATALOADER = """
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class SlowDataset(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        return torch.full((4,), float(i))

if __name__ == "__main__":
    loader = DataLoader(SlowDataset(), batch_size=4, num_workers=2, multiprocessing_context=sys.argv[1])
    print("sum", sum(float(batch.sum()) for batch in loader))
"""


CUT_FORK = """
import os, threading, time
from flameprof.collect.engine.session import SESSION
from flameprof.model.records import Frame

in_hook, forked = threading.Event(), threading.Event()

class Layer:
    def forward(self):
        while not forked.is_set():
            sum(range(100))

def layer_hook(frame):
    # in the clock thread's sample of the worker: the GIL let go until the main thread has forked
    if threading.current_thread() is not threading.main_thread() and not in_hook.is_set():
        in_hook.set()
        forked.wait(10)
    return Frame("layer", kind="layer")

def spin_in_child():
    end = time.perf_counter() + 0.4
    while time.perf_counter() < end:
        pass

SESSION.sampler.frame_hooks[Layer.forward.__code__] = layer_hook
worker = threading.Thread(target=Layer().forward)
worker.start()
assert in_hook.wait(10)
pid = os.fork()
if pid == 0:
    spin_in_child()
    os._exit(0)
forked.set()
worker.join()
os.waitpid(pid, 0)
print("child", pid)
"""


def test_a_child_forked_in_the_middle_of_a_sample_is_profiled(tmp_path):
    """The fork cuts the clock thread's sample of another thread (its layer hook lets the GIL go).
    The child discarded its parent's samples before dropping that cut sample, a discard refused
    while a sample is in progress, and it ran unprofiled."""
    script = tmp_path / "cut.py"
    script.write_text(CUT_FORK)
    proc = run_flameprof("run", "-q", "-o", str(tmp_path / "out"), "--rate", "500", str(script), timeout=120)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    child = int(proc.stdout.split()[-1])
    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    assert child in {p.pid for p in profile.processes}, profile.processes
    in_child = [t.pid == child for t in profile.threads]
    walls = profile.sample_wall[[in_child[t] for t in profile.sample_thread.tolist()]]
    assert 0.3 < walls.sum() < 0.6, walls.sum()  # its 0.4 s of spinning
    (forked,) = [label for label in seconds_by_process(profile) if label.startswith("fork of pid")]
    assert seconds_by_process(profile)[forked]["spin_in_child"] > 0.3


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_dataloader_workers_appear_by_role(tmp_path, start_method):
    script = tmp_path / "loader.py"
    script.write_text(DATALOADER)
    proc = run_flameprof(
        "run", "-q", "-o", str(tmp_path / "out"), "--rate", "200", str(script), start_method, timeout=240
    )
    assert proc.returncode == 0 and "sum 1984.0" in proc.stdout, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    by_process = seconds_by_process(profile)
    assert {"dataloader worker 0", "dataloader worker 1"} <= set(by_process), (profile.processes, proc.stderr)
    for worker in ("dataloader worker 0", "dataloader worker 1"):
        # 16 items of 20 ms each per worker
        assert 0 < by_process[worker]["SlowDataset.__getitem__"] < 2.0, by_process[worker]
    assert "SlowDataset.__getitem__" not in by_process["main"]
    report = run_flameprof("report", str(tmp_path / "out" / "profile.flameprof"), "--format", "json")
    processes = json.loads(report.stdout)["processes"]
    (main,) = [loop for loop in processes["loops"] if loop["role"] == "main"]
    assert main["data_wait"] > 0 and {w["role"] for w in main["workers"]} == {
        "dataloader worker 0",
        "dataloader worker 1",
    }
    assert sum(w["busy"] for w in main["workers"]) > 0


DDP = """
import os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

def train_step(model, optimizer, x):
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()

def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    model = DistributedDataParallel(layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(128, 64)
    for _ in range(20):
        train_step(model, optimizer, x)
    dist.barrier()
    sys.stdout.write(f"rank {dist.get_rank()} done\\n")  # one write: the ranks share the pipe
    sys.stdout.flush()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
"""


def test_torchrun_ranks_appear_by_role(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    proc = run_flameprof(
        "run",
        "-q",
        "-o",
        str(tmp_path / "out"),
        "--",
        torchrun,
        "--standalone",
        "--nproc_per_node=2",
        str(script),
        cwd=tmp_path,
        timeout=240,
        env={"OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "rank 0 done" in proc.stdout and "rank 1 done" in proc.stdout
    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    by_process = seconds_by_process(profile)
    assert by_process["main"]  # torchrun itself, the command flameprof started
    for rank in ("rank 0", "rank 1"):
        assert by_process[rank]["train_step"] > 0, sorted(by_process)
    assert {p.role for p in profile.processes} >= {"main", "rank 0", "rank 1"}
    report = run_flameprof("report", str(tmp_path / "out" / "profile.flameprof"))
    assert (
        "rank 0: " in report.stdout and "rank 1: " in report.stdout and "slowest rank: rank " in report.stdout
    )
