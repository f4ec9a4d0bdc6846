"""The call tree and the SVG flame graph built from it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from flameprof.analyze.tree import build_tree
from flameprof.analyze.views import display_stacks
from flameprof.collect.importers.folded import read_folded
from flameprof.model.builder import ProfileBuilder
from flameprof.model.frames import Labeler
from flameprof.model.profile import Frame
from flameprof.model.validate import check_profile
from flameprof.render.svg import UNITS, render_svg

SVG = "{http://www.w3.org/2000/svg}"


def folded(*lines: str):
    return read_folded(list(lines), "test")


def sampled_profile():
    """Three threads' worth of samples with different wall and CPU weights, in seconds."""
    b = ProfileBuilder({"cwd": "/proj", "weight_unit": "seconds"})
    main = Frame("main", "/proj/app.py", 1)
    work = Frame("work", "/proj/app.py", 10)
    dot = Frame("dot", "/venv/lib/python3.11/site-packages/numpy/core/multiarray.py", 5)
    sleep = Frame("sleep", "/usr/lib/python3.11/threading.py", 300)
    thread = b.thread_id(1, 1, "MainThread")
    for stack, wall, cpu, times in (
        ([main, work, dot], 0.02, 0.02, 5),
        ([main, work], 0.01, 0.005, 3),
        ([main, sleep], 0.5, 0.0, 2),
        ([main], 0.01, 0.01, 1),
    ):
        sid = b.stack_id([b.frame(f) for f in stack])
        for _ in range(times):
            b.add_sample(0.0, thread, sid, wall, cpu)
    return b.build()


def by_path(tree):
    """{label path: node} for every node but the root."""
    out, paths = {}, {0: ()}
    for i in range(1, len(tree)):
        paths[i] = paths[int(tree.parent[i])] + (tree.label(i),)
        out[paths[i]] = i
    return out


def rects(svg: str):
    root = ET.fromstring(svg.encode("utf-8"))
    return root, [r for r in root.find(f"{SVG}svg[@id='f']").iter(f"{SVG}rect")]


def frame_ys(svg: str) -> dict[str, int]:
    """Each frame's y: a stack level's rects sit in a group translated to it, and carry no y."""
    root = ET.fromstring(svg.encode("utf-8"))
    ys = {}
    for group in root.find(f"{SVG}svg[@id='f']").iter(f"{SVG}g"):
        match = re.fullmatch(r"translate\(0,(\d+)\)", group.get("transform", ""))
        assert match, group.attrib
        for r in group.iter(f"{SVG}rect"):
            assert r.get("y") is None
            ys[r.get("n")] = int(match.group(1))
    return ys


# --- call tree ---------------------------------------------------------------------------------


def test_tree_totals_self_and_children_in_label_order():
    tree = build_tree(folded("a;b;c 3", "a;b 2", "a;d 5", "x 1", "a;b;c 1"))
    nodes = by_path(tree)
    a, b, c, d, x = (nodes[p] for p in [("a",), ("a", "b"), ("a", "b", "c"), ("a", "d"), ("x",)])
    assert tree.total[0] == 12 and tree.self_weight[0] == 0
    assert (tree.total[a], tree.self_weight[a]) == (11, 0)
    assert (tree.total[b], tree.self_weight[b]) == (6, 2)
    assert (tree.total[c], tree.self_weight[c]) == (4, 4)
    assert (tree.total[d], tree.total[x]) == (5, 1)
    assert tree.unit == "count"
    assert np.array_equal(tree.samples, tree.total)  # folded counts are sample counts
    assert tree.children(0).tolist() == [a, x] and tree.children(a).tolist() == [b, d]
    node = tree.node(b)
    assert (node.label, node.depth, node.children, node.frame.name) == ("b", 2, (c,), "b")
    start = tree.offsets()
    assert (start[a], start[b], start[c], start[d], start[x]) == (0, 0, 0, 6, 11)


def test_tree_weights_follow_the_mode():
    profile = sampled_profile()
    wall, cpu, samples = (build_tree(profile, mode) for mode in ("wall", "cpu", "samples"))
    work = ("main (app.py:1)", "work (app.py:10)")
    assert wall.total[0] == pytest.approx(5 * 0.02 + 3 * 0.01 + 2 * 0.5 + 0.01)
    assert wall.total[by_path(wall)[work]] == pytest.approx(0.13)
    assert wall.self_weight[by_path(wall)[work]] == pytest.approx(0.03)
    assert cpu.total[by_path(cpu)[work]] == pytest.approx(0.115)
    assert samples.total[by_path(samples)[work]] == 8 and samples.unit == "count"
    assert wall.unit == "seconds" and wall.samples[by_path(wall)[work]] == 8
    assert wall.samples[0] == 11 and wall.self_samples[by_path(wall)[work]] == 3


