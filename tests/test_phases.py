"""Phase classification: built-in rules, precedence, user rules and declared scopes, views, and a real
torch loop."""

from __future__ import annotations

import numpy as np
import pytest

from flameprof.analyze.phases import (
    LEAF_PHASES,
    Classifier,
    layer_of_stacks,
    parse_rule,
    phase_of_samples,
    phase_of_stacks,
    profile_rules,
)
from flameprof.analyze.views import display_stacks
from flameprof.errors import FlameprofError
from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame
from flameprof.model.records import CLOSURE

TORCH = "/venv/lib/python3.11/site-packages/torch/"
MODULE = Frame("<module>", "/work/train.py", 1)
NEXT = Frame("_BaseDataLoaderIter.__next__", TORCH + "utils/data/dataloader.py", 720)
SINGLE = Frame("_SingleProcessDataLoaderIter._next_data", TORCH + "utils/data/dataloader.py", 783)
MULTI = Frame("_MultiProcessingDataLoaderIter._next_data", TORCH + "utils/data/dataloader.py", 1468)
TRY_GET = Frame("_MultiProcessingDataLoaderIter._try_get_data", TORCH + "utils/data/dataloader.py", 1278)
QUEUE_GET = Frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 98)
FETCH = Frame("_MapDatasetFetcher.fetch", TORCH + "utils/data/_utils/fetch.py", 49)
GETITEM = Frame("Images.__getitem__", "/work/train.py", 20)
CALL = Frame("Module._call_impl", TORCH + "nn/modules/module.py", 1782)
LAYER = Frame("Net.fc (Linear)", kind="layer")
LINEAR = Frame("Linear.forward", TORCH + "nn/modules/linear.py", 130)
TENSOR_BACKWARD = Frame("Tensor.backward", TORCH + "_tensor.py", 566)
ENGINE = Frame("_engine_run_backward", TORCH + "autograd/graph.py", 966)
SGD = Frame("SGD.step", TORCH + "optim/sgd.py", 105)
ZERO = Frame("Optimizer.zero_grad", TORCH + "optim/optimizer.py", 1023)
SYNC = Frame("synchronize", TORCH + "cuda/__init__.py", 1080)
LOG = Frame("log_metrics", "/work/train.py", 60)


def classify(*stacks: list[Frame], meta: dict | None = None, rules=None) -> list[str]:
    b = ProfileBuilder(meta)
    t = b.thread_id(1, 1, "MainThread")
    for i, frames in enumerate(stacks):
        b.add_sample(0.01 * (i + 1), t, b.stack_id([b.frame(f) for f in frames]), 0.01)
    profile = b.build()
    rules = profile_rules(profile, rules or [])
    return [LEAF_PHASES[i] for i in phase_of_samples(profile, rules)]


def test_builtin_rules_classify_each_phase():
    got = classify(
        [MODULE, NEXT, SINGLE, FETCH, GETITEM],
        [MODULE, NEXT, MULTI, TRY_GET, QUEUE_GET],
        [MODULE, CALL, LAYER, LINEAR],
        [MODULE, TENSOR_BACKWARD, ENGINE],
        [MODULE, SGD],
        [MODULE, ZERO],
        [MODULE, SYNC],
        [MODULE, LOG],
        [MODULE],
    )
    assert got == [
        "data.fetch",
        "data.wait",
        "forward",
        "backward",
        "optimizer",
        "optimizer",
        "sync",
        "other",
        "other",
    ]


def test_priority_data_beats_forward_and_backward_beats_forward():
    transform = [MODULE, NEXT, SINGLE, FETCH, GETITEM, CALL, Frame("Normalize.forward", "/work/t.py", 3)]
    recompute = [
        MODULE,
        TENSOR_BACKWARD,
        ENGINE,
        Frame("CheckpointFunction.backward", "/x.py", 1),
        CALL,
        LINEAR,
    ]
    sync_in_forward = [MODULE, CALL, LAYER, LINEAR, SYNC]
    assert classify(transform, recompute, sync_in_forward) == ["data.fetch", "backward", "sync"]


C10D = TORCH + "distributed/distributed_c10d.py"
LOGGER = Frame("_exception_logger.<locals>.wrapper", TORCH + "distributed/c10d_logger.py", 81)


