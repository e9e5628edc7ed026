"""Helpers of the failure-behaviour tests (``tests/integration/test_failure_*.py``, issue 19): run the
CLI in a subprocess under hostile conditions and look at what it left behind.

The cases are generated at test time from the real traces in ``../shared/traces/`` (skipped
cleanly when absent; nothing from there is copied into the repository) and from
``streamtrace.synth.job``; the only things used from the package are the CLI, its files and
the generator.  Hostile conditions, as root (skipped when unavailable):

* read-only / unreadable folders: ``chmod`` + running the CLI with ``setpriv --bounding-set
  -dac_override,-dac_read_search`` (root without the capabilities that ignore permission bits);
  a read-only bind mount (EROFS) in a private mount namespace (``unshare -m``);
* a full disk: a 2 MB tmpfs in the test's tmp folder, filled up to a few KB;
* a read-only install: the package copied to a read-only folder, ``HOME`` read-only, no numba
  cache folder;
* signals: the CLI started with ``Popen`` and signalled once its output folder shows a given
  number of new or changed files (polled every ms), so the signal lands mid-write;
* orphaned workers: the CLI's descendants read from ``/proc`` just before SIGKILL.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from streamtrace.synth.job import SynthSpec, generate_job

from support import CPU3D, REAL, ROOT

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
SLOW = 300                       # seconds: a cold numba cache compiles every kernel
CPU3D_IT = CPU3D / "iteration_4"


# -- running the CLI ------------------------------------------------------------------------

class Result:
    """What one CLI run gave: ``returncode``, ``stdout``, ``stderr``, ``args``."""

    def __init__(self, returncode, stdout, stderr, args):
        self.returncode, self.stdout, self.stderr, self.args = returncode, stdout, stderr, args

    def __repr__(self):
        return (f"<exit {self.returncode} of streamtrace {' '.join(map(str, self.args))}\n"
                f"stderr (last 1500 chars):\n{self.stderr[-1500:]}\nstdout (last 500):\n{self.stdout[-500:]}>")

    @property
    def err_lines(self):
        return [ln for ln in self.stderr.splitlines() if ln.strip()]

    @property
    def last_err(self):
        lines = self.err_lines
        return lines[-1] if lines else ""


def descendants(pid):
    """Every live descendant of ``pid`` (from /proc)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pids(pids):
    for p in pids:
        if alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def cli(*args, cwd=None, env=None, prefix=(), timeout=SLOW):
    """``python -m streamtrace ARGS`` from the repository root (this checkout's package);
    stdout/stderr go to files, so an orphaned worker holding a pipe cannot hang the test."""
    argv = [*prefix, sys.executable, "-m", "streamtrace", *map(str, args)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err, text=True, cwd=cwd or ROOT, env=env)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_pids(descendants(p.pid) + [p.pid])
            p.wait()
        out.seek(0)
        err.seek(0)
        return Result(p.returncode, out.read(), err.read(), args)


def snapshot(root):
    """path -> (inode, mtime, size, is folder) of every entry under ``root``."""
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            out[p] = (st.st_ino, st.st_mtime_ns, st.st_size, os.path.isdir(p))
    return out


