"""The shipped examples and ``flameprof demo``."""

import os

from conftest import assert_one_error_line, run_flameprof

from flameprof import Profiler
from flameprof.examples import cnn_train, inference
from flameprof.model import storage


def kinds_and_marks(profile):
    layers = {f.name for f in profile.frames if f.kind == "layer"}
    counts = {}
    for m in profile.marks:
        counts[m.name] = counts.get(m.name, 0) + 1
    return layers, counts


def test_cnn_example_steps_are_counted_and_layers_named(capsys):
    with Profiler(rate=1000) as p:
        cnn_train.main(["--steps", "6", "--batch-size", "16"])
    assert "6 steps in" in capsys.readouterr().out
    layers, counts = kinds_and_marks(p.profile)
    assert counts == {"step": 6, "batch": 6, "backward": 6, "forward": 6}
    assert "SmallCNN" in layers and any(name.startswith("SmallCNN.features.") for name in layers)


def test_cnn_example_slow_data_spends_its_time_in_the_dataset():
    with Profiler(rate=1000) as p:
        cnn_train.main(["--steps", "3", "--batch-size", "8", "--slow-data", "0.01"])
    profile = p.profile
    in_dataset = sum(
        w
        for s, w in zip(profile.sample_stack.tolist(), profile.sample_wall.tolist())
        if s >= 0 and any(profile.frames[f].name == "decode_jpeg_stand_in" for f in profile.stack_frames(s))
    )
    assert in_dataset >= 3 * 8 * 0.01 * 0.5  # sampling error grows when a loaded machine starves the sampler


def test_inference_example_serves_every_batch(capsys):
    with Profiler(rate=1000) as p:
        inference.main(["--steps", "5", "--batch-size", "32"])
    assert "served 160 requests" in capsys.readouterr().out
    assert kinds_and_marks(p.profile)[1] == {"batch": 5, "forward": 5}  # a step per model call


def test_demo_command_profiles_an_example_and_says_where_the_flame_graph_is(tmp_path):
    out = tmp_path / "demo"
    proc = run_flameprof(
        "demo", "--example", "inference", "-o", str(out), "--rate", "500", "--", "--steps", "30", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    svg = os.path.join(str(out), "profile.svg")
    assert f"flame graph: {svg}" in proc.stdout and os.path.getsize(svg) > 0
    assert "served 7680 requests" in proc.stdout
    profile = storage.load(os.path.join(str(out), "profile.flameprof"))
    assert sum(m.name == "batch" for m in profile.marks) == 30
    assert any(f.kind == "layer" and f.name.startswith("Classifier") for f in profile.frames)


def test_demo_rejects_an_unknown_example(tmp_path):
    assert_one_error_line(run_flameprof("demo", "--example", "gan", cwd=tmp_path), "gan")
