"""Device time per phase for the whole run (collect/engine/device_phases.py, analyze/device_phases.py).

On a CPU the host clock stamps real host time at each boundary, so a loop that times its own data
wait, forward, backward and optimizer must read the same per-step times from the report. The CUDA
clock is the same bookkeeping with stamps the device reaches later: a clock whose stamps are passed
only some polls later stands for it, and the marks must still come out in order, without a wait."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from flameprof.analyze.advice import judge, judge_on_device
from flameprof.analyze.breakdown import analyze
from flameprof.analyze.device_phases import device_time
from flameprof.analyze.report import build_report, report_of
from flameprof.collect.engine import device_phases, scopes
from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame, Mark
from flameprof.profiler import Profiler
from flameprof.render.report import render_report

now = time.perf_counter
DATA_S = 0.006  # each batch's wait, a sleep in the Dataset


class Slow(Dataset):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int):
        time.sleep(DATA_S)
        return torch.randn(256), torch.randn(256)


def _train(steps: int) -> dict[str, list[float]]:
    """A loop timing its own phases around the calls the boundaries wrap."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 256))
    # Adam over 2M parameters: a step of several ms, next to which the step wrapper's own time
    # outside the optimizer hooks (tens of microseconds, that the loop's timer includes) is small
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    timers: dict[str, list[float]] = {k: [] for k in ("data", "forward", "backward", "optimizer")}
    it = iter(DataLoader(Slow(), batch_size=1))
    for _ in range(steps):
        t0 = now()
        x, y = next(it)
        t1 = now()
        loss = sum(((model(x) - y) ** 2).mean() for _ in range(6))
        t2 = now()
        loss.backward()
        t3 = now()
        opt.step()
        t4 = now()
        opt.zero_grad()
        for key, (a, b) in zip(timers, ((t0, t1), (t1, t2), (t2, t3), (t3, t4))):
            timers[key].append(b - a)
    return timers


def test_host_clock_times_each_phase_as_the_loop_times_itself(monkeypatch):
    monkeypatch.setenv(device_phases.ENV, "host")
    with Profiler(rate=100) as prof:
        timers = _train(40)
    report = report_of(prof.profile)
    d = report.device_time
    assert d is not None and d.clock == "host" and d.steps >= 30
    own = {key: float(np.mean(values[-d.steps :])) for key, values in timers.items()}
    assert d.device["data.wait"] == pytest.approx(own["data"], rel=0.1, abs=3e-4)
    for phase in ("forward", "backward", "optimizer"):
        assert d.device[phase] == pytest.approx(own[phase], rel=0.1, abs=3e-4), phase
    # on a CPU the host's time over the same stamps is the device's (the stamp is read a call after
    # the host's time: microseconds apart)
    assert d.host == pytest.approx(d.device, abs=1e-4)
    share = own["data"] / sum(own.values())
    assert d.data_wait_percent == pytest.approx(100 * share, abs=3)
    assert d.lag_seconds == pytest.approx(0.0, abs=1e-4)
    text = render_report(report, "text")
    assert "device: " in text and "host clock" in text and "idle while the host waits for data" in text


@pytest.mark.parametrize("setting", [None, "off"])
def test_without_cuda_or_when_off_nothing_is_stamped(monkeypatch, setting):
    if setting is None:
        monkeypatch.delenv(device_phases.ENV, raising=False)
    else:
        monkeypatch.setenv(device_phases.ENV, setting)
    with Profiler(rate=100) as prof:
        _train(5)
    assert not any(m.name.startswith("device") for m in prof.profile.marks)
    assert report_of(prof.profile).device_time is None


class LateClock:
    """Stamps the device passes once ``delay`` more stamps were taken, 2 ms of device time apart."""

    name = "cuda"

    def __init__(self, delay: int) -> None:
        self.delay, self.taken = delay, 0

    def stamp(self) -> int:
        self.taken += 1
        return self.taken

    def passed(self, stamp: int) -> bool:
        return self.taken >= stamp + self.delay

    def seconds(self, origin: int, stamp: int) -> float:
        return 2e-3 * (stamp - origin)


def test_stamps_become_marks_in_order_once_the_device_passed_them():
    builder = ProfileBuilder()

    class Sampler:
        t0, pid, scopes = now(), 1, None

    scopes.activate(Sampler, builder)
    try:
        clock = LateClock(delay=6)
        phases = device_phases.DevicePhases(lambda: clock, Sampler.t0)
        for name in device_phases.BOUNDARIES * 3:
            phases.boundary(name)
        device = [m for m in builder.marks if m.name == device_phases.MARK]
        taken = 3 * len(device_phases.BOUNDARIES)
        assert len(device) == taken - 6  # the last ones are not passed yet: no wait for them
        values = [m.value.split() for m in device]
        assert [v[0] for v in values] == list(device_phases.BOUNDARIES * 3)[: len(values)]
        stamps = [float(v[1]) for v in values]
        assert np.allclose(np.diff(stamps), 2e-3)
        assert [m.value for m in builder.marks if m.name == device_phases.CLOCK_MARK] == ["cuda"]
    finally:
        scopes.deactivate(Sampler)


