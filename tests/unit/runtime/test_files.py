"""Output files and folders as units, owner-named temporaries and their clean-up, output errors,
workers that die with their parent (streamtrace.runtime.files, streamtrace.runtime.lifecycle)."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from streamtrace.runtime.errors import OutputError, StreamtraceError
from streamtrace.runtime import files as F
from streamtrace.runtime.parallel import run_tasks


def _dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _host():
    return F.owner().split("-", 1)[1]


def _tree(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _old_analysis(d: Path):
    (d / "kernels").mkdir(parents=True)
    (d / "kernels" / "part-0.parquet").write_bytes(b"old kernels")
    (d / "summary.json").write_text('{"old": true}')


def _owned(name):
    return name in ("summary.json", "kernels", "ops")


def test_output_folder_replaces_the_folder_as_a_whole(tmp_path):
    out = tmp_path / "an"
    _old_analysis(out)
    with F.output_folder(out, owned=_owned) as stage:
        assert stage.parent == tmp_path and stage.name.startswith(".an.") and not list(stage.iterdir())
        (stage / "ops").mkdir()
        (stage / "ops" / "x").write_bytes(b"new")
        (stage / "summary.json").write_text("{}")
        assert _tree(out) == {"kernels/part-0.parquet": b"old kernels", "summary.json": b'{"old": true}'}
    assert _tree(out) == {"ops/x": b"new", "summary.json": b"{}"}         # nothing of the old one is left
    assert sorted(os.listdir(tmp_path)) == ["an"]


@pytest.mark.parametrize("exchange", [True, False])
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_output_folder_leaves_the_old_folder_on_any_exception(tmp_path, monkeypatch, exchange, error):
    if not exchange:
        monkeypatch.setattr(F, "exchange", lambda a, b: False)
    out = tmp_path / "an"
    _old_analysis(out)
    before = _tree(out)
    with pytest.raises(error):
        with F.output_folder(out, owned=_owned) as stage:
            (stage / "summary.json").write_text("{}")
            raise error()
    assert _tree(out) == before and sorted(os.listdir(tmp_path)) == ["an"]
    with F.output_folder(out, owned=_owned) as stage:           # and without the atomic exchange too
        (stage / "summary.json").write_text("new")
    assert _tree(out) == {"summary.json": b"new"} and sorted(os.listdir(tmp_path)) == ["an"]


def test_an_output_oserror_names_the_folder(tmp_path):
    out = tmp_path / "an"
    with pytest.raises(OutputError) as e:
        with F.output_folder(out) as stage:
            raise OSError(errno.ENOSPC, "No space left on device", str(stage / "kernels" / "part-0.parquet"))
    assert e.value.path == str(out) and "No space left on device" in str(e.value) and not out.exists()


@pytest.mark.parametrize("case", ["file", "under_file", "foreign", "holds_input", "cwd"])
def test_output_folder_refuses_before_any_work(tmp_path, monkeypatch, case):
    out = tmp_path / "out"
    inputs = ()
    if case == "file":
        out.write_text("precious")
    elif case == "under_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "out"
    elif case == "foreign":
        _old_analysis(out)
        (out / "notes.txt").write_text("mine")
    elif case == "holds_input":
        (out / "traces").mkdir(parents=True)
        inputs = [out / "traces" / "rank_0.json"]
    else:
        out.mkdir()
        monkeypatch.chdir(out)
    ran = []
    with pytest.raises(OutputError) as e:
        with F.output_folder(out, owned=_owned, inputs=inputs):
            ran.append(1)
    assert not ran and str(out) in str(e.value)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_carry_keeps_the_rest_as_hard_links(tmp_path):
    agg = tmp_path / "agg"
    agg.mkdir()
    (agg / "ranks.parquet").write_bytes(b"table")
    (agg / "report.json").write_text("old report")
    (agg / "charts").mkdir()
    (agg / "charts" / "a.png").write_bytes(b"old chart")
    with F.output_folder(agg, carry=lambda n: n not in ("report.json", "charts")) as stage:
        assert sorted(os.listdir(stage)) == ["ranks.parquet"]
        assert os.stat(stage / "ranks.parquet").st_ino == os.stat(agg / "ranks.parquet").st_ino
        (stage / "report.json").write_text("new report")
    assert _tree(agg) == {"ranks.parquet": b"table", "report.json": b"new report"}


def test_clean_stale_removes_only_what_a_dead_process_of_this_host_left(tmp_path):
    dead, live = _dead_pid(), os.getppid()
    host = _host()
    names = {f".m.json.{dead}-{host}.rank0.seg": "gone", f".m.json.{live}-{host}.rank0.seg": "kept",
             f".m.json.{dead}-otherhost.rank0.seg": "kept", f".streamtrace-warm.{dead}-{host}.abc": "gone",
             f".an.{dead}-{host}.staging": "gone", ".m.json.123.rank0.seg": "kept", ".hidden": "kept",
             f".m.json.{dead}-{host}.k2j_9.tmp": "gone", f".m.json.{dead}-{host}.rank3.seg.1.val": "gone",
             f".config.{dead}-{host}.bak": "kept",
             f".{F.owner().split('-')[0]}x": "kept"}
    for n in names:
        if n.endswith((".staging", ".abc")):
            (tmp_path / n).mkdir()
            (tmp_path / n / "f").write_text("x")
        else:
            (tmp_path / n).write_text("x")
    removed = F.clean_stale(tmp_path)
    assert sorted(removed) == sorted(n for n, v in names.items() if v == "gone")
    assert sorted(os.listdir(tmp_path)) == sorted(n for n, v in names.items() if v == "kept")


def test_clean_stale_puts_back_an_old_folder_cut_between_two_renames(tmp_path):
    dead = _dead_pid()
    old = tmp_path / f".an.{dead}-{_host()}.old"
    _old_analysis(old)
    before = _tree(old)
    F.clean_stale(tmp_path)
    assert _tree(tmp_path / "an") == before and sorted(os.listdir(tmp_path)) == ["an"]


@pytest.mark.parametrize("case", ["folder", "under_file", "input"])
def test_check_output_file(tmp_path, case):
    inputs = ()
    out = tmp_path / "m.json"
    if case == "folder":
        out.mkdir()
    elif case == "under_file":
        (tmp_path / "f").write_text("x")
        out = tmp_path / "f" / "m.json"
    else:
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "r.json").write_text("{}")
        out = tmp_path / "in" / ".." / "in" / "r.json"
        inputs = [tmp_path / "in" / "r.json"]
    with pytest.raises(OutputError):
        F.check_output_file(out, inputs)


def test_output_error_tells_input_from_output(tmp_path):
    e = F.output_error(tmp_path / "out", OSError(errno.EACCES, "Permission denied", "/elsewhere/in.json"))
    assert type(e) is StreamtraceError and "/elsewhere/in.json" in str(e)
    e = F.output_error(tmp_path / "out", OSError(errno.ENOSPC, "No space left on device", "/elsewhere/x"))
    assert isinstance(e, OutputError) and e.path == str(tmp_path / "out")
    e = F.output_error(tmp_path / "out", OSError(errno.EACCES, "Permission denied", str(tmp_path / "out" / "a")))
    assert isinstance(e, OutputError)


def _boom(x):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_oserror_in_a_task_stops_the_run(jobs):
    """A full disk is nothing another task can escape: raised even with keep_going, not retried."""
    with pytest.raises(OSError):
        run_tasks(_boom, [(i,) for i in range(3)], jobs, retries=1, keep_going=True)


_ORPHAN = """
import os, sys, time
from streamtrace.runtime.lifecycle import die_with_parent
r, w = os.pipe()
pid = os.fork()
if pid == 0:                                   # the middle process
    middle = os.getpid()
    kid = os.fork()
    if kid == 0:                               # the worker (not holding the test's pipes)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)
        if {die}:
            die_with_parent(middle)
        time.sleep(30)
        os._exit(0)
    os.write(w, str(kid).encode())
    os._exit(0)                                # dies at once: the worker is an orphan