def test_collectives_are_comm_wherever_they_are_called_and_beat_backward_and_sync():
    all_reduce = Frame("all_reduce", C10D, 2870)
    barrier = Frame("barrier", C10D, 4700)
    hook = Frame("allreduce_hook", "/work/train.py", 40)  # a gradient hook: called by autograd
    wait = Frame("wait_tensor", TORCH + "distributed/_functional_collectives.py", 140)
    got = classify(
        [MODULE, LOGGER, all_reduce],
        [MODULE, LOGGER, barrier],
        [MODULE, TENSOR_BACKWARD, ENGINE, hook, LOGGER, all_reduce],
        [MODULE, SGD, LOGGER, Frame("broadcast", C10D, 2700)],
        [MODULE, CALL, LAYER, wait],
        [MODULE, SYNC, LOGGER, barrier],
        [MODULE, Frame("get_rank", C10D, 2300)],  # not a collective
        [MODULE, TENSOR_BACKWARD, ENGINE, Frame("get_world_size", C10D, 2320)],
    )
    assert got == ["comm", "comm", "comm", "comm", "comm", "comm", "other", "backward"]


def test_without_closure_marks_the_programs_code_under_an_optimizer_is_its_callback():
    """A profile without closure marks (py-spy): Lightning's automatic optimisation and LBFGS run
    forward and backward inside ``step(closure)``, taken from the program's code there."""
    lightning = "/venv/lib/python3.11/site-packages/lightning/pytorch/"
    step = [MODULE, Frame("Adam.step", TORCH + "optim/adam.py", 200)]
    closure = [
        *step,
        Frame("Closure.__call__", lightning + "loops/optimization/automatic.py", 140),
        Frame("LitModel.training_step", "/work/train.py", 30),
    ]
    contextlib = Frame("_GeneratorContextManager.__enter__", "/usr/lib/python3.11/contextlib.py", 132)
    got = classify(
        [*step, Frame("_single_tensor_adam", TORCH + "optim/adam.py", 340)],
        [*step, contextlib],  # the standard library is not a callback
        closure,  # the step's own code, outside any module call
        [*closure, CALL, LAYER, LINEAR],
        [*closure, TENSOR_BACKWARD, ENGINE],
        [MODULE, CALL, LAYER, LINEAR, *step[1:]],  # an optimizer called from a forward stays one
    )
    assert got == ["optimizer", "optimizer", "other", "forward", "backward", "optimizer"]


def test_with_closure_marks_only_the_closure_leaves_the_optimizer():
    """The collector marks the closure: an optimizer's own code is optimizer wherever its class is
    defined (the program's file, a library), the closure's code has the phase it would have without
    the optimizer."""
    wrapper = Frame("Optimizer.profile_hook_step.<locals>.wrapper", TORCH + "optim/optimizer.py", 508)
    mine = [MODULE, wrapper, Frame("Lion.step", "/work/train.py", 40)]
    library = [MODULE, wrapper, Frame("Adafactor.step", "/venv/lib/python3.11/site-packages/t/opt.py", 9)]
    closure = [*mine, CLOSURE, Frame("closure", "/work/train.py", 70)]
    got = classify(
        mine,
        [*mine, Frame("_norms", "/work/train.py", 20)],
        library,
        [*closure, Frame("log", "/work/train.py", 90)],
        [*closure, CALL, LAYER, LINEAR],
        [*closure, TENSOR_BACKWARD, ENGINE],
        meta={"optimizer_closures": "marked"},
    )
    assert got == ["optimizer", "optimizer", "optimizer", "other", "forward", "backward"]


def test_the_import_system_is_never_a_phase():
    """The first optimizer imports torch._dynamo; a Dataset may import lazily: both are startup."""
    find = Frame("_find_and_load", "<frozen importlib._bootstrap>", 1349)
    exec_module = Frame("_LoaderBasics.exec_module", "<frozen importlib._bootstrap_external>", 1020)
    init = Frame("Optimizer.__init__", TORCH + "optim/optimizer.py", 370)
    got = classify(
        [MODULE, init, find, exec_module, Frame("<module>", TORCH + "_dynamo/__init__.py", 1)],
        [MODULE, NEXT, SINGLE, FETCH, GETITEM, find, exec_module],
        [MODULE, CALL, LAYER, LINEAR, find],
        [MODULE, init],
    )
    assert got == ["other", "other", "other", "optimizer"]


def test_user_rule_beats_builtins_and_innermost_user_rule_wins():
    rules = [parse_rule("other=train.py:log_metrics"), parse_rule("sync=*.item_like")]
    got = classify(
        [MODULE, CALL, LAYER, LINEAR, LOG],
        [MODULE, LOG, Frame("Metric.item_like", "/work/m.py", 5)],
        rules=rules,
    )
    assert got == ["other", "sync"]


