"""The vocabulary of the critical path's graphs (``streamtrace.aggregate.critical_local``, one rank's
step; ``streamtrace.aggregate.critical_path``, the job's): segment categories, anchor kinds, and the
growing node / edge arrays of one step.

Nodes are instants (int64 ns on aggregate's aligned axis); an edge ``u -> v`` says "v cannot happen
before u", weighted by the time it stands for (int64 ns), with a ``Category``, the lane it lies
on (``thread <tid>``, ``device <d> stream <s>``), the name of the event it stands for and that
event's id in its rank's trace (``ref``).  Lanes and names are int32 codes into the part's
``Texts`` (one table for all of a part's steps), not object arrays of str: a step graph's tens of
thousands of edges then pickle, concatenate and index as plain integers, and a look-up by name
(a change's pattern, a median factor) runs once per distinct text.
"""
from __future__ import annotations

import math
from enum import IntEnum

import numpy as np

from ..kernels.critical import back_within_instant
from ..kernels.critical import time_positions as _time_positions


class Category(IntEnum):
    """What an edge of the path stands for (``critical_path.parquet``'s ``category``, by name)."""
    cpu_op = 0           # CPU time inside an op (the innermost open op names it)
    launch_delay = 1     # runtime call start -> the GPU event it launched
    compute_kernel = 2   # a kernel's duration
    comm_transfer = 3    # a collective's transfer after its last member arrived
    memcpy = 4           # a memory copy / set's duration
    kernel_gap = 5       # a GPU event waiting for the previous one on its stream or another stream
    sync = 6             # a CPU call waking up after the GPU work (or the thread) it waited for
    host_gap = 7         # CPU time outside any profiled op (data loading, Python)
    wait = 8             # a zero-weight edge: time something waited for another edge; never on a consistent path
    queued = 9           # the step's first GPU event waited behind GPU work launched before the step
    thread_wait = 10     # a thread handing work to another thread (autograd's backward, a worker) and back


CATEGORIES = tuple(c.name for c in Category)
"""Category names by code (``CATEGORIES[code]``)."""


class Anchor(IntEnum):
    """Kinds of the nodes a rank's step graph is reduced to (the job level joins them)."""
    step_start = 0       # the rank's step start: a source
    arrival = 1          # a communication event's start: a sink (it waits for the collective's last member)
    end = 2              # a communication event's end: a source
    step_end = 3         # the rank's step end: a sink


BARRIER = -1
"""The kind of a job-level node that is a collective's barrier (not an ``Anchor``)."""

_TIES = np.asarray([3, 1, 2, 0, 4], np.int8)     # by kind + 1: barrier, step start, arrival, end, step end


POSITION_CHUNK = 1 << 20
"""Nodes ``positions`` numbers at a time."""


def positions(order) -> np.ndarray:
    """The inverse of the permutation ``order`` (node ids in topological order): ``pos[order[i]] =
    i``, int32 (int64 past 2^31 - 1 nodes: half the memory the graph holds by node, 6 MB at a 4,096-rank
    step's 1.5 M nodes; ``kernels.critical`` reads int32 positions), written ``POSITION_CHUNK`` nodes
    at a time (no index array of every node: 12 MB at 1.5 M nodes)."""
    pos = np.empty(len(order), np.int32 if len(order) <= np.iinfo(np.int32).max else np.int64)
    for i in range(0, len(order), POSITION_CHUNK):
        j = order[i:i + POSITION_CHUNK]
        pos[j] = np.arange(i, i + len(j))
    return pos


