"""Numba kernels for CPU call trees and GPU-time attribution.

Three steps turn the flat event arrays of a (possibly merged, multi-rank) trace
into per-operator GPU figures:

1. ``build_call_tree`` nests the complete (``ph: X``) CPU events of every
   track (one int64 key per (rank, pid, tid)) into a forest: ``parent``,
   ``depth`` and a topological ``order``.
2. ``link_by_correlation`` finds, for every GPU event, the launch event
   (runtime call) with the same (rank, correlation id).  The rank is part of the
   key: every rank numbers its correlation ids from the same range, so in a
   merged trace the id alone links a kernel to launches of *all* ranks.
3. ``propagate`` adds every GPU event to the launch that owns it and to all
   of its ancestors, in one bottom-up pass: launch ``count``, summed kernel time
   ``total`` and ``busy`` (length of the union of the kernel intervals).

Events are identified by their index in the input arrays; times are int64
nanoseconds.  Each public function is a thin Python wrapper (validation,
dtype conversion, sorting with numpy) around an ``@njit`` core.  Plain-Python
twins with the same signatures and different algorithms live in
``streamtrace.kernels.reference``; ``tests/test_tree.py`` checks that both
agree on random forests.

Naive attribution (for every kernel, walk up its launcher's ancestors and append
the kernel to a list per node) costs O(M·d) appends and, with correlation ids
that collide across K merged ranks, O(K²·M·d): every kernel is linked to the K
launches sharing its id.  Here linking is keyed by rank, and ``count`` /
``total`` take one pass that visits each CPU event once: O(N + M).  ``busy``
merges interval unions bottom-up; its bound is in ``propagate``.
"""
from __future__ import annotations

import operator

import numpy as np
from numba import njit

from .intervals import as_int64
from .runs import merge_runs, sort_group, union_into
from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = [
    "build_call_tree",
    "link_by_correlation",
    "propagate",
]

_I64_MAX = np.iinfo(np.int64).max


# --------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------

def _same_length(arrays, names, what):
    n = arrays[0].shape[0]
    for a, name in zip(arrays[1:], names[1:]):
        if a.shape[0] != n:
            raise ValueError(
                f"{what}: {names[0]} and {name} lengths differ ({n} != {a.shape[0]})"
            )
    return n


def _check_times(start, end, what):
    if start.shape[0] and bool(np.any(end < start)):
        i = int(np.argmax(end < start))
        raise ValueError(
            f"{what}: end < start at index {i} ({int(end[i])} < {int(start[i])})"
        )


def _check_index(idx, n, what):
    """``idx`` values must lie in [-1, n)."""
    if idx.shape[0] and (int(idx.min()) < -1 or int(idx.max()) >= n):
        bad = (idx < -1) | (idx >= n)
        i = int(np.argmax(bad))
        raise ValueError(f"{what}[{i}] = {int(idx[i])} is not -1 or an event index in [0, {n})")


def _check_forest(parent, order):
    """Validate ``parent`` (values in [-1, N)) and ``order`` (a permutation of
    range(N) listing every parent before its children).  Returns the inverse
    permutation of ``order`` (position of every event).  O(N)."""
    n = parent.shape[0]
    if order.shape[0] != n:
        raise ValueError(f"propagate: parent and order lengths differ ({n} != {order.shape[0]})")
    _check_index(parent, n, "propagate: parent")
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if int(order.min()) < 0 or int(order.max()) >= n:
        raise ValueError("propagate: order is not a permutation of range(N)")
    pos = np.full(n, -1, dtype=np.int64)
    pos[order] = np.arange(n, dtype=np.int64)
    if bool(np.any(pos < 0)):
        raise ValueError("propagate: order is not a permutation of range(N) (repeated index)")
    has = parent >= 0
    bad = has & (pos[np.where(has, parent, 0)] >= pos)
    if bool(np.any(bad)):
        i = int(np.argmax(bad))
        raise ValueError(
            f"propagate: order lists event {i} before (or as) its parent {int(parent[i])}; "
            "order must be topological (parents first) and parent acyclic"
        )
    return pos