def _stamped_profile(data_wait: float, compute: float, steps: int = 12):
    """A loop thread's step marks and CUDA device stamps: each step waits ``data_wait`` on the
    device (idle) and computes ``compute``; the samples say the host hardly waited for data."""
    b = ProfileBuilder()
    main = b.thread_id(1, 1, "MainThread")
    stack = b.stack_id(
        [b.frame(Frame("train", "/work/train.py", 1)), b.frame(Frame("forward", "/work/net.py", 2))]
    )
    b.marks.append(Mark(0.0, main, device_phases.CLOCK_MARK, "cuda"))
    t = 0.0
    for _ in range(steps):
        for boundary, seconds in (("data", data_wait), ("batch", compute / 2), ("backward", compute / 2)):
            b.marks.append(Mark(t, main, device_phases.MARK, f"{boundary} {t!r}"))
            t += seconds
        b.marks.append(Mark(t, main, "step", "optimizer"))
    b.marks.append(Mark(t, main, device_phases.MARK, f"data {t!r}"))
    for k in range(int(t / 0.01)):
        b.add_sample(0.01 * (k + 1), main, stack, 0.01, 0.01)
    return b.build()


def test_a_gpu_run_is_input_bound_when_its_device_idles_waiting_for_data():
    profile = _stamped_profile(data_wait=0.03, compute=0.07)
    analysis = analyze(profile)
    section = device_time(profile, analysis.steps)
    assert section is not None and section.clock == "cuda"
    assert section.data_wait_percent == pytest.approx(30.0, abs=0.5)
    report = build_report(profile, analysis)
    assert report.verdict.level == "highly" and report.verdict.basis == "device time"
    assert "the device idles 30.0% of its step time while the host waits for data" in report.verdict.text
    # a device that waits only 2 % of its step: not input-bound
    busy = _stamped_profile(data_wait=0.002, compute=0.098)
    assert build_report(busy, analyze(busy)).verdict.level == "not"


def test_the_host_clock_leaves_the_samples_verdict_alone():
    profile = _stamped_profile(data_wait=0.03, compute=0.07)
    analysis = analyze(profile)
    section = device_time(profile, analysis.steps)
    host = type(section)(**{**section.__dict__, "clock": "host"})
    verdict = build_report(profile, analysis).verdict
    sampled = judge(analysis)
    assert judge_on_device(sampled, host) is sampled and verdict.level != sampled.level


def test_the_stamps_hooks_are_removed_when_profiling_stops(monkeypatch):
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    monkeypatch.setenv(device_phases.ENV, "host")
    before = (
        _BaseDataLoaderIter.__dict__["__next__"],
        torch.Tensor.backward,
        len(_global_optimizer_pre_hooks),
        len(_global_optimizer_post_hooks),
    )
    with Profiler(rate=100):
        assert torch.Tensor.backward is not before[1]
        assert len(_global_optimizer_pre_hooks) > before[2]
    after = (
        _BaseDataLoaderIter.__dict__["__next__"],
        torch.Tensor.backward,
        len(_global_optimizer_pre_hooks),
        len(_global_optimizer_post_hooks),
    )
    assert after == before


def test_a_loop_without_a_dataloader_gets_its_forward_from_the_outermost_module(monkeypatch):
    """As nanoGPT's loop: batches indexed from a tensor, no DataLoader; the outermost module's call
    opens the forward."""
    monkeypatch.setenv(device_phases.ENV, "host")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 256))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = torch.randn(64, 8, 256)
    forward, backward = [], []
    with Profiler(rate=100) as prof:
        for i in range(40):
            x = data[i % 64]
            t0 = now()
            loss = (model(x) ** 2).mean()
            t1 = now()
            loss.backward()
            t2 = now()
            opt.step()
            opt.zero_grad()
            forward.append(t1 - t0)
            backward.append(t2 - t1)
    d = report_of(prof.profile).device_time
    assert d is not None and d.steps >= 30
    assert d.device["forward"] == pytest.approx(np.mean(forward[-d.steps :]), rel=0.1, abs=3e-4)
    assert d.device["backward"] == pytest.approx(np.mean(backward[-d.steps :]), rel=0.1, abs=3e-4)
    assert d.device["data.wait"] == 0.0  # no DataLoader: no wait stamped