def time_positions(t, cls) -> np.ndarray:
    """Each node's place in the job graphs' time order: by time ``t`` (int64[n] ns), then tie class
    ``cls`` (``tie_classes``, int8[n]), then node id; ``positions(np.lexsort((cls, t)))``.  int32 while
    the ids fit (int64 past 2^31 - 1 nodes).  A radix sort to int32 positions
    (``kernels.critical.time_positions``: 8 bytes a node held, where the lexsort's int64 order and the
    positions made from it held 24 bytes and its sort's own buffers; 1.5 M nodes at 4,096 synthetic ranks:
    ~+12 MB, was +26), the lexsort where a key would not fit (a span of 2^60 ns or more, a class outside
    ``[0, 8)``, past 2^31 - 1 nodes)."""
    t, cls = np.asarray(t, np.int64), np.asarray(cls, np.int8)
    if not len(t):
        return np.zeros(0, np.int32)
    lo, hi = int(t.min()), int(t.max())
    if hi - lo < (1 << 60) and len(t) <= np.iinfo(np.int32).max and int(cls.min()) >= 0 and int(cls.max()) < 8:
        return _time_positions(np.ascontiguousarray(t), np.ascontiguousarray(cls), lo)
    return positions(np.lexsort((cls, t)))


def fits_in(dtype, values) -> bool:
    """Whether every one of ``values`` (an integer array) can be held in an array of integer type ``dtype``."""
    info = np.iinfo(dtype)
    return not len(values) or (int(values.min()) >= info.min and int(values.max()) <= info.max)


def search(a: np.ndarray, v) -> np.ndarray:
    """``np.searchsorted(a, v)`` (``a`` a sorted integer array) with ``v`` cast to ``a``'s type where every
    value fits it: numpy searches an int32 array for int64 values by casting the whole array to int64 first
    (1.3 M int32 nodes at 4,096 synthetic ranks: a 10 MB copy a search)."""
    v = np.asarray(v)
    if v.size and v.dtype != a.dtype and a.dtype.kind in "iu" and fits_in(a.dtype, v.reshape(-1)):
        v = v.astype(a.dtype)
    return np.searchsorted(a, v)


def joined_ints(*parts) -> np.ndarray:
    """The integer arrays ``parts`` joined, as int32 when every value fits, else int64: a job graph's node
    columns and its members' ids, half the memory of int64 (1.6 M nodes at 4,096 synthetic ranks: 6 MB a
    column)."""
    if not parts:
        return np.zeros(0, np.int32)
    small = all(fits_in(np.int32, x) for x in parts)
    return np.concatenate(parts, dtype=np.int32 if small else np.int64, casting="same_kind")


def narrow(x: np.ndarray) -> np.ndarray:
    """Integer array ``x`` as int32 when every value fits, else as it is (``joined_ints``' choice, a part at a time)."""
    return x.astype(np.int32) if x.dtype != np.int32 and fits_in(np.int32, x) else x


def tie_classes(kind) -> np.ndarray:
    """The place of each job-level node of kind ``kind`` (an ``Anchor`` or ``BARRIER``, any integer
    array) among the nodes of its time in a topological order, int8: end 0 < step start 1 < arrival
    2 < barrier 3 < step end 4 (5: any other kind).  One byte a node, where a ``np.select`` over the
    kinds made five masks and an int64 array (1.5 M nodes at 4,096 synthetic ranks)."""
    k = np.asarray(kind)
    out = np.full(len(k), 5, np.int8)
    ok = (k >= BARRIER) & (k <= Anchor.step_end)
    out[ok] = _TIES[k[ok] + 1]
    return out


class Edge(IntEnum):
    """Types of the job graph's edges (the critical path's and the what-if replay's; ``etype``)."""
    local = 0            # within one rank: a stretch of its reduced step graph
    wait = 1             # a member's arrival -> the collective's barrier (it waits for the last member)
    transfer = 2         # the barrier -> a member's end (or a send -> its receive): the transfer itself