# --------------------------------------------------------------------------
# njit cores (inputs already validated)
# --------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _call_tree_sorted(track, start, end, clamp):
    """Stack pass over events already sorted by (track, start asc, end desc,
    index); works on sorted positions only, so every access is sequential or
    near the top of the stack.

    Returns the sorted position of each event's parent (-1 for roots) and the
    depths.  The stack holds open events with their effective (clamped) ends,
    which never increase from bottom to top.  O(N): every event is pushed once
    and popped at most once."""
    n = track.shape[0]
    ppos = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int32)
    stack = np.empty(n, dtype=np.int64)
    stack_end = np.empty(n, dtype=np.int64)
    top = 0
    n_clamped = 0
    n_overrun = 0
    limit = np.int64(_I64_MAX) - clamp     # pe > limit: pe + clamp would overflow
    for k in range(n):
        if k == 0 or track[k] != track[k - 1]:
            top = 0
        s = start[k]
        e = end[k]
        while top > 0 and stack_end[top - 1] <= s:
            top -= 1
        if top > 0 and e > stack_end[top - 1]:
            pe = stack_end[top - 1]
            if pe > limit or e < pe + clamp:
                e = pe                       # small overrun: clamp to the parent
                n_clamped += 1
            else:
                n_overrun += 1               # close the events it overruns
                while top > 0 and stack_end[top - 1] < e:
                    top -= 1
        if top > 0:
            p = stack[top - 1]
            ppos[k] = p
            depth[k] = depth[p] + 1
        stack[top] = k
        stack_end[top] = e
        top += 1
    return ppos, depth, n_clamped, n_overrun


@njit(cache=True, nogil=True)
def _merge_join(l_key, l_corr, g_key, g_corr):
    """Merge join of launches and GPU events, both given sorted by (key, corr).

    Launches with equal (key, corr) are adjacent and, the sort being stable,
    in index order: the first of a group has the lowest index.  Returns, for
    every sorted GPU position, the sorted launch position it matches (-1 for
    none), and the number of duplicate launches.  O(N + M), sequential."""
    n = l_key.shape[0]
    m = g_key.shape[0]
    match = np.full(m, -1, dtype=np.int64)
    dup = 0
    for a in range(1, n):
        if l_corr[a] >= 0 and l_corr[a] == l_corr[a - 1] and l_key[a] == l_key[a - 1]:
            dup += 1
    a = 0
    for b in range(m):
        gc = g_corr[b]
        if gc < 0:
            continue
        gk = g_key[b]
        while a < n and (l_key[a] < gk or (l_key[a] == gk and l_corr[a] < gc)):
            a += 1
        if a < n and l_key[a] == gk and l_corr[a] == gc:
            match[b] = a
    return match, dup


