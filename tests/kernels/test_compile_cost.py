"""What makes numba slow to compile stays out of the kernels: an array assigned to a slice
(``b[lo:hi] = a[lo:hi]``, ``grown[:k] = pairs[:k]``) pulls in numba's broadcasting set-item, which
cost 3-6 CPU-s to compile per kernel (``chains._sort3`` 3.4 s, ``replay._record`` 6.5 s,
``sqlite_pages.decode_leaves`` 6.0 -> 1.9 s with a loop; bench/RESULTS.md), paid on a fresh install's first run.
A scalar fill (``d0[o:] = NEG``) is cheap and allowed.  The check reads the source (``ast``) of
every ``@njit`` function of ``streamtrace.kernels``."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import streamtrace.kernels as kernels

KERNELS = Path(kernels.__file__).parent
ROOT = KERNELS.parents[1]


def _is_njit(dec) -> bool:
    f = dec.func if isinstance(dec, ast.Call) else dec
    return isinstance(f, ast.Name) and f.id == "njit" or isinstance(f, ast.Attribute) and f.attr == "njit"


def _has_slice(sub: ast.Subscript) -> bool:
    s = sub.slice
    parts = s.elts if isinstance(s, ast.Tuple) else [s]
    return any(isinstance(p, ast.Slice) for p in parts)


def _scalar(v) -> bool:
    """A constant, a negated one or an upper-case module constant (``NEG``): a fill, not a copy."""
    if isinstance(v, ast.UnaryOp):
        v = v.operand
    return isinstance(v, ast.Constant) or isinstance(v, ast.Name) and v.id.isupper()


def slice_copies(source: str, filename="<src>") -> list:
    """``file:line function`` of every array-to-slice assignment inside an ``@njit`` function."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef) or not any(_is_njit(d) for d in fn.decorator_list):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AugAssign):
                targets, value = [node.target], node.value
            else:
                continue
            if any(isinstance(t, ast.Subscript) and _has_slice(t) for t in targets) and not _scalar(value):
                out.append(f"{filename}:{node.lineno} {fn.name}")
    return out


def test_the_check_finds_a_slice_copy():
    src = ("from numba import njit\n@njit(cache=True)\ndef f(a, b, lo, hi):\n    b[lo:hi] = a[lo:hi]\n"
           "    b[:2] += a[:2]\n    b[lo:] = -1\n    b[lo:] = NEG\n    return b\n"
           "def g(a, b):\n    b[:] = a\n")
    assert slice_copies(src) == ["<src>:4 f", "<src>:5 f"]


def test_no_kernel_assigns_an_array_to_a_slice():
    found = [hit for p in sorted(KERNELS.rglob("*.py")) for hit in slice_copies(p.read_text(), p.name)]
    assert not found, ("array-to-slice assignments in @njit kernels (write a loop: each costs seconds "
                       f"of compile on a fresh install): {found}")


_ONE_COMPILE_EACH = textwrap.dedent("""
    import importlib, json, pkgutil
    from numba.core.registry import CPUDispatcher
    import streamtrace.kernels as K
    from streamtrace.runtime import compile as C
    for n in C._closure(UNITS):
        C._dispatcher(n).compile(tuple(C.UNITS[n][2]))
    many = {}
    for m in pkgutil.iter_modules(K.__path__):
        mod = importlib.import_module("streamtrace.kernels." + m.name)
        for k, v in vars(mod).items():
            if isinstance(v, CPUDispatcher) and v.__module__ == mod.__name__ and len(v.overloads) > 1:
                many[m.name + "." + k] = [" ".join(map(str, s)) for s in v.overloads]
    print(json.dumps(many))
""")


def test_a_kernel_called_with_a_constant_compiles_once(tmp_path):
    """A bare int or bool constant passed to another kernel is a numba literal, and each distinct one
    a compile of its own (``_value`` of validate was compiled six times, ``_stable_order`` three):
    callers pass ``np.int64(...)`` / ``np.bool_(...)``.  The units that called kernels so, compiled on
    an empty cache: every kernel of theirs has one compiled signature."""
    units = ["validate.member_fields", "validate.span_fields", "critical.longest_path", "critical.latest_times",
             "replay.anchor_pairs", "intervals._union_sorted", "sqlite_pages.decode_leaves",
             "sqlite_pages.interior_children"]
    env = {**os.environ, "STREAMTRACE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_CACHE_DIR", None)
    p = subprocess.run([sys.executable, "-c", f"UNITS = {units!r}\n" + _ONE_COMPILE_EACH], capture_output=True,
                       text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1]) == {}