class Texts:
    """The distinct texts (lanes, event names; str, or None for a null name) of one part's step
    graphs and their codes (int32, in the order first met).  Append-only: a code keeps its text for
    every step built after it (``values`` of a later step decodes an earlier step's codes)."""

    def __init__(self):
        self._code: dict = {}
        self._values: list = []

    def __len__(self) -> int:
        return len(self._values)

    def code(self, text) -> int:
        """The code of ``text`` (added when new)."""
        c = self._code.get(text)
        if c is None:
            c = self._code[text] = len(self._values)
            self._values.append(text)
        return c

    def codes(self, texts) -> np.ndarray:
        """The codes of ``texts`` (a sequence or object array; a text a row), int32."""
        return np.fromiter((self.code(x) for x in np.asarray(texts, object).tolist()), np.int32, len(texts))

    def __getitem__(self, code: int):
        """The text of ``code``."""
        return self._values[code]

    def values(self) -> np.ndarray:
        """Every text so far by code, an object array (``values()[codes]`` decodes)."""
        return np.asarray(self._values + [None], object)[:-1]      # (the None: a 1-d array of tuples stays 1-d)


class StepGraph:
    """Growing node and edge arrays of one rank's step (node ids in creation order); ``texts``: the
    part's ``Texts`` (a new table when None)."""

    def __init__(self, texts: Texts | None = None):
        self.t, self.cls, self.e = [], [], []
        self.order = np.zeros(0, np.int64)
        self._n = 0
        self.texts = Texts() if texts is None else texts

    @property
    def size(self) -> int:
        """The number of nodes so far."""
        return self._n

    def nodes(self, t, cls=1) -> np.ndarray:
        """New nodes at times ``t`` (int64 ns); returns their ids (int64).  ``cls`` orders nodes of
        equal time (a GPU end 0, a CPU instant 1, a GPU start 2, the step end 3; then creation
        order), so that every edge runs forward."""
        t = np.asarray(t, np.int64)
        base, n = self._n, len(t)
        self._n += n
        self.t.append(t)
        self.cls.append(_column(cls, n, np.int8))
        return np.arange(base, base + n, dtype=np.int64)

    def edges(self, src, dst, w, cat, lane, name, ref=-1):
        """Append edges ``src -> dst`` (node ids) of weight ``w`` (int64 ns) and ``Category``
        ``cat``; ``lane``, ``name``: each edge's thread/stream and event, as codes of ``texts`` (an
        int array) or as text (a str, or an object array of them); ``ref``: the event's id in the
        trace (the GPU event's ``correlation`` for GPU categories, the CPU op's ``External id`` for
        CPU ones; -1 none).  Scalars repeat."""
        n = len(src)
        if n:
            self.e.append((np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(w, np.int64),
                           _column(cat, n, np.int8), self._codes(lane, n), self._codes(name, n),
                           _column(ref, n, np.int64)))

    def _codes(self, x, n: int) -> np.ndarray:
        """``x`` (codes, or text: ``edges``) as ``n`` int32 codes of ``texts``."""
        a = np.asarray(x)
        if a.dtype.kind in "iu":
            return _column(a, n, np.int32)
        if not a.ndim:
            return np.full(n, self.texts.code(x), np.int32)
        return _column(self.texts.codes(a), n, np.int32)

    def arrays(self):
        """``(t, cols)``: node times (int64[n]) and the edge columns ``[src, dst, w, cat, lane,
        name, ref, texts]`` (``lane`` / ``name`` int32 codes, ``texts`` the part's ``Texts.values()``
        now, by which they decode); sets ``order``, the nodes in topological order
        (``topological_order``)."""
        t = np.concatenate(self.t) if self.t else np.zeros(0, np.int64)
        cols = [np.concatenate([e[i] for e in self.e]) if self.e else
                np.zeros(0, np.int32 if i in (4, 5) else np.int8 if i == 3 else np.int64) for i in range(7)]
        cls = np.concatenate(self.cls) if self.cls else np.zeros(0, np.int8)
        self.order = topological_order(t, cls, cols[0], cols[1])
        return t, cols + [self.texts.values()]


TEXTS = 7
"""The place of the texts in a step graph's edge columns (``StepGraph.arrays``)."""


def edge_texts(cols) -> tuple:
    """``(lane, name)`` of a step graph's edge columns decoded: object arrays of str, a row an edge."""
    return cols[TEXTS][cols[4]], cols[TEXTS][cols[5]]