@njit(cache=True, nogil=True)
def _propagate(parent, order, inv, owner, gs, ge):
    """count / total / busy; ``inv`` is the inverse permutation of ``order``.

    Work happens on positions (in ``order``, then in preorder) rather than on
    event ids, so that parents, children and subtrees are near each other in
    memory whatever the layout of the input arrays."""
    n = parent.shape[0]
    m = owner.shape[0]
    # order space: position t holds event order[t]; its parent is at pp[t] < t
    pp = np.empty(n, dtype=np.int64)
    for t in range(n):
        p = parent[order[t]]
        pp[t] = inv[p] if p >= 0 else -1
    size = np.ones(n, dtype=np.int64)
    for t in range(n - 1, -1, -1):
        if pp[t] >= 0:
            size[pp[t]] += size[t]
    # preorder position of every order position: subtrees become blocks
    pre = np.empty(n, dtype=np.int64)
    nxt = np.empty(n, dtype=np.int64)
    cursor = 0
    for t in range(n):
        p = pp[t]
        if p >= 0:
            pre[t] = nxt[p]
            nxt[p] += size[t]
        else:
            pre[t] = cursor
            cursor += size[t]
        nxt[t] = pre[t] + 1
    psize = np.empty(n, dtype=np.int64)
    ppar = np.empty(n, dtype=np.int64)
    for t in range(n):
        q = pre[t]
        psize[q] = size[t]
        ppar[q] = pre[pp[t]] if pp[t] >= 0 else -1
    # GPU events by the preorder position of their owner
    own = np.zeros(n, dtype=np.int64)
    total = np.zeros(n, dtype=np.int64)
    gq = np.empty(m, dtype=np.int64)
    for j in range(m):
        o = owner[j]
        if o >= 0:
            q = pre[inv[o]]
            gq[j] = q
            own[q] += 1
            total[q] += ge[j] - gs[j]
        else:
            gq[j] = -1
    # count and total: one bottom-up pass, each event once
    count = own.copy()
    for q in range(n - 1, -1, -1):
        p = ppar[q]
        if p >= 0:
            count[p] += count[q]
            total[p] += total[q]
    # lay GPU intervals out in preorder of their owner (counting sort), then
    # sort each owner's group by start: v's subtree owns [off[q], off[q] + count[q])
    off = np.empty(n, dtype=np.int64)
    acc = 0
    for q in range(n):
        off[q] = acc
        acc += own[q]
    a_s = np.empty(acc, dtype=np.int64)
    a_e = np.empty(acc, dtype=np.int64)
    fill = off.copy()
    for j in range(m):
        q = gq[j]
        if q >= 0:
            a_s[fill[q]] = gs[j]
            a_e[fill[q]] = ge[j]
            fill[q] += 1
    for q in range(n):
        sort_group(a_s, a_e, off[q], off[q] + own[q])
    # canonical unions bottom-up (reverse preorder); the union of q's subtree
    # is kept at a[ustart[q]:ustart[q] + ulen[q]], inside q's block
    ustart = off.copy()
    ulen = np.zeros(n, dtype=np.int64)
    busy = np.zeros(n, dtype=np.int64)
    b_s = np.empty(acc, dtype=np.int64)
    b_e = np.empty(acc, dtype=np.int64)
    t_s = np.empty(acc, dtype=np.int64)
    t_e = np.empty(acc, dtype=np.int64)
    runs = np.empty(n + 2, dtype=np.int64)
    for q in range(n - 1, -1, -1):
        if count[q] == 0:
            continue
        # pieces: q's own events (one sorted run), then each child's union
        pieces = 0
        only = -1
        if own[q] > 0:
            pieces = 1
        end_q = q + psize[q]
        c = q + 1
        while c < end_q:
            if ulen[c] > 0:
                pieces += 1
                only = c
            c += psize[c]
        if pieces == 0:
            continue
        if pieces == 1 and own[q] == 0:      # a chain: share the child's list
            ustart[q] = ustart[only]
            ulen[q] = ulen[only]
            busy[q] = busy[only]
            continue
        if pieces == 1:                       # only own events: union in place
            w, length = union_into(a_s, a_e, off[q], off[q] + own[q], a_s, a_e, off[q])
            ulen[q] = w
            busy[q] = length
            continue
        # gather the runs into b, coalescing runs that are already in order
        r = np.int64(0)                       # typed: literal 0s would compile merge_runs /
        z = np.int64(0)                       # union_into once more for Literal[int](0)
        runs[0] = 0
        if own[q] > 0:
            for x in range(off[q], off[q] + own[q]):
                b_s[z] = a_s[x]
                b_e[z] = a_e[x]
                z += 1
            r = 1
            runs[1] = z
        c = q + 1
        while c < end_q:
            if ulen[c] > 0:
                lo = ustart[c]
                if r > 0 and a_s[lo] < b_s[z - 1]:
                    r += 1                    # out of order: a new run
                elif r == 0:
                    r = 1
                for x in range(lo, lo + ulen[c]):
                    b_s[z] = a_s[x]
                    b_e[z] = a_e[x]
                    z += 1
                runs[r] = z
            c += psize[c]
        if merge_runs(b_s, b_e, t_s, t_e, runs, r):
            w, length = union_into(t_s, t_e, np.int64(0), z, a_s, a_e, off[q])
        else:
            w, length = union_into(b_s, b_e, np.int64(0), z, a_s, a_e, off[q])
        ustart[q] = off[q]
        ulen[q] = w
        busy[q] = length
    # back to event ids
    count_out = np.empty(n, dtype=np.int64)
    total_out = np.empty(n, dtype=np.int64)
    busy_out = np.empty(n, dtype=np.int64)
    for t in range(n):
        v = order[t]
        q = pre[t]
        count_out[v] = count[q]
        total_out[v] = total[q]
        busy_out[v] = busy[q]
    return count_out, total_out, busy_out


# --------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------

