"""Layer frames: nn.Module calls named by dotted path from the root module, from the stack alone."""

import gc

import pytest
import torch
from sampled import wait_for_samples
from torch import nn

from flameprof import Profiler
from flameprof.collect.engine.layers import LayerNamer, index_tree


@pytest.fixture(autouse=True, params=["native", "python"])
def sampler_kind(request, monkeypatch):
    """Each test runs with the C sampler (which caches hook results per module) and the Python one."""
    monkeypatch.setenv("FLAMEPROF_NATIVE", "1" if request.param == "native" else "0")
    return request.param


class Work(nn.Module):
    """A leaf that waits for a sample, so samples reliably land in it."""

    def forward(self, x):
        wait_for_samples()
        return x + 1


def layer_paths(profile):
    """Every sampled stack as the tuple of its layer-frame names, root first."""
    out = set()
    for sid in set(profile.sample_stack.tolist()):
        if sid >= 0:
            names = tuple(
                profile.frames[f].name for f in profile.stack_frames(sid) if profile.frames[f].kind == "layer"
            )
            if names:
                out.add(names)
    return out


def profiled(fn, repeats=4):
    with Profiler(rate=1000) as profiler:
        for _ in range(repeats):
            fn()
    return profiler.profile


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(Work(), Work()) for _ in range(2)])
        self.head = Work()

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_nested_containers_get_full_dotted_paths():
    net = Net()
    paths = layer_paths(profiled(lambda: net(torch.zeros(2))))
    assert ("Net", "Net.blocks.1 (Sequential)", "Net.blocks.1.0 (Work)") in paths
    assert ("Net", "Net.blocks.0 (Sequential)", "Net.blocks.0.1 (Work)") in paths
    assert ("Net", "Net.head (Work)") in paths
    # ModuleList has no forward: it never is a frame of its own
    assert not any("Net.blocks (ModuleList)" in p for p in paths)


def test_shared_module_is_named_by_its_first_path_wherever_it_is_called():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = Work()
            self.dec = nn.Sequential(nn.Identity(), self.enc)  # the same module registered twice

        def forward(self, x):
            return self.dec(self.enc(x))

    model = Shared()
    first = next(name for name, m in model.named_modules() if m is model.enc)
    paths = layer_paths(profiled(lambda: model(torch.zeros(2))))
    assert ("Shared", f"Shared.{first} (Work)") in paths
    assert ("Shared", "Shared.dec (Sequential)", f"Shared.{first} (Work)") in paths
    assert not any("Shared.dec.1 (Work)" in p for p in paths)


def test_two_models_and_two_instances_of_one_class_are_told_apart():
    gc.collect()  # earlier tests' models are gone, so their root names are free again
    a, b = Net(), Net()

    class Other(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = Work()

        def forward(self, x):
            return self.w(x)

    other = Other()
    paths = layer_paths(profiled(lambda: (a(torch.zeros(2)), b(torch.zeros(2)), other(torch.zeros(2)))))
    roots = {p[0] for p in paths}
    assert roots == {"Net", "Net#2", "Other"}
    assert ("Net#2", "Net#2.head (Work)") in paths
    assert ("Other", "Other.w (Work)") in paths


def test_data_parallel_wrapper_keeps_its_frame_and_drops_the_module_prefix():
    model = nn.DataParallel(Net())  # on CPU it calls self.module directly
    paths = layer_paths(profiled(lambda: model(torch.zeros(2))))
    assert ("DataParallel", "Net", "Net.head (Work)") in paths
    assert not any("module" in name for p in paths for name in p)


def test_ddp_style_wrapper_names_the_wrapped_model_as_root():
    # A real single-process DistributedDataParallel takes ~5 s to build here; naming depends only on
    # the wrapper's class name and its ``module`` attribute, which this stand-in has.
    class DistributedDataParallel(nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, x):
            return self.module(x)

    model = DistributedDataParallel(Net())
    paths = layer_paths(profiled(lambda: model(torch.zeros(2))))
    assert ("DistributedDataParallel", "Net", "Net.blocks.0 (Sequential)", "Net.blocks.0.1 (Work)") in paths


def test_modules_whose_repr_getattr_and_named_modules_raise_still_profile():
    class Evil(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Work()

        def __getattr__(self, name):
            raise RuntimeError("no attribute access here")

        def __repr__(self):
            raise RuntimeError("no repr")

        def named_modules(self, *args, **kwargs):
            raise RuntimeError("no named_modules")

        def forward(self, x):
            return self._modules["inner"](x)

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.evil = Evil()

        def forward(self, x):
            return self.evil(x)

    model = Holder()
    paths = layer_paths(profiled(lambda: model(torch.zeros(2))))
    assert ("Holder", "Holder.evil (Evil)", "Holder.evil.inner (Work)") in paths


def test_unregistered_module_is_named_after_its_caller():
    loose = [Work()]  # a plain list: not a registered submodule

    class Caller(nn.Module):
        def forward(self, x):
            return loose[0](x)

    model = Caller()
    paths = layer_paths(profiled(lambda: model(torch.zeros(2))))
    assert ("Caller", "Caller.Work (Work)") in paths


def test_a_module_called_from_its_holders_method_is_named_under_the_holder():
    """Lightning's ``training_step`` calls ``self.net(x)`` without calling the LightningModule."""

    class Holds(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(Work(), Work())

        def training_step(self, x):
            return self.net(x)

    holder = Holds()
    paths = layer_paths(profiled(lambda: holder.training_step(torch.zeros(2))))
    assert ("Holds.net (Sequential)", "Holds.net.1 (Work)") in paths
    assert not any(name.startswith("Sequential") for path in paths for name in path)


def test_index_follows_named_modules_order_and_names_are_cached_per_module():
    net = Net()
    index = index_tree(net, "Net")
    expected = [("Net." + name) if name else "Net" for name, _ in net.named_modules()]
    assert [index[id(m)][1] for _, m in net.named_modules()] == expected
    namer = LayerNamer()
    assert namer.path_of(net.blocks[1][0]) == "Work"  # no root known yet: it is a root
    namer2 = LayerNamer()
    assert namer2.path_of(net) == "Net"
    assert namer2.path_of(net.blocks[1][0]) == "Net.blocks.1.0"