def test_declared_scope_phase_and_saved_rules_from_meta():
    scope = Frame("load batch", kind="scope")
    meta = {"scope_phases": {"load batch": "data"}, "phase_rules": ["data.wait=train.py:wait_for_queue"]}
    got = classify(
        [MODULE, scope, Frame("decode", "/work/io.py", 3)],
        [MODULE, Frame("wait_for_queue", "/work/train.py", 90)],
        [MODULE, Frame("load batch", "/work/x.py", 1)],  # a function, not the scope
        meta=meta,
    )
    assert got == ["data.fetch", "data.wait", "other"]


@pytest.mark.parametrize("text", ["forward", "=x", "fwd=x", "data=", "data=  ", "sync=path.py:"])
def test_malformed_rules_raise_one_clear_error(text):
    with pytest.raises(FlameprofError, match="bad --phase rule"):
        parse_rule(text)


def test_native_names_with_double_colons_are_names_not_paths():
    rule = parse_rule("sync=at::native::_local_scalar_dense*")
    c = Classifier([rule])
    assert c.classify([Frame("at::native::_local_scalar_dense_cpu", kind="native")]) == "sync"
    assert c.classify([Frame("at::native::add", kind="native")]) == "other"


def test_stack_classification_is_per_stack_and_matches_frame_walk():
    stacks = [[MODULE, NEXT, SINGLE, FETCH, GETITEM], [MODULE, CALL, LAYER, LINEAR], [MODULE, SGD], [MODULE]]
    b = ProfileBuilder()
    t = b.thread_id(1, 1)
    rng = np.random.default_rng(0)
    ids = [b.stack_id([b.frame(f) for f in s]) for s in stacks]
    for k in rng.integers(0, len(ids), 1000):
        b.add_sample(0.0, t, ids[k], 0.01)
    b.add_sample(0.0, t, -1, 0.01)
    profile = b.build()
    per_stack = phase_of_stacks(profile)
    c = Classifier(profile_rules(profile))
    for sid in range(len(profile.stack_parent)):
        assert LEAF_PHASES[per_stack[sid]] == c.classify(
            [profile.frames[f] for f in profile.stack_frames(sid)]
        )
    samples = phase_of_samples(profile)
    assert LEAF_PHASES[samples[-1]] == "other"  # the empty stack
    assert np.array_equal(samples[:-1], per_stack[profile.sample_stack[:-1]])
    layers = layer_of_stacks(profile)
    assert profile.frames[layers[ids[1]]] == LAYER and layers[ids[0]] == -1


def _views_profile():
    b = ProfileBuilder()
    t = b.thread_id(1, 1)
    b.add_stack_sample(
        [
            MODULE,
            CALL,
            LAYER,
            CALL,
            Frame("Net.fc.act (ReLU)", kind="layer"),
            Frame("relu", TORCH + "nn/functional.py", 1),
        ],
        0.3,
        t,
    )
    b.add_stack_sample([MODULE, NEXT, MULTI, TRY_GET, QUEUE_GET], 0.5, t)
    b.add_stack_sample([MODULE, Frame("epoch", kind="scope"), LOG], 0.2, t)
    return b.build()


def test_layers_view_keeps_layers_scopes_and_the_leaf():
    got = {
        tuple(f.name for f in frames): round(w, 6)
        for frames, w in display_stacks(_views_profile(), view="layers")
    }
    assert got == {
        ("Net.fc (Linear)", "Net.fc.act (ReLU)", "relu"): 0.3,
        ("Queue.get",): 0.5,
        ("epoch", "log_metrics"): 0.2,
    }


def test_phases_view_puts_the_phase_at_the_root():
    got = {
        tuple(f.name for f in frames[:3]): w for frames, w in display_stacks(_views_profile(), view="phases")
    }
    assert got[("forward", "<module>", "Module._call_impl")] == pytest.approx(0.3)
    assert got[("data", "data.wait", "<module>")] == pytest.approx(0.5)
    assert got[("other", "<module>", "epoch")] == pytest.approx(0.2)


