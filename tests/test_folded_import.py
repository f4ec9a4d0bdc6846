"""Reading folded text: the C reader (flameprof._folded) and the pure-Python fallback give the same
Profile."""

from __future__ import annotations

import io
import os
import random
import sys
import warnings

import numpy as np
import pytest

import flameprof._folded  # noqa: F401  built with the package: a missing build fails here, not a skip
from flameprof.collect.importers.folded import read_folded, read_folded_chunks
from flameprof.errors import FlameprofError
from flameprof.model.records import Frame
from flameprof.model.validate import check_profile
from flameprof.render.svg import render_svg

sys.path.insert(0, "scripts")
from bench_render import generate  # noqa: E402

# Every kind of line the reader must agree on: comments, blank and whitespace-only lines (ASCII and Unicode),
# CRLF endings, empty frames, non-ASCII and invalid UTF-8 labels (two invalid bytes read as the same U+FFFD),
# labels naming the same Frame, counts Python's float() reads in unusual spellings, and malformed lines.
EDGE_LINES = [
    b"# a comment",
    b"",
    b"   ",
    b"\t\x0b\x1c",
    "\u00a0\u2003".encode(),
    b"main;work (app.py:3) 5",
    b"main;work (app.py:3);dot (numpy/core/x.py:7) 2\r",
    b"main;;work 1",
    b"main;caf\xc3\xa9 (caf\xc3\xa9.py:1) 3",
    b"main;bad\xff 1",
    b"main;bad\xfe 4",
    b"f (a.py:0) 1",
    b"f (a.py) 2",
    b"main 1.5",
    b"main 1e3",
    b"main 1_000",
    "main \u0663".encode(),
    b"main +5",
    b"main -0",
    b"main 0",
    b"main 12345678901234567890",
    b"main 5\t",
    b"main;work (app.py:3) -1",
    b"main nan",
    b"main inf",
    b"main x",
    b"main",
    b" 5",
    b"\xc2\xa0 5",
    b"main 5 ",
    b"#main 5",
    b"at::native::add_;std::vector<int>::push_back 7",
    b"\xef\xbb\xbfbom;main 1",
    b"a\rb 2",
]
MALFORMED = {
    b"main;work (app.py:3) -1",
    b"main nan",
    b"main inf",
    b"main x",
    b"main",
    b" 5",
    b"\xc2\xa0 5",
    b"main 5 ",
}


def read_folded_bytes(data: bytes, source: str = "<stdin>", strict: bool = True):
    return read_folded_chunks([data], source, strict)


def python_read(data: bytes, strict: bool = True):
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline="\n")
    return read_folded(text, "in.folded", strict)


def assert_same_profile(a, b):
    assert a.frames == b.frames
    for column in (
        "stack_parent",
        "stack_frame",
        "sample_stack",
        "sample_wall",
        "sample_cpu",
        "sample_time",
        "sample_thread",
    ):
        x, y = getattr(a, column), getattr(b, column)
        assert x.dtype == y.dtype and np.array_equal(x, y), column
    assert a.meta == b.meta
    check_profile(a)


def edge_text(rng: random.Random, lines: int, malformed: bool) -> bytes:
    pool = [line for line in EDGE_LINES if malformed or line not in MALFORMED]
    body = b"\n".join(rng.choice(pool) for _ in range(lines))
    return body + rng.choice([b"", b"\n", b"\r\n"])  # with and without a final newline


def test_both_readers_agree_on_every_kind_of_line():
    rng = random.Random(7)
    for _ in range(30):
        data = edge_text(rng, 60, malformed=False)
        assert_same_profile(read_folded_bytes(data, "in.folded"), python_read(data))


def test_both_readers_skip_the_same_malformed_lines(capsys):
    rng = random.Random(8)
    for _ in range(30):
        data = edge_text(rng, 60, malformed=True)
        fast, slow = read_folded_bytes(data, "in.folded", strict=False), python_read(data, strict=False)
        assert_same_profile(fast, slow)
        skipped = sum(line.rstrip(b"\r") in MALFORMED for line in data.split(b"\n"))
        assert fast.meta.get("skipped_lines", 0) == skipped
    warnings = capsys.readouterr().err.splitlines()
    assert warnings and all(w.startswith("flameprof: warning: in.folded: skipped ") for w in warnings)


