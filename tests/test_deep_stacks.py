"""Very deep stacks (a 20,000-frame recursion, a chain of 20,000 distinct functions, 10,000 nested layers):
report, every render format and diff work on them (no RecursionError, the deepest frame shown, folded text
that reads back as the same stacks), and their memory grows linearly with the depth, not with its square."""

from __future__ import annotations

import gzip
import json
import random
import tracemalloc

import numpy as np
import pytest

from flameprof.analyze.ancestry import Ancestry, innermost
from flameprof.analyze.breakdown import rank_frames, stack_weights
from flameprof.analyze.report import report_of
from flameprof.cli import main
from flameprof.collect.importers.folded import parse_frame, read_folded, read_folded_chunks
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame, Profile

DEPTH = 20_000
LAYER = "layer:"  # frames named so become layer frames


def deep_stacks(depth: int, variant: int = 0) -> dict[str, int]:
    """Folded stacks ``depth`` frames deep (recursion, distinct functions, shared prefixes, nested layers)
    and a few shallow ones; ``variant`` 1 changes some counts and adds a stack."""
    main_ = "main (train.py:5)"
    rec = "recurse (train.py:10)"
    distinct = [f"d{i} (deep.py:{i + 1})" for i in range(depth - 1)]
    call = "Module._call_impl (torch/nn/modules/module.py:1500)"
    layers = [call if i % 2 else f"{LAYER}model.blocks.{i // 2}" for i in range(depth - 2)]
    stacks = {
        (main_, *[rec] * (depth - 1)): 7 + variant,
        (main_, *distinct): 5,
        (main_, *distinct[: depth // 2], "branch (deep.py:99999)"): 3 - variant,
        (main_, *[rec] * (depth // 2), "leaf (train.py:20)"): 2,
        (main_, "train_step (train.py:30)", call, *[rec] * (depth - 3)): 4,
        (main_, "train_step (train.py:30)", call, "forward (model.py:3)"): 11,
        (main_, "train_step (train.py:30)", *layers): 3,
        (main_, "load_batch (data.py:8)"): 6,
    }
    if variant:
        stacks[(main_, *distinct[: depth // 4], "new_leaf (deep.py:77777)")] = 5
    return {";".join(frames): count for frames, count in stacks.items()}


def deep_profile(depth: int, variant: int = 0) -> Profile:
    """The stacks read as folded text, with sample times (one after the other) and layer frames."""
    text = "".join(f"{stack} {count}\n" for stack, count in deep_stacks(depth, variant).items())
    profile = read_folded_chunks([text.encode()], "deep.folded")
    profile.sample_time = np.cumsum(profile.sample_wall)
    profile.frames = [
        Frame(f.name[len(LAYER) :], kind="layer") if f.name.startswith(LAYER) else f for f in profile.frames
    ]
    return profile


DISTINCT_LEAF = f"d{DEPTH - 2} (deep.py:{DEPTH - 1})"  # the deepest frame of the chain of distinct functions
DEEPEST_LAYER = f"model.blocks.{(DEPTH - 4) // 2}"


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    directory = tmp_path_factory.mktemp("deep")
    for name, variant in (("a", 0), ("b", 1)):
        storage.save(deep_profile(DEPTH, variant), directory / f"{name}.flameprof")
    return directory


def flameprof(capsys, *args) -> str:
    """Run the CLI in this process (a RecursionError would fail the test); its stdout."""
    capsys.readouterr()
    assert main([str(a) for a in args]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_report_of_deep_stacks(deep, capsys, fmt):
    out = flameprof(capsys, "report", deep / "a.flameprof", "--format", fmt)
    assert DISTINCT_LEAF in out and DEEPEST_LAYER in out
    if fmt == "json":
        data = json.loads(out)
        functions = {row["name"]: row for row in data["functions"]}
        total = sum(deep_stacks(DEPTH).values())
        assert functions["recurse (train.py:10)"]["total"] == 7 + 2 + 4  # counted once per stack
        assert functions[DISTINCT_LEAF]["self"] == 5
        assert functions["main (train.py:5)"]["total"] == total
        layers = {row["name"]: row for row in data["layers"]}
        assert layers[DEEPEST_LAYER]["self"] == 3 and layers["model.blocks.0"]["total"] == 3


def test_folded_of_deep_stacks_reads_back_as_the_same_stacks(deep, tmp_path, capsys):
    flameprof(capsys, "render", deep / "a.flameprof", "-o", tmp_path / "out.folded")
    text = (tmp_path / "out.folded").read_text()
    expected = {stack.replace(LAYER, ""): count for stack, count in deep_stacks(DEPTH).items()}
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines())
    assert {stack: int(count) for stack, count in lines.items()} == expected
    again = read_folded(text.splitlines(), "out.folded")
    stacks = {tuple(again.frames[f] for f in again.stack_frames(s)) for s in again.sample_stack.tolist()}
    assert stacks == {tuple(parse_frame(label) for label in stack.split(";")) for stack in expected}
    assert max(len(s) for s in stacks) == DEPTH


def test_svg_and_exports_of_deep_stacks(deep, tmp_path, capsys):
    out = tmp_path / "out.svg"
    flameprof(capsys, "render", deep / "a.flameprof", "-o", out, "--format", "speedscope,chrome,pprof,html")
    assert DISTINCT_LEAF in out.read_text()
    assert DISTINCT_LEAF in (tmp_path / "out.html").read_text()
    assert DISTINCT_LEAF.encode() in gzip.decompress((tmp_path / "out.pb.gz").read_bytes())

    doc = json.loads((tmp_path / "out.speedscope.json").read_text())
    names = [f["name"] for f in doc["shared"]["frames"]]
    samples = doc["profiles"][0]["samples"]
    assert max(len(s) for s in samples) == DEPTH
    assert any(len(s) == DEPTH and names[s[-1]] == DISTINCT_LEAF for s in samples)

    events = json.loads((tmp_path / "out.trace.json").read_text())["traceEvents"]
    depth = deepest = 0
    for e in events:
        if e.get("tid") == 0 and e["ph"] in "BE":  # the samples' track of the only thread
            depth += 1 if e["ph"] == "B" else -1
            deepest = max(deepest, depth)
    assert depth == 0 and deepest == DEPTH
    assert any(e.get("name") == DISTINCT_LEAF for e in events)


@pytest.mark.parametrize("view", ["layers", "phases"])
def test_views_of_deep_stacks(deep, tmp_path, capsys, view):
    flameprof(capsys, "render", deep / "a.flameprof", "-o", tmp_path / "out.svg", "--view", view)
    flameprof(capsys, "render", deep / "a.flameprof", "-o", tmp_path / "out.folded", "--view", view)
    assert DEEPEST_LAYER in (tmp_path / "out.svg").read_text()
    assert DEEPEST_LAYER in (tmp_path / "out.folded").read_text()


def test_diff_of_deep_stacks(deep, tmp_path, capsys):
    out = flameprof(capsys, "diff", deep / "a.flameprof", deep / "b.flameprof", "-o", tmp_path / "diff.svg")
    assert "new_leaf (deep.py:77777)" in out
    svg = (tmp_path / "diff.svg").read_text()
    assert DISTINCT_LEAF in svg and "new_leaf (deep.py:77777)" in svg


def test_report_memory_grows_linearly_with_depth():
    """Quadratic work (a frame list per prefix of a deep stack) would need 16x the memory for 4x the
    depth; linear work about 4x, less the fixed part."""

    def peak(depth: int) -> int:
        profile = deep_profile(depth)
        tracemalloc.start()
        try:
            report_of(profile)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(5_000), peak(20_000)
    assert large < 8 * small, (small, large)


def random_profile(rng: random.Random) -> Profile:
    b = ProfileBuilder()
    frames = [
        Frame(f"f{i}", "x.py", i % 3, rng.choice(["python", "layer"])) for i in range(rng.randint(1, 8))
    ]
    for _ in range(rng.randint(1, 30)):
        sid = b.stack_id([b.frame(rng.choice(frames)) for _ in range(rng.randint(1, 12))])
        b.add_sample(0.0, 0, sid, rng.choice([0.0, 0.01, 0.02, 0.5, 1.0, 0.125]))
    return b.build()


def test_ancestry_against_walking_each_stack():
    rng = random.Random(7)
    for _ in range(100):
        profile = random_profile(rng)
        parent = profile.stack_parent
        n = len(parent)
        key = np.array([rng.choice([-1, 0, 1, 2]) for _ in range(n)])
        tree = Ancestry(parent)
        ancestors: list[list[int]] = []
        for s in range(n):
            chain = [s]
            while parent[chain[-1]] >= 0:
                chain.append(int(parent[chain[-1]]))
            ancestors.append(chain)  # self first, root last
        inner = [next((int(key[a]) for a in chain if key[a] >= 0), -1) for chain in ancestors]
        assert innermost(parent, key).tolist() == inner
        first = [key[c[0]] >= 0 and all(key[a] != key[c[0]] for a in c[1:]) for c in ancestors]
        assert tree.first_occurrence(key).tolist() == first
        sizes = [sum(s in chain for chain in ancestors) for s in range(n)]
        assert tree.sizes.tolist() == sizes
        pre = tree.preorder
        for u in range(n):
            for v in range(n):
                assert (pre[u] < pre[v] < pre[u] + sizes[u]) == (u in ancestors[v][1:])


def test_one_pass_depths_and_sums_agree_with_the_levels_and_refuse_a_parent_after_its_child(monkeypatch):
    """The C passes (``flameprof._trees``) and numpy's level-at-a-time fallback give the same depths
    and subtree sums; a table whose parent comes after its child is refused, not summed wrong."""
    from flameprof import _trees
    from flameprof.analyze import ancestry

    rng = random.Random(11)
    for _ in range(50):
        parent = random_profile(rng).stack_parent
        values = np.array([rng.random() for _ in parent])
        fast = ancestry.depths(parent), ancestry.subtree_sums(parent, None, values, values * 2)
        monkeypatch.setattr(ancestry, "_trees", None)
        slow = ancestry.depths(parent), ancestry.subtree_sums(parent, None, values, values * 2)
        monkeypatch.undo()
        assert fast[0].tolist() == slow[0].tolist()
        for f, s in zip(fast[1], slow[1]):
            assert np.allclose(f, s, rtol=1e-12) and f is not values
    with pytest.raises(ValueError, match="does not precede"):
        _trees.depths(np.array([-1, 2, 0], dtype=np.int32))
    with pytest.raises(ValueError, match="float64"):
        _trees.add_subtrees(np.array([-1, 0], dtype=np.int32), np.zeros(3))


def test_rank_frames_counts_each_stack_once_per_name():
    """Against the definition: a name's self time is that of the stacks whose innermost wanted frame has
    it, its total that of the stacks with it anywhere (recursion counted once)."""
    rng = random.Random(3)
    for _ in range(100):
        profile = random_profile(rng)
        weights = stack_weights(profile, profile.sample_wall, None)
        for wanted in ([True] * len(profile.frames), [f.kind == "layer" for f in profile.frames]):
            self_s: dict[str, float] = {}
            total_s: dict[str, float] = {}
            for sid in np.flatnonzero(weights).tolist():
                names = [profile.frames[f].name for f in profile.stack_frames(sid) if wanted[f]]
                if names:
                    self_s[names[-1]] = self_s.get(names[-1], 0.0) + weights[sid]
                    for name in set(names):
                        total_s[name] = total_s.get(name, 0.0) + weights[sid]
            rows = rank_frames(profile, weights, wanted, None, lambda f: f.name)
            assert {r.name for r in rows} == set(total_s)
            for r in rows:
                assert r.self_s == self_s.get(r.name, 0.0)  # added in stack order, as before
                assert r.total_s == pytest.approx(total_s[r.name], rel=1e-12)