def cli_signalled(args, watch, sig, *, changed=None, match=None, timeout=SLOW):
    """Start the CLI and send ``sig`` once ``watch`` holds ``changed`` new or changed files
    (recursive) or a new path whose name matches the regex ``match``.  Returns (Result, fired,
    descendants just before the signal)."""
    before = snapshot(watch)
    argv = [sys.executable, "-m", "streamtrace", *map(str, args)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        # Ctrl-C as a terminal sends it: a shell starts a background job with SIGINT ignored, and a
        # process started so ignores it for good (Python then installs no KeyboardInterrupt handler)
        p = subprocess.Popen(argv, stdout=out, stderr=err, text=True, cwd=ROOT,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        fired, kids, t0 = False, [], time.monotonic()
        try:
            while p.poll() is None and time.monotonic() - t0 < timeout:
                now = snapshot(watch)
                hit = False
                if changed is not None:
                    hit = sum(1 for k, v in now.items() if not v[3] and before.get(k) != v) >= changed
                if match is not None and not hit:
                    hit = any(re.search(match, os.path.basename(k)) for k in now if k not in before)
                if hit:
                    kids = descendants(p.pid)
                    os.kill(p.pid, sig)
                    fired = True
                    break
                time.sleep(0.001)
            p.wait(timeout=timeout)
        finally:
            if p.poll() is None:
                kill_pids(descendants(p.pid) + [p.pid])
                p.wait()
        out.seek(0)
        err.seek(0)
        return Result(p.returncode, out.read(), err.read(), args), fired, kids


# -- assertions -----------------------------------------------------------------------------

def assert_no_traceback(r):
    assert "Traceback" not in r.stderr, f"traceback: {r.last_err!r}\n{r!r}"


def assert_one_line_error(r, *names):
    """Exit 1, no traceback, exactly one non-empty stderr line that names each of ``names``
    (a path: its full text or its file name); the one-time "notice: compiling kernels" line of a
    cold numba cache is not counted (it depends on which tests ran first)."""
    assert_no_traceback(r)
    assert r.returncode == 1, f"exit {r.returncode}, expected 1\n{r!r}"
    lines = [x for x in r.err_lines if not x.startswith("notice: compiling kernels")]
    assert len(lines) == 1, f"{len(lines)} stderr lines, expected one\n{r!r}"
    for n in names:
        assert str(n) in lines[0] or Path(n).name in lines[0], f"the error does not name {n}: {lines[0]!r}"


def visible_files(folder):
    """Relative paths of the files under ``folder`` a reader would see (dataset readers skip
    names starting with '.' or '_')."""
    folder = Path(folder)
    if not folder.exists():
        return set()
    out = set()
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith((".", "_")) for part in rel.parts):
            out.add(rel.as_posix())
    return out


def hidden_entries(folder):
    """Names starting with '.' anywhere under ``folder`` (temporaries)."""
    folder = Path(folder)
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*")) if folder.exists() else []


def tree_digest(folder):
    folder = Path(folder)
    return {rel: hashlib.sha256((folder / rel).read_bytes()).hexdigest() for rel in visible_files(folder)}


def says_dropped(text, tmp_path):
    """The message speaks of a dropped event (the test's own folder names taken out)."""
    return re.search(r"drop|skip|ignor|discard|refus|invalid|not a number|bad ts|unusable",
                     text.replace(str(tmp_path), "<tmp>"), re.I)


def _plain_bytes(path) -> bytes:
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def trace_events(path):
    """The events of a trace file, read by Python's json, independent of streamtrace's reader
    (by ijson's pure-Python backend, which builds values without recursion and keeps lone
    surrogates, when they nest too deep for json)."""
    raw = _plain_bytes(path)
    try:
        return json.loads(raw)["traceEvents"]
    except RecursionError:
        import ijson
        return list(ijson.get_backend("python").items(raw, "traceEvents.item", use_float=True))


def trace_header(path):
    """The merged trace's ``streamtrace`` header (as ``trace_events`` reads)."""
    raw = _plain_bytes(path)
    try:
        return json.loads(raw)["streamtrace"]
    except RecursionError:
        import ijson
        return next(ijson.get_backend("python").items(raw, "streamtrace"))


# -- inputs -----------------------------------------------------------------------------------

def need_cpu3d():
    if not CPU3D_IT.is_dir():
        pytest.skip("../shared/traces/cpu-3d is absent")


def need_real():
    if not REAL.is_dir():
        pytest.skip("../shared/traces/real is absent")


def synth(folder, **kw):
    """A small synthetic job; returns its iteration folder."""
    spec = dict(world_size=2, tp=2, pp=1, layers=1, microbatches=1)
    spec.update(kw)
    generate_job(folder, SynthSpec(**spec))
    return Path(folder) / f"iteration_{spec.get('iteration', 10)}"


def cpu3d(folder, ranks=(0, 1)):
    """Real cpu-3d rank traces (TP2 x DP2 x PP2, gloo) copied into ``folder/iteration_4``."""
    need_cpu3d()
    it = Path(folder) / "iteration_4"
    it.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        name = f"rank_{r:04d}_iter_4.pt.trace.json"
        (it / name).write_bytes((CPU3D_IT / name).read_bytes())
    return it


def real(name, dest):
    """A real trace from ../shared/traces/real, decompressed to ``dest``."""
    need_real()
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(gzip.decompress((REAL / name).read_bytes()))
    return dest


def rank_file(it, r):
    return next(Path(it).glob(f"rank_{r:04d}_*.json*"))


def inject(path, event: bytes):
    """Put ``event`` (raw JSON text) first in the file's traceEvents array."""
    b = Path(path).read_bytes()
    j = b.index(b"[", b.index(b'"traceEvents"')) + 1
    Path(path).write_bytes(b[:j] + event + b"," + b[j:])


def add_top_level_key(path, text: bytes, first=False):
    """Add ``"key": value`` (raw) as the document's first or last top-level member."""
    b = Path(path).read_bytes()
    if first:
        k = b.index(b"{")
        Path(path).write_bytes(b[:k + 1] + text + b"," + b[k + 1:])
    else:
        k = b.rstrip().rindex(b"}")
        Path(path).write_bytes(b[:k] + b"," + text + b"}\n")


def first_event(path, pred):
    doc = json.loads(Path(path).read_bytes())
    return next(e for e in doc["traceEvents"] if pred(e))


def marked_kernel(path, ts_text: str, dur_text=None, name="CORPUS_MARK") -> bytes:
    """A copy of the file's first kernel, renamed ``name``, with its ts (and dur) text replaced
    by the raw JSON ``ts_text``."""
    ev = dict(first_event(path, lambda e: e.get("cat") == "kernel" and e.get("ph") == "X"))
    ev["name"] = name
    ev["ts"] = "@TS@"
    if dur_text is not None:
        ev["dur"] = "@DUR@"
    ev["args"] = dict(ev.get("args", {}), correlation=987654321)
    raw = json.dumps(ev).replace('"@TS@"', ts_text)
    if dur_text is not None:
        raw = raw.replace('"@DUR@"', dur_text)
    return raw.encode()


def ts_of_first_x(path) -> bytes:
    return repr(first_event(path, lambda e: e.get("ph") == "X")["ts"]).encode()


DEEP = 10_000
SURROGATE_KEY_EVENT = (b'{"ph":"X","cat":"cpu_op","name":"corpus_surrogate","pid":4242,"tid":4242,'
                       b'"ts":%s,"dur":1,"args":{"\\udc80":1}}')
DEEP_ARRAY_EVENT = (b'{"ph":"X","cat":"cpu_op","name":"corpus_deep","pid":4242,"tid":4242,"ts":%s,"dur":1,'
                    b'"args":{"deep":' + b"[" * DEEP + b"]" * DEEP + b"}}")
DEEP_OBJECT_EVENT = (b'{"ph":"X","cat":"cpu_op","name":"corpus_deep","pid":4242,"tid":4242,"ts":%s,"dur":1,'
                     b'"args":' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"}")

def fresh_aggregate(small_analysis, tmp_path):
    """A copy of the session's aggregate folder without its report: ``tmp_path/agg``."""
    g = tmp_path / "agg"
    shutil.copytree(small_analysis / "aggregate", g)
    for p in list(g.glob("*.md")) + [g / "report.json"]:
        if p.exists():
            p.unlink()
    shutil.rmtree(g / "charts", ignore_errors=True)
    return g


# -- privileges and file systems ----------------------------------------------------------------

_PROBE = {}


def unprivileged():
    """The prefix that runs a command as root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, so
    permission bits apply (empty for an ordinary user); skips when that is not possible here."""
    if "setpriv" not in _PROBE:
        ok = False
        setpriv = shutil.which("setpriv")
        if IS_ROOT and setpriv:
            d = Path(tempfile.mkdtemp(prefix="failure-probe-"))
            try:
                (d / "ro").mkdir()
                os.chmod(d / "ro", 0o555)
                p = subprocess.run([setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--",
                                    sys.executable, "-c", f"open({str(d / 'ro' / 'x')!r}, 'w')"],
                                   capture_output=True, text=True)
                ok = p.returncode != 0 and "PermissionError" in p.stderr
            finally:
                os.chmod(d / "ro", 0o755)
                shutil.rmtree(d, ignore_errors=True)
        elif not IS_ROOT:
            ok = None
        _PROBE["setpriv"] = ok
    ok = _PROBE["setpriv"]
    if ok is None:
        return ()
    if not ok:
        pytest.skip("cannot drop root's DAC capabilities here (setpriv)")
    return (shutil.which("setpriv"), "--bounding-set", "-dac_override,-dac_read_search", "--")


def private_ro_mount(folder):
    """The prefix that runs a command in a private mount namespace where ``folder`` is a
    read-only bind mount (EROFS); skips when unavailable."""
    unshare = shutil.which("unshare")
    if not (IS_ROOT and unshare):
        pytest.skip("needs root and unshare for a private read-only bind mount")
    p = subprocess.run([unshare, "-m", "sh", "-c", 'mount --bind -o ro "$1" "$1" && ! touch "$1/.probe"',
                        "sh", str(folder)], capture_output=True)
    if p.returncode != 0:
        pytest.skip("read-only bind mount not possible here")
    return (unshare, "-m", "sh", "-c", f'mount --bind -o ro "{folder}" "{folder}" && exec "$@"', "sh")


def readonly_dir(parent, name="readonly-out"):
    d = Path(parent) / name
    d.mkdir()
    os.chmod(d, 0o555)
    return d