def build_call_tree(track, start, end, clamp_ns=1000):
    """Nest the complete CPU events of every track into a call forest.

    Parameters
    ----------
    track : array_like of int, shape (N,)
        One int64 key per event; the caller encodes (rank, pid, tid) into it.
        Events of different tracks are never related.
    start, end : array_like of int, shape (N,)
        Event ``i`` covers ``[start[i], end[i])`` in int64 nanoseconds
        (complete ``ph: X`` events: CPU ops, annotations, runtime calls).
    clamp_ns : int, default 1000
        Tolerance for children that end after their parent (timestamp rounding).

    Each track's events are sorted by (start asc, end desc, index asc) and
    pushed on a stack; an event's parent is the innermost open event whose
    (effective) interval contains its start: open events ending at or before
    the start are closed first, so touching events are siblings and two
    identical non-empty events nest (lower index outside).  If the event ends
    after that parent's effective end:

    * by less than ``clamp_ns`` ns: it stays a child and its end is treated as
      the parent's end (counted in ``n_clamped``);
    * by ``clamp_ns`` or more: it is counted in ``n_overrun`` and attached to
      the innermost open ancestor that does contain it (or made a root); the
      open events it overruns are closed, so events starting later nest under
      it.  It is never dropped.

    Returns
    -------
    parent : numpy.int64 array, shape (N,)
        Index of the parent event, -1 for roots.
    depth : numpy.int32 array, shape (N,)
        0 for roots, ``depth[parent] + 1`` otherwise.
    order : numpy.int64 array, shape (N,)
        Topological order (parents before children): the per-track sort
        orders concatenated by ascending track key.  It is also a preorder:
        every subtree is contiguous.
    n_clamped, n_overrun : int

    Complexity
    ----------
    O(N log N) for the ``np.lexsort`` done here, then O(N) in the njit stack pass.

    Raises
    ------
    ValueError
        if the lengths differ, an array is not one-dimensional, ``end < start``
        somewhere, or ``clamp_ns`` is negative or above the int64 range.
    TypeError
        if the arrays do not hold integers or ``clamp_ns`` is not an integer.
    """
    k = as_int64(track, "build_call_tree: track")
    s = as_int64(start, "build_call_tree: start")
    e = as_int64(end, "build_call_tree: end")
    _same_length((k, s, e), ("track", "start", "end"), "build_call_tree")
    _check_times(s, e, "build_call_tree")
    clamp = operator.index(clamp_ns)
    if not 0 <= clamp <= _I64_MAX:
        raise ValueError(f"build_call_tree: clamp_ns must be in [0, 2**63), got {clamp}")
    # ~e is -e - 1: end descending without overflow.  lexsort is stable, so
    # equal (track, start, end) keep ascending index.
    order = np.lexsort((~e, s, k)).astype(np.int64, copy=False)
    ppos, depth_sorted, n_clamped, n_overrun = _call_tree_sorted(
        k[order], s[order], e[order], np.int64(clamp))
    parent = np.full(k.shape[0], -1, dtype=np.int64)
    has = ppos >= 0
    parent[order[has]] = order[ppos[has]]
    depth = np.empty(k.shape[0], dtype=np.int32)
    depth[order] = depth_sorted
    return parent, depth, order, int(n_clamped), int(n_overrun)


def link_by_correlation(launch_key, launch_corr, gpu_key, gpu_corr):
    """Link every GPU event to the launch event with the same (rank, correlation).

    Parameters
    ----------
    launch_key, launch_corr : array_like of int, shape (N,)
        Rank (or any int64 key that separates merged traces) and correlation id
        of each launch event (runtime call such as ``cudaLaunchKernel`` or
        ``cudaGraphLaunch``).  A negative correlation (-1) means none.
    gpu_key, gpu_corr : array_like of int, shape (M,)
        The same for each GPU event (kernel, memcpy, memset).

    Returns
    -------
    launcher : numpy.int64 array, shape (M,)
        Index of the launch event with equal key and correlation, -1 if none
        (or if the GPU event's correlation is negative).  One launch may own
        many GPU events (CUDA graphs).  Keys never cross: a GPU event of rank 1
        is never linked to a launch of rank 0 with the same correlation id.
    n_duplicate_launch_keys : int
        Number of launch events ignored because a lower-indexed launch event
        has the same (key, correlation) (should be 0; the lowest index wins).

    Complexity
    ----------
    O(N log N + M log M) for the two ``np.lexsort`` calls, then an O(N + M)
    merge join in the njit core.

    Raises
    ------
    ValueError
        if the lengths of a pair differ or an array is not one-dimensional.
    TypeError
        if the arrays do not hold integers.
    """
    lk = as_int64(launch_key, "link_by_correlation: launch_key")
    lc = as_int64(launch_corr, "link_by_correlation: launch_corr")
    gk = as_int64(gpu_key, "link_by_correlation: gpu_key")
    gc = as_int64(gpu_corr, "link_by_correlation: gpu_corr")
    _same_length((lk, lc), ("launch_key", "launch_corr"), "link_by_correlation")
    _same_length((gk, gc), ("gpu_key", "gpu_corr"), "link_by_correlation")
    l_order = np.lexsort((lc, lk))
    g_order = np.lexsort((gc, gk))
    match, dup = _merge_join(lk[l_order], lc[l_order], gk[g_order], gc[g_order])
    launcher = np.full(gk.shape[0], -1, dtype=np.int64)
    ok = match >= 0
    launcher[g_order[ok]] = l_order[match[ok]]
    return launcher, int(dup)