os.waitpid(pid, 0)
print(os.read(r, 32).decode())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_with_its_parent():
    def orphan_alive_after(die, seconds):
        """Whether the orphaned worker is still alive ``seconds`` after its parent died."""
        out = subprocess.run([sys.executable, "-c", _ORPHAN.format(die=die)], capture_output=True, text=True,
                             check=True).stdout
        kid = int(out)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{kid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return False
            except OSError:
                return False
            time.sleep(0.05)
        os.kill(kid, 9)
        return True
    assert not orphan_alive_after(True, 5)
    assert orphan_alive_after(False, 0.5)          # the control: without it the worker lives on


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=40)


@settings(max_examples=150, deadline=None)
@given(json_values, st.sampled_from([1, 3, 1 << 16]))
def test_write_json_writes_the_bytes_json_dumps_makes(value, chunk):
    import io
    import json

    import numpy as np

    from streamtrace.runtime import files
    doc = {"ranks": [value, {"n": np.int64(7), "x": np.float64(0.5)}], "é": "ünïcode ☃"}
    default = lambda o: o.item()                                  # noqa: E731 - numpy scalars, as json_default
    saved, files.JSON_CHUNK = files.JSON_CHUNK, chunk
    try:
        f = io.BytesIO()
        files.write_json(f, doc, default)
    finally:
        files.JSON_CHUNK = saved
    assert f.getvalue() == json.dumps(doc, indent=1, default=default).encode()


