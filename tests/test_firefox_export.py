"""Firefox Profiler export: a real training run (DataLoader worker, traced window) written in the
processed format, checked against that format's types at version 70 (the Firefox Profiler's
``src/types/profile.ts``): every required field, every column as long as its table, every index in
range, samples in time order, markers well formed, and each thread's weight equal to the profile's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_flameprof

from flameprof.analyze.breakdown import analyze
from flameprof.model import storage
from flameprof.model.phase_names import LEAF_PHASES
from flameprof.render.firefox import render_firefox
from flameprof.render.formats import Rendering
from flameprof.render.options import OutputOptions

# The non-optional fields of each type of the processed format, version 70.
REQUIRED = {
    "Profile": {"meta", "libs", "shared", "threads"},
    "ProfileMeta": {
        "interval",
        "startTime",
        "processType",
        "product",
        "stackwalk",
        "version",
        "preprocessedProfileVersion",
        "markerSchema",
    },
    "RawProfileSharedData": {
        "stackTable",
        "frameTable",
        "funcTable",
        "resourceTable",
        "nativeSymbols",
        "stringArray",
        "sources",
        "sourceLocationTable",
    },
    "RawThread": {
        "processType",
        "processStartupTime",
        "processShutdownTime",
        "registerTime",
        "unregisterTime",
        "pausedRanges",
        "name",
        "isMainThread",
        "pid",
        "tid",
        "samples",
        "markers",
    },
}
# Tables: their required columns (``length`` aside).
TABLES = {
    "stackTable": {"frame", "prefixOffset"},
    "frameTable": {
        "address",
        "lib",
        "inlineDepth",
        "category",
        "subcategory",
        "func",
        "nativeSymbol",
        "innerWindowID",
        "line",
        "column",
        "originalLocation",
    },
    "funcTable": {
        "name",
        "isJS",
        "relevantForJS",
        "resource",
        "source",
        "lineNumber",
        "columnNumber",
        "originalLocation",
    },
    "resourceTable": {"name", "host", "type"},
    "nativeSymbols": {"libIndex", "address", "name", "functionSize"},
    "sources": {"id", "filename", "startLine", "startColumn", "sourceMapURL", "content"},
    "sourceLocationTable": {"source", "line", "column"},
}
SAMPLES = {"stack", "weight", "weightType"}  # and ``time`` or ``timeDeltas``
MARKERS = {"data", "name", "startTime", "endTime", "phase", "category"}
COLORS = {
    "transparent",
    "purple",
    "green",
    "orange",
    "yellow",
    "lightblue",
    "blue",
    "brown",
    "magenta",
    "red",
    "lightred",
    "darkgrey",
    "grey",
}
DISPLAY = {
    "marker-chart",
    "marker-table",
    "timeline-overview",
    "timeline-memory",
    "timeline-ipc",
    "timeline-fileio",
    "timeline-network",
    "stack-chart",
}

TRAIN = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class Net(nn.Module):  # two layers of equal cost, ~0.1 s of forward each: both are sampled
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 1024)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(1024, 256)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))

if __name__ == "__main__":
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    for x, y in DataLoader(data, batch_size=64, num_workers=1):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("trained")
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One real run, written as a flameprof profile and a Firefox Profiler file."""
    tmp = tmp_path_factory.mktemp("firefox")
    (tmp / "train.py").write_text(TRAIN)
    out = tmp / "out"
    proc = run_flameprof(
        "run", "-q", "--rate", "500", "--trace-steps", "3:5", "-o", str(out), "--format", "firefox",
        str(tmp / "train.py"), cwd=tmp, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "profile.firefox.json").read_text())["meta"]["preprocessedProfileVersion"] == 70
    # the file checked is rendered from the saved profile, so both hold the same (stored) numbers
    proc = run_flameprof(
        "render", str(out / "profile.flameprof"), "-o", str(tmp / "again"), "--format", "firefox"
    )
    assert proc.returncode == 0, proc.stderr
    profile = storage.load(out / "profile.flameprof")
    doc = json.loads((tmp / "again.firefox.json").read_text())
    return profile, doc


