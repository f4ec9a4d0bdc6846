"""The call tree of a profile view: every distinct call path once, with its total and self weight.

Flame graphs, text reports and differential graphs all read this one structure. It is column-oriented
(numpy arrays indexed by node) because an imported folded file can hold millions of distinct paths;
node 0 is the root ("all") and parents always precede their children. Sibling nodes with the same
label are merged, so the tree matches the folded text of the same view line for line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ..model.frames import Labeler
from ..model.profile import Frame, Profile
from .ancestry import by_depth, depths, subtree_sums
from .views import display_stacks


@dataclass(frozen=True)
class Node:
    """A snapshot of one node, for code that walks a few nodes rather than whole columns."""

    index: int
    frame: Frame | None  # None for the root
    label: str
    total: float  # weight of the node and everything it called
    self_weight: float  # weight of samples whose leaf is this node
    samples: float
    self_samples: float
    depth: int
    children: tuple[int, ...]  # node indexes, in label order


@dataclass
class CallTree:
    """Columns per node; ``frames``/``labels`` are per distinct label and ``frame[i]`` indexes them.

    ``unit`` is ``seconds`` or ``count`` (imported folded counts, or ``--mode samples``); ``samples``
    counts samples (for ``count`` trees it equals the weight). ``columns`` holds extra per-node values
    that other analyses attach (e.g. a baseline's totals for a differential graph).
    """

    frames: list[Frame]
    labels: list[str]
    parent: np.ndarray  # int32, -1 for the root
    frame: np.ndarray  # int32 index into frames/labels, -1 for the root
    depth: np.ndarray  # int32, 0 for the root
    total: np.ndarray  # float64
    self_weight: np.ndarray  # float64
    samples: np.ndarray  # float64
    self_samples: np.ndarray  # float64
    unit: str = "seconds"
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    _children: tuple[np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __len__(self) -> int:
        return len(self.parent)

    def label(self, i: int) -> str:
        f = int(self.frame[i])
        return self.labels[f] if f >= 0 else "all"

    def children(self, i: int) -> np.ndarray:
        """Child node indexes of ``i`` in label order (flamegraph.pl's left-to-right order)."""
        order, starts = self._child_index()
        return order[starts[i] : starts[i + 1]]

    def node(self, i: int) -> Node:
        f = int(self.frame[i])
        return Node(
            i,
            self.frames[f] if f >= 0 else None,
            self.label(i),
            float(self.total[i]),
            float(self.self_weight[i]),
            float(self.samples[i]),
            float(self.self_samples[i]),
            int(self.depth[i]),
            tuple(self.children(i).tolist()),
        )

    def offsets(self) -> np.ndarray:
        """Where each node starts along the x axis, in weight units: children side by side in label
        order from their parent's start, as flamegraph.pl lays them out."""
        order, starts = self._child_index()
        before = np.zeros(len(self))
        child_totals = self.total[order]
        running = np.cumsum(child_totals) - child_totals  # exclusive prefix sums in child order
        before[order] = running - running[starts[self.parent[order]]]
        start = np.zeros(len(self))
        for level in by_depth(self.depth)[1:]:
            start[level] = start[self.parent[level]] + before[level]
        return start

    def prune(self, min_total: float) -> CallTree:
        """The tree without nodes lighter than ``min_total`` (their ancestors are heavier, so it stays a
        tree); the root is always kept."""
        keep = self.total >= min_total
        keep[0] = True
        return self.subset(np.flatnonzero(keep))

    def subset(self, nodes: np.ndarray) -> CallTree:
        """A tree of the given nodes (ascending, every node's parent included), renumbered."""
        new_index = np.full(len(self) + 1, -1, dtype=np.int32)  # slot -1 maps the root's parent
        new_index[nodes] = np.arange(len(nodes), dtype=np.int32)
        return CallTree(
            self.frames,
            self.labels,
            new_index[self.parent[nodes]],
            self.frame[nodes],
            self.depth[nodes],
            self.total[nodes],
            self.self_weight[nodes],
            self.samples[nodes],
            self.self_samples[nodes],
            self.unit,
            {k: v[nodes] for k, v in self.columns.items()},
        )

    def _child_index(self) -> tuple[np.ndarray, np.ndarray]:
        if self._children is not None:
            return self._children
        rank = _label_ranks(self.labels)
        kids = np.arange(1, len(self))
        order = kids[np.lexsort((rank[self.frame[kids]], self.parent[kids]))]
        starts = np.searchsorted(self.parent[order], np.arange(len(self) + 1))
        self._children = (order, starts)
        return self._children


def match_paths(tree: CallTree, other: CallTree) -> np.ndarray:
    """Per node of ``tree``: the node of ``other`` with the same path of labels from the root, or -1."""
    other_child: dict[tuple[int, str], int] = {}
    other_parent = other.parent.tolist()
    for i in range(1, len(other)):
        other_child[(other_parent[i], other.label(i))] = i
    match = np.full(len(tree), -1, dtype=np.int64)
    match[0] = 0
    parent = tree.parent.tolist()
    for i in range(1, len(tree)):
        up = match[parent[i]]
        if up >= 0:
            match[i] = other_child.get((int(up), tree.label(i)), -1)
    return match


def tree_unit(profile: Profile, mode: str) -> str:
    """``count`` when the weights are counts (imported folded text, or ``mode`` samples), else ``seconds``."""
    return (
        "count" if mode == "samples" or profile.meta.get("weight_unit", "seconds") == "count" else "seconds"
    )


def build_tree(profile: Profile, mode: str = "wall", view: str = "code") -> CallTree:
    """The call tree of ``profile`` seen in ``view``, weighted by ``mode`` (wall, cpu, samples or gil:
    the samples' counts stay every sample's, see ``Profile.waiting_for_gil``)."""
    unit = tree_unit(profile, mode)
    counted = profile.meta.get("weight_unit", "seconds") == "count"
    weight_mode = "wall" if counted and mode == "samples" else mode  # a folded count is the sample count
    if view == "code":
        parent, node_frame, frames, self_w, self_n = _from_profile(profile, weight_mode)
    else:
        parent, node_frame, frames, self_w, self_n = _from_stacks(
            display_stacks(profile, weight_mode, view), display_stacks(profile, "samples", view)
        )
    if counted:
        self_n = self_w
    return _finish(parent, node_frame, frames, Labeler(profile.meta), self_w, self_n, unit)


def _from_profile(
    profile: Profile, mode: str
) -> tuple[np.ndarray, np.ndarray, list[Frame], np.ndarray, np.ndarray]:
    """The code view's tree is the profile's own interned stack table (node ``i + 1`` is stack ``i``):
    no per-sample Python work, which matters for million-line folded files."""
    n = len(profile.stack_parent) + 1
    parent = np.empty(n, dtype=np.int32)
    parent[0] = -1
    parent[1:] = profile.stack_parent + 1
    node_frame = np.empty(n, dtype=np.int32)
    node_frame[0] = -1
    node_frame[1:] = profile.stack_frame
    index = profile.sample_stack + 1
    self_w = np.bincount(index, weights=profile.weights(mode), minlength=n).astype(np.float64)
    self_n = np.bincount(index, minlength=n).astype(np.float64)
    return parent, node_frame, profile.frames, self_w, self_n


def _from_stacks(
    weighted: Iterable[tuple[list[Frame], float]], counted: Iterable[tuple[list[Frame], float]]
) -> tuple[np.ndarray, np.ndarray, list[Frame], np.ndarray, np.ndarray]:
    """Intern (frames, value) pairs from ``display_stacks`` into a parent-pointer table."""
    frame_ids: dict[Frame, int] = {}
    frames: list[Frame] = []
    node_ids: dict[tuple[int, int], int] = {}
    parent, node_frame = [-1], [-1]
    self_w: list[float] = [0.0]
    self_n: list[float] = [0.0]

    def add(stack: list[Frame], value: float, column: list[float], other: list[float]) -> None:
        node = 0
        for f in stack:
            fid = frame_ids.get(f)
            if fid is None:
                fid = frame_ids[f] = len(frames)
                frames.append(f)
            key = (node, fid)
            child = node_ids.get(key)
            if child is None:
                child = node_ids[key] = len(parent)
                parent.append(node)
                node_frame.append(fid)
                column.append(0.0)
                other.append(0.0)
            node = child
        column[node] += value

    for stack, value in weighted:
        add(stack, value, self_w, self_n)
    for stack, value in counted:
        add(stack, value, self_n, self_w)
    return (
        np.asarray(parent, dtype=np.int32),
        np.asarray(node_frame, dtype=np.int32),
        frames,
        np.asarray(self_w, dtype=np.float64),
        np.asarray(self_n, dtype=np.float64),
    )


def _finish(
    parent: np.ndarray,
    node_frame: np.ndarray,
    frames: list[Frame],
    labeler: Labeler,
    self_w: np.ndarray,
    self_n: np.ndarray,
    unit: str,
) -> CallTree:
    depth = depths(parent)
    label_ids: dict[str, int] = {}
    display_frames: list[Frame] = []  # the first frame of each distinct label
    frame_label = np.empty(len(frames), dtype=np.int32)
    for i, f in enumerate(frames):
        text = labeler.label(f)
        j = label_ids.get(text)
        if j is None:
            j = label_ids[text] = len(display_frames)
            display_frames.append(f)
        frame_label[i] = j
    node_label = np.full(len(parent), -1, dtype=np.int32)
    node_label[1:] = frame_label[node_frame[1:]]
    if len(display_frames) < len(frames):  # two frames share a label: merge their sibling nodes
        parent, node_label, depth, self_w, self_n = _merge_same_label(
            parent, node_label, depth, self_w, self_n
        )
    total, samples = subtree_sums(parent, None, self_w, self_n)
    return CallTree(
        display_frames, list(label_ids), parent, node_label, depth, total, self_w, samples, self_n, unit
    )


def _merge_same_label(
    parent: np.ndarray, node_label: np.ndarray, depth: np.ndarray, self_w: np.ndarray, self_n: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Renumber nodes so that each (parent, label) pair is one node, level by level from the root."""
    new_id = np.zeros(len(parent), dtype=np.int64)
    new_parent, new_label, new_depth = [np.array([-1])], [np.array([-1])], [np.array([0])]
    count = 1
    for d, level in enumerate(by_depth(depth)[1:], 1):
        keys = new_id[parent[level]] * (int(node_label.max()) + 1) + node_label[level]
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        new_id[level] = count + inverse
        new_parent.append(new_id[parent[level[first]]])
        new_label.append(node_label[level[first]])
        new_depth.append(np.full(len(uniq), d))
        count += len(uniq)
    w = np.bincount(new_id, weights=self_w, minlength=count)
    n = np.bincount(new_id, weights=self_n, minlength=count)
    return (
        np.concatenate(new_parent).astype(np.int32),
        np.concatenate(new_label).astype(np.int32),
        np.concatenate(new_depth).astype(np.int32),
        w,
        n,
    )


def _label_ranks(labels: list[str]) -> np.ndarray:
    rank = np.empty(len(labels) + 1, dtype=np.int64)  # slot -1: the root, which is nobody's child
    rank[np.array(sorted(range(len(labels)), key=labels.__getitem__), dtype=np.int64)] = np.arange(
        len(labels)
    )
    rank[-1] = -1
    return rank
