"""The command process's start-up settings (``streamtrace.runtime.tuning``)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from support import ROOT


def test_the_command_process_imports_neither_pandas_nor_numba_to_report(tmp_path):
    """The command's process keeps pandas out (pyarrow would import it at its first conversion),
    pyarrow still reads and computes, and the report side of the job package (its folder readers)
    loads no numba kernel; ``streamtrace.aggregate.aggregate`` is the function of ``streamtrace.aggregate.run``."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"k": ["a", "b", "a"]}), tmp_path / "t.parquet")
    code = f"""
import sys
from streamtrace.runtime.tuning import skip_pandas
skip_pandas()
import pyarrow.compute as pc, pyarrow.parquet as pq
t = pq.read_table({str(tmp_path / 't.parquet')!r})
assert pc.sum(pc.equal(t["k"], "a")).as_py() == 2
import streamtrace.aggregate.folder, streamtrace.report
assert "pandas" not in sys.modules and "numba" not in sys.modules, sorted(m for m in sys.modules if m in ("pandas", "numba"))
from streamtrace.aggregate import AggregateOptions
import streamtrace.aggregate.run as run
from streamtrace.aggregate import aggregate
assert callable(aggregate) and aggregate is run.aggregate and aggregate.__module__ == "streamtrace.aggregate.run"
try:
    import pandas
except ImportError:
    print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_quiet_llvm_lock_drops_numbas_lock_events_and_kernels_still_compile_and_run():
    """``quiet_llvm_lock`` removes numba's callbacks from llvmlite's lock (numba registers them on
    import: they were there before), a new kernel still compiles and runs, and a second call is a no-op."""
    code = """
import numba
from llvmlite.binding import ffi
from streamtrace.runtime.tuning import quiet_llvm_lock
numba_cbs = lambda: [a for a, _ in ffi.lib._lock._cblist if getattr(a, "__module__", "") == "numba.core.base"]
assert numba_cbs(), "numba registers its llvm_lock callbacks on import"
quiet_llvm_lock()
assert not numba_cbs()
quiet_llvm_lock()
@numba.njit
def add(a, b):
    return a + b
assert add(2, 3) == 5
from streamtrace.kernels.critical import longest_path
import numpy as np
d, p, o = longest_path(2, np.asarray([0]), np.asarray([1]), np.asarray([7]), np.asarray([0, -(2 ** 62)]))
assert d.tolist() == [0, 7]
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


ARENAS = """
import ctypes, sys, threading
import numpy as np
together = threading.Barrier(6)
def work():
    held = [np.ones(20000) for _ in range(200)]     # (160 KB each: glibc's heap, not a mapping of its own)
    together.wait()                                 # (no thread ends, handing its arena on, before all allocated)
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
ctypes.CDLL("libc.so.6").malloc_stats()             # (stderr: a block "Arena N:" per arena)
"""