def test_real_torch_loop_at_1000_hz_is_classified():
    """A tiny real training loop: every phase it runs is seen, and the dataset's frames are data.fetch."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    from flameprof.profiler import Profiler

    class Slow(Dataset):
        def __len__(self):
            return 32

        def __getitem__(self, i):
            s = 0
            for k in range(10000):
                s += k
            return torch.randn(32), torch.tensor(i % 2)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    profiler = Profiler(rate=1000).start()
    for _epoch in range(5):  # about 100 samples: one epoch took about 20, and a phase could get none
        for x, y in DataLoader(Slow(), batch_size=8):
            for _ in range(10):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    profile = profiler.stop()
    phases = phase_of_samples(profile)
    main = profile.sample_thread == profile.sample_thread[np.argmax(profile.sample_wall)]
    seen = {LEAF_PHASES[p] for p in np.unique(phases[main])}
    assert {"data.fetch", "forward", "backward"} <= seen
    per_stack = phase_of_stacks(profile)
    for sid in range(len(profile.stack_parent)):
        names = [profile.frames[f].name for f in profile.stack_frames(sid)]
        if "Slow.__getitem__" in names:
            assert LEAF_PHASES[per_stack[sid]] == "data.fetch", names
        if "Linear.forward" in names:
            assert LEAF_PHASES[per_stack[sid]] == "forward", names
        if "SGD.step" in names or "Optimizer.zero_grad" in names:
            assert LEAF_PHASES[per_stack[sid]] == "optimizer", names


class _SlowItems:
    """A map-style dataset that sleeps, so the loop waits for its DataLoader worker."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        import time

        import torch

        time.sleep(0.005)
        return torch.zeros(4)


def test_real_loop_waiting_for_a_worker_is_data_wait():
    from torch.utils.data import DataLoader

    from flameprof.profiler import Profiler

    profiler = Profiler(rate=1000).start()
    batches = sum(1 for _ in DataLoader(_SlowItems(), batch_size=8, num_workers=1))
    profile = profiler.stop()
    assert batches == 3
    phases = phase_of_samples(profile)
    main = [i for i, t in enumerate(profile.threads) if t.name == "MainThread"]
    wait = (phases == LEAF_PHASES.index("data.wait")) & np.isin(profile.sample_thread, main)
    # three batches of eight 5 ms items: the main thread waits for most of ~120 ms
    assert profile.sample_wall[wait].sum() > 0.06


class _PreparedItems:
    """A dataset whose items take Python work and a wait (a read), prepared in a worker process."""

    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        import time

        import torch

        acc = 0
        for k in range(3000):
            acc += k
        time.sleep(0.0015)
        return torch.randn(64), torch.tensor(i % 4)


def test_phases_of_a_loop_whose_data_loading_blocks_match_its_own_timers():
    """The main thread waits for a DataLoader worker, then computes between blocking calls (tensor ops
    that let the GIL go): each phase's share of its wall time is within 3 points of its own timers."""
    import time

    import torch
    from torch.utils.data import DataLoader

    from flameprof.profiler import Profiler

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 4),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(DataLoader(_PreparedItems(), batch_size=4, num_workers=1))
    next(batches)  # the worker's start-up, outside the window
    spent = dict.fromkeys(("data", "forward", "backward", "optimizer"), 0.0)
    profiler = Profiler(rate=1000).start()
    start = now = time.perf_counter()
    while now - start < 3:
        x, y = next(batches)
        t1 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        t4 = time.perf_counter()
        for phase, seconds in zip(spent, (t1 - now, t2 - t1, t3 - t2, t4 - t3)):
            spent[phase] += seconds
        now = t4
    profile = profiler.stop()
    main = [i for i, t in enumerate(profile.threads) if t.name == "MainThread"]
    mine = np.isin(profile.sample_thread, main)
    phases = phase_of_samples(profile)[mine]
    wall = profile.sample_wall[mine]
    total = wall.sum()
    measured = {
        "data": wall[
            np.isin(phases, [LEAF_PHASES.index("data.wait"), LEAF_PHASES.index("data.fetch")])
        ].sum(),
        **{p: wall[phases == LEAF_PHASES.index(p)].sum() for p in ("forward", "backward", "optimizer")},
    }
    truth_total = now - start
    assert spent["data"] / truth_total > 0.2  # the loop did wait for its data
    for phase in spent:
        assert abs(100 * (measured[phase] / total - spent[phase] / truth_total)) <= 3, (
            phase,
            spent,
            measured,
        )