def strict_error(data: bytes) -> str:
    """The error line both readers stop at (they must agree)."""
    with pytest.raises(FlameprofError) as fast:
        read_folded_bytes(data, "in.folded")
    with pytest.raises(FlameprofError) as slow:
        python_read(data)
    assert str(fast.value) == str(slow.value)
    return str(fast.value)


@pytest.mark.parametrize("bad", sorted(MALFORMED))
def test_both_readers_stop_at_the_same_malformed_line(bad):
    data = b"main;a 1\n\n# note\n" + bad + b"\r\nmain;b 2\n"
    assert strict_error(data).startswith("in.folded:4: malformed folded line")


def test_texts_naming_the_same_frame_share_it():
    profile = read_folded_bytes(b"main;f (a.py:0) 1\nmain;f (a.py) 2\nmain;bad\xff 1\nmain;bad\xfe 1\n")
    assert profile.frames == [Frame("main"), Frame("f", "a.py", 0), Frame("bad\ufffd")]
    assert len(profile.stack_parent) == 3  # main, main;f, main;bad: one stack each
    assert profile.sample_wall.tolist() == [1, 2, 1, 1]


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


def test_chunks_cut_anywhere_read_like_the_whole(monkeypatch):
    data = edge_text(random.Random(9), 200, malformed=False)
    expected = read_folded_bytes(data)
    for size in (1, 2, 3, 7, 64, 1000):
        assert_same_profile(read_folded_chunks(chunked(data, size)), expected)
    monkeypatch.setitem(sys.modules, "flameprof._folded", None)  # the Python reader, cut inside characters
    for size in (1, 3, 1000):
        assert_same_profile(read_folded_chunks(chunked(data, size)), expected)


def test_a_generated_profile_renders_the_same_svg_by_both_readers(tmp_path):
    path = tmp_path / "stacks.folded"
    generate(str(path), 3000, seed=3)
    data = path.read_bytes()
    fast, slow = read_folded_bytes(data, str(path)), python_read(data)
    slow.meta["source"] = str(path)
    assert_same_profile(fast, slow)
    assert fast.num_samples == 3000 and len(fast.stack_parent) > 3000
    assert render_svg(fast, minwidth=0.1) == render_svg(slow, minwidth=0.1)


def test_without_the_c_reader_the_python_reader_is_used_silently(monkeypatch, capsys):
    data = edge_text(random.Random(10), 100, malformed=False)
    expected = read_folded_bytes(data, "in.folded")
    monkeypatch.setitem(sys.modules, "flameprof._folded", None)  # import fails as when it was not built
    assert_same_profile(read_folded_bytes(data, "in.folded"), expected)
    assert capsys.readouterr().err == ""
    with pytest.raises(FlameprofError, match="in.folded:2: malformed"):
        read_folded_bytes(b"a 1\nb\n", "in.folded")


def test_stacks_are_numbered_in_order_of_first_appearance():
    profile = read_folded_bytes(b"a;b;c 1\nx 1\na;d 1\na;b 1\n")
    assert profile.all_stack_frames() == [(0,), (0, 1), (0, 1, 2), (3,), (0, 4)]
    assert profile.sample_stack.tolist() == [2, 3, 4, 1]


def test_a_folded_file_is_loaded_a_chunk_at_a_time(tmp_path, monkeypatch):
    from flameprof.collect.importers import load

    path = tmp_path / "stacks.folded"
    generate(str(path), 500, seed=4)
    expected = read_folded_bytes(path.read_bytes(), str(path))
    sizes = []

    def recording(chunks, *args):
        return read_folded_chunks((sizes.append(len(c)) or c for c in chunks), *args)

    monkeypatch.setattr(load, "CHUNK", 4096)
    monkeypatch.setattr(load, "read_folded_chunks", recording)
    assert_same_profile(load.load_input(str(path)), expected)
    assert sum(sizes) == path.stat().st_size and len(sizes) > 10 and max(sizes[1:]) == 4096