def test_tree_matches_display_stacks_of_every_view():
    profile = sampled_profile()
    labeler = Labeler(profile.meta)
    for view in ("code", "layers", "phases"):
        tree = build_tree(profile, "wall", view)
        expected: dict[tuple, float] = {}
        for frames, weight in display_stacks(profile, "wall", view):
            key = tuple(labeler.label(f) for f in frames)
            expected[key] = expected.get(key, 0.0) + weight
        got = {path: tree.self_weight[i] for path, i in by_path(tree).items() if tree.self_weight[i]}
        assert got.keys() == {k for k, v in expected.items() if v}, view
        for key, value in got.items():
            assert value == pytest.approx(expected[key]), (view, key)


def test_folded_reading_interns_each_call_path_once():
    lines = ["a;b;c 1", "x;b 2", "a;b 3", "a;b;c 4", "a 5", "f (m.py:01);g 6", "f (m.py:1);g 7"]
    profile = folded(*lines)
    check_profile(profile)
    prefixes = {
        tuple(s.split(";")[:k])
        for s in (line.rpartition(" ")[0] for line in lines[:5])
        for k in range(1, s.count(";") + 2)
    }
    assert len(profile.stack_parent) == len(prefixes) + 2  # + "f (m.py:1)" and its "g", once
    stacks = [
        tuple(profile.frames[f].name for f in profile.stack_frames(s)) for s in profile.sample_stack.tolist()
    ]
    assert stacks[:5] == [("a", "b", "c"), ("x", "b"), ("a", "b"), ("a", "b", "c"), ("a",)]
    assert (
        profile.sample_stack[0] == profile.sample_stack[3]
        and profile.sample_stack[5] == profile.sample_stack[6]
    )
    assert profile.sample_wall.tolist() == [1, 2, 3, 4, 5, 6, 7]


def test_frames_with_the_same_label_merge_into_one_node():
    b = ProfileBuilder({"cwd": "/a", "weight_unit": "seconds"})
    thread = b.thread_id(1, 1)
    # Two files that shorten to the same label (both relative to a site-packages dir).
    f1 = Frame("g", "/x/site-packages/m.py", 3)
    f2 = Frame("g", "/y/site-packages/m.py", 3)
    top = Frame("main", "/a/t.py", 1)
    for f, w in ((f1, 1.0), (f2, 2.0)):
        b.add_sample(0, thread, b.stack_id([b.frame(top), b.frame(f)]), w, w)
    tree = build_tree(b.build())
    assert len(tree) == 3
    assert tree.total[by_path(tree)[("main (t.py:1)", "g (m.py:3)")]] == 3.0


def test_prune_keeps_heavy_nodes_and_their_ancestors():
    tree = build_tree(folded("a;b;c 50", "a;b;d 1", "a;e 2", "f 1"))
    pruned = tree.prune(2)
    assert sorted(by_path(pruned)) == [("a",), ("a", "b"), ("a", "b", "c"), ("a", "e")]
    assert pruned.total[0] == tree.total[0]  # the root keeps the whole weight
    assert all(pruned.parent[i] < i for i in range(1, len(pruned)))


# --- SVG ----------------------------------------------------------------------------------------


def test_svg_is_well_formed_with_one_rect_per_node_laid_out_in_label_order():
    svg = render_svg(folded("m;b 2", "m;a 3", "z 5"), minwidth=0)
    root, frames = rects(svg)
    assert root.tag == f"{SVG}svg"
    by_name = {r.get("n"): r for r in frames}
    assert set(by_name) == {"all", "m", "a", "b", "z"}
    x = {n: int(r.get("x")) for n, r in by_name.items()}
    w = {n: int(r.get("width")) for n, r in by_name.items()}
    assert w["all"] == UNITS and x["all"] == 0
    assert x["a"] == x["m"] < x["b"] < x["z"]  # alphabetical, like flamegraph.pl
    assert w["a"] == UNITS * 3 // 10 and w["b"] == UNITS * 2 // 10 and x["b"] == x["a"] + w["a"]
    assert by_name["z"].get("s") == "5"  # tooltip count: the folded count
    assert render_svg(folded("m;b 2", "m;a 3", "z 5"), minwidth=0) == svg  # deterministic


