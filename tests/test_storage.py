import io
import json
import zipfile

import numpy as np
import pytest

from flameprof.errors import FlameprofError
from flameprof.model import storage
from flameprof.model.builder import ProfileBuilder
from flameprof.model.profile import Frame, Mark, ProcessInfo


def sample_profile():
    b = ProfileBuilder({"cwd": "/home/u/proj", "rate": 100.0})
    t0 = b.thread_id(10, 10, "MainThread")
    t1 = b.thread_id(10, 11, "worker")
    b.process(ProcessInfo(10, "main", "hostA", "python train.py"))
    main = b.frame(Frame("main", "/home/u/proj/train.py", 3))
    step = b.frame(Frame("step", "/home/u/proj/train.py", 9))
    layer = b.frame(Frame("Net.fc (Linear)", kind="layer"))
    s1 = b.stack_id([main])
    s2 = b.stack_id([main, step, layer])
    b.add_sample(0.010, t0, s1, 0.010, 0.009)
    b.add_sample(0.020, t0, s2, 0.010, 0.010)
    b.add_sample(0.020, t1, s2, 0.020, 0.000)
    b.marks.append(Mark(0.015, t0, "step", "1"))
    b.counters["rss"] = ([0.0, 0.1], [1e8, 1.1e8])
    return b.build()


def test_round_trip_keeps_every_table(tmp_path):
    profile = sample_profile()
    path = tmp_path / "p.flameprof"
    storage.save(profile, path)
    loaded = storage.load(path)
    assert loaded.frames == profile.frames
    assert loaded.threads == profile.threads
    assert loaded.processes == profile.processes
    assert loaded.marks == profile.marks
    assert loaded.meta["version"] == storage.VERSION and loaded.meta["cwd"] == "/home/u/proj"
    np.testing.assert_array_equal(loaded.stack_parent, profile.stack_parent)
    np.testing.assert_array_equal(loaded.sample_stack, profile.sample_stack)
    np.testing.assert_allclose(loaded.sample_wall, profile.sample_wall, atol=1e-6)
    np.testing.assert_allclose(loaded.sample_cpu, profile.sample_cpu, atol=1e-6)
    np.testing.assert_allclose(loaded.sample_time, profile.sample_time, atol=1e-6)
    np.testing.assert_allclose(loaded.counters["rss"][1], [1e8, 1.1e8])
    assert loaded.stack_frames(int(loaded.sample_stack[1])) == [0, 1, 2]


def test_file_is_a_zip_of_json_and_npy_without_pickle(tmp_path):
    path = tmp_path / "p.flameprof"
    storage.save(sample_profile(), path)
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        assert {"meta.json", "frames.json", "sample_stack.npy", "stack_parent.npy"} <= names
        arr = np.load(io.BytesIO(zf.read("sample_wall.npy")), allow_pickle=False)
        assert arr.dtype == np.int64 and arr.tolist() == [10000, 10000, 20000]
        assert json.loads(zf.read("meta.json"))["format"] == "flameprof"


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "bad_meta", "bad_index"])
def test_corrupt_files_raise_one_clear_error(tmp_path, damage):
    data = storage.dumps(sample_profile())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = b"PK\x03\x04" + bytes(range(256)) * 4
    elif damage == "empty":
        data = b""
    else:
        buf = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(buf, "w") as dst:
            for item in src.namelist():
                content = src.read(item)
                if damage == "bad_meta" and item == "meta.json":
                    content = b'{"format": "other"}'
                if damage == "bad_index" and item == "sample_stack.npy":
                    out = io.BytesIO()
                    np.save(out, np.array([0, 99, 0], dtype=np.int32))
                    content = out.getvalue()
                dst.writestr(item, content)
        data = buf.getvalue()
    path = tmp_path / "bad.flameprof"
    path.write_bytes(data)
    with pytest.raises(FlameprofError) as info:
        storage.load(path)
    assert "bad.flameprof" in str(info.value)


def test_newer_version_is_refused(tmp_path):
    profile = sample_profile()
    data = storage.dumps(profile)
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(buf, "w") as dst:
        for item in src.namelist():
            content = src.read(item)
            if item == "meta.json":
                meta = json.loads(content)
                meta["version"] = storage.VERSION + 1
                content = json.dumps(meta).encode()
            dst.writestr(item, content)
    with pytest.raises(FlameprofError, match="newer"):
        storage.loads(buf.getvalue(), "x")


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    storage.save(sample_profile(), tmp_path / "p.flameprof")
    assert [p.name for p in tmp_path.iterdir()] == ["p.flameprof"]


def test_saved_files_get_the_usual_permissions(tmp_path):
    path = tmp_path / "p.flameprof"
    storage.save(sample_profile(), path)
    import os

    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask
