"""The stacks flame graphs show by default: one frame per imported module, no bootstrap frames,
startup under its own root; the same samples and weights; ``--raw-stacks`` keeps them as recorded."""

from __future__ import annotations

import json

from flameprof.analyze.breakdown import analyze
from flameprof.analyze.tidy_stacks import module_name, tidy_stacks
from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame, Mark, Profile
from flameprof.render.formats import Rendering
from flameprof.render.options import OutputOptions

SITE = "/venv/lib/python3.11/site-packages/"
BOOT = "<frozen importlib._bootstrap>"
EXTERNAL = "<frozen importlib._bootstrap_external>"
RUNPY = [Frame("_run_module_as_main", "<frozen runpy>", 198), Frame("_run_code", "<frozen runpy>", 88)]
MAIN = Frame("<module>", "/work/train.py", 1)
LOOP = Frame("train", "/work/train.py", 10)
LINEAR = Frame("linear", SITE + "torch/nn/functional.py", 2000)
CHAIN = [
    Frame("_find_and_load", BOOT, 1165),
    Frame("_find_and_load_unlocked", BOOT, 1136),
    Frame("_load_unlocked", BOOT, 690),
    Frame("exec_module", EXTERNAL, 936),
    Frame("_call_with_frames_removed", BOOT, 241),
]
TORCH = Frame("<module>", SITE + "torch/__init__.py", 1)
DEPS = Frame("_load_global_deps", SITE + "torch/__init__.py", 180)
DYNAMO = Frame("<module>", SITE + "torch/_dynamo/__init__.py", 1)
READ = Frame("get_data", EXTERNAL, 1180)
THREAD = [
    Frame("Thread._bootstrap", "/usr/lib/python3.11/threading.py", 995),
    Frame("Thread._bootstrap_inner", "/usr/lib/python3.11/threading.py", 1038),
    Frame("Thread.run", "/usr/lib/python3.11/threading.py", 975),
]
WORKER = Frame("pin_loop", "/work/train.py", 60)

STACKS = {  # name: (frames, seconds of samples before the first step, after it)
    "torch's own code": ([*RUNPY, MAIN, *CHAIN, TORCH, DEPS], 3, 0),
    "a nested import": ([*RUNPY, MAIN, *CHAIN, TORCH, DEPS, *CHAIN, DYNAMO], 2, 0),
    "reading a module": ([*RUNPY, MAIN, *CHAIN[:4], READ], 1, 0),
    "the loop": ([*RUNPY, MAIN, LOOP, LINEAR], 1, 6),
    "a lazy import in the loop": ([*RUNPY, MAIN, LOOP, *CHAIN, DYNAMO], 0, 1),
    "a thread": ([*THREAD, WORKER], 1, 2),
}


def profile() -> Profile:
    """Samples of 1 s each: every stack's startup samples first, then its loop samples."""
    b = ProfileBuilder({"start_time": 1.7e9, "cwd": "/work"})
    main, other = b.thread_id(1, 1, "MainThread"), b.thread_id(1, 2, "pin")
    t = 0.0
    for when in (1, 2):
        if when == 2:
            b.marks.append(Mark(t + 1e-6, main, "step"))
        for frames, *counts in STACKS.values():
            stack = b.stack_id([b.frame(f) for f in frames])
            for _ in range(counts[when - 1]):
                t += 1.0
                b.add_sample(t, other if frames[0] in THREAD else main, stack, 1.0, 1.0)
    b.marks.append(Mark(t + 1e-6, main, "step"))
    return b.build()


def names(p: Profile) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    for stack, weight in zip(p.sample_stack.tolist(), p.sample_wall.tolist()):
        key = tuple(p.frames[i].name for i in p.stack_frames(stack))
        out[key] = out.get(key, 0.0) + weight
    return out


def test_imports_fold_to_one_frame_per_module_and_startup_gets_its_own_root():
    raw = profile()
    shown = tidy_stacks(raw, startup_end=analyze(raw).steps.start)
    assert names(shown) == {
        ("startup", "<module>", "import torch"): 3.0,
        ("startup", "<module>", "import torch", "import torch._dynamo"): 2.0,
        ("startup", "<module>", "import (find and load)"): 1.0,
        ("startup", "<module>", "train", "linear"): 1.0,
        ("startup", "pin_loop"): 1.0,
        ("<module>", "train", "linear"): 6.0,
        ("<module>", "train", "import torch._dynamo"): 1.0,
        ("pin_loop",): 2.0,
    }
    assert shown.sample_wall.sum() == raw.sample_wall.sum() and shown.num_samples == raw.num_samples
    assert (shown.sample_time == raw.sample_time).all() and (shown.sample_thread == raw.sample_thread).all()
    # the import frames are the import system to the analyses too: startup's import time is unchanged
    assert analyze(shown).startup_import_seconds == analyze(raw).startup_import_seconds == 6.0


def test_without_a_loop_there_is_no_startup_root_and_a_plain_profile_is_left_alone():
    shown = names(tidy_stacks(profile()))
    assert ("<module>", "import torch") in shown and not any(k[0] == "startup" for k in shown)
    b = ProfileBuilder({})
    b.add_sample(1.0, b.thread_id(1, 1), b.stack_id([b.frame(MAIN), b.frame(LOOP)]), 1.0)
    plain = b.build()
    assert tidy_stacks(plain) is plain


def test_module_names_from_their_files():
    assert module_name(SITE + "torch/_dynamo/__init__.py") == "torch._dynamo"
    assert module_name("/usr/lib/python3.11/json/decoder.py") == "json.decoder"
    assert module_name("<frozen os>") == "os"
    assert module_name("/work/models/gpt.py") == "gpt"


def test_flame_graphs_show_the_tidy_stacks_unless_raw_stacks_is_asked():
    raw = profile()
    tidy = Rendering(raw, OutputOptions())
    assert tidy.shown is not raw and "import torch._dynamo" in [f.name for f in tidy.shown.frames]
    speedscope = json.loads(
        __import__("flameprof.render.formats").render.formats.FORMATS["speedscope"].text(tidy)
    )
    shown_names = {f["name"] for f in speedscope["shared"]["frames"]}
    assert "import torch" in shown_names and "_find_and_load" not in shown_names
    assert Rendering(raw, OutputOptions(raw_stacks=True)).shown is raw
