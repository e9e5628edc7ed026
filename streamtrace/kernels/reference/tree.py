"""Plain-Python twins of ``streamtrace.kernels.tree`` (call trees, correlation
linking, GPU-time propagation) and ``streamtrace.kernels.treestream`` (one track in
time-ordered chunks; strings for Arrow).  Each section below says how its algorithm
differs from the kernel's.
"""
from __future__ import annotations

import operator as _operator

import numpy as np

from ..treestream import RES_DTYPE
from .intervals import int_list, union_length

_I64_MAX = 2**63 - 1

__all__ = ["build_call_tree_ref", "link_by_correlation_ref", "propagate_ref", "tree_stream_ref",
           "gather_strings_ref"]


# --------------------------------------------------------------------------
# call trees, correlation linking, GPU-time propagation
# (twins of streamtrace.kernels.tree)
# --------------------------------------------------------------------------
#
# * build_call_tree: no stack.  Each track is sorted with sorted(); then, for
#   every event, all earlier events of the track are scanned backwards and the
#   innermost *open* one is picked directly from its definition: an earlier
#   event q is open at event c when its effective end lies after c's start and
#   no event between q and c has a later effective end (such an event either
#   ran past q's end, or overran q and closed it).  O(N^2).
# * link_by_correlation: a dict from (key, correlation) to the lowest index.
# * propagate: every GPU event walks up its owner's ancestor chain (a set of
#   visited nodes guards against cycles) and is appended to a list per node;
#   count / total / busy are read off the lists, busy with the union_length
#   twin above.  O(M·d) appends.




def _tree_ints(x, what):
    return int_list(x, what)


def _same_len(lists, names, what):
    n = len(lists[0])
    for lst, name in zip(lists[1:], names[1:]):
        if len(lst) != n:
            raise ValueError(f"{what}: {names[0]} and {name} lengths differ ({n} != {len(lst)})")
    return n


def build_call_tree_ref(track, start, end, clamp_ns=1000):
    """Twin of ``streamtrace.kernels.tree.build_call_tree`` (backward scan)."""
    k = _tree_ints(track, "build_call_tree: track")
    s = _tree_ints(start, "build_call_tree: start")
    e = _tree_ints(end, "build_call_tree: end")
    n = _same_len((k, s, e), ("track", "start", "end"), "build_call_tree")
    for i in range(n):
        if e[i] < s[i]:
            raise ValueError(f"build_call_tree: end < start at index {i} ({e[i]} < {s[i]})")
    clamp = _operator.index(clamp_ns)    # TypeError for non-integers
    if not 0 <= clamp <= _I64_MAX:
        raise ValueError(f"build_call_tree: clamp_ns must be in [0, 2**63), got {clamp}")

    parent = [-1] * n
    depth = [0] * n
    order = []
    n_clamped = 0
    n_overrun = 0
    by_track = {}
    for i in range(n):
        by_track.setdefault(k[i], []).append(i)
    for key in sorted(by_track):
        seq = sorted(by_track[key], key=lambda i: (s[i], -e[i], i))
        order.extend(seq)
        eff = []                       # effective ends, by position in seq
        for pos, c in enumerate(seq):
            # open earlier events, innermost first
            open_ = []
            later_max = None           # max effective end strictly between q and c
            for q in range(pos - 1, -1, -1):
                if eff[q] > s[c] and (later_max is None or later_max <= eff[q]):
                    open_.append(q)
                later_max = eff[q] if later_max is None else max(later_max, eff[q])
            end_c = e[c]
            par = None
            if open_:
                inner = open_[0]
                if end_c <= eff[inner]:
                    par = inner
                elif end_c - eff[inner] < clamp:
                    par = inner
                    end_c = eff[inner]
                    n_clamped += 1
                else:
                    n_overrun += 1
                    par = next((q for q in open_ if eff[q] >= end_c), None)
            eff.append(end_c)
            if par is not None:
                parent[c] = seq[par]
                depth[c] = depth[seq[par]] + 1
    return (np.array(parent, dtype=np.int64), np.array(depth, dtype=np.int32),
            np.array(order, dtype=np.int64), n_clamped, n_overrun)


def link_by_correlation_ref(launch_key, launch_corr, gpu_key, gpu_corr):
    """Twin of ``streamtrace.kernels.tree.link_by_correlation`` (a dict)."""
    lk = _tree_ints(launch_key, "link_by_correlation: launch_key")
    lc = _tree_ints(launch_corr, "link_by_correlation: launch_corr")
    gk = _tree_ints(gpu_key, "link_by_correlation: gpu_key")
    gc = _tree_ints(gpu_corr, "link_by_correlation: gpu_corr")
    _same_len((lk, lc), ("launch_key", "launch_corr"), "link_by_correlation")
    _same_len((gk, gc), ("gpu_key", "gpu_corr"), "link_by_correlation")
    first = {}
    dup = 0
    for i, key in enumerate(zip(lk, lc)):
        if key[1] < 0:
            continue
        if key in first:
            dup += 1
        else:
            first[key] = i
    launcher = [first.get(key, -1) if key[1] >= 0 else -1 for key in zip(gk, gc)]
    return np.array(launcher, dtype=np.int64), dup