@settings(max_examples=150, deadline=None)
@given(st.lists(json_values, max_size=6), st.dictionaries(st.text(max_size=6), json_values, max_size=3),
       st.integers(0, 3))
def test_json_items_are_written_as_the_list_json_dumps_makes_and_their_spans_read_back(items, rest, at):
    """A ``JsonItems`` value (an iterable read once) is written as the list of its items would be, at any
    place among the dict's keys, and each item's span in the bytes is that item's JSON text alone."""
    import io
    import json
    import math

    from streamtrace.runtime.files import JsonItems, write_json
    keys = [k for k in rest if k != "ranks"]
    keys.insert(min(at, len(keys)), "ranks")
    doc = {k: items if k == "ranks" else rest[k] for k in keys}
    lazy = JsonItems(iter(items))
    f = io.BytesIO()
    write_json(f, {k: lazy if k == "ranks" else v for k, v in doc.items()})
    text = f.getvalue()
    assert text == json.dumps(doc, indent=1).encode()
    spans = list(zip(lazy.spans[::2], lazy.spans[1::2]))
    back = [json.loads(text[a:b]) for a, b in spans]
    norm = lambda v: json.dumps(v, sort_keys=True) if not (isinstance(v, float) and math.isnan(v)) else "nan"  # noqa: E731
    assert len(back) == len(items) and [norm(v) for v in back] == [norm(v) for v in items]


def test_write_json_writes_long_items_about_a_chunk_at_a_time():
    """Each ``JsonItems`` item is one piece of text (a rank's entry, KBs): writes are joined by characters, so
    none holds much more than ``JSON_CHUNK`` of them (joined 65,536 pieces at a time, one write held a
    4,096-rank ``summary.json`` whole), and the bytes are still ``json.dumps``'s."""
    import io
    import json

    from streamtrace.runtime import files

    class Writes(io.BytesIO):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def write(self, b):
            self.sizes.append(len(b))
            return super().write(b)
    items = [{"rank": i, "pad": "x" * 5000} for i in range(2000)]          # ~10 MB of text
    f = Writes()
    files.write_json(f, {"ranks": files.JsonItems(iter(items)), "n": 1})
    assert f.getvalue() == json.dumps({"ranks": items, "n": 1}, indent=1).encode()
    assert len(f.sizes) >= 9 and max(f.sizes) <= files.JSON_CHUNK + 5100


def test_write_json_raises_what_json_raises_and_atomic_output_keeps_the_old_file(tmp_path):
    from streamtrace.runtime.files import atomic_output, write_json
    p = tmp_path / "summary.json"
    p.write_text('{"old": 1}')
    with pytest.raises(TypeError):
        with atomic_output(p, compress=False) as f:
            write_json(f, {"a": list(range(100_000)), "b": object()})
    assert p.read_text() == '{"old": 1}' and [q.name for q in tmp_path.iterdir()] == ["summary.json"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_special_file_is_never_replaced(tmp_path):
    """An atomic write renames its temporary file over the path: over a device or a pipe it would replace the
    special file itself (a hostile-input pass: ``-o /dev/full`` as root turned the device into a Parquet file)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    for p in (fifo, link):                # (never a real device: a failing check would replace it)
        with pytest.raises(OutputError, match="not a regular file"):
            F.check_output_file(p)
        with pytest.raises(OutputError, match="not a regular file"):
            with F.atomic_output(p) as f:
                f.write(b"x")
    assert fifo.is_fifo() and link.is_symlink()
    assert [q.name for q in tmp_path.iterdir() if q.name not in ("pipe", "link")] == []    # no temporary left


def test_atomic_output_to_a_folder_or_under_a_file_is_an_output_error(tmp_path):
    (tmp_path / "afile").write_text("keep")
    for p in (tmp_path, tmp_path / "afile" / "out.bin"):
        with pytest.raises(OutputError):
            with F.atomic_output(p) as f:
                f.write(b"x")
    assert (tmp_path / "afile").read_text() == "keep"
