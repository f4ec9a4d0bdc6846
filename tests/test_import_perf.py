"""perf script import and ``flameprof collapse perf``: stackcollapse-perf.pl semantics, periods,
Python perf-trampoline frames, malformed input.

The expected collapsed lines below were derived by reading stackcollapse-perf.pl and checked
against the real script on the same input.
"""

from __future__ import annotations

import os

import pytest
from conftest import run_flameprof

from flameprof import cli
from flameprof.collect.importers.perf_profile import read_perf_script
from flameprof.collect.importers.perf_script import CollapseOptions, collapse_perf, format_collapsed
from flameprof.errors import FlameprofError

DATA = os.path.join(os.path.dirname(__file__), "data", "import")

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
TORCH = "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so"
# The same stack twice, the leaf at two instruction offsets (so two distinct lines).
ADD_SAMPLES = "".join(
    f"""\
python3 4242/4250 [000] {time}:    2002002 cpu-clock:ppp: 
\t    7f00000a0b{pc} at::native::add_out(at::Tensor const&, at::Tensor const&)+0x{off} ({TORCH})
\t    7f00000a0c00 (anonymous namespace)::wrapper_add<float>(at::Tensor)+0x9 ({TORCH})
\t    7f00000a0d00 inner->outer+0x3 ({TORCH})
\t    7f1a2b000030 py::forward:/srv/app/model.py+0x5 (/tmp/perf-4242.map)
\t    7f1a2b3c0000 [unknown] ({LIBC})
\t               0 [unknown] ([unknown])

"""
    for time, pc, off in (("100.001101", "0c", "40"), ("100.002102", "1d", "51"))
)
PERF_TEXT = f"""\
# ========
# cmdline : /usr/bin/perf record -g python3 train.py
# ========
#
python3 4242/4242 [001] 100.000100:    1001001 cpu-clock:ppp: 
\tffffffff81000130 entry_SYSCALL_64_after_hwframe+0x76 ([kernel.kallsyms])
\t    7f1a2b3c4d5e __libc_read+0x1e ({LIBC})
\t    7f1a2b000010 py::load_batch:/srv/app/data.py+0x5 (/tmp/perf-4242.map)
\t          4c0d1e _PyEval_EvalFrameDefault+0x6642 (/usr/bin/python3.12)
\t    7f1a2b000020 py::<module>:/srv/app/train.py+0x5 (/tmp/perf-4242.map)

{ADD_SAMPLES}pt worker 4301/4301 [002] 100.003000:          0 cpu-clock:ppp: 
\tffffffff810a0000 schedule+0x10 (/boot/vmlinux)
\t    55d0c0ffee00 "quoted;name"+0x2 (/tmp/perf-4301.map)

python3 4242/4242 [001] 100.004000:     500000 cycles: 
\t    7f1a2b3c4d5e __libc_read+0x1e ({LIBC})

java 77/78 [003] 100.005000:    1001001 cpu-clock:ppp: 
\t    7f0000001000 Lorg/example/Foo;.bar(I)V+0x4 (/tmp/perf-77.map)

python3 4242/4242 [001] 100.006000:    1001001 cpu-clock:ppp: 
\t    7f1a2b3c4d5e __libc_read+0x1e ({LIBC})
"""

LOAD = "py::<module>:/srv/app/train.py;_PyEval_EvalFrameDefault;py::load_batch:/srv/app/data.py;__libc_read"
ADD = "py::forward:/srv/app/model.py;inner;outer_[i];at::native::add_out"
DEFAULT = [
    "java;org/example/Foo:.bar 1001001",
    "pt_worker;quoted:name;schedule 1",
    f"python3;[unknown];[libc.so.6];{ADD} 4004004",
    f"python3;{LOAD};entry_SYSCALL_64_after_hwframe 1001001",
]


def collapse(text: str, chunk: int | None = None, **options) -> list[str]:
    data = text.encode()
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    out = collapse_perf(chunks, CollapseOptions(**options))
    return b"".join(format_collapsed(out)).decode().splitlines()


def test_default_collapse_matches_stackcollapse_perf():
    # Offsets stripped, C++ arguments removed, "(anonymous namespace)..." symbols dropped (the Perl
    # script skips symbols starting with "("), a->b inline chains split with _[i], unknown symbols
    # named after their module, ";" and quotes tidied, java signatures condensed, periods summed,
    # a zero period counted as 1, only the first event type kept, and the last sample, which has
    # no blank line after it, dropped.
    assert collapse(PERF_TEXT) == DEFAULT


