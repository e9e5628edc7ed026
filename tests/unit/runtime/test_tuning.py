"""The command process's start-up settings (``streamtrace.runtime.tuning``)."""
from __future__ import annotations

import subprocess
import sys

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
