"""One rank's CPU tracks analysed by forked worker processes (``--jobs N`` on one big trace).

:func:`streamtrace.rankanalysis.analyze_rank` walks a rank's CPU tracks one after
another (link launches, sort, call tree, ops rows).  When one big trace is analysed with
``--jobs N`` the parse already ran on N cores and this walk would be the serial tail, so
here the tracks are cut into at most N contiguous groups of about equal event count and
each group is analysed by a child process forked from the parent, which shares the
parsed store copy-on-write.  Group ``g`` writes its ops rows to
``ops/.../part-<g>.parquet`` (:func:`streamtrace.outputs.partition_path`), so the files
in order hold the rows in the serial order, and the ``parent`` column (a global row
index) keeps its meaning.  A child sends back only what the rest of the analysis needs:
the GPU rows it linked and their launch context, its phase/step windows and counters.

Linking is the one step that depends on the tracks before: a launch claims the GPU
events of its correlation id that no earlier track claimed.  A child cannot see the
other groups' claims, so it claims as if it came first; the parent applies the groups in
order and checks that no row of a group was already claimed by an earlier one.  When a
row was (a correlation id launched from threads in two groups, which Kineto traces do
not have in practice), or when a child fails, the parent analyses that group again
itself from the exact serial state.  The result is always what the serial walk gives
(tests/test_trackfork.py).  Needs ``os.fork`` (Linux, macOS); elsewhere the walk is
serial.

:func:`run_forked` is the plain form used for the kernels rows: functions run at once,
one here and the others in forked children, a failed child's function run again here.
Children end with ``os._exit`` (no ``atexit`` handlers, no temporary folder of the
parent removed); a child the parent gives up on gets SIGTERM, which it turns into
``SystemExit`` so that its half-written output file is deleted.
"""
from __future__ import annotations

import os
import pickle
import signal

import numpy as np

#: the per-GPU-row launch context a track's call tree writes for the rows it owns
CTX_KEYS = ("t_launch", "launch_op", "launching", "annot", "top", "dim", "comm_row")


def track_groups(sizes, parts: int) -> list[tuple[int, int]]:
    """Cut tracks of ``sizes`` events (in order) into at most ``parts`` contiguous, non-empty
    groups ``[(lo, hi), ...]`` whose largest event sum is as small as possible (binary
    search on that sum; ``len(sizes)`` is small)."""
    sizes = [max(1, int(s)) for s in sizes]
    n = len(sizes)
    parts = max(1, min(int(parts), n))
    if n == 0:
        return []

    def cut(cap):
        out, lo, acc = [], 0, 0
        for i, s in enumerate(sizes):
            if acc and acc + s > cap:
                out.append((lo, i))
                lo, acc = i, 0
            acc += s
        out.append((lo, n))
        return out
    lo_cap, hi_cap = max(sizes), sum(sizes)
    while lo_cap < hi_cap:
        mid = (lo_cap + hi_cap) // 2
        if len(cut(mid)) <= parts:
            hi_cap = mid
        else:
            lo_cap = mid + 1
    return cut(lo_cap)


