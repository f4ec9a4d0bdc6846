"""The Python call site the samples show during each span of a trace (an idle interval, a sync):
counted in numpy over (span, sample) pairs, checked against counting each span's samples directly."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from flameprof.analyze import ops
from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame, Profile


def sampled(seed: int, spread: bool = False) -> Profile:
    """Three threads sampled at random times with random intervals (up to 10 ms, or, ``spread``, from
    none to 0.3 s, a few long among many short), over program stacks, a library's stack (no call
    site of the program's own) and stacks that share a program frame."""
    rng = np.random.default_rng(seed)
    builder = ProfileBuilder()
    threads = [builder.thread_id(1, tid, f"T{tid}") for tid in (1, 2, 3)]
    root = builder.frame(Frame("<module>", "/work/train.py", 1))
    library = builder.frame(Frame("forward", "/usr/lib/python3/site-packages/torch/nn/module.py", 3))
    own = [builder.frame(Frame(f"f{k}", "/work/train.py", 10 + k)) for k in range(4)]
    stacks = [builder.stack_id([root, frame]) for frame in own]
    stacks += [builder.stack_id([library]), builder.stack_id([root, library])]
    for _ in range(3000):
        thread, stack = threads[rng.integers(3)], stacks[rng.integers(len(stacks))]
        wall = rng.uniform(0, 0.01) if not spread else 10 ** rng.uniform(-7, -0.5) * rng.integers(2)
        builder.add_sample(float(rng.uniform(0, 1)), thread, stack, float(wall), 0.0)
    return builder.build()


def directly(profile: Profile, tids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str]:
    """Per span, the samples of its thread that overlap it, counted one by one (the first seen of
    equals wins, in time order)."""
    out = []
    for tid, start, end in zip(tids.tolist(), starts.tolist(), ends.tolist()):
        rows = [
            r
            for r in np.argsort(profile.sample_time, kind="stable").tolist()
            if profile.threads[int(profile.sample_thread[r])].tid == tid
            and profile.sample_time[r] >= start
            and profile.sample_time[r] - profile.sample_wall[r] <= end
        ]
        sites = [ops._program_frame(profile, int(profile.sample_stack[r])) for r in rows]
        counted = Counter(site for site in sites if site)
        out.append(counted.most_common(1)[0][0] if counted else "")
    return out


@pytest.mark.parametrize("spread", [False, True])
@pytest.mark.parametrize("pairs_at_once", [50, 1 << 22])
def test_each_spans_call_site_is_the_one_its_samples_show_most(monkeypatch, pairs_at_once, spread):
    monkeypatch.setattr(ops, "PAIRS_AT_ONCE", pairs_at_once)  # small: spans counted a few at a time
    for seed in range(3):
        profile = sampled(seed, spread)
        rng = np.random.default_rng(100 + seed)
        tids = rng.choice([1, 2, 3, 7], 300)  # 7: a thread without samples
        starts = rng.uniform(-0.05, 1.0, 300)
        ends = starts + rng.exponential(0.01, 300)  # spans overlap one another and their samples
        found = ops._call_sites(profile, tids, starts, ends)
        assert found == directly(profile, tids, starts, ends)
        assert sum(bool(site) for site in found) > 200  # most spans have a site, and they differ
        assert len(set(found) - {""}) == 5  # f0-f3, and <module> under the library frame


def test_a_few_long_samples_do_not_make_every_span_read_past_its_end(monkeypatch):
    """Samples are read in groups of like length, each span as far past its end as its group's
    longest: the pairs read stay within a small multiple of those that overlap."""
    read = []

    def counting(samples, span_of, lo, hi, ends):
        read.append(int((hi - lo).sum()))
        return commonest(samples, span_of, lo, hi, ends)

    commonest = ops._commonest_sites
    monkeypatch.setattr(ops, "_commonest_sites", counting)
    profile = sampled(0, spread=True)
    rng = np.random.default_rng(7)
    tids = rng.choice([1, 2, 3], 300)
    starts = rng.uniform(0, 1.0, 300)
    ends = starts + rng.exponential(0.01, 300)
    ops._call_sites(profile, tids, starts, ends)
    thread = np.array([profile.threads[t].tid for t in profile.sample_thread])
    time, began = profile.sample_time, profile.sample_time - profile.sample_wall
    overlapping = sum(
        int(((thread == tid) & (time >= start) & (began <= end)).sum())
        for tid, start, end in zip(tids.tolist(), starts.tolist(), ends.tolist())
    )
    reach = sum(
        int(((thread == tid) & (time >= start) & (time <= end + profile.sample_wall.max())).sum())
        for tid, start, end in zip(tids.tolist(), starts.tolist(), ends.tolist())
    )
    assert overlapping <= sum(read) < 1.5 * overlapping  # read by one group: 13 times the pairs
    assert reach > 10 * overlapping
