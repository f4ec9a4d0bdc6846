"""The report: verdict thresholds, advice, stable JSON keys, formats and the ``flameprof report`` command."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, assert_one_error_line, run_flameprof

from flameprof.analyze.advice import verdict_level
from flameprof.analyze.report import report_of
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame, Mark
from flameprof.render.report import render_report

TORCH = "/venv/lib/python3.11/site-packages/torch/"
DL = TORCH + "utils/data/dataloader.py"
MODULE = Frame("<module>", "/work/train.py", 1)
NEXT = Frame("_BaseDataLoaderIter.__next__", DL, 720)
STACKS = {
    "fetch": [
        MODULE,
        NEXT,
        Frame("_SingleProcessDataLoaderIter._next_data", DL, 783),
        Frame("Images.__getitem__", "/work/train.py", 20),
    ],
    "wait": [
        MODULE,
        NEXT,
        Frame("_MultiProcessingDataLoaderIter._next_data", DL, 1468),
        Frame("_MultiProcessingDataLoaderIter._try_get_data", DL, 1278),
    ],
    "forward": [
        MODULE,
        Frame("Module._call_impl", TORCH + "nn/modules/module.py", 1782),
        Frame("Net.fc (Linear)", kind="layer"),
        Frame("Linear.forward", TORCH + "nn/modules/linear.py", 130),
    ],
    "dropout": [
        MODULE,
        Frame("Module._call_impl", TORCH + "nn/modules/module.py", 1782),
        Frame("Net.drop (Dropout)", kind="layer"),
        Frame("Dropout.forward", TORCH + "nn/modules/dropout.py", 70),
    ],
    "backward": [MODULE, Frame("Tensor.backward", TORCH + "_tensor.py", 566)],
    "sync": [MODULE, Frame("synchronize", TORCH + "cuda/__init__.py", 1080)],
    "comm": [MODULE, Frame("all_reduce", TORCH + "distributed/distributed_c10d.py", 2870)],
    "plain": [MODULE, Frame("work", "/work/app.py", 5)],
    "seed": [MODULE, Frame("manual_seed_all", TORCH + "cuda/random.py", 90)],
}


def stepped(step: dict[str, float], steps: int = 4, marks: bool = True):
    """``steps`` identical steps, each one sample per ``{stack: seconds}`` entry, with step marks."""
    b = ProfileBuilder({"duration": 0.0})
    main = b.thread_id(1, 1, "MainThread")
    ids = {name: b.stack_id([b.frame(f) for f in frames]) for name, frames in STACKS.items()}
    t = 0.0
    for _ in range(steps):
        if marks:
            b.marks.append(Mark(t, main, "step"))
        for name, seconds in step.items():
            t += seconds
            b.add_sample(t, main, ids[name], seconds, seconds)
    if marks:
        b.marks.append(Mark(t, main, "step"))
    b.meta["duration"] = t
    return b.build()


@pytest.mark.parametrize(
    "share, level",
    [(0.199, "moderately"), (0.2, "highly"), (0.05, "moderately"), (0.0499, "not"), (0.0, "not")],
)
def test_verdict_level_thresholds(share, level):
    assert verdict_level(share) == level


@pytest.mark.parametrize(
    "data, compute, level",
    [(199, 801, "moderately"), (1, 4, "highly"), (1, 19, "moderately"), (1, 20, "not")],
)
def test_verdict_from_steady_state_steps(data, compute, level):
    verdict = report_of(stepped({"fetch": data, "forward": compute})).verdict
    assert verdict.level == level
    assert verdict.basis == "steady-state steps"
    assert verdict.data_percent == pytest.approx(100 * data / (data + compute))
    assert verdict.input_bound == (level != "not")


def test_warmup_step_does_not_count_towards_the_verdict():
    profile = stepped({"forward": 10}, steps=5)
    slow_first = stepped({"fetch": 90, "forward": 10}, steps=1)
    assert report_of(slow_first).verdict.level == "highly"
    # the same slow step first, then steady compute-only steps: not input-bound
    profile = _concat(slow_first, profile)
    report = report_of(profile)
    assert report.steps.warmup.count == 1 and report.steps.count == 6
    assert report.verdict.level == "not"
    assert report.phases["data"].percent == pytest.approx(90 / 150 * 100)  # whole run still shows it


def _concat(first, second):
    b = ProfileBuilder()
    main = b.thread_id(1, 1, "MainThread")
    offset = 0.0
    for p in (first, second):
        stacks = p.all_stack_frames()
        for t, sid, w in zip(p.sample_time, p.sample_stack, p.sample_wall):
            b.add_sample(offset + t, main, b.stack_id([b.frame(p.frames[f]) for f in stacks[sid]]), w, w)
        b.marks += [Mark(offset + m.time, main, m.name) for m in p.marks if not (offset and m.time == 0)]
        offset += p.duration
    return b.build()


def test_json_keys_are_stable():
    data = json.loads(
        render_report(report_of(stepped({"wait": 1, "fetch": 1, "forward": 6, "backward": 2})), "json")
    )
    assert data["report_version"] == 3
    assert {"phases", "steps", "layers", "verdict", "functions", "duration", "samples", "gil"} <= set(data)
    assert data["gil"] is None  # built in Python: no sample's GIL state is known
    assert list(data["phases"]) == [
        "data",
        "forward",
        "backward",
        "optimizer",
        "sync",
        "comm",
        "eval",
        "checkpoint",
        "other",
    ]
    assert set(data["phases"]["data"]) == {"seconds", "percent", "wait", "fetch"}
    assert data["phases"]["data"]["wait"]["percent"] == pytest.approx(10.0)
    assert data["phases"]["forward"] == {"seconds": 24.0, "percent": 60.0}
    assert {"source", "count", "warmup", "steady", "per_step"} <= set(data["steps"])
    assert {"count", "p50", "p90", "max", "mean", "phases"} <= set(data["steps"]["steady"])
    assert data["steps"]["count"] == 4 and data["steps"]["steady"]["p50"] == pytest.approx(10.0)
    assert data["layers"][0] == {
        "name": "Net.fc (Linear)",
        "self": 24.0,
        "total": 24.0,
        "self_percent": 60.0,
        "total_percent": 60.0,
        # a traced window's costs (test_trace_window.py); None without one
        **dict.fromkeys(
            (
                "params",
                "param_bytes",
                "flops",
                "forward_flops",
                "forward",
                "backward",
                "device",
                "gflops_per_s",
            )
        ),
    }
    assert (data["ops"], data["memory"], data["device"], data["processes"]) == (None, None, None, None)
    assert {"level", "input_bound", "data_percent", "basis", "text", "advice"} <= set(data["verdict"])


def test_profile_without_torch_still_reports():
    data = report_of(stepped({"plain": 5}, marks=False))
    assert data.phases["other"].percent == 100.0
    assert data.layers == [] and data.steps.count == 0
    assert data.verdict.level == "unknown"
    for fmt in ("text", "markdown"):
        assert "no training or inference loop found" in render_report(data, fmt)


def test_text_and_markdown_show_phases_steps_layers_and_verdict():
    data = report_of(stepped({"fetch": 1, "forward": 3}))
    text = render_report(data, "text")
    assert "HIGHLY input-bound" in text and "Net.fc (Linear)" in text and "4 steps (marks:step)" in text
    warmup = next(line for line in text.splitlines() if line.startswith("  #1 "))
    assert warmup.split() == ["#1", "warm-up", "4000.0", "ms", "data", "25%", "forward", "75%"]
    assert text.count("slowest") == 3
    md = render_report(data, "markdown")
    assert "| data | 4.000 s | 25.0% | 25.0% |" in md and "**Verdict: HIGHLY input-bound" in md


def test_report_command_json_and_user_phase_rule(tmp_path):
    path = str(tmp_path / "p.flameprof")
    storage.save(stepped({"plain": 1, "forward": 3}), path)
    proc = run_flameprof("report", path, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["phases"]["data"]["percent"] == 0.0
    proc = run_flameprof("report", path, "--format", "json", "--phase", "data=app.py:work")
    assert json.loads(proc.stdout)["phases"]["data"]["fetch"]["percent"] == 25.0


def test_report_command_malformed_phase_rule_is_one_error_line(tmp_path):
    path = str(tmp_path / "p.flameprof")
    storage.save(stepped({"plain": 1}), path)
    proc = run_flameprof("report", path, "--phase", "warmup=*.py:x")
    assert_one_error_line(proc, "bad --phase rule", "warmup")
    assert proc.returncode == 2


def test_summary_shows_phases_steps_and_verdict_only_for_deep_learning_runs():
    from flameprof.render.formats import Rendering
    from flameprof.render.options import OutputOptions
    from flameprof.render.summary import format_summary

    dl = format_summary(
        Rendering(stepped({"fetch": 1, "forward": 3}), OutputOptions()), ["out/profile.flameprof"]
    )
    assert "phases of MainThread (steady-state steps, wall): data 25.0%, forward 75.0%" in dl
    assert "steps: 4 steps (marks:step)" in dl and "verdict: HIGHLY input-bound" in dl
    assert "flameprof report out/profile.flameprof" in dl
    plain = format_summary(
        Rendering(stepped({"plain": 2}, marks=False), OutputOptions()), ["out/profile.flameprof"]
    )
    assert "work (/work/app.py:5)" in plain and "verdict" not in plain and "phases" not in plain


def test_count_weighted_import_is_reported_in_samples_not_seconds(tmp_path):
    folded = tmp_path / "c.folded"
    folded.write_text("main;load;read 30\nmain;load;parse 10\nmain;train 60\n")
    path = str(tmp_path / "c.flameprof")
    assert run_flameprof("import", str(folded), "-o", path).returncode == 0
    proc = run_flameprof("report", path)
    assert proc.returncode == 0, proc.stderr
    assert "weighted by sample counts" in proc.stdout
    assert "60 samples" in proc.stdout and "train" in proc.stdout
    assert " s " not in proc.stdout.replace("samples", "")
    data = json.loads(run_flameprof("report", path, "--format", "json").stdout)
    assert data["unit"] == "samples"
    assert "| `train` | 60 samples |" in run_flameprof("report", path, "--format", "markdown").stdout


def test_top_functions_leave_idle_helper_threads_out_unless_asked(tmp_path, write_script):
    """Helper threads that sleep all run long (a condition wait, a select loop) do not lead the top
    functions; ``--idle`` shows them; the loop thread's own waits always count."""
    script = write_script(
        "helpers.py",
        "import selectors, socket, threading, time\n"
        "def waiter():\n"
        "    threading.Event().wait(3)\n"
        "def selecting():\n"
        "    a, b = socket.socketpair()\n"
        "    sel = selectors.DefaultSelector()\n"
        "    sel.register(a, selectors.EVENT_READ)\n"
        "    sel.select(3)\n"
        "for target in (waiter, selecting):\n"
        "    threading.Thread(target=target, daemon=True).start()\n"
        "def compute():\n"
        "    end = time.perf_counter() + 1.0\n"
        "    while time.perf_counter() < end:\n"
        "        pass\n"
        "def pause():\n"
        "    time.sleep(0.5)\n"
        "compute()\n"
        "pause()\n",
    )
    out = tmp_path / "out"
    assert run_flameprof("run", "-q", "-o", str(out), script).returncode == 0
    profile = str(out / "profile.flameprof")
    data = json.loads(run_flameprof("report", profile, "--format", "json").stdout)

    def function(name):  # "Condition.wait (threading.py:320)" -> "wait" (3.10 has no qualified names)
        return name.split(" (")[0].rsplit(".", 1)[-1]

    names = [function(row["name"]) for row in data["functions"]]
    assert names[0] == "compute" and data["idle_left_out"] > 2.0
    # A helper's first sample holds the CPU time of its start, so it is not idle: a sliver beside the
    # loop's work (one interval), while the seconds each helper sleeps are left out.
    self_time = {function(row["name"]): row["self"] for row in data["functions"]}
    helpers = self_time.get("wait", 0) + self_time.get("select", 0)
    assert helpers < 0.05 * self_time["compute"], data["functions"]
    assert "pause" in names  # the loop thread's sleep counts
    everything = json.loads(run_flameprof("report", profile, "--format", "json", "--idle").stdout)
    assert everything["idle_left_out"] == 0
    assert {"wait", "select"} <= {function(row["name"]) for row in everything["functions"][:3]}
    text = run_flameprof("report", profile).stdout
    assert "of other threads' idle waits left out (--idle)" in text


