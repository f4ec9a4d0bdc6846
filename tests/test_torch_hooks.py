"""Torch instrumentation while profiling: step and batch marks, backward layers, install and removal."""

import json
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch
from conftest import REPO, run_flameprof
from sampled import wait_for_samples
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.dataloader import _BaseDataLoaderIter

import flameprof
from flameprof import Profiler
from flameprof.model import storage


def marks(profile, name):
    return [m for m in profile.marks if m.name == name]


def train(model, optimizers, loader, epochs=1, user_steps=False):
    for _ in range(epochs):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            for opt in optimizers:
                opt.step()
                opt.zero_grad()
            if user_steps:
                flameprof.step()


def make_loader(batches=5):
    data = TensorDataset(torch.randn(batches * 4, 3), torch.randn(batches * 4, 2))
    return DataLoader(data, batch_size=4)


def test_optimizer_steps_and_batches_are_counted_once_per_iteration(sampler_kind):
    model = nn.Linear(3, 2)
    gen = torch.optim.SGD(model.parameters(), lr=0.1)
    disc = torch.optim.Adam(model.parameters(), lr=0.1)  # a second optimizer stepping each iteration
    loader, other = make_loader(5), make_loader(3)
    with Profiler(rate=1000) as p:
        train(model, [gen, disc], loader, epochs=2)
        for _ in other:
            pass
    assert p.profile.meta["sampler"] == sampler_kind
    steps = marks(p.profile, "step")
    assert len(steps) == 10 and {m.value for m in steps} == {"optimizer"}
    main = [i for i, t in enumerate(p.profile.threads) if t.name == "MainThread"]
    assert {m.thread for m in steps} == set(main) and len(main) == 1
    batches = marks(p.profile, "batch")
    assert [m.value for m in batches] == ["0"] * 10 + ["1"] * 3
    assert all(b.time < s.time for b, s in zip(batches, steps))  # each batch arrives before its step ends


def test_explicit_flameprof_step_replaces_optimizer_steps(sampler_kind):
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Profiler(rate=1000) as p:
        train(model, [opt], make_loader(7), user_steps=True)
    assert [m.value for m in marks(p.profile, "step")] == ["user"] * 7


@pytest.mark.parametrize("first_kept", [True, False])
def test_a_new_optimizer_counts_once_the_first_is_replaced(sampler_kind, first_kept):
    """A second training stage with a new optimizer: its steps count from its first one, whether
    the first optimizer is still referenced (it takes the lead on its second step in a row) or
    already freed."""
    model = nn.Linear(3, 2)
    with Profiler(rate=1000) as p:
        first = torch.optim.SGD(model.parameters(), lr=0.1)
        train(model, [first], make_loader(2))
        if not first_kept:
            del first
        second_stage = time.perf_counter() - flameprof.profiler.SESSION.sampler.t0
        train(model, [torch.optim.SGD(model.parameters(), lr=0.1)], make_loader(3))
    times = [m.time for m in marks(p.profile, "step")]
    assert len(times) == 5 and times == sorted(times)
    assert times[1] < second_stage < times[2]


def test_the_leading_optimizer_changes_only_on_a_second_step_in_a_row():
    from flameprof.collect.engine.scopes import LeadingOptimizer

    class Opt:
        pass

    a, b, c = Opt(), Opt(), Opt()
    lead = LeadingOptimizer()
    order = [a, b, a, b, a, c, b, a, b, b, a, b]  # alternating keeps a; b twice in a row takes over
    counted = [lead.steps(opt, t) for t, opt in enumerate(order)]
    assert counted == [[0], [], [2], [], [4], [], [], [7], [], [8, 9], [], [11]]