WHOLE_RUN = """\
import time
t0, start = time.perf_counter(), time.time()
import json, sys
import torch
from torch.utils.data import DataLoader, Dataset

class Items(Dataset):
    def __len__(self):
        return 1_000_000
    def __getitem__(self, i):
        acc = 0
        for k in range(2500):
            acc += k * k
        return torch.full((64,), float(acc % 7)), i % 4

torch.set_num_threads(1)
# steps of several ms: a loop whose period is near the sampling interval aliases with it
model = torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 4))
opt = torch.optim.Adam(model.parameters())  # the first optimizer imports torch._dynamo
spent = dict.fromkeys(("data", "forward", "backward", "optimizer"), 0.0)
batches = iter(DataLoader(Items(), batch_size=64))
# one untimed step: what the first step imports lazily is startup for flameprof and for these timers
x, y = next(batches)
torch.nn.functional.cross_entropy(model(x), y).backward()
opt.step()
opt.zero_grad()
loop_start = now = time.perf_counter()
while now - loop_start < 2.5:
    x, y = next(batches)
    t1 = time.perf_counter()
    out = model(x)
    t2 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(out, y)
    t3 = time.perf_counter()
    loss.backward()
    t4 = time.perf_counter()
    opt.step()
    opt.zero_grad()
    t5 = time.perf_counter()
    for phase, seconds in zip(spent, (t1 - now, t2 - t1, t4 - t3, t5 - t4)):
        spent[phase] += seconds
    now = t5
end = time.time()
truth = {"spent": spent, "total": time.perf_counter() - t0, "start": start, "end": end}
json.dump(truth, open(sys.argv[1], "w"))
"""


def test_whole_run_phases_match_the_programs_own_timers(tmp_path):
    """Over a whole run (importing torch, the first optimizer importing torch._dynamo, the loop), every
    phase is within 2 points of the program's own timers: imports count as startup, never as a phase."""
    from conftest import run_flameprof

    from flameprof.analyze.breakdown import analyze
    from flameprof.model import storage

    (tmp_path / "train.py").write_text(WHOLE_RUN)
    proc = run_flameprof(
        "run",
        "-q",
        "--rate",
        "1000",
        "-o",
        str(tmp_path / "out"),
        str(tmp_path / "train.py"),
        str(tmp_path / "truth.json"),
    )
    assert proc.returncode == 0, proc.stderr
    import json

    truth = json.loads((tmp_path / "truth.json").read_text())
    profile = storage.load(tmp_path / "out" / "profile.flameprof")
    # the program's own span: from its first line to its last (interpreter start-up and exit,
    # torch's exit handlers included, are outside its timers)
    at = profile.meta["start_time"] + profile.sample_time
    profile.select((at - profile.sample_wall >= truth["start"] - 0.002) & (at <= truth["end"] + 0.002))
    analysis = analyze(profile)
    seconds = dict(zip(LEAF_PHASES, analysis.phase_seconds.tolist()))
    measured = {
        "data": seconds["data.wait"] + seconds["data.fetch"],
        **{p: seconds[p] for p in ("forward", "backward", "optimizer")},
    }
    total = analysis.loop_seconds
    for phase, spent in truth["spent"].items():
        off = abs(100 * (measured[phase] / total - spent / truth["total"]))
        print(f"{phase}: {100 * spent / truth['total']:.1f}% by its timers, {off:.2f} points off")
        assert off <= 2, (phase, truth, measured, total)
    assert analysis.import_seconds > 0.1  # importing torch and torch._dynamo: startup


def test_a_manual_loop_without_optim_or_dataloader_matches_its_own_timers():
    """Steps marked with ``flameprof.step()``, a hand-written SGD update and batches from a list: the
    steps are found, and forward and backward are within 2 points of the loop's own timers."""
    import time

    import torch

    import flameprof
    from flameprof.analyze.breakdown import analyze
    from flameprof.profiler import Profiler

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    # steps of a few ms: a loop whose period is near the sampling interval aliases with it
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 4),
    )
    batches = [(torch.randn(64, 256), torch.randint(0, 4, (64,))) for _ in range(8)]
    spent = dict.fromkeys(("forward", "backward"), 0.0)
    steps = 0
    try:
        profiler = Profiler(rate=1000).start()
        start = now = time.perf_counter()
        while now - start < 2.5:
            x, y = batches[steps % len(batches)]
            t1 = time.perf_counter()
            out = model(x)
            t2 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(out, y)
            t3 = time.perf_counter()
            loss.backward()
            t4 = time.perf_counter()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
                    p.grad = None
            flameprof.step()
            spent["forward"] += t2 - t1
            spent["backward"] += t4 - t3
            steps += 1
            now = time.perf_counter()
        profile = profiler.stop()
    finally:
        torch.set_num_threads(threads)
    analysis = analyze(profile)
    assert analysis.steps.source == "marks:step" and abs(analysis.steps.count - steps) <= 1
    seconds = dict(zip(LEAF_PHASES, analysis.phase_seconds.tolist()))
    total, truth_total = analysis.loop_seconds, now - start
    for phase, value in spent.items():
        assert abs(100 * (seconds[phase] / total - value / truth_total)) <= 2, (phase, spent, seconds)