def _column(x, n: int, dtype) -> np.ndarray:
    """``x`` (an array of ``n`` values, or one value for all ``n``) as an array of ``dtype``."""
    a = np.asarray(x, dtype)
    if not a.ndim:
        return np.full(n, a, dtype)
    return a if len(a) == n else np.broadcast_to(a, n)


def int64s(x) -> np.ndarray:
    """``x`` as a C-contiguous int64 array (``x`` itself when it already is one): a kernel's argument
    of the one signature ``streamtrace.runtime.compile.UNITS`` compiles."""
    return np.ascontiguousarray(x, np.int64)


MAX_LEVELS = 64
"""How many edges deep a chain of same-instant edges is ordered (``topological_order``)."""


def topological_order(t, cls, src, dst) -> np.ndarray:
    """The nodes (times ``t`` int64 ns, classes ``cls``) in an order every edge ``src -> dst``
    (node ids, ``t[src] <= t[dst]``) follows: by time, then, among nodes of one instant, by their
    depth in the edges between them (a node after every node with an edge into it), then by class,
    then by id.  Returns the node ids in order (int64).  Edges against time, and same-instant chains
    deeper than ``MAX_LEVELS``, are left for the caller to drop."""
    ids = np.arange(len(t))
    if len(t) and int(t.max()) - int(t.min()) < 1 << 60:         # one stable sort on (t, cls)
        order = np.argsort((t - t.min()) * 4 + cls, kind="stable")
    else:
        order = np.lexsort((ids, cls, t))
    if not len(src) or not back_within_instant(int64s(order), int64s(t), int64s(src), int64s(dst)):
        return order        # none back within one instant: the order stands (one back in time: the caller drops it)
    eq = t[src] == t[dst]
    es, ed = src[eq], dst[eq]
    level = np.zeros(len(t), np.int64)
    for _ in range(MAX_LEVELS):
        new = level.copy()
        np.maximum.at(new, ed, level[es] + 1)
        if (new == level).all():
            break
        level = np.minimum(new, MAX_LEVELS)
    return np.lexsort((ids, cls, level, t))


# -- the job level's collectives, as arrays (``streamtrace.aggregate.critical_path``,
#    ``streamtrace.aggregate.whatif_job``) --------------------------------------------------------

WAIT_EDGE, TRANSFER_EDGE = int(Edge.wait), int(Edge.transfer)
"""The job graphs' edge types of a member's wait for its barrier and of its transfer."""
NO_TIME = -(2 ** 62)


def key_codes(*blocks) -> np.ndarray:
    """Dense int64 codes of the rows of ``blocks`` taken one after the other (each an int64[n_i, k]
    array, e.g. ``(part, correlation, stream)`` rows, or a sequence of its k columns): equal rows, equal
    codes, numbered in the rows' sorted order (columns in order).  Rows whose columns' spans fit 63 bits
    together are packed into one int64 each and sorted as such (8 bytes a row, where a ``lexsort`` of the
    joined rows held them twice: ~2 M keys at 4,096 synthetic ranks); others are sorted a column at a time."""
    blocks = [_key_columns(b) for b in blocks]
    n = sum(len(b[0]) for b in blocks)
    if not n:
        return np.zeros(0, np.int64)
    packed = _packed(blocks, n)
    if packed is not None:
        o = np.argsort(packed)                              # (equal keys get one code: any order of them)
        s = packed[o]
        del packed
        new = np.empty(n, bool)                             # a row unlike the one before it (in order)
        new[0] = True
        np.not_equal(s[1:], s[:-1], out=new[1:])
        del s
    else:
        keys = np.concatenate([np.column_stack(b) for b in blocks]).astype(np.int64, copy=False)
        o = np.lexsort(keys.T[::-1])
        new = np.zeros(n, bool)
        new[0] = True
        for j in range(keys.shape[1]):                      # a column at a time: the sorted rows never copied
            s = keys[o, j]
            new[1:] |= s[1:] != s[:-1]
            del s
        del keys
    code = np.cumsum(new)
    del new
    code -= 1
    out = np.empty(n, np.int64)
    out[o] = code
    return out