@pytest.mark.parametrize(
    "options, expected",
    [
        (
            {"pid": True},
            [
                "java-77;org/example/Foo:.bar 1001001",
                "pt_worker-4301;quoted:name;schedule 1",
                f"python3-4242;[unknown];[libc.so.6];{ADD} 4004004",
                f"python3-4242;{LOAD};entry_SYSCALL_64_after_hwframe 1001001",
            ],
        ),
        (
            {"tid": True},
            [
                "java-77/78;org/example/Foo:.bar 1001001",
                "pt_worker-4301/4301;quoted:name;schedule 1",
                f"python3-4242/4242;{LOAD};entry_SYSCALL_64_after_hwframe 1001001",
                f"python3-4242/4250;[unknown];[libc.so.6];{ADD} 4004004",
            ],
        ),
        (
            {"kernel": True},
            [
                "java;org/example/Foo:.bar 1001001",
                "pt_worker;quoted:name;schedule_[k] 1",
                f"python3;[unknown];[libc.so.6];{ADD} 4004004",
                f"python3;{LOAD};entry_SYSCALL_64_after_hwframe_[k] 1001001",
            ],
        ),
        (
            {"jit": True},
            [
                "java;org/example/Foo:.bar_[j] 1001001",
                "pt_worker;quoted:name_[j];schedule 1",
                f"python3;[unknown];[libc.so.6];{ADD.replace('model.py', 'model.py_[j]')} 4004004",
                "python3;py::<module>:/srv/app/train.py_[j];_PyEval_EvalFrameDefault;"
                "py::load_batch:/srv/app/data.py_[j];__libc_read;entry_SYSCALL_64_after_hwframe 1001001",
            ],
        ),
        (
            {"addrs": True},
            [
                "java;org/example/Foo:.bar 1001001",
                "pt_worker;quoted:name;schedule 1",
                f"python3;[unknown <0>];[libc.so.6 <7f1a2b3c0000>];{ADD} 4004004",
                f"python3;{LOAD};entry_SYSCALL_64_after_hwframe 1001001",
            ],
        ),
        ({"event_filter": b"cycles"}, ["python3;__libc_read 500000"]),
        ({"event_filter": b"cycles:"}, []),  # the event name as perf prints it, without the colon
    ],
)
def test_collapse_options(options, expected):
    assert collapse(PERF_TEXT, **options) == expected