def test_seconds_profile_carries_sample_counts_and_kinds():
    svg = render_svg(sampled_profile(), minwidth=0)
    _, frames = rects(svg)
    by_name = {r.get("n"): r for r in frames}
    assert by_name["work (app.py:10)"].get("s") == "8"
    assert by_name["dot (numpy/core/multiarray.py:5)"].get("class")[0] == "l"  # library
    assert by_name["sleep (threading.py:300)"].get("class")[0] == "s"  # standard library
    assert by_name["main (app.py:1)"].get("class")[0] == "u"  # your code
    legend = ET.fromstring(svg.encode()).find(f"{SVG}g[@id='legend']")
    assert [t.text for t in legend.iter(f"{SVG}text")] == ["your code", "library", "standard library"]
    assert "of wall time, 11 samples" in svg


def test_legend_lists_only_the_kinds_drawn():
    profile = folded(
        "main (app.py:1) 100000", "main (app.py:1);loads (/usr/lib/python3.11/json/decoder.py:5) 1"
    )
    for minwidth, kinds in ((0, ["your code", "standard library"]), (0.1, ["your code"])):
        legend = ET.fromstring(render_svg(profile, minwidth=minwidth).encode()).find(f"{SVG}g[@id='legend']")
        assert [t.text for t in legend.iter(f"{SVG}text")] == kinds


HOSTILE = [
    "<script>alert(1)</script>",
    "]]><script>alert(2)</script>",
    "a & b",
    "q\"uote's",
    "ctl\x01\x7f",
    "<![CDATA[x]]>",
]


def test_every_name_is_escaped_and_nothing_is_injected():
    lines = [f"main;{name} {i + 1}" for i, name in enumerate(HOSTILE)]
    svg = render_svg(folded(*lines), title="<b>t</b> & ]]>", minwidth=0)
    root, frames = rects(svg)
    scripts = list(root.iter(f"{SVG}script"))
    assert len(scripts) == 1 and "alert" not in scripts[0].text
    assert not list(root.iter(f"{SVG}b")) and not list(root.iter("script"))
    names = {r.get("n") for r in frames}
    for name in HOSTILE:
        assert name.replace("\x01", "\ufffd") in names
    assert root.find(f"{SVG}text[@id='title']").text == "<b>t</b> & ]]>"
    labels = [t.text for t in root.find(f"{SVG}g[@id='l']").iter(f"{SVG}text")]
    assert "<scri.." in labels and "a & b" in labels  # drawn names round-trip too


def test_minwidth_drops_narrow_frames_and_shrinks_the_file():
    lines = ["main;hot 100000"] + [f"main;cold{i};leaf 1" for i in range(300)]
    profile = folded(*lines)
    everything, pruned = render_svg(profile, minwidth=0), render_svg(profile, minwidth=0.1)
    assert len(rects(everything)[1]) == 3 + 600
    assert {r.get("n") for r in rects(pruned)[1]} == {"all", "main", "hot"}
    assert len(pruned) < len(everything) / 5


def test_icicle_puts_the_root_on_top():
    profile = folded("a;b;c 1", "a;d 1")
    for icicle in (False, True):
        frames = frame_ys(render_svg(profile, icicle=icicle))
        order = [frames[n] for n in ("all", "a", "b", "c")]
        assert order == (sorted(order) if icicle else sorted(order, reverse=True))
        assert frames["b"] == frames["d"]
    assert ">Icicle graph</text>" in render_svg(profile, icicle=True)


def test_title_is_shown():
    profile = folded("a 1")
    assert (
        ET.fromstring(render_svg(profile, title="My run").encode()).find(f"{SVG}text[@id='title']").text
        == "My run"
    )
    assert ">Flame graph</text>" in render_svg(profile)


def test_large_profile_keeps_a_small_file():
    lines = [f"root;mid{i % 50};leaf{i} {1 + i % 7}" for i in range(20000)]
    svg = render_svg(folded(*lines))
    frames = rects(svg)[1]
    assert len(frames) < 1200 * 10 * 3  # at most ~one frame per 0.1 px per level
    assert len(svg) < 1_000_000