def propagate(parent, order, gpu_owner, gpu_start, gpu_end):
    """GPU work launched in every CPU event's subtree.

    Parameters
    ----------
    parent, order : array_like of int, shape (N,)
        A forest over N CPU events, e.g. from ``build_call_tree``:
        ``parent[i]`` is -1 or an index in [0, N); ``order`` is a permutation
        of range(N) listing every parent before its children (any topological
        order; it need not be a preorder).  Trees of many ranks may be mixed.
    gpu_owner : array_like of int, shape (M,)
        Index of the CPU event (the launch) owning each GPU event, -1 for none
        (e.g. ``link_by_correlation``'s ``launcher``).
    gpu_start, gpu_end : array_like of int, shape (M,)
        GPU event intervals ``[gpu_start[j], gpu_end[j])`` in int64 ns.

    Returns
    -------
    count : numpy.int64 array, shape (N,)
        Number of GPU events owned by the event or one of its descendants.
    total : numpy.int64 array, shape (N,)
        Sum of their durations (ns).
    busy : numpy.int64 array, shape (N,)
        Length (ns) of the union of their intervals: overlapping kernels
        (several streams, graph replays) count once; ``busy <= total``.

    Complexity
    ----------
    ``count`` and ``total``: O(N + M), one pass over ``order`` reversed that
    visits each event once (after O(N + M) relabelling of events by position,
    so that the pass touches memory near its last access).

    ``busy``: O(N + M) to lay the GPU events out by the preorder position of
    their owner (every subtree is then one contiguous block), plus sorting each
    launch's own GPU events by start (insertion sort up to 16, else argsort:
    O(M) for ordinary launches, O(M log M) at worst), then canonical interval
    unions built bottom-up.  A node whose GPU work comes from a single piece
    (one child subtree and no launches of its own: call chains) shares that
    child's union in O(1).  A node with r_v >= 2 pieces (its own launches, and
    each child subtree with GPU work) merges them as sorted runs in
    O(S_v log r_v), S_v being the total size of the pieces' unions (at most
    the number of GPU events in its subtree); runs already in time order are
    concatenated for free.  Every GPU event is thus copied once per merging
    ancestor: O(M · b · log M) in total at worst, with b the largest number of
    merging nodes on a root-to-leaf path (b <= tree depth d), and O(M · b)
    when the pieces of each node start in launch order (one stream).  Extra
    memory: O(N + M) int64.

    Sums are int64: they overflow only past 2**63 - 1 ns.

    Raises
    ------
    ValueError
        if lengths differ, an index is out of range, ``order`` is not a
        permutation of range(N) that lists parents before children (this also
        rejects cycles), or ``gpu_end < gpu_start`` somewhere.
    TypeError
        if the arrays do not hold integers.
    """
    p = as_int64(parent, "propagate: parent")
    o = as_int64(order, "propagate: order")
    w = as_int64(gpu_owner, "propagate: gpu_owner")
    gs = as_int64(gpu_start, "propagate: gpu_start")
    ge = as_int64(gpu_end, "propagate: gpu_end")
    inv = _check_forest(p, o)
    _same_length((w, gs, ge), ("gpu_owner", "gpu_start", "gpu_end"), "propagate")
    _check_index(w, p.shape[0], "propagate: gpu_owner")
    _check_times(gs, ge, "propagate: gpu")
    return _propagate(p, o, inv, w, gs, ge)
