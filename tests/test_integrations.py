"""The framework adapters, driven by the real frameworks: a Lightning profiler and a Hugging Face
callback (tiny random models, CPU, no downloads)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import torch  # noqa: F401  (these need torch: without it, test_pythons.sh leaves this file out)
from conftest import REPO
from sampled import wait_for_samples

from flameprof.analyze.breakdown import analyze
from flameprof.analyze.processes import analyze_processes, processes_section
from flameprof.model import storage


class Waits(torch.nn.Module):
    """A layer the sampler always sees: it waits for two ticks (a tiny model may otherwise run
    between ticks every time)."""

    def forward(self, x):
        wait_for_samples()
        return x


def lightning_module():
    import lightning as L

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
            self.net.append(Waits())

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Lit()


def test_lightning_profiler_writes_one_profile_per_stage_with_its_steps(tmp_path, caplog):
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    from flameprof.integrations.lightning import FlameprofProfiler

    data = DataLoader(TensorDataset(torch.randn(640, 32), torch.randint(0, 2, (640,))), batch_size=16)
    profiler = FlameprofProfiler(dirpath=tmp_path, rate=500)
    trainer = L.Trainer(
        max_epochs=1,
        profiler=profiler,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        num_sanity_val_steps=0,
    )
    model = lightning_module()
    with caplog.at_level(logging.INFO):
        trainer.fit(model, data)
        trainer.validate(model, data)
    fit = storage.load(tmp_path / "flameprof-fit" / "profile.flameprof")
    validate = storage.load(tmp_path / "flameprof-validate" / "profile.flameprof")
    assert (tmp_path / "flameprof-fit" / "profile.svg").exists()
    steps = analyze(fit).steps
    assert steps.source == "marks:step" and abs(steps.count - 40) <= 1  # 40 training batches
    assert abs(analyze(validate).steps.count - 40) <= 1  # the validation stage marks its own steps
    layers = {f.name for f in fit.frames if f.kind == "layer"}
    assert {"Lit.net (Sequential)", "Lit.net.3 (Waits)"} <= layers
    assert "flameprof (fit): " in caplog.text and "phases: data" in caplog.text


DDP_FIT = r"""
import sys, time, torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from flameprof.integrations.lightning import FlameprofProfiler

class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def training_step(self, batch, i):
        if self.global_rank == 1:  # rank 1 is the straggler: 10 ms more work a step
            start = time.perf_counter()
            while time.perf_counter() - start < 0.01:
                pass
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

if __name__ == "__main__":
    samples = TensorDataset(torch.randn(2048, 32), torch.randn(2048, 1))
    data = DataLoader(samples, batch_size=32, num_workers=1)
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_steps=30, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        profiler=FlameprofProfiler(dirpath=sys.argv[1], rate=500),
    )
    trainer.fit(Lit(), data)
"""


def test_lightning_ddp_ranks_are_merged_into_one_profile_naming_the_slowest(tmp_path):
    script = tmp_path / "ddp_fit.py"
    script.write_text(DDP_FIT)
    out = tmp_path / "prof"
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run(
        [sys.executable, str(script), str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "flameprof-fit",
        "flameprof-fit-rank0",
        "flameprof-fit-rank1",
    ]
    merged = storage.load(out / "flameprof-fit" / "profile.flameprof")
    assert sorted(p.role for p in merged.processes) == ["rank 0", "rank 1"]
    for rank in (0, 1):
        own = storage.load(out / f"flameprof-fit-rank{rank}" / "profile.flameprof")
        assert [p.role for p in own.processes] == [f"rank {rank}"]
    report = processes_section(analyze_processes(merged))
    assert report is not None
    assert report.straggler == "rank 1", report.lines
    # its training_step works longer; under DDP training_step runs inside the wrapper's forward
    assert report.straggler_phase == "forward", report.lines
    assert "slowest rank: rank 1" in proc.stdout + proc.stderr  # the summary Lightning logs


def test_importing_flameprof_imports_no_framework():
    code = (
        "import sys, flameprof\n"
        "print(sorted(m for m in ('lightning', 'transformers', 'IPython') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": REPO}
    )
    assert out.stdout.strip() == "[]", out.stderr


def test_hugging_face_callback_profiles_a_window_of_steps(tmp_path):
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    from flameprof.integrations.huggingface import FlameprofCallback

    torch.manual_seed(0)
    # Wide enough that the encoder layer is most of each step: the 20 profiled steps then always
    # hold samples inside it (at 32 wide, a step took ~2 ms and the layer was missed once in CI).
    config = BertConfig(
        vocab_size=200,
        hidden_size=256,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=64,
        num_labels=2,
    )
    data = [{"input_ids": torch.randint(0, 200, (64,)), "labels": torch.tensor(i % 2)} for i in range(512)]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=40,
        per_device_train_batch_size=8,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    callback = FlameprofCallback(steps=(10, 30), rate=500)
    trainer = Trainer(
        model=BertForSequenceClassification(config), args=args, train_dataset=data, callbacks=[callback]
    )
    trainer.train()
    profile = storage.load(tmp_path / "flameprof" / "profile.flameprof")
    steps = analyze(profile).steps
    assert steps.source == "marks:step" and abs(steps.count - 20) <= 1  # steps 10 to 30
    layers = {f.name for f in profile.frames if f.kind == "layer"}
    assert "BertForSequenceClassification.bert.encoder.layer.0 (BertLayer)" in layers
    [entry] = [e for e in trainer.state.log_history if "flameprof/verdict" in e]
    assert entry["step"] == 30 and entry["flameprof/forward_percent"] > 0
    assert entry["flameprof/profile"].endswith("profile.flameprof")


UNFINISHED_STAGE = r"""
import sys, time
from flameprof.integrations.lightning import FlameprofProfiler

profiler = FlameprofProfiler(dirpath=sys.argv[1], rate=500)
profiler.setup("fit")
end = time.perf_counter() + 0.3
while time.perf_counter() < end:
    pass
print("done")
"""


def test_lightning_profiler_left_running_writes_its_stage_before_the_interpreter_shuts_down(tmp_path):
    """A stage Lightning never tears down (the run ended some other way) is written at exit, while
    the interpreter can still build a profile, not from the profiler's finalizer during shutdown."""
    script = tmp_path / "unfinished.py"
    script.write_text(UNFINISHED_STAGE)
    out = tmp_path / "prof"
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.run(
        [sys.executable, str(script), str(out)], env=env, capture_output=True, text=True, timeout=120
    )
    assert (proc.returncode, proc.stdout) == (0, "done\n"), proc.stderr[-3000:]
    assert "Error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    profile = storage.load(out / "flameprof-fit" / "profile.flameprof")
    assert profile.meta["duration"] > 0.25
