"""``flameprof run``: the target behaves as under plain python, and the profile is always written."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO, assert_one_error_line, flameprof_cmd, run_flameprof

from flameprof.model import storage
from flameprof.model.frames import Labeler

BUSY = """
import sys, threading, time

def spin(seconds):  # burns CPU time, however loaded the machine is
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n

def idle(seconds):
    time.sleep(seconds)

def worker():
    spin(0.3)

def main():
    t = threading.Thread(target=worker, name="busy-worker")
    t.start()
    spin(0.4)
    idle(0.3)
    t.join()

if __name__ == "__main__":
    main()
    print("argv=%r path0=%r name=%s" % (sys.argv, sys.path[0], __name__))
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


def outputs(outdir):
    return sorted(p for p in os.listdir(outdir) if not p.startswith("."))


def labels_of(profile):
    labeler = Labeler(profile.meta)
    return {labeler.label(f) for f in profile.frames}


def test_script_runs_with_main_semantics_and_writes_outputs(tmp_path, write_script):
    script = write_script("busy.py", BUSY)
    out = tmp_path / "out"
    proc = run_flameprof("run", "-o", str(out), "--rate", "200", script, "3", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert f"argv=[{script!r}, '3'] path0={str(tmp_path)!r} name=__main__" in proc.stdout
    assert outputs(out) == ["profile.flameprof", "profile.folded", "profile.svg"]
    assert "samples" in proc.stderr and str(out) in proc.stderr

    profile = storage.load(out / "profile.flameprof")
    names = {t.name for t in profile.threads}
    assert {"MainThread", "busy-worker"} <= names
    labels = labels_of(profile)
    assert "spin (busy.py:4)" in labels and "idle (busy.py:11)" in labels
    assert not any("flameprof" in f.file for f in profile.frames), "flameprof's own frames leaked"
    assert not any("runpy" in f.file for f in profile.frames)
    # stacks start at the target's module frame, or at threading's _shutdown, where the interpreter
    # waits for the program's threads once the module has finished (a tick lands there now and then)
    roots = {
        (frame.name, os.path.basename(frame.file))
        for frame in (
            profile.frames[profile.stack_frames(int(s))[0]]
            for s, t in zip(profile.sample_stack, profile.sample_thread)
            if s >= 0 and profile.threads[t].name == "MainThread"
        )
    }
    assert ("<module>", "busy.py") in roots
    assert roots <= {("<module>", "busy.py"), ("_shutdown", "threading.py")}, roots

    folded = (out / "profile.folded").read_text().splitlines()
    assert folded and all(line.rsplit(" ", 1)[1].isdigit() for line in folded)
    assert any(line.startswith("<module> (busy.py:1);main (busy.py:17);spin (busy.py:4) ") for line in folded)


def test_wall_weight_of_each_thread_matches_its_lifetime(tmp_path, write_script):
    script = write_script("busy.py", BUSY)
    out = tmp_path / "out"
    proc = run_flameprof("run", "-q", "-o", str(out), script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    profile = storage.load(out / "profile.flameprof")
    main = [i for i, t in enumerate(profile.threads) if t.name == "MainThread"][0]
    wall = profile.sample_wall[profile.sample_thread == main].sum()
    assert wall == pytest.approx(profile.duration, rel=0.02)
    assert wall > 0.65
    # wall mode keeps idle time, cpu mode does not count it
    idle_stacks = [
        s
        for s in set(profile.sample_stack.tolist())
        if s >= 0 and any(profile.frames[f].name == "idle" for f in profile.stack_frames(s))
    ]
    mask = np.isin(profile.sample_stack, idle_stacks)
    assert profile.sample_wall[mask].sum() > 0.2
    assert profile.sample_cpu[mask].sum() < 0.05


def test_cpu_mode_folded_drops_idle_time(tmp_path, write_script):
    script = write_script("busy.py", BUSY)
    out = tmp_path / "out"
    proc = run_flameprof("run", "-q", "--mode", "cpu", "--count", "ms", "-o", str(out), script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folded = dict(line.rsplit(" ", 1) for line in (out / "profile.folded").read_text().splitlines())
    spin = sum(int(v) for k, v in folded.items() if k.endswith("spin (busy.py:4)"))
    sleep = sum(int(v) for k, v in folded.items() if "idle (busy.py:11)" in k)
    # 700 ms of CPU are spun; a thread's CPU after its last sample is lost when it ends before the
    # next one, and two threads spinning on two cores starve the sampler for up to ~250 ms, so the
    # profile records 550-695 ms of it (less under load); idle time none
    assert spin > 400 and sleep < 50


def test_module_mode(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\nprint('pkg main', __name__, sys.argv[1:])\n")
    (tmp_path / "mymod.py").write_text(
        "import sys\nif __name__ == '__main__':\n    print('mod', sys.argv[1:])\n"
    )
    proc = run_flameprof("run", "-q", "-o", str(tmp_path / "o1"), "-m", "mymod", "--flag", "x", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "mod ['--flag', 'x']" in proc.stdout
    proc = run_flameprof("run", "-q", "-o", str(tmp_path / "o2"), "-m", "mypkg", "a", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "pkg main __main__ ['a']" in proc.stdout
    assert (tmp_path / "o2" / "profile.svg").exists()


def test_uncaught_exception_prints_the_usual_traceback_and_exits_1(tmp_path, write_script):
    script = write_script("boom.py", "def f():\n    raise ValueError('boom')\nf()\n")
    out = tmp_path / "out"
    proc = run_flameprof("run", "-q", "-o", str(out), script, cwd=tmp_path)
    plain = subprocess.run([sys.executable, script], capture_output=True, text=True)
    assert proc.returncode == plain.returncode == 1
    assert proc.stderr.strip() == plain.stderr.strip()
    assert (out / "profile.flameprof").exists()


def test_syntax_error_in_target_is_reported_like_python(tmp_path, write_script):
    script = write_script("bad.py", "def f(:\n")
    proc = run_flameprof("run", "-q", "-o", str(tmp_path / "out"), script)
    assert proc.returncode == 1
    assert "SyntaxError" in proc.stderr and "flameprof/" not in proc.stderr


def test_ctrl_c_stops_the_target_as_usual_and_the_whole_profile_is_written(tmp_path, write_script):
    """KeyboardInterrupt ends the program through Python, so flameprof writes every sample (other
    signals: test_signals.py)."""
    sig = signal.SIGINT
    script = write_script(
        "loop.py", "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.01)\n"
    )
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(
        flameprof_cmd("run", "-q", "-o", str(out), script),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -sig, err
    assert "KeyboardInterrupt" in err
    profile = storage.load(out / "profile.flameprof")
    assert profile.num_samples > 5


def test_target_output_and_exit_code_are_its_own(tmp_path, write_script):
    script = write_script(
        "io.py", "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit('bye')\n"
    )
    proc = run_flameprof("run", "-q", "-o", str(tmp_path / "out"), script)
    assert proc.returncode == 1 and proc.stdout == "out\n"
    assert proc.stderr == "err\nbye\n"


def test_missing_script_directory_and_unknown_option_are_one_line_errors(tmp_path):
    assert_one_error_line(run_flameprof("run", str(tmp_path / "nope.py")), "no such script")
    assert_one_error_line(run_flameprof("run", str(tmp_path)), "directory")
    assert_one_error_line(run_flameprof("run", "--bogus", "x.py"), "--bogus")
    assert_one_error_line(run_flameprof("run", "-m", "no_such_module_xyz"), "no_such_module_xyz")
    assert_one_error_line(run_flameprof("run"), "nothing to run")
    assert_one_error_line(run_flameprof("bogus-command"))


def test_unwritable_output_dir_is_refused_before_running(tmp_path, write_script):
    script = write_script("hello.py", "print('ran')\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_flameprof("run", "-o", str(blocker / "sub"), script)
    assert_one_error_line(proc, "output directory")
    assert "ran" not in proc.stdout


def test_phase_rules_are_checked_before_running_and_saved_in_the_profile(tmp_path, write_script):
    script = write_script(
        "load.py", "import time\ndef next_batch():\n    time.sleep(0.2)\nnext_batch()\nprint('ran')\n"
    )
    proc = run_flameprof("run", "--phase", "nonsense", script)
    assert_one_error_line(proc, "--phase")
    assert "ran" not in proc.stdout
    out = tmp_path / "out"
    proc = run_flameprof("run", "-q", "-o", str(out), "--phase", "data=next_batch", script)
    assert proc.returncode == 0, proc.stderr
    profile = storage.load(out / "profile.flameprof")
    assert profile.meta["phase_rules"] == ["data=next_batch"]
    report = run_flameprof("report", "--format", "json", str(out / "profile.flameprof"))
    import json

    assert json.loads(report.stdout)["phases"]["data"]["seconds"] > 0.1


@pytest.mark.parametrize(
    ("name", "files"),
    [
        ("failing", {"failing.py": "import sys\nprint(sys.path[0], sys.argv[0], __spec__.name)\n1/0\n"}),
        (
            "pkg",
            {
                "pkg/__init__.py": "",
                "pkg/helper.py": "X = 1\n",
                "pkg/__main__.py": "import sys\nfrom . import helper\n"
                "print(sys.path[0], __package__, __file__)\nraise ValueError(helper.X)\n",
            },
        ),
        ("broken", {"broken.py": "def f(:\n"}),
    ],
)
def test_dash_m_behaves_as_python_dash_m(tmp_path, name, files):
    """The installed command (its sys.path[0] is its own directory, not the current one) finds the
    module in the current directory and prints Python's own traceback, runpy's frames included."""
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    command = os.path.join(os.path.dirname(sys.executable), "flameprof")
    env = dict(os.environ, PYTHONPATH=REPO)  # no empty entry: the current directory is not on it
    plain = subprocess.run(
        [sys.executable, "-m", name], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    profiled = subprocess.run(
        [command, "run", "-q", "-o", "out", "-m", name], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (profiled.returncode, profiled.stdout, profiled.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )
    assert plain.returncode == 1 and "Traceback" in plain.stderr