def test_hooks_are_removed_when_profiling_stops():
    from torch.optim.optimizer import _global_optimizer_post_hooks

    original_next = _BaseDataLoaderIter.__dict__["__next__"]
    post_hooks = dict(_global_optimizer_post_hooks)
    with Profiler(rate=1000, backward_layers=True) as p:
        assert _BaseDataLoaderIter.__dict__["__next__"] is not original_next
        assert len(_global_optimizer_post_hooks) == len(post_hooks) + 1
        assert torch.nn.modules.module._global_backward_hooks
        sampler = flameprof.profiler.SESSION.sampler
        assert torch.nn.Module._call_impl.__code__ in sampler.frame_hooks
    assert p.profile.num_samples > 0
    assert _BaseDataLoaderIter.__dict__["__next__"] is original_next
    assert dict(_global_optimizer_post_hooks) == post_hooks
    assert not torch.nn.modules.module._global_backward_hooks
    assert not torch.nn.modules.module._global_backward_pre_hooks
    assert torch.nn.Module._call_impl.__code__ not in sampler.frame_hooks
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, [opt], make_loader(2))  # and the program runs on unaffected
    assert not marks(p.profile, "step")


class SlowGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        wait_for_samples()
        return grad


class Slow(nn.Module):
    def forward(self, x):
        return SlowGrad.apply(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.slow = Slow()
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.slow(self.fc(x)))


def backward_layer_stacks(backward_layers):
    net = Net()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Profiler(rate=1000, backward_layers=backward_layers) as p:
            for _ in range(5):
                net(torch.randn(2, 4)).sum().backward()
    profile = p.profile
    stacks = set()
    for sid in set(profile.sample_stack.tolist()):
        if sid >= 0:
            stacks.add(
                tuple(
                    profile.frames[f].name
                    for f in profile.stack_frames(sid)
                    if profile.frames[f].kind == "layer" and profile.frames[f].name.endswith("(backward)")
                )
            )
    return stacks, [str(w.message) for w in caught]


def test_backward_layers_attribute_gradient_time_to_the_layer():
    stacks, caught = backward_layer_stacks(True)
    assert ("Net (backward)", "Net.slow (backward)") in stacks
    # Net.out's backward ended before Net.slow's began: it is not left open around it
    assert {s for s in stacks if "Net.slow (backward)" in s} == {("Net (backward)", "Net.slow (backward)")}
    assert not any("Full backward hook" in text for text in caught)  # torch's warning is not shown


def test_backward_layers_are_off_by_default():
    stacks, _ = backward_layer_stacks(False)
    assert stacks == {()}


def run_python(code):
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_flameprof_run_instruments_torch_imported_by_the_target_and_wires_backward_layers(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import time
        import torch
        from torch import nn
        import flameprof

        def wait_for_samples():
            sampler = flameprof.profiler.SESSION.sampler
            ticks = sampler.ticks
            while sampler.ticks < ticks + 2:
                time.sleep(0.001)

        class SlowGrad(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                wait_for_samples()
                return grad * 2

        class Sleepy(nn.Module):
            def forward(self, x):
                wait_for_samples()
                return SlowGrad.apply(x)

        # flameprof watched this import: torch still sees its own loader
        assert type(torch.__loader__).__name__ == "SourceFileLoader"
        assert torch.__spec__.loader is torch.__loader__
        model = nn.Sequential(nn.Linear(3, 3), Sleepy())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            model(torch.randn(2, 3)).sum().backward()
            opt.step()
    """)
    )
    out = tmp_path / "out"
    proc = run_flameprof(
        "run",
        "-q",
        "--no-subprocesses",
        "--backward-layers",
        "--rate",
        "1000",
        "-o",
        str(out),
        str(script),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    profile = storage.load(str(out / "profile.flameprof"))
    layers = {f.name for f in profile.frames if f.kind == "layer"}
    assert "Sequential.1 (Sleepy)" in layers
    assert "Sequential.1 (backward)" in layers
    assert sum(m.name == "step" for m in profile.marks) == 6


def test_program_without_torch_profiles_and_flameprof_does_not_import_torch():
    result = run_python("""
        import json, sys, time, flameprof
        with flameprof.Profiler(rate=1000) as p:
            with flameprof.scope("work"):
                time.sleep(0.02)
            flameprof.step()
        kinds = sorted({f.kind for f in p.profile.frames})
        watchers = [type(f).__name__ for f in sys.meta_path if type(f).__module__.startswith("flameprof")]
        print(json.dumps({"torch": "torch" in sys.modules, "kinds": kinds, "marks": len(p.profile.marks),
                          "watchers": watchers}))
    """)
    assert result == {"torch": False, "kinds": ["python", "scope"], "marks": 1, "watchers": []}