def analyze_tracks(track, store, keys, gpu, win, tot, jobs, open_ops):
    """Run ``track(store, key, gpu, win, tot, ops_writer)`` for every CPU track in ``keys``
    with the same results as calling it for each key in order with the ``open_ops(0)``
    writer, using up to ``jobs`` forked processes.

    ``gpu``: the rank's ``_Gpu`` with nothing linked yet (``gpu.free`` all True);
    ``win``/``tot``: the window lists and counters the calls extend;
    ``open_ops(part)``: a context manager giving the ops writer of ``part-<part>.parquet``.
    Returns ``{"parts": ops part files written (1 when the walk was serial), "redone":
    groups the parent analysed again (claim overlap or failed child)}``."""
    sizes = [store.rows(k) for k in keys]
    groups = track_groups(sizes, jobs)
    if len(groups) < 2 or not hasattr(os, "fork") or not bool(gpu.free.all()):
        _walk(track, store, keys, gpu, win, tot, open_ops, 0)
        return {"parts": 1, "redone": 0}
    bases = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64) + tot["n_cpu"]
    pids, pipes = [], []
    redone = 0
    try:
        for g, (lo, hi) in enumerate(groups):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:                                     # the child: never returns
                os.close(r)
                _child(w, track, store, keys[lo:hi], gpu, win, int(bases[lo]), open_ops, g)
            os.close(w)
            pids.append(pid)
            pipes.append(os.fdopen(r, "rb"))
        for g, (lo, hi) in enumerate(groups):
            data = pipes[g].read()
            os.waitpid(pids[g], 0)
            pids[g] = None
            res = pickle.loads(data) if data else None
            if res is None or res.get("error") or not bool(gpu.free[res["rows"]].all()):
                _walk(track, store, keys[lo:hi], gpu, win, tot, open_ops, g)   # from the exact serial state
                redone += 1
                continue
            rows = res["rows"]
            gpu.free[rows] = False
            for k in CTX_KEYS:
                gpu.ctx[k][rows] = res["ctx"][k]
            for k, parts in res["win"].items():
                win[k].extend(parts)
            for k, v in res["tot"].items():
                tot[k] += v
    finally:
        for f in pipes:
            f.close()
        _reap(pids)
    return {"parts": len(groups), "redone": redone}


def _walk(track, store, keys, gpu, win, tot, open_ops, part):
    """The serial walk of ``keys``, ops rows to ``part-<part>.parquet``."""
    with open_ops(part) as ops:
        for key in keys:
            track(store, key, gpu, win, tot, ops)


def _exit_on_term(signum, frame):
    raise SystemExit(1)


def _child_signals():
    """In a child: SIGTERM (the parent gave up) becomes ``SystemExit``, so that a
    half-written output file is deleted; Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGTERM, _exit_on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _reap(pids):
    """Terminate and wait for the children still running (None entries: already waited)."""
    for pid in pids:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except OSError:
                pass


def _child(w, track, store, keys, gpu, win, base, open_ops, g):
    """Analyse ``keys`` as group ``g`` and write the results to pipe ``w``; exits the process."""
    try:
        _child_signals()
        my_win = {k: [] for k in win}
        my_tot = {"n_cpu": base, "clamped": 0, "overrun": 0, "dup": 0}
        _walk(track, store, keys, gpu, my_win, my_tot, open_ops, g)
        rows = np.flatnonzero(~gpu.free)
        my_tot["n_cpu"] -= base
        payload = {"rows": rows, "ctx": {k: gpu.ctx[k][rows] for k in CTX_KEYS}, "win": my_win,
                   "tot": my_tot, "error": None}
    except BaseException as e:                              # noqa: BLE001 - reported; the parent redoes it
        payload = {"error": f"{type(e).__name__}: {e}"}
    try:
        with os.fdopen(w, "wb") as f:
            f.write(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        os._exit(0)


def run_forked(fns, then=None):
    """Run ``fns[0]()`` in this process and each of ``fns[1:]`` in a forked child at the same
    time, then ``then()`` here while the children finish.  A child that fails (any
    exception, or killed) is run again here, so every function has run once successfully
    when this returns.  Exceptions of the functions run here propagate (the children are
    then terminated).  Without ``os.fork`` everything runs here, in order."""
    if not hasattr(os, "fork"):
        for f in fns:
            f()
        if then is not None:
            then()
        return
    pids = []
    try:
        for f in fns[1:]:
            pid = os.fork()
            if pid == 0:                                         # the child
                code = 1
                try:
                    _child_signals()
                    f()
                    code = 0
                except BaseException:                            # noqa: BLE001 - the parent runs it again
                    pass
                finally:
                    os._exit(code)
            pids.append(pid)
        fns[0]()
        if then is not None:
            then()
        for i, pid in enumerate(pids):
            _, status = os.waitpid(pid, 0)
            pids[i] = None
            if os.waitstatus_to_exitcode(status) != 0:
                fns[i + 1]()
    finally:
        _reap(pids)