def _arenas(setup: str, env=None) -> int:
    """How many glibc arenas a fresh process holds after ``setup`` and six threads that allocate."""
    import os
    out = subprocess.run([sys.executable, "-c", setup + ARENAS], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return sum(line.startswith("Arena ") for line in out.stderr.splitlines())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")
def test_the_command_process_threads_share_two_malloc_arenas():
    """``streamtrace.cli.command`` (run here for ``--version``, its exit left out) limits the process to
    ``MALLOC_ARENAS`` glibc arenas before any thread starts: six threads that allocate then share two, where
    a process that did not call it gets one each (up to glibc's 8 a core); ``MALLOC_ARENA_MAX`` in the
    environment is left to glibc."""
    import os
    from streamtrace.runtime.tuning import MALLOC_ARENAS
    if "MALLOC_ARENA_MAX" in os.environ:
        pytest.skip("MALLOC_ARENA_MAX is set in this environment")
    command = ("import sys\nimport streamtrace.cli as cli\ncli.leave = lambda code: None\n"
               "sys.argv = ['streamtrace', '--version']\ncli.command()\n")
    assert _arenas(command) == MALLOC_ARENAS == 2
    assert _arenas("") > MALLOC_ARENAS                 # (2 cores or more: glibc's own limit is 16 and up)
    assert _arenas("from streamtrace.runtime.tuning import few_malloc_arenas\nassert not few_malloc_arenas()\n",
                   {"MALLOC_ARENA_MAX": "4"}) == 4


def test_parked_arrays_are_let_go_and_come_back_the_same(tmp_path):
    """``Parking``: each array attribute parked None inside the block (not held), back after it with its dtype,
    shape and values, also when the block raises; what is not an array left alone; no file left."""
    import contextlib
    import types

    import numpy as np

    from streamtrace.runtime.tuning import Parking
    big = np.arange(-5, 2**33, 2**30, dtype=np.int64)
    g = types.SimpleNamespace(a=np.array([3, -1, 2**31 - 1], np.int32), b=np.array([True, False]), c=big.copy(),
                              d=np.zeros((2, 3), np.int8), texts=["x"], e=None)
    keep = {k: v.copy() for k, v in vars(g).items() if isinstance(v, np.ndarray)}
    for fail in (False, True):
        with pytest.raises(RuntimeError) if fail else contextlib.nullcontext():
            with Parking(g, tmp_path) as lot:
                lot.only(("a", "b", "c", "d", "texts", "e", "missing"))
                assert g.a is None and g.b is None and g.c is None and g.d is None
                assert g.texts == ["x"] and g.e is None
                if fail:
                    raise RuntimeError("inside")
        for k, v in keep.items():
            got = getattr(g, k)
            assert got.dtype == v.dtype and got.shape == v.shape and np.array_equal(got, v), k
        assert list(tmp_path.iterdir()) == []


def test_parking_moves_between_sets_without_reading_back_what_stays(tmp_path):
    """``Parking.only``: a second set parks what is new and brings back what it leaves out; an array in
    both sets stays on disk (its file not written again); ``peek`` lends the parked arrays as read-only
    maps equal to them, None again after; the block's end brings every array back as it was, and an
    attribute the block set keeps that value; no file left."""
    import types

    import numpy as np

    from streamtrace.runtime.tuning import Parking
    g = types.SimpleNamespace(a=np.arange(7, dtype=np.int32), b=np.array([2**40, -3], np.int64),
                              c=np.array([True, False, True]), d=np.zeros((2, 2), np.int8), label="x")
    keep = {k: v.copy() for k, v in vars(g).items() if isinstance(v, np.ndarray)}
    with Parking(g, tmp_path) as lot:
        lot.only(("a", "b", "label"))
        assert g.a is None and g.b is None and g.label == "x" and g.c is not None
        stamp = (tmp_path / "b.npy").stat().st_mtime_ns, (tmp_path / "b.npy").stat().st_ino
        lot.only(("b", "c"))
        assert np.array_equal(g.a, keep["a"]) and g.a.dtype == np.int32
        assert g.b is None and g.c is None
        assert ((tmp_path / "b.npy").stat().st_mtime_ns, (tmp_path / "b.npy").stat().st_ino) == stamp
        assert sorted(x.name for x in tmp_path.iterdir()) == ["b.npy", "c.npy"]
        with lot.peek():
            assert np.array_equal(g.b, keep["b"]) and np.array_equal(g.c, keep["c"])
            assert not g.b.flags.writeable
        assert g.b is None and g.c is None
        g.c = np.array([7])                             # (set by the block: kept)
    assert np.array_equal(g.c, [7])
    for k in ("a", "b", "d"):
        assert getattr(g, k).dtype == keep[k].dtype and np.array_equal(getattr(g, k), keep[k]), k
    assert list(tmp_path.iterdir()) == []


def _resident_kb(fragment: str) -> int:
    """kB of this process's resident pages mapped from files whose path contains ``fragment`` (smaps)."""
    total, mine = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            first = line.split(" ", 1)[0]
            if "-" in first and ":" not in first:
                mine = fragment in line
            elif mine and first == "Rss:":
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps, madvise")
def test_release_library_pages_drops_clean_read_only_pages_and_keeps_written_ones(tmp_path):
    """A read-only private mapping of a file, read whole, leaves the resident set and reads the same bytes
    after, again on a second call (the mapping remembered) and for a new mapping of the file; one whose page
    was written before it became read-only (as a library's relocated data) is left mapped, its written byte
    kept; a mapping of another file is not touched."""
    import ctypes
    import mmap
    import os
    from streamtrace.runtime.tuning import release_library_pages
    size = 64 * mmap.PAGESIZE
    data = bytes(range(256)) * (size // 256)
    for name in ("libfakeclean.so", "libfakedirty.so", "libother.so"):
        with open(tmp_path / name, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())                           # (written back: the page cache's pages clean)
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    with open(tmp_path / "libfakeclean.so", "rb") as a, open(tmp_path / "libfakedirty.so", "r+b") as b, \
            open(tmp_path / "libother.so", "rb") as c:
        clean = mmap.mmap(a.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        other = mmap.mmap(c.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        dirty = mmap.mmap(b.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        dirty[5] = 0xEE                                     # (a private copy of the first page)
        at = ctypes.addressof(ctypes.c_char.from_buffer(dirty))
        assert libc.mprotect(at, size, mmap.PROT_READ) == 0
        assert clean[:] == data and other[:] == data and dirty[6] == data[6]
        before = {n: _resident_kb(n) for n in ("libfakeclean", "libfakedirty", "libother")}
        assert min(before.values()) > 0
        assert release_library_pages("libfakeclean") == size // 1024
        assert release_library_pages("libfakedirty") == 0
        assert _resident_kb("libfakeclean") == 0
        assert _resident_kb("libfakedirty") == before["libfakedirty"]
        assert _resident_kb("libother") == before["libother"]
        assert clean[:] == data                             # (mapped back from the file, as first read)
        assert _resident_kb("libfakeclean") > 0
        assert release_library_pages("libfakeclean") == size // 1024      # (the mapping found clean before)
        assert _resident_kb("libfakeclean") == 0 and clean[:] == data
        clean.close()                                       # (another mapping of the file: found again)
        clean = mmap.mmap(a.fileno(), size // 2, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        assert clean[:] == data[:size // 2] and _resident_kb("libfakeclean") > 0
        assert release_library_pages("libfakeclean") == size // 2048
        assert _resident_kb("libfakeclean") == 0
        assert dirty[5] == 0xEE and dirty[:5] == data[:5] and dirty[6:] == data[6:]
        assert libc.mprotect(at, size, mmap.PROT_READ | mmap.PROT_WRITE) == 0
        del at
        for m in (clean, dirty, other):
            m.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")
def test_loading_kernels_leaves_llvms_set_up_pages_out_of_the_resident_set():
    """numba's set-up touches tens of MB of llvmlite's library: a process that set numba up itself holds
    them; after ``runtime.compile.load`` (which sets it up too) less than half that stays resident, and a
    loaded kernel and a kernel compiled afterwards both run."""
    import inspect
    code = inspect.getsource(_resident_kb) + """
import sys
from streamtrace.runtime import compile as c
mode = sys.argv[1]
if mode == "load":
    assert c.load(c.SET_UP_UNIT, "intervals.disjoint_length") == [c.SET_UP_UNIT, "intervals.disjoint_length"]
else:
    c._dispatcher(c.SET_UP_UNIT).compile(c.UNITS[c.SET_UP_UNIT][2])
print(_resident_kb("libllvmlite"))
if mode == "load":
    import numba, numpy as np
    from streamtrace.kernels.intervals import disjoint_length
    assert disjoint_length(np.asarray([0, 30], np.int64), np.asarray([10, 35], np.int64)) == 15
    add = numba.njit(lambda a, b: a + b)
    assert add(2, 3) == 5
"""
    kb = {}
    for mode in ("set_up", "load"):
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        kb[mode] = int(out.stdout.split()[-1])
    assert kb["set_up"] > 20_000 and kb["load"] < kb["set_up"] / 2, kb


def test_clean_spans_needs_every_dirty_field_read_and_zero():
    """A mapping is clean when its smaps block shows ``Anonymous``, ``Private_Dirty`` and ``Shared_Dirty``,
    each 0: one with a field left out (a sandbox's smaps) or not 0 is not; a writable mapping or another
    file's is not even listed."""
    from streamtrace.runtime.tuning import clean_spans

    def block(span, perms, path, **fields):
        rows = [f"{span} {perms} 00000000 fe:00 1 {path}\n", "Rss:                 8 kB\n"]
        return rows + [f"{k}: {v} kB\n" for k, v in fields.items()] + ["VmFlags: rd mr mw me\n"]
    zero = {"Anonymous": 0, "Private_Dirty": 0, "Shared_Dirty": 0}
    text = (block("1000-3000", "r-xp", "/x/libllvmlite.so", **zero)
            + block("3000-4000", "r--p", "/x/libllvmlite.so", **{**zero, "Private_Dirty": 4})
            + block("4000-5000", "r--p", "/x/libllvmlite.so", Anonymous=0, Private_Dirty=0)
            + block("5000-6000", "rw-p", "/x/libllvmlite.so", **zero)
            + block("6000-7000", "r--p", "/x/lib with space/libLLVM-17.so", **zero)
            + block("7000-8000", "r-xp", "/x/libother.so", **zero))
    every, clean = clean_spans(text, ("libllvmlite", "libLLVM"))
    assert every == {(0x1000, 0x3000, "/x/libllvmlite.so"), (0x3000, 0x4000, "/x/libllvmlite.so"),
                     (0x4000, 0x5000, "/x/libllvmlite.so"), (0x6000, 0x7000, "/x/lib with space/libLLVM-17.so")}
    assert clean == {(0x1000, 0x3000, "/x/libllvmlite.so"), (0x6000, 0x7000, "/x/lib with space/libLLVM-17.so")}