COUNTING_RUN = """
import atexit, sys
import torch  # the demo's CNN runs on it: without torch the test is left out
import flameprof.analyze.breakdown as breakdown
import flameprof.analyze.phase_tree as phase_tree
import flameprof.analyze.report as report
from flameprof.cli import main

calls = {"analyze": 0, "build_report": 0, "phase_tree": 0}

def counted(module, name):
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls[name] += 1
        return original(*args, **kwargs)

    setattr(module, name, wrapper)

counted(breakdown, "analyze")
counted(report, "build_report")
counted(phase_tree, "phase_tree")
atexit.register(lambda: print("calls", calls, file=sys.stderr))
sys.exit(main(sys.argv[1:]))
"""


def test_run_with_every_format_analyses_and_reports_once(tmp_path):
    """The summary, the HTML report and every export of one run share one analysis, one report, and
    the SVG and HTML share one call tree."""
    out = tmp_path / "out"
    args = ("run", "--format", "all", "-o", str(out), "-m", "flameprof.examples.cnn_train", "--steps", "30")
    proc = subprocess.run(
        [sys.executable, "-c", COUNTING_RUN, *args],
        env={**os.environ, "PYTHONPATH": REPO},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    calls = ast.literal_eval(proc.stderr.rsplit("calls ", 1)[1].strip())
    assert calls == {"analyze": 1, "build_report": 1, "phase_tree": 1}, proc.stderr
    assert "verdict:" in proc.stderr and (out / "profile.html").exists() and (out / "profile.svg").exists()
    # the .svg drawn from the shared tree (with phase columns) colours by kind of code unless asked
    svg = (out / "profile.svg").read_text()
    assert ' p="' not in svg and "plegend" not in svg
    assert ' p="' in (out / "profile.html").read_text()


def _with_a_slow_step(slow: int = 7, steps: int = 10):
    """``steps`` steps of 1 s fetch + 3 s in Net.fc; step ``slow`` (1-based) waits 2 s more for data
    and spends 5 s more in Net.drop."""
    b = ProfileBuilder({"duration": 0.0})
    main = b.thread_id(1, 1, "MainThread")
    ids = {name: b.stack_id([b.frame(f) for f in frames]) for name, frames in STACKS.items()}
    t = 0.0
    for k in range(1, steps + 1):
        b.marks.append(Mark(t, main, "step"))
        parts = {"fetch": 1.0, "forward": 3.0} | ({"wait": 2.0, "dropout": 5.0} if k == slow else {})
        for name, seconds in parts.items():
            t += seconds
            b.add_sample(t, main, ids[name], seconds, seconds)
    b.marks.append(Mark(t, main, "step"))
    b.meta["duration"] = t
    return b.build()


def test_a_slow_step_names_the_phase_and_the_layer_that_grew():
    report = report_of(_with_a_slow_step())
    slow = next(n for n in report.steps.notable if n.index == 7)
    assert slow.kind == "slowest" and slow.wall == pytest.approx(11.0)
    assert slow.grew_layer is not None and slow.grew_layer.name == "Net.drop (Dropout)"
    assert slow.grew_layer.step == pytest.approx(5.0)
    assert slow.grew_phase is not None and slow.grew_phase.name == "forward"  # dropout is forward too
    # over the steady-state steps' average, steps 2 to 10 (the first is warm-up), the slow one among them
    assert slow.grew_phase.step - slow.grew_phase.average == pytest.approx(8.0 - (8 * 3.0 + 8.0) / 9)
    assert "grew: forward +4444.4 ms, Net.drop (Dropout) +4444.4 ms" in render_report(report, "text")


def test_one_step_beside_the_average(tmp_path):
    profile = _with_a_slow_step()
    report = report_of(profile, step=7)
    assert report.step is not None and report.step.index == 7 and not report.step.warmup
    phases = {c.name: c for c in report.step.phases}
    assert phases["data.wait"].step == pytest.approx(2.0)
    assert phases["data.wait"].average == pytest.approx(2.0 / 9)  # steady steps: 2 to 10
    layers = {c.name: c for c in report.step.layers}
    assert layers["Net.fc (Linear)"].step == pytest.approx(3.0) and layers["Net.fc (Linear)"].average == 3.0
    assert report.step.ops is None  # no traced window
    path = tmp_path / "p.flameprof"
    storage.save(profile, path)
    proc = run_flameprof("report", str(path), "--step", "7")
    assert proc.returncode == 0, proc.stderr
    assert "step 7: 11000.0 ms, steady-state average 4777.8 ms" in proc.stdout
    md = run_flameprof("report", str(path), "--step", "7", "--format", "markdown").stdout
    assert "| `Net.drop (Dropout)` | 5000.0 ms | 555.6 ms | +4444.4 ms |" in md
    data = json.loads(run_flameprof("report", str(path), "--step", "2", "--format", "json").stdout)
    assert data["step"]["index"] == 2 and data["steps"]["notable"][0]["kind"] == "warm-up"
    assert_one_error_line(run_flameprof("report", str(path), "--step", "11"), "no step 11")
