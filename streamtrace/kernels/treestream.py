"""One track's call tree, GPU roll-up and launch context, in time-ordered chunks
(bounded memory), plus a string gather for building Arrow string columns.

``TreeStream`` takes a track's CPU events as records sorted by (start asc, end
desc, index asc) -- the order ``streamtrace.kernels.tree.build_call_tree`` nests
them in -- in any number of chunks, and carries the stack of open events from one
chunk to the next.  It computes what ``build_call_tree`` + ``propagate`` +
``nearest_marked`` / ``outermost_marked`` compute on the whole track, with the same
results:

* per event, when it is closed (popped): ``parent`` (its index), ``depth``, and the GPU
  events launched in its subtree: ``count``, ``total`` (sum of durations), ``busy``
  (length of their union);
* per GPU event owned by a launch, when the launch is pushed: the launch's start and
  name, its parent's name, and from the launch's ancestors-or-self: the nearest and the
  outermost annotation (``flags & 1``), the nearest event with a parallel-dimension
  hint (``flags & 2``), the nearest collective-args row (``comm >= 0``, only for GPU
  events without one of their own).

Memory: the open events (stack), and the interval unions of their closed subtrees
(an arena with the stack's discipline: every open event owns a contiguous segment of
pieces -- its own GPU intervals and the union of each closed child subtree -- merged
into one union when it closes, in O(S log r) with the run merge of ``tree``).  Each
GPU interval is held at most once, and only while an ancestor of its launch is open.

Plain-Python twins: ``streamtrace.kernels.reference.tree_stream_ref`` and
``gather_strings_ref``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .runs import merge_runs, sort_group, union_into
from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["TreeStream", "REC_DTYPE", "RES_DTYPE", "gather_strings"]

_I64_MAX = np.iinfo(np.int64).max

#: one CPU event, as fed to ``TreeStream.feed`` (sorted by s asc, e desc, idx asc)
REC_DTYPE = np.dtype([("s", "i8"), ("e", "i8"), ("idx", "i8"), ("own_off", "i8"), ("name", "i4"),
                      ("comm", "i4"), ("own_cnt", "i4"), ("flags", "u1")])
#: one closed event, as returned by ``TreeStream.feed`` / ``TreeStream.finish``
RES_DTYPE = np.dtype([("idx", "i8"), ("parent", "i8"), ("depth", "i4"), ("count", "i8"), ("total", "i8"),
                      ("busy", "i8")])

# columns of the stack (int64, one row per open event)
_IDX, _END, _NAME, _ANNOT, _TOP, _DIM, _COMM, _COUNT, _TOTAL, _PIECE0 = range(10)
_NSTACK = 10
# state: stack top, arena top, pieces, clamped, overruns, results written
_TOPS, _ARENA, _NPIECES, _CLAMPED, _OVERRUN, _NRES = range(6)


@njit(cache=True, nogil=True)
def _pop(stk, state, ar_s, ar_e, pc, b_s, b_e, t_s, t_e, runs, res):
    """Close the top event: merge its pieces into one union, write its result, add its
    figures to its parent (whose pieces it now is), or drop them for a root."""
    L = state[_TOPS] - 1
    p0 = stk[L, _PIECE0]
    npc = state[_NPIECES]
    busy = np.int64(0)
    if npc - p0 == 1:                         # one piece: already a union, it stays in place
        busy = pc[p0, 2]
    elif npc - p0 > 1:
        z = np.int64(0)                       # typed: literal 0s would compile merge_runs /
        r = np.int64(0)                       # union_into once more for Literal[int](0)
        runs[0] = 0
        for q in range(p0, npc):              # gather, coalescing pieces already in order
            lo = pc[q, 0]
            if r > 0 and ar_s[lo] < b_s[z - 1]:
                r += 1
            elif r == 0:
                r = 1
            for x in range(lo, lo + pc[q, 1]):
                b_s[z] = ar_s[x]
                b_e[z] = ar_e[x]
                z += 1
            runs[r] = z
        off = pc[p0, 0]
        if merge_runs(b_s, b_e, t_s, t_e, runs, r):
            w, length = union_into(t_s, t_e, np.int64(0), z, ar_s, ar_e, off)
        else:
            w, length = union_into(b_s, b_e, np.int64(0), z, ar_s, ar_e, off)
        pc[p0, 1] = w
        pc[p0, 2] = length
        state[_NPIECES] = p0 + 1
        state[_ARENA] = off + w
        busy = length
    n = state[_NRES]
    res[n, 0] = stk[L, _IDX]
    res[n, 1] = stk[L - 1, _IDX] if L > 0 else -1
    res[n, 2] = L
    res[n, 3] = stk[L, _COUNT]
    res[n, 4] = stk[L, _TOTAL]
    res[n, 5] = busy
    state[_NRES] = n + 1
    if L > 0:
        stk[L - 1, _COUNT] += stk[L, _COUNT]
        stk[L - 1, _TOTAL] += stk[L, _TOTAL]
    elif state[_NPIECES] > p0:                # a root: its union is not needed any more
        state[_ARENA] = pc[p0, 0]
        state[_NPIECES] = p0
    state[_TOPS] = L


@njit(cache=True, nogil=True)
def _feed(s, e, idx, own_off, name, comm, own_cnt, flags, k0, clamp, final,
          own_rows, g_start, g_end, t_launch, launch_op, launching, annot, top_annot, dim_at, comm_row,
          stk, state, ar_s, ar_e, pc, b_s, b_e, t_s, t_e, runs, res):
    """Push records k0.. (popping the events they close); returns the index of the first
    record not processed: len(s) when done, less when the arena must grow first.  With
    ``final``, also closes every open event once all records are in."""
    n = s.shape[0]
    cap = ar_s.shape[0]
    limit = np.int64(_I64_MAX) - clamp
    for k in range(k0, n):
        cnt = own_cnt[k]
        if state[_ARENA] + cnt > cap:
            return k
        sk = s[k]
        ek = e[k]
        while state[_TOPS] > 0 and stk[state[_TOPS] - 1, _END] <= sk:
            _pop(stk, state, ar_s, ar_e, pc, b_s, b_e, t_s, t_e, runs, res)
        top = state[_TOPS]
        if top > 0 and ek > stk[top - 1, _END]:
            pe = stk[top - 1, _END]
            if pe > limit or ek < pe + clamp:
                ek = pe                       # small overrun: clamp to the parent
                state[_CLAMPED] += 1
            else:
                state[_OVERRUN] += 1          # close the events it overruns
                while state[_TOPS] > 0 and stk[state[_TOPS] - 1, _END] < ek:
                    _pop(stk, state, ar_s, ar_e, pc, b_s, b_e, t_s, t_e, runs, res)
        L = state[_TOPS]
        nm = np.int64(name[k])
        fl = flags[k]
        stk[L, _IDX] = idx[k]
        stk[L, _END] = ek
        stk[L, _NAME] = nm
        if L > 0:
            stk[L, _ANNOT] = nm if fl & 1 else stk[L - 1, _ANNOT]
            stk[L, _TOP] = stk[L - 1, _TOP] if stk[L - 1, _TOP] != -2 else (nm if fl & 1 else -2)
            stk[L, _DIM] = nm if fl & 2 else stk[L - 1, _DIM]
            stk[L, _COMM] = comm[k] if comm[k] >= 0 else stk[L - 1, _COMM]
        else:
            stk[L, _ANNOT] = nm if fl & 1 else -1
            stk[L, _TOP] = nm if fl & 1 else -2       # -2: no marked ancestor yet (names are >= -1)
            stk[L, _DIM] = nm if fl & 2 else -1
            stk[L, _COMM] = comm[k] if comm[k] >= 0 else -1
        stk[L, _PIECE0] = state[_NPIECES]
        total = np.int64(0)
        if cnt > 0:
            lo = state[_ARENA]
            parent_name = stk[L - 1, _NAME] if L > 0 else -1
            for j in range(cnt):
                g = own_rows[own_off[k] + j]
                ar_s[lo + j] = g_start[g]
                ar_e[lo + j] = g_end[g]
                total += g_end[g] - g_start[g]
                t_launch[g] = sk
                launch_op[g] = nm
                launching[g] = parent_name
                annot[g] = stk[L, _ANNOT]
                top_annot[g] = stk[L, _TOP] if stk[L, _TOP] != -2 else -1
                dim_at[g] = stk[L, _DIM]
                if comm_row[g] < 0:
                    comm_row[g] = stk[L, _COMM]
            sort_group(ar_s, ar_e, lo, lo + cnt)
            w, length = union_into(ar_s, ar_e, lo, lo + cnt, ar_s, ar_e, lo)
            if w > 0:
                q = state[_NPIECES]
                pc[q, 0] = lo
                pc[q, 1] = w
                pc[q, 2] = length
                state[_NPIECES] = q + 1
                state[_ARENA] = lo + w
        stk[L, _COUNT] = cnt
        stk[L, _TOTAL] = total
        state[_TOPS] = L + 1
    if final:
        while state[_TOPS] > 0:
            _pop(stk, state, ar_s, ar_e, pc, b_s, b_e, t_s, t_e, runs, res)
    return n


def _grow(a, rows):
    out = np.empty((rows,) + a.shape[1:], a.dtype)
    out[:len(a)] = a
    return out


class TreeStream:
    """Call tree + GPU roll-up of one track, fed in time-ordered chunks.

    ``own_rows``: GPU row indices grouped by owning launch (a record owns
    ``own_rows[own_off:own_off + own_cnt]``); ``g_start``/``g_end``: GPU intervals (ns);
    ``gpu``: dict of per-GPU-row output arrays written for owned rows: ``t_launch``
    (int64), the name ids ``launch_op``, ``launching``, ``annot``, ``top``, ``dim``
    (int32, or int16 when every name id fits), ``comm_row`` (int32; only filled where
    it is negative).  ``clamp_ns`` as for
    ``build_call_tree``.  ``arena``: initial capacity of
    the interval arena (it grows on demand)."""

    def __init__(self, own_rows, g_start, g_end, gpu, clamp_ns=1000, arena=1024):
        self.own_rows = np.ascontiguousarray(own_rows, np.int32 if len(g_start) < 2 ** 31 else np.int64)
        self.g_start = np.ascontiguousarray(g_start, np.int64)
        self.g_end = np.ascontiguousarray(g_end, np.int64)
        self.gpu = gpu
        m = len(self.g_start)
        if len(self.g_end) != m or bool(np.any(self.g_end < self.g_start)):
            raise ValueError("TreeStream: g_start and g_end differ in length, or end < start")
        if len(self.own_rows) and (int(self.own_rows.min()) < 0 or int(self.own_rows.max()) >= m):
            raise ValueError(f"TreeStream: own_rows must be GPU rows in [0, {m})")
        names = gpu["launch_op"].dtype
        for k in ("launch_op", "launching", "annot", "top", "dim", "comm_row", "t_launch"):
            want = np.int64 if k == "t_launch" else np.int32 if k == "comm_row" else names
            if names not in (np.int16, np.int32) or gpu[k].dtype != want or len(gpu[k]) != m \
                    or not gpu[k].flags.c_contiguous:
                raise TypeError(f"TreeStream: gpu[{k!r}] must be a contiguous {np.dtype(want)} array of {m}"
                                " (the five name columns all int32 or all int16)")
        self.clamp = np.int64(clamp_ns)
        if not 0 <= int(clamp_ns) <= _I64_MAX:
            raise ValueError("TreeStream: clamp_ns must be in [0, 2**63)")
        self.stk = np.zeros((64, _NSTACK), np.int64)
        self.state = np.zeros(6, np.int64)
        self.pc = np.zeros((64, 3), np.int64)
        self.ar_s = self.ar_e = np.empty(0, np.int64)
        self._grow_arena(max(1, int(arena)))
        self._last = None

    def _grow_arena(self, cap):
        used = int(self.state[_ARENA])
        ar_s, ar_e = np.empty(cap, np.int64), np.empty(cap, np.int64)
        ar_s[:used] = self.ar_s[:used]
        ar_e[:used] = self.ar_e[:used]
        self.ar_s, self.ar_e = ar_s, ar_e
        self.b_s = self.b_e = self.t_s = self.t_e = None          # scratch: freed before reallocating
        self.b_s, self.b_e, self.t_s, self.t_e = (np.empty(cap, np.int64) for _ in range(4))

    @property
    def n_clamped(self):
        return int(self.state[_CLAMPED])

    @property
    def n_overrun(self):
        return int(self.state[_OVERRUN])

    def feed(self, rec, final=False):
        """Push the records ``rec`` (REC_DTYPE, continuing the sorted order); returns the
        events closed meanwhile (RES_DTYPE, in closing order)."""
        n = len(rec)
        if n and self._last is not None:
            a, b = self._last, rec[0]
            if (int(b["s"]), -int(b["e"]), int(b["idx"])) <= (int(a["s"]), -int(a["e"]), int(a["idx"])):
                raise ValueError("TreeStream.feed: records are not in (start, -end, idx) order")
        if n > 1:
            s, e, i = rec["s"], rec["e"], rec["idx"]
            bad = (s[1:] < s[:-1]) | ((s[1:] == s[:-1]) & ((e[1:] > e[:-1]) | ((e[1:] == e[:-1]) & (i[1:] <= i[:-1]))))
            if bad.any():
                raise ValueError("TreeStream.feed: records are not in (start, -end, idx) order")
        if n and bool(np.any(rec["e"] < rec["s"])):
            raise ValueError("TreeStream.feed: end < start")
        if n and bool(np.any((rec["own_cnt"] < 0) | ((rec["own_cnt"] > 0) & (
                (rec["own_off"] < 0) | (rec["own_off"] + rec["own_cnt"] > len(self.own_rows)))))):
            raise ValueError("TreeStream.feed: own_off/own_cnt point outside own_rows")
        if n:
            self._last = rec[-1].copy()
        top = int(self.state[_TOPS])
        need = top + n + 1
        if len(self.stk) < need:
            self.stk = _grow(self.stk, max(need, 2 * len(self.stk)))
        need = int(self.state[_NPIECES]) + n + 1
        if len(self.pc) < need:
            self.pc = _grow(self.pc, max(need, 2 * len(self.pc)))
        res = np.empty((top + n + 1, 6), np.int64)
        self.state[_NRES] = 0
        cols = [np.ascontiguousarray(rec[f]) for f in ("s", "e", "idx", "own_off", "name", "comm", "own_cnt",
                                                        "flags")]
        g = self.gpu
        k = 0
        runs = np.empty(len(self.pc) + 2, np.int64)
        while True:
            k = _feed(*cols, k, self.clamp, final, self.own_rows, self.g_start, self.g_end, g["t_launch"],
                      g["launch_op"], g["launching"], g["annot"], g["top"], g["dim"], g["comm_row"],
                      self.stk, self.state, self.ar_s, self.ar_e, self.pc, self.b_s, self.b_e, self.t_s,
                      self.t_e, runs, res)
            if k >= n:
                break
            self._grow_arena(max(int(self.state[_ARENA]) + int(rec["own_cnt"][k]), 2 * len(self.ar_s)))
        out = np.empty(int(self.state[_NRES]), RES_DTYPE)
        for j, f in enumerate(RES_DTYPE.names):
            out[f] = res[:len(out), j]
        return out

    def finish(self):
        """Close every open event; returns them (RES_DTYPE)."""
        return self.feed(np.zeros(0, REC_DTYPE), final=True)


# -- strings ---------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _gather_strings(blob, offs, idx, out_off, out):
    n = idx.shape[0]
    pos = 0
    for i in range(n):
        j = idx[i]
        out_off[i] = pos
        if j >= 0:
            a = offs[j]
            b = offs[j + 1]
            for x in range(a, b):
                out[pos] = blob[x]
                pos += 1
    out_off[n] = pos


def gather_strings(blob, offs, idx):
    """Arrow string column buffers for ``strings[idx]`` (``-1`` -> ""), the strings being
    ``blob[offs[j]:offs[j + 1]]`` (UTF-8).  Returns ``(offsets int32[n + 1], data uint8)``.
    Raises ValueError when an index is out of range or the data passes 2**31 - 1 bytes."""
    blob = np.ascontiguousarray(blob, np.uint8)
    offs = np.ascontiguousarray(offs, np.int64)
    idx = np.ascontiguousarray(idx, np.int64)
    k = len(offs) - 1
    if len(idx) and (int(idx.min()) < -1 or int(idx.max()) >= k):
        raise ValueError(f"gather_strings: an index is not -1 or in [0, {k})")
    lens = np.diff(offs)
    total = int(np.where(idx >= 0, lens[np.maximum(idx, 0)] if k else 0, 0).sum())
    if total >= 2 ** 31:
        raise ValueError("gather_strings: more than 2**31 - 1 bytes in one column chunk")
    out_off = np.empty(len(idx) + 1, np.int64)
    out = np.empty(total, np.uint8)
    _gather_strings(blob, offs, idx, out_off, out)
    return out_off.astype(np.int32), out