def _key_columns(block) -> list:
    """A ``key_codes`` block as its columns (1-d int arrays)."""
    if isinstance(block, np.ndarray):
        return [block[:, j] for j in range(block.shape[1])] if block.ndim == 2 else [block]
    return [np.asarray(c) for c in block]


def _packed(blocks, n: int) -> np.ndarray | None:
    """The rows of ``blocks`` (lists of columns) packed into one int64 each, order kept (``(c0 - min0)
    * span1 * span2 ... + (c1 - min1) * span2 ...``), or None when the spans' product passes 2**63."""
    width = {len(b) for b in blocks if len(b[0])}
    if len(width) != 1:
        return None
    lo, span = [], []
    for j in range(width.pop()):
        cols = [b[j] for b in blocks if len(b[0])]
        lo.append(min(int(c.min()) for c in cols))
        span.append(max(int(c.max()) for c in cols) - lo[-1] + 1)
    if math.prod(span) >= 1 << 63:
        return None
    out = np.empty(n, np.int64)
    i = 0
    for b in blocks:
        m = len(b[0])
        if not m:
            continue
        key = out[i:i + m]
        key[:] = b[0]
        key -= lo[0]
        for c, low, sp in zip(b[1:], lo[1:], span[1:]):
            key *= sp
            key += c            # (may wrap past 2**63 before the next line: int64 arithmetic is exact modulo
            key -= low          # 2**64, and the packed value fits)
        i += m
    return out


def last_of(codes, values, n) -> np.ndarray:
    """``{code: value}`` as a dict built in row order would hold it (the last value of a code wins),
    as an int64[n] array (-1 where no row has the code)."""
    out = np.full(n, -1, np.int64)
    if len(codes):
        row = np.full(n, -1, np.int64)                          # the last row of each code (an unbuffered
        np.maximum.at(row, codes, np.arange(len(codes)))        # max: no sort of the codes and its copies)
        has = row >= 0
        out[has] = np.asarray(values)[row[has]]
    return out


def matched_members(arrivals, ends, members, first_only: bool = True) -> tuple:
    """The collectives' members met in a job graph: ``arrivals`` / ``ends`` ``(keys, nodes)`` (keys: an
    int64[n, 3] array of ``(part, correlation, stream)`` rows or its three columns, any int type; nodes:
    int node ids), ``members`` ``(keys, instance)`` (``collectives_ranks``' matched rows).  Returns
    int64 arrays ``(arrival, end, instance)``, one row per arrival whose key has an end (its key's last
    end node, and its key's last instance, -1 when it has none: as dicts built in row order hold them), in
    the arrivals' order; ``first_only``: each key once, at its first arrival's place with its last
    arrival's node (the critical path's), else every arrival (the replay's)."""
    (ak, an), (ek, en), (mk, mi) = arrivals, ends, members
    na, ne = len(an), len(en)
    codes = key_codes(ak, ek, mk)
    nc = int(codes.max()) + 1 if len(codes) else 0
    ca, ce, cm = codes[:na], codes[na:na + ne], codes[na + ne:]
    if first_only:
        first = np.sort(np.unique(ca, return_index=True)[1]) if na else np.zeros(0, np.int64)
        a = last_of(ca, an, nc)[ca[first]]
        ca = ca[first]
    else:
        a = np.asarray(an, np.int64)
    e = last_of(ce, en, nc)[ca]
    has = e >= 0
    return a[has], e[has], last_of(cm, mi, nc)[ca[has]]