def assert_processed_profile_valid(doc: dict) -> None:
    """The processed format's types at version 70, as the Firefox Profiler defines them."""
    assert REQUIRED["Profile"] <= set(doc)
    meta, shared = doc["meta"], doc["shared"]
    assert REQUIRED["ProfileMeta"] <= set(meta)
    assert meta["preprocessedProfileVersion"] == 70
    assert meta["stackwalk"] in (0, 1) and isinstance(meta["processType"], int)
    assert meta["interval"] > 0
    assert meta["sampleUnits"] == {"time": "ms", "eventDelay": "ms", "threadCPUDelta": "µs"}
    categories = meta["categories"]
    assert categories and all(c["color"] in COLORS and c["subcategories"] for c in categories)
    assert sum(c["color"] == "grey" for c in categories) == 1  # the default category
    schemas = {s["name"]: s for s in meta["markerSchema"]}
    for s in schemas.values():
        assert set(s["display"]) <= DISPLAY and all({"key", "format"} <= set(f) for f in s["fields"])
    assert REQUIRED["RawProfileSharedData"] <= set(shared)
    strings = shared["stringArray"]
    assert all(isinstance(s, str) for s in strings)
    for name, columns in TABLES.items():
        table = shared[name]
        assert columns <= set(table), name
        assert "prefix" not in table and "lib" not in (table if name == "resourceTable" else {})
        for column in set(table) - {"length"}:
            assert len(table[column]) == table["length"], (name, column)
    stacks, frames, funcs = shared["stackTable"], shared["frameTable"], shared["funcTable"]
    resources, sources = shared["resourceTable"], shared["sources"]
    for i, (frame, offset) in enumerate(zip(stacks["frame"], stacks["prefixOffset"])):
        assert 0 <= frame < frames["length"] and 0 <= offset <= i  # the prefix precedes its stack
    for cat, sub, func in zip(frames["category"], frames["subcategory"], frames["func"]):
        assert 0 <= func < funcs["length"]
        assert cat is not None and 0 <= cat < len(categories)
        assert sub is not None and 0 <= sub < len(categories[cat]["subcategories"])
    assert set(frames["lib"]) <= {-1} and set(frames["address"]) <= {-1}
    for name, resource, source in zip(funcs["name"], funcs["resource"], funcs["source"]):
        assert 0 <= name < len(strings)
        assert resource == -1 or 0 <= resource < resources["length"]
        assert source is None or 0 <= source < sources["length"]
    assert all(0 <= n < len(strings) for n in resources["name"] + sources["filename"])
    for thread in doc["threads"]:
        assert REQUIRED["RawThread"] <= set(thread)
        assert isinstance(thread["pid"], str) and isinstance(thread["tid"], (int, str))
        samples = thread["samples"]
        assert SAMPLES <= set(samples) and "time" in samples
        assert samples["weightType"] in ("samples", "tracing-ms", "bytes")
        for column in set(samples) - {"length", "weightType", "weight"}:
            assert len(samples[column]) == samples["length"], column
        if samples["weight"] is not None:
            assert len(samples["weight"]) == samples["length"]
        assert all(s is None or 0 <= s < stacks["length"] for s in samples["stack"])
        assert samples["time"] == sorted(samples["time"])
        markers = thread["markers"]
        assert MARKERS <= set(markers)
        for column in set(markers) - {"length"}:
            assert len(markers[column]) == markers["length"], column
        rows = zip(*(markers[k] for k in ("name", "startTime", "endTime", "phase", "category", "data")))
        for name, start, end, phase, cat, data in rows:
            assert 0 <= name < len(strings) and 0 <= cat < len(categories)
            assert phase in (0, 1, 2, 3)
            if phase in (0, 1, 2):
                assert isinstance(start, (int, float))
            if phase in (1, 3):
                assert isinstance(end, (int, float))
            if phase == 1:
                assert end >= start
            assert data is None or data["type"] in schemas
    mains = {}
    for thread in doc["threads"]:
        mains[thread["pid"]] = mains.get(thread["pid"], 0) + thread["isMainThread"]
    assert set(mains.values()) == {1}  # one main thread per process


def test_a_training_run_is_a_valid_processed_profile(run):
    profile, doc = run
    assert_processed_profile_valid(doc)
    # one thread per profiled thread, and every process (main, DataLoader worker) has its track
    tracks = {(t["pid"], t["tid"]) for t in doc["threads"]}
    assert {(str(t.pid), t.tid) for t in profile.threads} <= tracks
    roles = {t["processName"] for t in doc["threads"]}
    assert any(r.startswith("dataloader worker") for r in roles) and any(r.startswith("main") for r in roles)
    assert len({p.pid for p in profile.processes}) >= 2


