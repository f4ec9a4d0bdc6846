"""Per-node values of a parent-pointer tree (a profile's stack table, a call tree) that depend on a node's
ancestors or descendants: depths and subtree sums in one pass over the nodes by the C extension
``flameprof._trees`` where it is built, else with numpy a depth level at a time; either way linear in the
number of nodes however deep the tree (a 40,000-frame recursion is 40,000 levels of one node each, a few
microseconds apiece), and never a list of frames per node, which would be quadratic in the depth.

``parent[i]`` is -1 for a root, and parents precede their children.
"""

from __future__ import annotations

import numpy as np

try:
    from .. import _trees
except ImportError:  # not built: numpy, a level at a time
    _trees = None  # type: ignore[assignment]


def depths(parent: np.ndarray) -> np.ndarray:
    """Depth of each node (0 for roots): in one pass in C, else by pointer jumping: each round adds the
    distance to the ancestor reached so far and jumps twice as far, so ~log2(max depth) vectorised rounds
    over whole columns (roots point to themselves and add 0, so no round needs a mask)."""
    if _trees is not None:
        return np.frombuffer(_trees.depths(np.ascontiguousarray(parent, dtype=np.int32)), dtype=np.int32)
    depth = (parent >= 0).astype(np.int32)
    ancestor = np.where(parent >= 0, parent, np.arange(len(parent), dtype=parent.dtype))
    while True:
        jumped = ancestor[ancestor]
        if np.array_equal(jumped, ancestor):
            return depth
        depth += depth[ancestor]
        ancestor = jumped


def by_depth(depth: np.ndarray) -> list[np.ndarray]:
    """Node indexes grouped by depth, ascending within each group."""
    deepest = int(depth.max()) if len(depth) else 0
    # a stable sort of 16-bit keys is a radix sort: several times faster on millions of nodes
    order = np.argsort(depth.astype(np.uint16) if deepest < 1 << 16 else depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(deepest + 2))
    return [order[bounds[d] : bounds[d + 1]] for d in range(len(bounds) - 1)]


def levels(parent: np.ndarray) -> list[np.ndarray]:
    """``by_depth(depths(parent))``: the nodes of each depth, roots first."""
    return by_depth(depths(parent))


def subtree_sums(
    parent: np.ndarray, levels: list[np.ndarray] | None, *values: np.ndarray
) -> list[np.ndarray]:
    """Per node, the sum of each of ``values`` over the node and all its descendants: float64 values in one
    pass in C, others (or without it) a level at a time from ``levels`` (computed when None)."""
    if _trees is not None and all(v.dtype == np.float64 for v in values):
        parents = np.ascontiguousarray(parent, dtype=np.int32)
        sums = [np.array(v, dtype=np.float64) for v in values]  # copies, C-contiguous
        for total in sums:
            _trees.add_subtrees(parents, total)
        return sums
    if levels is None:
        levels = by_depth(depths(parent))
    totals = [v.copy() for v in values]
    for level in reversed(levels[1:]):
        up = parent[level]
        for t in totals:
            np.add.at(t, up, t[level])
    return totals


def innermost(parent: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Per node, ``key`` of the nearest ancestor-or-self whose key is 0 or more, else -1: by pointer
    jumping, ~log2(depth) rounds over the column. Each unkeyed node points at its parent (a root at a
    sentinel node that is keyed -1) and every round jumps the pointers of nodes whose target is unkeyed;
    keyed nodes point at themselves, so the pointers stop at the nearest keyed ancestor."""
    n = len(parent)
    keyed = np.append(key >= 0, True)  # the sentinel ``n`` ends every walk
    up = np.where(parent >= 0, parent, n).astype(np.int64)
    ptr = np.append(np.where(keyed[:-1], np.arange(n), up), n)
    while True:
        jumped = np.where(keyed[ptr], ptr, ptr[ptr])
        if np.array_equal(jumped, ptr):
            nearest: np.ndarray = np.append(key, -1)[ptr[:-1]]
            return nearest
        ptr = jumped


class Ancestry:
    """A parent-pointer tree's depth levels, and on first use its subtree sizes and preorder, shared by
    the analyses of one stack table."""

    def __init__(self, parent: np.ndarray) -> None:
        self.parent = parent
        self.levels = levels(parent)
        self._sizes: np.ndarray | None = None
        self._preorder: np.ndarray | None = None

    def subtree_sums(self, *values: np.ndarray) -> list[np.ndarray]:
        return subtree_sums(self.parent, self.levels, *values)

    def innermost(self, key: np.ndarray) -> np.ndarray:
        return innermost(self.parent, key)

    @property
    def sizes(self) -> np.ndarray:
        """Nodes in each node's subtree, itself included."""
        if self._sizes is None:
            (self._sizes,) = self.subtree_sums(np.ones(len(self.parent), dtype=np.int64))
        return self._sizes

    @property
    def preorder(self) -> np.ndarray:
        """Position of each node in a depth-first preorder (children in index order): node ``u`` is an
        ancestor of ``v`` when ``preorder[u] < preorder[v] < preorder[u] + sizes[u]``."""
        if self._preorder is None:
            parent, sizes = self.parent, self.sizes
            order = np.argsort(parent, kind="stable")  # siblings side by side, roots (parent -1) first
            grouped = parent[order]
            size = sizes[order]
            running = np.cumsum(size) - size  # exclusive prefix sums in sibling order
            before = np.empty(len(parent), dtype=np.int64)
            before[order] = running - running[np.searchsorted(grouped, grouped)]  # earlier siblings' sizes
            pre = np.empty(len(parent), dtype=np.int64)
            if self.levels:
                pre[self.levels[0]] = before[self.levels[0]]
            for level in self.levels[1:]:
                pre[level] = pre[parent[level]] + 1 + before[level]
            self._preorder = pre
        return self._preorder

    def first_occurrence(self, key: np.ndarray) -> np.ndarray:
        """Per node: its ``key`` is 0 or more and no proper ancestor has the same key (the outermost call
        of a recursion), so that a value summed over these nodes' subtrees counts each stack once per key."""
        n = len(self.parent)
        out = np.zeros(n, dtype=bool)
        keyed = np.flatnonzero(key >= 0)
        if not len(keyed):
            return out
        pre, sizes = self.preorder, self.sizes
        order = keyed[np.lexsort((pre[keyed], key[keyed]))]  # by key, then preorder
        group = np.cumsum(np.concatenate(([0], key[order][1:] != key[order][:-1])))
        # The largest end of the earlier nodes of the same key: offsetting each key's ends by its group
        # number times (n + 1) keeps a running maximum from reaching into the next key's nodes.
        ends = pre[order] + sizes[order] + group * (n + 1)
        reach = np.concatenate(([-1], np.maximum.accumulate(ends)[:-1])) - group * (n + 1)
        out[order] = reach <= pre[order]  # no earlier node of the key still open: not inside one of them
        return out