def propagate_ref(parent, order, gpu_owner, gpu_start, gpu_end):
    """Twin of ``streamtrace.kernels.tree.propagate`` (ancestor walks)."""
    par = _tree_ints(parent, "propagate: parent")
    odr = _tree_ints(order, "propagate: order")
    own = _tree_ints(gpu_owner, "propagate: gpu_owner")
    gs = _tree_ints(gpu_start, "propagate: gpu_start")
    ge = _tree_ints(gpu_end, "propagate: gpu_end")
    n = _same_len((par, odr), ("parent", "order"), "propagate")
    for i, p in enumerate(par):
        if not -1 <= p < n:
            raise ValueError(f"propagate: parent[{i}] = {p} is not -1 or an event index")
    if sorted(odr) != list(range(n)):
        raise ValueError("propagate: order is not a permutation of range(N)")
    seen = set()
    for v in odr:
        if par[v] >= 0 and par[v] not in seen:
            raise ValueError(f"propagate: order lists event {v} before its parent {par[v]}")
        seen.add(v)
    _same_len((own, gs, ge), ("gpu_owner", "gpu_start", "gpu_end"), "propagate")
    for j in range(len(own)):
        if not -1 <= own[j] < n:
            raise ValueError(f"propagate: gpu_owner[{j}] = {own[j]} is not -1 or an event index")
        if ge[j] < gs[j]:
            raise ValueError(f"propagate: gpu: end < start at index {j} ({ge[j]} < {gs[j]})")

    lists = [[] for _ in range(n)]
    for j, v in enumerate(own):
        visited = set()
        while v != -1:
            if v in visited:
                raise ValueError(f"propagate: parent has a cycle through event {v}")
            visited.add(v)
            lists[v].append((gs[j], ge[j]))
            v = par[v]
    count = [len(lst) for lst in lists]
    total = [sum(b - a for a, b in lst) for lst in lists]
    busy = [union_length([a for a, _ in lst], [b for _, b in lst]) if lst else 0
            for lst in lists]
    return (np.array(count, dtype=np.int64), np.array(total, dtype=np.int64),
            np.array(busy, dtype=np.int64))



# --------------------------------------------------------------------------
# one track in time-ordered chunks; strings for Arrow
# (twins of streamtrace.kernels.treestream)
# --------------------------------------------------------------------------
#
# * tree_stream_ref: the whole track at once, no stack carried between chunks:
#   the call tree from build_call_tree_ref above (backward scan), count / total /
#   busy from propagate_ref (ancestor walks), and each launch's context by walking
#   up its ancestor chain.
# * gather_strings_ref: bytes.join over Python strings.




def tree_stream_ref(rec, own_rows, g_start, g_end, gpu, clamp_ns=1000):
    """Twin of ``streamtrace.kernels.treestream.TreeStream`` fed every record of
    ``rec`` (REC_DTYPE, any order) and finished: returns ``(results, n_clamped,
    n_overrun)``, ``results`` a RES_DTYPE array sorted by ``idx``; fills ``gpu`` the same way."""
    rec = rec[np.argsort(rec["idx"], kind="stable")]       # ties in (start, end) go by idx
    n = len(rec)
    s = [int(v) for v in rec["s"]]
    e = [int(v) for v in rec["e"]]
    parent, depth, _, n_clamped, n_overrun = build_call_tree_ref([0] * n, s, e, clamp_ns)
    owner = [-1] * len(g_start)
    for i in range(n):
        off, cnt = int(rec["own_off"][i]), int(rec["own_cnt"][i])
        for g in own_rows[off:off + cnt]:
            owner[int(g)] = i
    count, total, busy = propagate_ref(parent, list(range(n)) if n == 0 else _topo(parent), owner,
                                       g_start, g_end)
    names = [int(v) for v in rec["name"]]
    flags = [int(v) for v in rec["flags"]]
    comm = [int(v) for v in rec["comm"]]

    def chain(i):
        out = []
        while i >= 0:
            out.append(i)
            i = int(parent[i])
        return out
    for g, i in enumerate(owner):
        if i < 0:
            continue
        up = chain(i)
        gpu["t_launch"][g] = s[i]
        gpu["launch_op"][g] = names[i]
        gpu["launching"][g] = names[parent[i]] if parent[i] >= 0 else -1
        ann = [j for j in up if flags[j] & 1]
        gpu["annot"][g] = names[ann[0]] if ann else -1
        gpu["top"][g] = names[ann[-1]] if ann else -1
        dim = [j for j in up if flags[j] & 2]
        gpu["dim"][g] = names[dim[0]] if dim else -1
        if gpu["comm_row"][g] < 0:
            cm = [j for j in up if comm[j] >= 0]
            gpu["comm_row"][g] = comm[cm[0]] if cm else -1
    out = np.zeros(n, RES_DTYPE)
    out["idx"] = rec["idx"]
    out["parent"] = [int(rec["idx"][p]) if p >= 0 else -1 for p in parent]
    out["depth"] = depth
    out["count"], out["total"], out["busy"] = count, total, busy
    return out, n_clamped, n_overrun


def _topo(parent):
    """Parents before children (by depth)."""
    depth = []
    for i in range(len(parent)):
        d, j = 0, int(parent[i])
        while j >= 0:
            d, j = d + 1, int(parent[j])
        depth.append(d)
    return sorted(range(len(parent)), key=lambda i: depth[i])


def gather_strings_ref(blob, offs, idx):
    """Twin of ``streamtrace.kernels.treestream.gather_strings`` (bytes.join)."""
    k = len(offs) - 1
    raw = bytes(np.asarray(blob, np.uint8))
    strings = [raw[int(offs[j]):int(offs[j + 1])] for j in range(k)]
    parts, out_off, pos = [], [0], 0
    for j in (int(v) for v in idx):
        if not -1 <= j < k:
            raise ValueError(f"gather_strings: an index is not -1 or in [0, {k})")
        b = strings[j] if j >= 0 else b""
        parts.append(b)
        pos += len(b)
        out_off.append(pos)
    if pos >= 2 ** 31:
        raise ValueError("gather_strings: more than 2**31 - 1 bytes in one column chunk")
    return np.asarray(out_off, np.int32), np.frombuffer(b"".join(parts), np.uint8).copy()