def test_the_c_reader_asks_python_once_per_distinct_label_wherever_it_stands():
    """A label's hash is computed while its end is searched for, a word at a time, or byte by byte
    near the end of a line: both must agree, or the same label is taken for a new one (and Python is
    asked again) depending on its place in the line."""
    from flameprof._folded import FoldedParser

    asked: list[str] = []
    parser = FoldedParser(lambda text: asked.append(text) or len(asked) - 1)
    labels = ["", "a", "ab", "abcdefg", "abcdefgh", "abcdefghi", "x" * 15, "y" * 16, "z" * 23, "é→ü"]
    lines = []
    for shift in range(9):  # each label at every offset in a word, in the middle and at the end of a line
        for label in labels:
            lines.append(f"{'p' * shift};{label};q 1\n{'p' * shift};q;{label} 2\n{label};q 3\n")
    assert parser.feed("".join(lines).encode())
    distinct = {"p" * shift for shift in range(9)} | set(labels) | {"q"}
    assert sorted(asked) == sorted(distinct)


def big_text(lines: int, seed: int) -> bytes:
    """Generated deep stacks: enough frames that the C reader hands several batches to its interning
    thread."""
    rng = random.Random(seed)
    pool = [f"f{i} (m{i % 7}.py:{i})".encode() for i in range(300)]
    return b"".join(
        b";".join(rng.choice(pool) for _ in range(rng.randint(1, 60))) + b" %d\n" % rng.randint(1, 9)
        for _ in range(lines)
    )


def test_both_readers_agree_across_the_c_readers_batches():
    data = big_text(6000, seed=11)
    assert data.count(b";") > 4 * 32768  # several batches of the C reader's interning thread
    expected = python_read(data)
    expected.meta["source"] = "<stdin>"
    rng = random.Random(12)
    cuts = sorted(rng.sample(range(1, len(data)), 40))  # chunks of every size, lines cut anywhere
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    assert_same_profile(read_folded_chunks(chunks), expected)


def test_a_malformed_line_after_many_batches_reads_as_in_python():
    lines = big_text(6000, seed=13).splitlines(keepends=True)
    data = b"".join(lines[:4000] + [b"main;oops\n"] + lines[4000:])
    assert strict_error(data).startswith("in.folded:4001: malformed folded line")
    lenient = read_folded_bytes(data, "in.folded", strict=False)
    assert_same_profile(lenient, python_read(data, strict=False))
    assert lenient.num_samples == 6000


def test_a_forked_child_is_refused_the_parent_parser_and_the_parent_reads_on():
    """The C reader's interning thread is not copied by fork: a child that feeds its copy of the parser
    gets an error, not a hang, and the parent's parse is unharmed."""
    from flameprof._folded import FoldedParser

    data = big_text(4000, seed=14)
    half = data.index(b"\n", len(data) // 2) + 1
    frames: dict[str, int] = {}
    parser = FoldedParser(lambda text: frames.setdefault(text, len(frames)))
    assert parser.feed(data[:half])  # several batches handed over: the thread runs
    with warnings.catch_warnings():  # CPython 3.12+ warns of a fork beside another thread: the case here
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            parser.feed(data[half:])
            parser.finish()
            code = 1
        except RuntimeError as exc:
            code = 0 if "fork" in str(exc) else 2
        os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    assert parser.feed(data[half:])
    whole = FoldedParser(lambda text: frames.setdefault(text, len(frames)))
    assert whole.feed(data)
    assert parser.finish() == whole.finish()


def test_the_c_reader_refuses_a_call_made_while_another_is_in_it():
    """A feed lets the GIL go while it waits for the interning thread and calls frame_id: a second call
    entering then (from another thread, or from frame_id itself) would fill the same batch."""
    from flameprof._folded import FoldedParser

    errors: list[str] = []

    def frame_id(text: str) -> int:
        try:
            parser.feed(b"inner 1\n")
        except RuntimeError as exc:
            errors.append(str(exc))
        return len(errors)

    parser = FoldedParser(frame_id)
    assert parser.feed(b"a;b 1\n")
    assert errors == ["FoldedParser is already in a call (another thread, or frame_id)"] * 2
    parent, frame, leaf, weight, *_ = parser.finish()  # the refused calls left nothing behind
    assert np.frombuffer(leaf, dtype=np.int32).tolist() == [1]
    assert np.frombuffer(weight).tolist() == [1.0]
