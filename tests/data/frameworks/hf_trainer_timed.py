"""A Hugging Face Trainer run of a tiny random BERT (no download) that times its own phases after
warm-up: argv[1] gets {"spent": {phase: seconds}, "total": seconds}; argv[2] is the output directory."""

import json
import sys
import time

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

now = time.perf_counter
torch.set_num_threads(1)
torch.manual_seed(0)
WARMUP = 5
spent = dict.fromkeys(("forward", "backward", "optimizer"), 0.0)
state = {"step": 0, "start": None}


def add(phase, seconds):
    if state["step"] >= WARMUP:
        spent[phase] += seconds


config = BertConfig(
    vocab_size=500,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=256,
    max_position_embeddings=64,
    num_labels=3,
)
model = BertForSequenceClassification(config)
model.register_forward_pre_hook(lambda m, a, k: state.__setitem__("f0", now()), with_kwargs=True)
model.register_forward_hook(lambda m, a, k, o: add("forward", now() - state["f0"]), with_kwargs=True)
data = [{"input_ids": torch.randint(0, 500, (32,)), "labels": torch.tensor(i % 3)} for i in range(4096)]


class Timers(TrainerCallback):
    def on_train_begin(self, args, st, control, optimizer=None, lr_scheduler=None, **kwargs):
        inner = getattr(optimizer, "optimizer", optimizer)
        lr_scheduler.step = timed("optimizer", lr_scheduler.step)  # torch.optim's: the optimizer's phase
        inner.register_step_pre_hook(lambda o, a, k: state.__setitem__("s0", now()))
        inner.register_step_post_hook(lambda o, a, k: add("optimizer", now() - state["s0"]))

    def on_step_begin(self, args, st, control, **kwargs):
        state["step"] = st.global_step
        if st.global_step == WARMUP:
            state["start"] = now()

    def on_step_end(self, args, st, control, **kwargs):
        state["end"] = now()


def timed(phase, function):
    def wrapper(*args, **kwargs):
        t0 = now()
        result = function(*args, **kwargs)
        add(phase, now() - t0)
        return result

    return wrapper


class TimedTrainer(Trainer):
    def create_accelerator_and_postprocess(self):
        super().create_accelerator_and_postprocess()
        self.accelerator.backward = timed("backward", self.accelerator.backward)
        self.accelerator.clip_grad_norm_ = timed("optimizer", self.accelerator.clip_grad_norm_)


args = TrainingArguments(
    output_dir=sys.argv[2],
    max_steps=120,
    per_device_train_batch_size=32,
    report_to=[],
    save_strategy="no",
    logging_strategy="no",
    use_cpu=True,
    dataloader_num_workers=0,
    disable_tqdm=True,
)
TimedTrainer(model=model, args=args, train_dataset=data, callbacks=[Timers()]).train()
json.dump({"spent": spent, "total": state["end"] - state["start"]}, open(sys.argv[1], "w"))
