"""flameprof diff: the differential tree, its SVG colours and tooltips, --normalize, and the tables."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from conftest import assert_one_error_line, run_flameprof
from synthetic import training_profile

from flameprof.analyze.diff import BASE_SELF, BASE_TOTAL, changes, diff_tree, largest
from flameprof.collect.importers.folded import read_folded
from flameprof.model import storage
from flameprof.render.diff_svg import render_diff_svg

TICKS = {"data": 2, "encoder": 3, "head": 1, "tokenize": 1, "backward": 2, "optimizer": 1}
SLOWER = dict(TICKS, encoder=5, data=1)  # the encoder grew by 2 ticks a step, the data wait shrank by 1
SVG = "{http://www.w3.org/2000/svg}"


def frames_of(svg: str) -> dict[str, list[dict]]:
    """Frame rectangles of a flame graph by name: their attributes (x, width, class, note d, ...)."""
    root = ET.fromstring(svg.encode())
    out: dict[str, list[dict]] = {}
    for rect in root.iter(SVG + "rect"):
        if "n" in rect.attrib:
            out.setdefault(rect.attrib["n"], []).append(rect.attrib)
    return out


def test_tree_is_new_with_base_columns():
    base, new = training_profile(TICKS), training_profile(SLOWER)
    tree = diff_tree(base, new)
    nodes = {tuple(tree.label(j) for j in _path(tree, i)): i for i in range(len(tree))}
    enc = nodes[
        (
            "<module> (train.py:1)",
            "train (train.py:10)",
            "Module._call_impl (torch/nn/modules/module.py:1740)",
            "Net.encoder (Encoder)",
        )
    ]
    assert tree.total[enc] == pytest.approx(0.5)
    assert tree.columns[BASE_TOTAL][enc] == pytest.approx(0.3)
    assert tree.self_weight[enc] == 0 and tree.columns[BASE_SELF][enc] == 0
    normalized = diff_tree(base, new, normalize=True)
    assert normalized.columns[BASE_TOTAL][0] == pytest.approx(
        normalized.total[0]
    )  # BASE scaled to NEW's total
    assert normalized.columns[BASE_TOTAL][enc] == pytest.approx(0.3 * 1.1)


def _path(tree, i):
    out = []
    while i > 0:
        out.append(i)
        i = int(tree.parent[i])
    return out[::-1]


def test_svg_colours_by_total_change_and_tooltips_give_both_changes():
    frames = frames_of(render_diff_svg(training_profile(TICKS), training_profile(SLOWER)))
    call = frames["Module._call_impl (torch/nn/modules/module.py:1740)"][0]
    # Its own self time did not change, but its subtree grew: coloured red, at full strength (largest change).
    assert call["class"] == "g8"
    assert call["d"] == "total +200.0 ms (+50%), self +0.0 ms (+0%)"
    leaf = [f for f in frames["linear (torch/nn/functional.py:2000)"] if f["d"].startswith("total +200")]
    assert leaf and leaf[0]["d"] == "total +200.0 ms (+67%), self +200.0 ms (+67%)"
    wait = frames["_MultiProcessingDataLoaderIter._get_data (torch/utils/data/dataloader.py:1300)"][0]
    assert wait["class"] == "b4"  # half the largest change, shrank
    assert frames["Net.head (Linear)"][0]["class"] == "z"
    # Sized by NEW: 5 of the 11 ticks of a step.
    encoder = frames["Net.encoder (Encoder)"][0]
    assert int(encoder["width"]) / int(frames["all"][0]["width"]) == pytest.approx(5 / 11, abs=1e-6)


def test_normalize_compares_shares():
    base = training_profile(TICKS, steps=5)
    doubled = training_profile(TICKS, steps=10)  # the same program, run twice as long
    absolute = frames_of(render_diff_svg(base, doubled))
    assert absolute["Net.head (Linear)"][0]["class"].startswith("g")
    shares = frames_of(render_diff_svg(base, doubled, normalize=True))
    assert {f["class"] for fs in shares.values() for f in fs} == {"z"}
    assert shares["Net.head (Linear)"][0]["d"] == "share +0.00 pp (+0%), self +0.00 pp (+0%)"
    grown, shrunk = largest(changes(base, doubled, normalize=True), "layer")
    assert grown == [] and shrunk == []


def test_path_only_in_new_is_marked_new():
    frames = frames_of(render_diff_svg(read_folded(["main;a 10"]), read_folded(["main;a 10", "main;b 5"])))
    assert frames["b"][0]["class"] == "g8"
    assert frames["b"][0]["d"] == "total +5 samples (new), self +5 samples (new)"
    assert frames["a"][0]["class"] == "z"


def test_cli_tables_and_svg(tmp_path):
    base, new = tmp_path / "base.flameprof", tmp_path / "new.flameprof"
    storage.save(training_profile(TICKS), base)
    storage.save(training_profile(SLOWER), new)
    out = tmp_path / "d.svg"
    proc = run_flameprof("diff", str(base), str(new), "-o", str(out), "--top", "2")
    assert proc.returncode == 0, proc.stderr
    assert "g8" in out.read_text()
    text = proc.stdout
    layers = text[text.index("Layers: largest regressions") :]
    assert layers.splitlines()[1].split() == [
        "+0.200",
        "s",
        "+67%",
        "0.300",
        "s",
        "->",
        "0.500",
        "s",
        "self",
        "+0.200",
        "s",
        "Net.encoder",
        "(Encoder)",
    ]
    phases = text[text.index("Phases: largest improvements") :]
    assert "data.wait" in phases.splitlines()[1] and "-0.100 s" in phases.splitlines()[1]
    md = run_flameprof("diff", str(base), str(new), "-o", str(out), "--normalize", "--table", "markdown")
    assert md.returncode == 0, md.stderr
    assert "### Layers: largest regressions (share of each profile)" in md.stdout
    assert "| +15.45 pp | +52% | 30.00% | 45.45% | +15.45 pp | `Net.encoder (Encoder)` |" in md.stdout


def test_cli_bad_input(tmp_path):
    base = tmp_path / "base.flameprof"
    storage.save(training_profile(TICKS), base)
    folded = tmp_path / "x.folded"
    folded.write_text("main;a 3\n")
    proc = run_flameprof("diff", str(base), str(folded), "-o", str(tmp_path / "d.svg"))
    assert_one_error_line(proc, "--normalize")
    proc = run_flameprof("diff", str(base), str(tmp_path / "nope.folded"))
    assert_one_error_line(proc, "nope.folded")