def test_all_is_kernel_and_jit_on_the_command_line(tmp_path, capsysbinary):
    path = tmp_path / "perf.txt"
    path.write_text(PERF_TEXT)
    assert cli.main(["collapse", "perf", "--all", str(path)]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert out.splitlines() == collapse(PERF_TEXT, kernel=True, jit=True)
    assert "schedule_[k]" in out and "bar_[j]" in out


def test_a_final_blank_line_completes_the_last_sample():
    assert collapse(PERF_TEXT + "\n") == sorted(DEFAULT + ["python3;__libc_read 1001001"])


def test_chunk_boundaries_do_not_change_the_result():
    whole = collapse(PERF_TEXT)
    for chunk in (1, 2, 3, 7, 64, 333):
        assert collapse(PERF_TEXT, chunk=chunk) == whole


def test_line_by_line_path_for_irregular_blocks():
    # A comment inside a sample, a second header without a blank line before it (its frames join
    # the first sample's stack, as in the Perl loop) and several blank lines in a row.
    text = (
        "pa 1 1.0: 5 cpu-clock: \n\t1 f+0x1 (/x)\n# note\n\t2 g (/x)\n"
        "pb 2 2.0: 7 cpu-clock: \n\t3 h (/x)\n\n\n\n"
        "pc 3 3.0: 1 cpu-clock: \n\t4 k (/x)\n\n"
    )
    assert collapse(text) == ["pb;h;g;f 7", "pc;k 1"]


def test_unrecognized_lines_are_counted_or_stop_strict(capsys):
    text = "pa 1 1.0: 1 cpu-clock: \n\t1 f (/x)\nthis is not perf output\n\n"
    assert collapse(text) == ["pa;f 1"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "skipped 1 unrecognized perf script line(s), first at line 3" in err
    with pytest.raises(FlameprofError, match=r"<stdin>:3: unrecognized perf script line"):
        collapse_perf([text.encode()], strict=True)


def test_collapse_command_reads_stdin_and_matches_the_library():
    proc = run_flameprof("collapse", "perf", input=PERF_TEXT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == DEFAULT
    assert proc.stderr.count("\n") == 1 and "kept only cpu-clock:ppp" in proc.stderr


def test_import_maps_threads_weights_and_python_frames():
    profile = read_perf_script([(PERF_TEXT + "\n").encode()], "perf.txt")
    assert profile.meta["weight_unit"] == "seconds" and profile.meta["event"] == "cpu-clock:ppp"
    threads = {(t.pid, t.tid): t.name for t in profile.threads}
    assert threads == {
        (4242, 4242): "python3",
        (4242, 4250): "python3",
        (4301, 4301): "pt worker",
        (77, 78): "java",
    }
    # cpu-clock periods are nanoseconds: 1001001 + 2 * 2002002 + 1 (zero -> 1) + 1001001 + 1001001
    assert profile.sample_wall.sum() == pytest.approx((1001001 * 3 + 2002002 * 2 + 1) * 1e-9)
    assert profile.sample_time.min() == 0 and profile.sample_time.max() == pytest.approx(0.0059)
    stacks = {
        tuple(profile.frames[f] for f in profile.stack_frames(s)) for s in set(profile.sample_stack.tolist())
    }
    forward = next(st for st in stacks if any(f.name == "forward" for f in st))
    assert [f.name for f in forward][-4:] == ["forward", "inner", "outer_[i]", "at::native::add_out"]
    py = next(f for f in forward if f.name == "forward")
    assert (py.kind, py.file, py.line) == ("python", "/srv/app/model.py", 0)
    native = next(f for f in forward if f.name == "at::native::add_out")
    assert (native.kind, native.file) == ("native", TORCH)
    loads = next(st for st in stacks if any(f.name == "load_batch" for f in st))
    assert [(f.name, f.kind) for f in loads][:2] == [
        ("<module>", "python"),
        ("_PyEval_EvalFrameDefault", "native"),
    ]
    # an import keeps the final sample even without a blank line after it
    assert profile.num_samples == 6


def test_import_of_a_real_python312_perf_recording():
    with open(os.path.join(DATA, "perf_py312.txt"), "rb") as fh:
        data = fh.read()
    profile = read_perf_script([data], "perf_py312.txt", strict=True)
    assert profile.num_samples == 8
    assert profile.meta["weight_unit"] == "seconds"
    assert profile.sample_wall.sum() == pytest.approx(8 * 2004008e-9)
    names = {(f.name, f.file, f.kind) for f in profile.frames}
    assert ("leaf", "/tmp/imp/pyperf.py", "python") in names
    assert ("ABCMeta.__new__", "<frozen abc>", "python") in names
    assert ("exc_page_fault", "[kernel.kallsyms]", "native") in names
    assert not any(f.name.startswith("py::") for f in profile.frames)
    # perf's "(inlined)" frames are native frames without a module
    assert ("arena_map_get", "", "native") in names
    collapsed = collapse_perf([data])
    assert sum(collapsed.values()) == 8 * 2004008


FAKE_ADDR2LINE = """#!/bin/sh
# arguments: -a PC -e MODULE -i -f -s -C
case "$2" in
  11d4) printf '0x00000000000011d4\\ninner\\nprog.c:2 (discriminator 3)\\n'
        printf 'middle\\nprog.c:3\\nouter\\nprog.c:4\\n' ;;
  0x1010) printf '0x0000000000001010\\nhelper\\nlib.c:9\\nfoo\\nlib.c:12\\n' ;;
  *) printf '0x%016x\\n??\\n??:0\\n' 0 ;;
esac
"""
FAKE_NM = "#!/bin/sh\nprintf '0000000000000800 T bar\\n0000000000001000 T foo\\n'\n"
INLINE_TEXT = (
    "prog 1 1.0: 1 cpu-clock: \n\t11d4 outer+0x44 (/x/prog)\n\tbeef foo+0x10 (/x/lib.so)\n"
    "\t5 main+0x5 (/x/prog)\n\tffff schedule+0x1 ([kernel.kallsyms])\n\n"
)


@pytest.mark.parametrize(
    "context, expected",
    [
        (False, "prog;schedule;main;foo;helper;outer;middle;inner 1"),
        (
            True,
            "prog;schedule;main;foo:lib.c:12;helper:lib.c:9;outer:prog.c:4;middle:prog.c:3;inner:prog.c:2 1",
        ),
    ],
)
def test_inline_uses_addr2line_then_nm(tmp_path, monkeypatch, context, expected):
    # addr2line's chain is reversed (outermost first), discriminators dropped; an unknown address
    # is found with nm from symbol+offset (0x1000 + 0x10); addr2line's ?? keeps the line as is
    # (main); kernel frames are never looked up.
    for name, script in (("addr2line", FAKE_ADDR2LINE), ("nm", FAKE_NM)):
        path = tmp_path / name
        path.write_text(script)
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert collapse(INLINE_TEXT, inline=True, context=context) == [expected]
