"""A Lightning run (automatic optimisation: forward and backward inside the optimizer's closure)
that times its own phases after warm-up: argv[1] gets {"spent": {phase: seconds}, "total": seconds}."""

import json
import sys
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

now = time.perf_counter
torch.set_num_threads(1)
WARMUP = 5


class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 4),
        )
        self.spent = dict.fromkeys(("forward", "backward", "optimizer"), 0.0)
        self.bounds = []

    def _add(self, phase, seconds):
        if self.global_step >= WARMUP:
            self.spent[phase] += seconds

    def training_step(self, batch, batch_idx):
        x, y = batch
        t = now()
        out = self.net(x)
        self._add("forward", now() - t)
        return torch.nn.functional.cross_entropy(out, y)

    def on_before_backward(self, loss):
        self._b0 = now()

    def on_after_backward(self):
        self._add("backward", now() - self._b0)

    def on_train_batch_start(self, batch, batch_idx):
        self.bounds.append(now())

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        inside = [0.0]

        def timed():
            c0 = now()
            result = optimizer_closure()
            inside[0] += now() - c0
            return result

        self._inside = inside
        optimizer.step(closure=timed)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        # Lightning calls this inside the closure, but zero_grad is the optimizer's work (flameprof's
        # phases, torch.profiler's Optimizer.zero_grad#): optimizer, though the closure's time holds it
        t = now()
        optimizer.zero_grad()
        self._add("optimizer", now() - t)

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters())

        def before(optimizer, args, kwargs):
            self._s0 = now()

        def after(optimizer, args, kwargs):  # the torch optimizer's own update: its step less the closure
            self._add("optimizer", now() - self._s0 - self._inside[0])

        opt.register_step_pre_hook(before)
        opt.register_step_post_hook(after)
        return opt


x = torch.randn(4096, 64)
y = torch.randint(0, 4, (4096,))
model = Lit()
trainer = L.Trainer(
    max_steps=300,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    accelerator="cpu",
    devices=1,
)
trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True))
b = model.bounds
total = now() - b[WARMUP]
json.dump({"spent": model.spent, "total": total}, open(sys.argv[1], "w"))