def barrier_edges(t, arrival, end, instance, first_node: int) -> dict:
    """The barriers of the matched members ``arrival`` / ``end`` (node ids, in the order met) of
    ``instance`` (-1 unmatched; any int type) in a job graph whose node times are ``t``: one barrier per
    instance at its last member's arrival, numbered from ``first_node`` in the order the instances
    are first met.  Returns arrays: ``bar_t`` (per barrier, int64 ns), ``bar_inst`` (its instance,
    int64), ``m_bar`` (int64) / ``m_arr`` / ``m_end`` / ``m_inst`` (the inputs' types; the matched members
    grouped by barrier, each group in the order met), ``lead`` (bool: a group's first member), ``own``
    (bool: a member that ended before its barrier, the last arrival), ``m_w`` (int64 ns: its transfer, end -
    last arrival, or end - its own arrival when ``own``).  Their edges: ``member_edges``."""
    m = instance >= 0
    ma, me, mi = arrival[m], end[m], instance[m]
    del m
    uinst, pos, inv = np.unique(mi, return_index=True, return_inverse=True)
    rank = np.empty(len(uinst), np.int64)                        # instances in the order first met
    rank[np.argsort(pos)] = np.arange(len(uinst))
    del pos
    bidx = rank[inv.reshape(-1)]
    del inv
    o = np.argsort(bidx, kind="stable")
    ma = ma[o]                                                   # (one at a time: each old array let go as its
    me = me[o]                                                   # ordered copy is made, not four held twice)
    mi = mi[o]
    bidx = bidx[o]
    del o                                                        # (each temporary let go once used: the
    nb = len(uinst)                                              # peak of the job graphs' build)
    last = np.full(nb, NO_TIME, np.int64)
    np.maximum.at(last, bidx, t[ma])
    bar_inst = np.empty(nb, np.int64)
    bar_inst[rank] = uinst
    w = last[bidx]
    own = t[me] < w
    w[own] = t[ma[own]]
    np.subtract(t[me], w, out=w)
    return {"bar_t": last, "bar_inst": bar_inst, "m_bar": bidx, "m_arr": ma, "m_end": me, "m_inst": mi,
            "lead": np.r_[True, bidx[1:] != bidx[:-1]] if len(bidx) else np.zeros(0, bool), "own": own, "m_w": w}


def member_edges(c: dict, first_node: int, rows: int):
    """The edges of ``barrier_edges``' members ``c`` (its ``m_bar``, ``m_arr``, ``m_end``, ``own``, ``m_w``
    read; barriers numbered from ``first_node``), two a member, in the members' order: a wait (arrival ->
    barrier, 0) and a transfer (barrier -> end, end - last arrival; a member that ended before the last
    arrival keeps its own transfer, arrival -> end: a send that did not wait for its receive); their types
    are ``member_types``.  Yields ``(src, dst, w)`` of ``rows`` members at a time: node ids (int32 when
    ``first_node`` + the members fit, else int64), int64 ns.  A job graph writes them to disk as made (the
    critical path's 1.3 M collective edges at 4,096 synthetic ranks: 22 MB as columns)."""
    top = first_node + len(c["m_bar"])                           # (a bound of the barriers' node ids)
    ids = np.int32 if top <= np.iinfo(np.int32).max else np.int64    # (half the memory)
    for lo in range(0, len(c["m_arr"]), rows):
        yield _member_edges(c, first_node, slice(lo, lo + rows), ids)


def member_types(n: int) -> np.ndarray:
    """The types (int8 ``Edge``) of ``n`` members' edges as ``member_edges`` makes them: wait, transfer."""
    return np.tile(np.asarray([WAIT_EDGE, TRANSFER_EDGE], np.int8), n)


def _member_edges(c: dict, first_node: int, j: slice, ids) -> tuple:
    ma, me, bidx, own, mw = (c[k][j] for k in ("m_arr", "m_end", "m_bar", "own", "m_w"))
    src, dst, w = np.empty(2 * len(ma), ids), np.empty(2 * len(ma), ids), np.empty(2 * len(ma), np.int64)
    w[0::2] = 0
    w[1::2] = mw
    src[0::2] = ma
    np.add(bidx, first_node, out=dst[0::2], casting="unsafe")   # (fits ``ids``: tested above)
    src[1::2] = dst[0::2]
    src[1::2][own] = ma[own]
    dst[1::2] = me
    return src, dst, w
