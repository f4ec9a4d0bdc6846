"""``flameprof collapse perf --srcline``: source lines printed by ``perf script -F+srcline`` after each
frame line, read as stackcollapse-perf.pl --srcline reads them.

The expected lines were derived by reading stackcollapse-perf.pl and checked against the real
script on the same input (with and without --pid, --tid, --addrs, --all).
"""

from __future__ import annotations

import pytest

from flameprof import cli
from flameprof.collect.importers.perf_profile import read_perf_script
from flameprof.collect.importers.perf_script import CollapseOptions, collapse_perf, format_collapsed

LIBZ = "/usr/lib/libz.so.1"
# Sample 1: kernel srcline "[kernel.kallsyms][addr]" adds nothing; an a->b chain reads two source
# lines (brackets and surrounding blanks removed); "[unknown] ([unknown])" reads none; "??:0" is kept.
# Sample 2 (thread 101): a symbol starting with "(" is dropped without reading its source line, which
# then is an unrecognized line. Sample 3: another event type, filtered (its lines unrecognized).
# Sample 4: perf 6's "(inlined)" frame lines have no module; the frame line is unrecognized and its
# source line "mmap64.c:58 (inlined)" parses as a frame whose source line is the next frame line;
# ";" and quotes in a symbol are tidied, not in a source line. Sample 5 lacks its source line, so
# the blank line is read as one and samples 5-7 run together until the input ends: dropped.
SRCLINE_TEXT = f"""\
# ========
# cmdline : /usr/bin/perf record -g python3 x.py
#
python3 100/100 [000] 1.000001:    1000 cpu-clock:ppp: 
\tffffffff81000130 entry_SYSCALL_64+0x76 ([kernel.kallsyms])
  [kernel.kallsyms][ffffffff81000130]
\t          709b deflate+0x18b ({LIBZ})
  deflate.c:1011
\t          6822 zlib_compress_impl->zlib_compress+0x312 (/usr/lib/zlib.so)
  zlibmodule.c:120
  zlibmodule.c:88 [discriminator 2]  
\t    7f00000000 [unknown] ([unknown])
\t    7f00000001 [unknown] (/usr/lib/libfoo.so)
  ??:0
\t          fd9c2 _PyEval_EvalFrameDefault+0x2e52 (/usr/lib/libpython3.11.so)
  ceval.c:5376

python3 100/101 [001] 1.000002:    1000 cpu-clock:ppp: 
\t          6133 (anon)+0x4 ({LIBZ})
  deflate.c:5
\t          709b deflate+0x18b ({LIBZ})
  deflate.c:1011

python3 100/100 [000] 1.000003:    5 cycles: 
\t          709b deflate+0x18b ({LIBZ})
  deflate.c:1011

python3 100/100 [000] 1.000004:    1000 cpu-clock:ppp: 
\t          1019b3 __GI___mmap64+0x13
  mmap64.c:58 (inlined)
\t          709b deflate+0x18b ({LIBZ})
  deflate.c:1011
\t          fd9c2 f;g"h+0x2 (/usr/lib/libx.so)
  x.c:1;2

python3 100/100 [000] 1.000005:    1000 cpu-clock:ppp: 
\t          709b deflate+0x18b ({LIBZ})

python3 100/100 [000] 1.000006:    2000 cpu-clock:ppp: 
\t          709b deflate+0x18b ({LIBZ})
  deflate.c:1011
\t          709c inflate+0x18b ({LIBZ})

python3 100/100 [000] 1.000007:    3000 cpu-clock:ppp: 
\t          709b deflate+0x18b ({LIBZ})
"""
FIRST = (
    "_PyEval_EvalFrameDefault:ceval.c:5376;{foo}:??:0;{unknown};zlib_compress_impl:zlibmodule.c:120;"
    "zlib_compress_[i]:zlibmodule.c:88;deflate:deflate.c:1011;entry_SYSCALL_64{k} 1000"
)
FOURTH = f"f:gh:x.c:1;2;.c:58:709b deflate+0x18b ({LIBZ}) 1000"


def collapse(text: str, chunk: int | None = None, **options) -> list[str]:
    data = text.encode()
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    return (
        b"".join(format_collapsed(collapse_perf(chunks, CollapseOptions(srcline=True, **options))))
        .decode()
        .splitlines()
    )


@pytest.mark.parametrize(
    "options, expected",
    [
        (
            {},
            [
                "python3;" + FIRST.format(foo="[libfoo.so]", unknown="[unknown]", k=""),
                "python3;deflate:deflate.c:1011 1000",
                "python3;" + FOURTH,
            ],
        ),
        (
            {"kernel": True, "jit": True},
            [
                "python3;" + FIRST.format(foo="[libfoo.so]", unknown="[unknown]", k="_[k]"),
                "python3;deflate:deflate.c:1011 1000",
                "python3;" + FOURTH,
            ],
        ),
        (
            {"tid": True, "addrs": True},
            [
                "python3-100/100;"
                + FIRST.format(foo="[libfoo.so <7f00000001>]", unknown="[unknown <7f00000000>]", k=""),
                "python3-100/100;" + FOURTH,
                "python3-100/101;deflate:deflate.c:1011 1000",
            ],
        ),
    ],
)
def test_srcline_matches_stackcollapse_perf(options, expected, capsys):
    assert collapse(SRCLINE_TEXT, **options) == expected
    err = capsys.readouterr().err
    assert "skipped 4 unrecognized perf script line(s), first at line 20" in err


def test_srcline_is_independent_of_chunk_boundaries():
    whole = collapse(SRCLINE_TEXT)
    for chunk in (1, 5, 64, 301):
        assert collapse(SRCLINE_TEXT, chunk=chunk) == whole


def test_without_srcline_the_source_lines_are_unrecognized(capsys):
    plain = collapse_perf([SRCLINE_TEXT.encode()])
    assert (
        plain[
            b"python3;_PyEval_EvalFrameDefault;[libfoo.so];[unknown];zlib_compress_impl;zlib_compress_[i];"
            b"deflate;entry_SYSCALL_64"
        ]
        == 1000
    )
    assert "unrecognized perf script line" in capsys.readouterr().err


def test_collapse_command_srcline_option(tmp_path, capsysbinary):
    path = tmp_path / "perf.txt"
    path.write_text(SRCLINE_TEXT)
    assert cli.main(["collapse", "perf", "--srcline", str(path)]) == 0
    assert capsysbinary.readouterr().out.decode().splitlines() == collapse(SRCLINE_TEXT)


def test_import_with_srcline_names_frames_by_source_line():
    text = SRCLINE_TEXT.split("python3 100/101")[0]
    profile = read_perf_script([text.encode()], "perf.txt", srcline=True)
    assert profile.num_samples == 1
    names = [profile.frames[f].name for f in profile.stack_frames(int(profile.sample_stack[0]))]
    assert names[-2:] == ["deflate:deflate.c:1011", "entry_SYSCALL_64"]
    assert "zlib_compress_impl:zlibmodule.c:120" in names
