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