def test_samples_keep_their_time_weight_and_cpu_per_thread(run):
    profile, doc = run
    start = doc["meta"]["startTime"]
    assert start == pytest.approx(profile.meta["start_time"] * 1e3)
    by_track = {(t["pid"], t["tid"]): t["samples"] for t in doc["threads"]}
    for index, info in enumerate(profile.threads):
        samples = by_track[(str(info.pid), info.tid)]
        rows = profile.sample_thread == index
        assert samples["length"] == int(rows.sum())
        assert samples["weightType"] == "tracing-ms"
        assert sum(samples["weight"]) == pytest.approx(profile.sample_wall[rows].sum() * 1e3, rel=1e-9)
        assert sum(samples["threadCPUDelta"]) == pytest.approx(profile.sample_cpu[rows].sum() * 1e6, rel=1e-6)
        assert samples["time"] == pytest.approx(np.sort(profile.sample_time[rows]) * 1e3, abs=1e-5)
    # each stack is the one flame graphs show (analyze/tidy_stacks.py): same function, same parent
    # (own index minus prefixOffset), and no importlib chain
    shown = Rendering(profile, OutputOptions()).shown
    stacks, frames = doc["shared"]["stackTable"], doc["shared"]["frameTable"]
    parents = [i - o if o else -1 for i, o in enumerate(stacks["prefixOffset"])]
    assert parents == shown.stack_parent.tolist()
    assert [frames["func"][f] for f in stacks["frame"]] == shown.stack_frame.tolist()
    names = {doc["shared"]["stringArray"][n] for n in doc["shared"]["funcTable"]["name"]}
    assert "import torch" in names and not {"_find_and_load", "_run_code"} & names
    total = sum(sum(t["samples"]["weight"] or []) for t in doc["threads"])
    assert total == pytest.approx(profile.sample_wall.sum() * 1e3, rel=1e-9)


def test_phases_layers_steps_and_traced_ops_are_there(run):
    profile, doc = run
    categories = doc["meta"]["categories"]
    assert [c["name"] for c in categories] == list(LEAF_PHASES)
    colors = [c["color"] for c in categories]
    assert len(set(colors)) == len(colors)  # every phase tells apart on the category graph
    forward = categories[LEAF_PHASES.index("forward")]["subcategories"]
    assert {"Net.fc1 (Linear)", "Net.fc2 (Linear)"} <= set(forward)
    strings = doc["shared"]["stringArray"]
    analysis = analyze(profile, idle=False)
    loop = profile.threads[analysis.thread]
    main = next(t for t in doc["threads"] if (t["pid"], t["tid"]) == (str(loop.pid), loop.tid))
    markers = main["markers"]
    kinds: dict[str, list[int]] = {}
    for i, data in enumerate(markers["data"]):
        kinds.setdefault(data["type"] if data else "", []).append(i)
    assert len(kinds["Step"]) == analysis.steps.count > 10
    # the phase markers tile the thread's samples: their names are the phases the analysis found
    phase_names = {strings[markers["name"][i]] for i in kinds["Phase"]}
    found = {LEAF_PHASES[p] for p in np.unique(analysis.sample_phase[analysis.loop_mask()])}
    assert phase_names == found and {"forward", "backward", "optimizer"} <= found
    waits = [markers["data"][i]["phase"] for i in kinds.get("Wait", [])]
    assert set(waits) <= {"data.wait", "sync"} and len(waits) == sum(
        strings[markers["name"][i]] in ("data.wait", "sync") for i in kinds["Phase"]
    )
    # the traced window's ops on the loop thread, under their layers
    ops = [markers["data"][i] for i in kinds["TracedEvent"]]
    assert profile.trace is not None and len(ops) == profile.trace.num_events  # a CPU run: host ops only
    assert any(o["layer"] == "Net.fc1 (Linear)" and o["phase"] == "forward" for o in ops)
    assert any(strings[markers["name"][i]] == "aten::addmm" for i in kinds["TracedEvent"])


def test_untimed_samples_are_refused():
    from flameprof.errors import FlameprofError
    from flameprof.model.builder import ProfileBuilder
    from flameprof.model.profile import Frame

    b = ProfileBuilder()
    thread = b.thread_id(1, 1, "main")
    b.add_sample(0.0, thread, b.stack_id([b.frame(Frame("f", "a.py", 1))]), 1.0, 0.0)
    profile = b.build()
    with pytest.raises(FlameprofError, match="timestamped"):
        render_firefox(profile, "wall", np.zeros(1, np.int8), -np.ones(1, np.int32), LEAF_PHASES, [])
