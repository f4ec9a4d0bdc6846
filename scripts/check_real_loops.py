"""Real third-party training loops under ``flameprof run``, against what they print about themselves.

    python scripts/check_real_loops.py wlm EXAMPLES/word_language_model
    python scripts/check_real_loops.py nanogpt NANOGPT_DIR

``wlm``: pytorch/examples' word_language_model (SGD by hand, no torch.optim, no DataLoader) on a
small word corpus written here; compares flameprof's step count with the number of training batches
and its steady-state p50 with the median of the program's printed ms/batch. ``nanogpt``:
karpathy/nanoGPT's train.py on CPU with a tiny character model and a character data set written
here; compares the step p50 with the median of its printed per-iteration times, and shows the eval
and checkpoint phases. The programs are run from a scratch directory; nothing of theirs is copied
into this repository.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FLAMEPROF = [sys.executable, "-m", "flameprof"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.path.dirname(HERE)}


def profile(program_dir: str, work: str, argv: list[str]) -> tuple[str, dict]:
    """(the program's output, flameprof's JSON report) of ``argv`` run from ``work`` under flameprof."""
    out = os.path.join(work, "flameprof-out")
    run = [*FLAMEPROF, "run", "-q", "--rate", "1000", "-o", out, *argv]
    proc = subprocess.run(run, cwd=work, env=ENV, capture_output=True, text=True, check=True)
    report = subprocess.run(
        [*FLAMEPROF, "report", "--format", "json", os.path.join(out, "profile.flameprof")],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout, json.loads(report.stdout)


def summary(report: dict) -> str:
    steps = report["steps"]
    phases = ", ".join(
        f"{name} {value['percent']:.1f}%"
        for name, value in report["phases"].items()
        if value["percent"] >= 0.5
    )
    return (
        f"  flameprof: {steps['count']} steps ({steps['source']}), steady p50 "
        f"{1000 * steps['steady']['p50']:.2f} ms, micro-steps {steps.get('micro_steps', 0)}\n"
        f"  phases of the run: {phases}\n"
        f"  eval {report['phases']['eval']['seconds']:.2f} s, "
        f"checkpoint {report['phases']['checkpoint']['seconds']:.3f} s"
    )


def word_language_model(directory: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data")
        os.makedirs(data)
        rng = random.Random(0)
        words = [f"w{i}" for i in range(2000)]
        for name, count in (("train", 120_000), ("valid", 15_000), ("test", 15_000)):
            with open(os.path.join(data, f"{name}.txt"), "w") as f:
                for _ in range(count // 12):
                    f.write(" " + " ".join(rng.choice(words) for _ in range(12)) + " \n")
        argv = [os.path.join(directory, "main.py"), "--data", data, "--epochs", "2", "--log-interval", "20"]
        argv += ["--emsize", "128", "--nhid", "128"]
        output, report = profile(directory, work, argv)
    per_batch = [float(m) for m in re.findall(r"ms/batch\s+([\d.]+)", output)]
    rows = 120_000 // 12 * 13 // 20  # tokens (12 words and an end of line a line) per batch column
    batches = 2 * len(range(0, rows - 1, 35))
    print("word_language_model")
    median = statistics.median(per_batch)
    print(f"  its own: median ms/batch {median:.2f} over {len(per_batch)} logs, {batches} batches")
    print(summary(report))


def nanogpt(directory: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data", "chars")
        os.makedirs(data)
        prepare = (
            "import numpy as np, pickle, random\n"
            "rng = random.Random(0)\n"
            "text = ''.join(rng.choice('abcdefgh ijklmnop\\n') for _ in range(200_000))\n"
            "chars = sorted(set(text)); stoi = {c: i for i, c in enumerate(chars)}\n"
            "ids = np.array([stoi[c] for c in text], dtype=np.uint16)\n"
            "ids[:180_000].tofile('train.bin'); ids[180_000:].tofile('val.bin')\n"
            "meta = {'vocab_size': len(chars), 'itos': dict(enumerate(chars)), 'stoi': stoi}\n"
            "pickle.dump(meta, open('meta.pkl', 'wb'))\n"
        )
        subprocess.run([sys.executable, "-c", prepare], cwd=data, check=True)
        config = {
            "dataset": "chars",
            "device": "cpu",
            "compile": False,
            "dtype": "float32",
            "eval_interval": 50,
            "eval_iters": 20,
            "log_interval": 1,
            "max_iters": 300,
            "lr_decay_iters": 300,
            "always_save_checkpoint": True,
            "batch_size": 8,
            "block_size": 64,
            "n_layer": 2,
            "n_head": 2,
            "n_embd": 64,
            "dropout": 0.0,
            "gradient_accumulation_steps": 1,
            "out_dir": os.path.join(work, "out"),
            "wandb_log": False,
        }
        argv = [os.path.join(directory, "train.py"), *(f"--{k}={v}" for k, v in config.items())]
        shutil.copy(os.path.join(directory, "configurator.py"), work)  # train.py reads it from its cwd
        output, report = profile(directory, work, argv)
    times = [float(m) for m in re.findall(r"iter \d+: loss [\d.]+, time ([\d.]+)ms", output)]
    median = statistics.median(times)
    # an iteration that evaluated (and saved) printed its step's time plus its evaluation's
    extra = sum(t - median for i, t in enumerate(times) if i % config["eval_interval"] == 0)
    print("nanoGPT")
    print(f"  its own: median time/iter {median:.2f} ms over {len(times)} iterations")
    print(f"  its own: evaluating and saving added {extra / 1000:.2f} s to the iterations that did")
    print(summary(report))


if __name__ == "__main__":
    {"wlm": word_language_model, "nanogpt": nanogpt}[sys.argv[1]](sys.argv[2])
