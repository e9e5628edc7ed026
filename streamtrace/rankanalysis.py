"""One rank of ``streamtrace analyze``, in bounded memory.

The rank's GPU events are held as a few compact columns (~70 bytes each); its CPU
tracks are streamed one at a time, block by block from the store, in three passes:

1. file order: launch -> GPU links by correlation (a launch claims the still-free GPU
   events of its correlation id; in a track, the lowest index wins), phase / step
   windows, and one sort record per event (:data:`~streamtrace.kernels.treestream.REC_DTYPE`)
   into an :class:`~streamtrace.store.ExternalSorter`;
2. time order (start asc, end desc, index asc): the records, in chunks, through
   :class:`~streamtrace.kernels.treestream.TreeStream` (call tree, GPU roll-up, launch
   context with the open-ancestor stack carried across chunks); the per-event results
   go into a second sorter, by index;
3. file order again: the ops rows (stored columns + results) to the Parquet writer.

Nothing is held per CPU event beyond one block, so the largest track (millions of
events on one thread) costs the same memory as a small one.  The results equal
``build_call_tree`` + ``link_by_correlation`` + ``propagate`` + ``nearest_marked`` on
the whole track (tests/test_treestream.py; chunked == in-memory in tests/test_analyze.py).
"""
from __future__ import annotations

import numpy as np

from . import classify as C
from .kernels.treestream import REC_DTYPE, RES_DTYPE, TreeStream
from .metrics import COMM, COMPUTE, MEMORY, device_metrics
from .outputs import StringPool
from .store import ExternalSorter, trim

KINDS = ("compute", "communication", "memory")
COLL_STR = ("collective", "dtype", "pg_name", "pg_desc", "pg_ranks", "parallel_dim")
COLL_INT = ("in_bytes", "out_bytes", "msg_bytes", "group_size")
GPU_CTX = ("launch_op", "launching", "annot", "top", "dim")


class Names:
    """Per-string-id lookups derived from the patterns (computed once per table); every
    array has one extra entry at the end for id -1."""

    def __init__(self, table, pats):
        strings = table.strings
        self.names = np.asarray(strings + [""], dtype=object)        # id -1 -> ""
        n = len(strings) + 1
        self.memory_cat = np.zeros(n, bool)
        self.comm = np.zeros(n, bool)
        for i, t in enumerate(strings):
            self.memory_cat[i] = t in pats.memory_cats
            self.comm[i] = bool(pats.comm.search(t))
        ph, fb, rc, st, sd = C.name_flags(strings, pats)
        self.phase = np.append(ph, 0)
        self.fallback = np.append(fb, 0)
        self.recompute = np.append(rc, False)
        self.step = np.append(st, -1)
        self.stack_dim = np.append(sd, "")
        self.has_stack_dim = np.asarray([bool(x) for x in self.stack_dim], bool)
        self.user_annotation = table.ids.get("user_annotation", -2)


_CORR_DTYPE = np.dtype([("c", "i8")])


def _corr_key(r):
    return [r["c"]]


def _rec_key(r):
    return [r["s"], -r["e"], r["idx"]]


def _res_key(r):
    return [r["idx"]]


def _expand(lo, hi):
    """Concatenation of ``arange(lo[i], hi[i])`` (and the position i of each element)."""
    cnt = hi - lo
    tot = int(cnt.sum())
    which = np.repeat(np.arange(len(lo)), cnt)
    first = np.cumsum(cnt) - cnt
    return lo[which] + (np.arange(tot) - first[which]), which


class _Gpu:
    """The rank's GPU events as compact columns, in store order (``gkeys`` order, each
    key's rows as added).  ``ctx``: the launch context the call trees write (see
    :class:`~streamtrace.kernels.treestream.TreeStream`), name ids as int16 when the
    string table has at most 2**15 - 1 strings."""

    def __init__(self, store, gkeys, nm, device_mode, pmap):
        self.keys = gkeys
        self.sizes = [store.rows(k) for k in gkeys]
        M = self.M = sum(self.sizes)
        self.start, self.end = (np.empty(M, np.int64) for _ in range(2))
        self.device = None                 # filled by load_devices(), after the CPU tracks
        self._dev = []
        self.kind = np.empty(M, np.int8)
        self.comm_row = np.empty(M, np.int32)
        corr = np.empty(M, np.int64)
        comm_names = []
        pos = 0
        for key in gkeys:
            dev = pmap.get(int(key[2]), {}).get("device", key[2]) if device_mode == "pmap" else key[2]
            self._dev.append(None if device_mode == "args" else dev)
            for b in store.blocks(key):
                sl = slice(pos, pos + len(b))
                self.start[sl] = b["ts"]
                self.end[sl] = b["ts"] + b["dur"]
                kind = np.where(nm.memory_cat[b["cat"]], MEMORY, np.where(nm.comm[b["name"]], COMM, COMPUTE))
                self.kind[sl] = kind
                self.comm_row[sl] = np.where(b["comm"] >= 0, b["comm"], -1)
                corr[sl] = np.where(b["correlation"] >= 0, b["correlation"], -1)
                comm_names.append(b["name"][kind == COMM])
                pos += len(b)
        self.comm_pos = np.flatnonzero(self.kind == COMM).astype(np.int32 if M < 2 ** 31 else np.int64)
        self.comm_name = np.concatenate(comm_names) if comm_names else np.zeros(0, np.int32)
        rows = np.flatnonzero(corr >= 0)
        rows = rows[np.argsort(corr[rows], kind="stable")]
        self.by_corr = rows.astype(np.int32) if M < 2 ** 31 else rows   # GPU rows by correlation id
        del rows
        # their ids, int32 when every id is below 2**31 - 1 (claim clips the ids it looks up)
        narrow = M == 0 or int(corr.max()) < 2 ** 31 - 1
        self.corr_sorted = corr[self.by_corr].astype(np.int32 if narrow else np.int64)
        del corr
        self.free = np.ones(M, bool)
        names = np.int16 if len(nm.names) <= 2 ** 15 else np.int32    # name ids (and -1)
        self.ctx = {k: np.full(M, -1, names) for k in GPU_CTX}
        self.ctx["comm_row"] = self.comm_row
        self.ctx["t_launch"] = self.start.copy()
        self.linked = None

    def done_linking(self):
        """Forget what only linking needs (no launch claims GPU rows after this)."""
        if self.linked is None:
            self.linked = int(self.M - np.count_nonzero(self.free))
            self.free = self.by_corr = self.corr_sorted = None

    def load_devices(self, store):
        """``self.device``: each GPU row's device (int32 when every device fits, else
        int64), from its key or, for a Megatron-style merge, its ``args.device`` in the
        store (not held during the CPU tracks: the rows' other columns are)."""
        self.device = np.empty(self.M, np.int64)
        pos = 0
        for key, size, dev in zip(self.keys, self.sizes, self._dev):
            if dev is not None:
                self.device[pos:pos + size] = dev
            else:
                for b in store.blocks(key):
                    self.device[pos:pos + len(b)] = b["device"]
                    pos += len(b)
                continue
            pos += size
        if self.M and -2 ** 31 <= int(self.device.min()) and int(self.device.max()) < 2 ** 31:
            self.device = self.device.astype(np.int32)

    def claim(self, corr, owner):
        """Links of one block's launches (``corr`` >= 0, ``owner`` = their positions in
        the block, ascending): every free GPU event with a launch's correlation goes to
        the first such launch.  Returns ``(owner position, GPU row)`` pairs by owner."""
        if self.corr_sorted.dtype == np.int32:            # an id >= 2**31 - 1 matches no row
            corr = np.minimum(corr, 2 ** 31 - 1).astype(np.int32)
        lo = np.searchsorted(self.corr_sorted, corr, "left")
        hi = np.searchsorted(self.corr_sorted, corr, "right")
        hit = hi > lo
        if not hit.any():
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        pos, which = _expand(lo[hit], hi[hit])
        rows = self.by_corr[pos]
        own = owner[hit][which]
        ok = self.free[rows]
        rows, own = rows[ok], own[ok]
        _, first = np.unique(rows, return_index=True)          # several launches, one id: the first
        first.sort()
        rows, own = rows[first], own[first]
        self.free[rows] = False
        return own, rows


def analyze_rank(store, keys, comm_rows, table, rank, device_mode, pmap, pats, topo=None, pg_config=None,
                 open_ops=None, kernels_out=None, pool=None, block_rows=65536, folder=None, jobs=1):
    """Analyse one rank whose events sit in ``store`` under ``keys``.

    Its ops rows go to the writer that ``open_ops(part)`` opens (a
    :class:`~streamtrace.outputs.PartitionWriter` of ``part-<part>.parquet`` whose string
    columns are ids into ``table``; ``part`` is 0 unless ``jobs`` > 1, see
    :mod:`streamtrace.trackfork`); its kernel rows to the writer that
    ``kernels_out(pools)`` opens (``pools`` from :func:`kernel_pools`, ``pool`` being
    ``table``'s :class:`~streamtrace.outputs.StringPool`).  ``block_rows``/``folder``: the
    external sorts' block size and spill folder (None: compressed in memory).  ``jobs`` > 1:
    the CPU tracks are analysed by up to ``jobs`` forked processes (same results).  Each
    key's rows are dropped from the store once analysed.  Returns the rank's summary dict
    (``devices``, ``iterations``, ``phases``, ``call_tree``, ``links``)."""
    import contextlib
    nm = Names(table, pats)
    gpu = _Gpu(store, [k for k in keys if k[0] == "gpu"], nm, device_mode, pmap)
    trim()                                                         # the columns' temporaries
    win = {"step": [], "recompute": [], **{c: [] for c in range(1, len(C.PHASES))},
           **{("fb", c): [] for c in range(1, len(C.PHASES))}}
    tot = {"n_cpu": 0, "clamped": 0, "overrun": 0, "dup": 0}
    open_ops = open_ops or (lambda part: contextlib.nullcontext(None))
    cpu_keys = [k for k in keys if k[0] == "cpu"]
    if jobs > 1 and cpu_keys:
        from .trackfork import analyze_tracks

        def track(store, piece, gpu, win, tot, ops):
            _track(store, piece[0], gpu, nm, win, tot, ops, block_rows, folder, span=piece[1])
        analyze_tracks(track, store, cpu_keys, gpu, win, tot, jobs, open_ops)
        for key in cpu_keys:
            store.drop(key)
        trim()
    else:
        with open_ops(0) as ops_writer:
            for i, key in enumerate(cpu_keys):
                _track(store, key, gpu, nm, win, tot, ops_writer, block_rows, folder, last=i == len(cpu_keys) - 1)
                store.drop(key)
                trim()
    gpu.done_linking()
    linked = gpu.linked
    iteration, ph, micro = _phases(gpu, win)
    del win, gpu.ctx["t_launch"]
    trim()
    gpu.load_devices(store)
    coll = _collectives(gpu, comm_rows, nm, pats, topo, pg_config or {})
    M = gpu.M
    summary = {"devices": {}, "iterations": {}, "phases": [],
               "call_tree": {"cpu_events": int(tot["n_cpu"]), "clamped": int(tot["clamped"]),
                             "overruns": int(tot["overrun"])},
               "links": {"gpu_events": int(M), "linked": linked, "duplicate_launch_ids": int(tot["dup"])}}
    forked = kernels_out is not None and jobs > 1 and M >= 2 * block_rows
    if kernels_out is not None:
        pools = kernel_pools(pool or StringPool(table.strings), coll["pool"])

        def write(part, span=None):
            with kernels_out(pools, part) as w:
                _write_kernels(store, gpu, iteration, ph, micro, coll, w, span)
        if forked:                                  # two halves at once, the metrics meanwhile
            from .trackfork import run_forked
            h = M // 2
            run_forked([lambda: write(0, (0, h)), lambda: write(1, (h, M))],
                       then=lambda: _metrics(summary, gpu.device, gpu.start, gpu.end, gpu.kind, iteration, ph,
                                             micro))
        else:
            write(0)
    for k in gpu.keys:
        store.drop(k)
    if not forked:
        device, g_start, g_end, kind = gpu.device, gpu.start, gpu.end, gpu.kind
        gpu = coll = None                                          # (not del: closures above name them)
        trim()
        _metrics(summary, device, g_start, g_end, kind, iteration, ph, micro)
    return summary


def piece_blocks(store, key, span=None):
    """The key's blocks in order, or only its rows ``[lo, hi)`` when ``span`` is given
    (blocks outside it are not read: their row counts come from ``store.block_spans``)."""
    if span is None:
        yield from store.blocks(key)
        return
    lo, hi = span
    rows = store.block_spans(key)[0]
    starts = np.concatenate([[0], np.cumsum(rows)])
    for j in range(max(0, int(np.searchsorted(starts, lo, "right")) - 1), len(rows)):
        pos, n = int(starts[j]), int(rows[j])
        if pos >= hi:
            break
        a, z = max(lo - pos, 0), min(hi - pos, n)
        if a < z:
            b = store.block(key, j)
            yield b if (a, z) == (0, n) else b[a:z]
            del b                              # only the consumer holds the block while it works


def _track(store, key, gpu, nm, win, tot, ops_writer, block_rows, folder, last=False, span=None):
    """One CPU track: the three passes of the module docstring.  ``last``: no track
    comes after this one (the linking columns are dropped after pass 1).  ``span``: only
    the track's rows ``[lo, hi)``, a piece that no call tree crosses
    (:func:`streamtrace.trackfork.plan_pieces`); its launches' distinct correlation ids
    (sorted int64) are then appended to ``tot["piece_ids"]`` as ``(key, ids)``, for the
    duplicates between pieces (``tot["dup"]`` counts those within the piece)."""
    recs = ExternalSorter(REC_DTYPE, _rec_key, block_rows, folder, delta=("s", "e-s", "idx"))
    corrs = ExternalSorter(_CORR_DTYPE, _corr_key, block_rows, folder, delta=("c",))
    own_parts = []
    i0 = n_own = 0
    trimmer = _Trimmer(block_rows)
    for b in piece_blocks(store, key, span):                      # 1. file order
        r, rows = _link_block(b, i0, n_own, gpu, nm, win, corrs)
        i0 += len(b)
        trimmer.done(len(b))
        del b                       # before the next block is unpacked
        if len(rows):
            own_parts.append(rows)
            n_own += len(rows)
        recs.add(r)
        del r, rows
    n = i0
    if last:
        gpu.done_linking()
    prev = None                     # launches sharing a correlation id with an earlier one
    ids = None if span is None else []
    for c in corrs.chunks():
        c = c["c"]
        again = np.concatenate([[prev is not None and c[0] == prev], c[1:] == c[:-1]])
        tot["dup"] += int(np.count_nonzero(again))
        if ids is not None:
            ids.append(c[~again])
        prev = c[-1]
    if ids is not None:
        tot["piece_ids"].append((key, np.concatenate(ids) if ids else np.zeros(0, np.int64)))
    own_rows = np.concatenate(own_parts) if own_parts else np.zeros(0, np.int32)
    del own_parts
    trim()
    tree = TreeStream(own_rows, gpu.start, gpu.end, gpu.ctx)     # 2. time order
    results = ExternalSorter(RES_DTYPE, _res_key, block_rows, folder, delta=("idx",))
    for chunk in recs.chunks():
        for a in range(0, len(chunk), block_rows):
            results.add(tree.feed(chunk[a:a + block_rows]))
    results.add(tree.finish())
    tot["clamped"] += tree.n_clamped
    tot["overrun"] += tree.n_overrun
    del tree, own_rows, recs
    trim()
    if ops_writer is not None:                                    # 3. file order: the ops rows
        res = _Aligned(results.chunks())
        base = tot["n_cpu"]
        for b in piece_blocks(store, key, span):
            rr = res.take(len(b))
            ops_writer.write({
                "pid": key[2], "tid": key[3], "ts_ns": b["ts"], "dur_ns": b["dur"], "name": b["name"],
                "cat": b["cat"], "depth": rr["depth"], "parent": np.where(rr["parent"] >= 0, rr["parent"] + base, -1),
                "correlation": b["correlation"], "external_id": b["external_id"], "kernel_count": rr["count"],
                "kernel_time_ns": rr["total"], "gpu_busy_ns": rr["busy"]})
            trimmer.done(len(b))
            del b, rr                   # before the next block is unpacked (the writer copied the rows)
        if hasattr(ops_writer, "shrink"):
            ops_writer.shrink()         # its pending rows only, while the next track is sorted
    else:
        for _ in results.chunks():
            pass
    tot["n_cpu"] += n


def _link_block(b, i0, n_own, gpu, nm, win, corrs):
    """Pass 1 on one stored block ``b`` of a track (its first row is the track's row
    ``i0``; ``n_own`` GPU rows are owned by the rows before): windows into ``win``, the
    launches' correlation ids into ``corrs``, links claimed in ``gpu``.  Returns the
    block's sort records (REC_DTYPE) and the GPU rows its launches own, by launch."""
    nb = len(b)
    start, cname = b["ts"], b["name"]
    end = start + b["dur"]
    _windows(win, nm, cname, start, end)
    r = np.zeros(nb, REC_DTYPE)
    rows = np.zeros(0, np.int32)
    launches = np.flatnonzero(b["correlation"] >= 0)
    if gpu.M and len(launches):
        lc = b["correlation"][launches]
        corrs.add(lc.view(_CORR_DTYPE))
        own, rows = gpu.claim(lc, launches)
        if len(rows):
            cnt = np.bincount(own, minlength=nb)
            r["own_cnt"] = cnt
            r["own_off"] = n_own + np.cumsum(cnt) - cnt
    r["s"], r["e"], r["idx"], r["name"] = start, end, np.arange(i0, i0 + nb), cname
    r["comm"] = np.where(b["comm"] >= 0, b["comm"], -1)
    annot = (b["cat"] == nm.user_annotation) & (nm.step[cname] < 0)
    r["flags"] = annot.astype(np.uint8) | (nm.has_stack_dim[cname].astype(np.uint8) << 1)
    return r, rows


class _Trimmer:
    """:func:`~streamtrace.store.trim` every ``TRIM_BLOCKS`` blocks' worth of rows of a
    track's pass.  Each stored block's temporary arrays (of varying sizes) land on
    different parts of the heap between the pass's long-lived pieces, so without it the
    resident free heap creeps up by ~20-30 MB over the 1.8 M-event track of the 1.1 GB
    benchmark trace; trimming after every block instead costs ~8 % of the run time."""

    TRIM_BLOCKS = 4

    def __init__(self, block_rows):
        self.every = self.TRIM_BLOCKS * max(1, int(block_rows))
        self.rows = 0

    def done(self, rows):
        self.rows += rows
        if self.TRIM_BLOCKS and self.rows >= self.every:
            self.rows = 0
            trim()


class _Aligned:
    """Records from an iterator of chunks, taken ``n`` at a time."""

    def __init__(self, it):
        self.it = iter(it)
        self.buf = np.zeros(0, RES_DTYPE)

    def take(self, n):
        parts, got = [], 0
        while got < n:
            if not len(self.buf):
                self.buf = next(self.it)
                continue
            k = min(n - got, len(self.buf))
            parts.append(self.buf[:k])
            self.buf = self.buf[k:]
            got += k
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _windows(win, nm, cname, start, end):
    """Phase / micro-batch / iteration windows of one block (from any thread)."""
    for sel, bucket, extra in ((nm.step[cname] >= 0, "step", nm.step[cname]),
                               (nm.recompute[cname], "recompute", None)):
        if sel.any():
            win[bucket].append((start[sel], end[sel], None if extra is None else extra[sel]))
    for code in range(1, len(C.PHASES)):
        for sel, bucket in ((nm.phase[cname] == code, code), (nm.fallback[cname] == code, ("fb", code))):
            if sel.any():
                win[bucket].append((start[sel], end[sel], None))


def _cat_windows(parts):
    """Concatenate window lists and sort by start: (start, end, value)."""
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z, z
    s = np.concatenate([p[0] for p in parts])
    e = np.concatenate([p[1] for p in parts])
    v = np.concatenate([p[2] for p in parts]) if parts[0][2] is not None else np.zeros(len(s), np.int64)
    o = np.argsort(s, kind="stable")
    return s[o], e[o], v[o]


def _phases(gpu, win, rows=65536):
    """Step, phase and micro-batch of every GPU event: innermost window containing its
    launch time (``rows`` GPU events at a time).  Returns ``(iteration, phase,
    micro-batch)``: int32 (int64 when a step number needs it), int8, int32; -1 / 0 / -1
    when unknown."""
    M, t_launch = gpu.M, gpu.ctx["t_launch"]
    ws, we, wval = _cat_windows(win["step"])
    phase_w = {}
    for code in range(1, len(C.PHASES)):
        ps, pe, _ = _cat_windows(win[code])
        if len(ps):
            phase_w[code] = (ps, pe, C.ordinal_within(C.containing(ws, we, ps), ps))
    fb_w = [(code, *_cat_windows(win[("fb", code)])[:2]) for code in range(1, len(C.PHASES))]
    rs, re_, _ = _cat_windows(win["recompute"])
    narrow = not len(wval) or (-2 ** 31 <= int(wval.min()) and int(wval.max()) < 2 ** 31)
    iteration = np.empty(M, np.int32 if narrow else np.int64)
    ph = np.zeros(M, np.int8)
    micro = np.full(M, -1, np.int32)              # ordinals within a step
    for a in range(0, M, rows):
        t = t_launch[a:a + rows]
        step_pos = C.containing(ws, we, t)
        iteration[a:a + rows] = np.where(step_pos >= 0, wval[np.maximum(step_pos, 0)] if len(wval) else -1, -1)
        p, mi = ph[a:a + rows], micro[a:a + rows]
        ph_start = np.full(len(t), np.iinfo(np.int64).min)
        for code, (ps, pe, mb) in phase_w.items():
            pos = C.containing(ps, pe, t)
            better = (pos >= 0) & (ps[np.maximum(pos, 0)] >= ph_start)
            p[better] = code
            mi[better] = mb[pos[better]] if C.PHASES[code] in ("forward", "backward") else -1
            ph_start[better] = ps[pos[better]]
        for code, ps, pe in fb_w:
            hit = (p == 0) & (C.containing(ps, pe, t) >= 0)
            p[hit] = code
        p[(C.containing(rs, re_, t) >= 0) & (p == C.PHASES.index("backward"))] = C.PHASES.index("recompute")
    return iteration, ph, micro


def _collectives(gpu, comm_rows, nm, pats, topo, pg_config):
    """Collective type, bytes, process group and parallel dimension of the communication
    kernels only: ``{"pos": rows, column: values}``; string columns as ids into ``"pool"``."""
    pool, ids = [], {}

    def sid(v):
        v = v if isinstance(v, str) else str(v)
        if v not in ids:
            ids[v] = len(pool)
            pool.append(v)
        return ids[v]
    k = len(gpu.comm_pos)
    dim_at = gpu.ctx["dim"]
    index, found = {}, []                  # kernels with equal inputs share one result
    which = np.empty(k, np.int64)
    for i, (name, r, d) in enumerate(zip(gpu.comm_name.tolist(), gpu.comm_row[gpu.comm_pos].tolist(),
                                         dim_at[gpu.comm_pos].tolist())):
        row = comm_rows[r] if r >= 0 else None
        key = (name, d, _row_key(row))
        v = index.get(key)
        if v is None:
            info = C.collective_info(row, nm.names[name], pats, pg_config)
            dim = topo.dim_of(info["pg_ranks"]) if topo is not None else None
            dim = dim or pats.first(pats.pg_desc, info["pg_desc"])
            if not dim and d >= 0:
                dim = nm.stack_dim[d]
            info["parallel_dim"] = dim or "unknown"
            info["pg_ranks"] = ",".join(map(str, info["pg_ranks"]))
            v = index[key] = len(found)
            found.append([info[c] for c in COLL_INT] + [sid(info[c]) for c in COLL_STR])   # strings in order
        which[i] = v
    table = np.asarray(found, np.int64).reshape(len(found), len(COLL_INT) + len(COLL_STR))
    out = {c: table[which, n] for n, c in enumerate(COLL_INT)}
    out.update({c: table[which, len(COLL_INT) + n].astype(np.int32) for n, c in enumerate(COLL_STR)})
    out["pos"] = gpu.comm_pos
    out["pool"] = StringPool(pool)
    return out


def _row_key(row):
    """A hashable stand-in for a collective-args row (its values in key order)."""
    if row is None:
        return None
    key = tuple(row.values())
    try:
        hash(key)
    except TypeError:                     # a list value: compare by text
        return repr(key)
    return key


def _write_kernels(store, gpu, iteration, ph, micro, coll, writer, span=None):
    """The kernels rows (all, or the GPU rows ``span`` = ``(lo, hi)``) to ``writer``."""
    lo, hi = span or (0, gpu.M)
    ctx = gpu.ctx
    first = 0                                   # the key's first GPU row
    for key, size in zip(gpu.keys, gpu.sizes):
        pos = max(lo, first)
        rows = (pos - first, min(hi, first + size) - first)
        first += size
        if rows[0] >= rows[1]:
            continue
        for b in piece_blocks(store, key, rows):
            nb = len(b)
            sl = slice(pos, pos + nb)
            cols = {
                "device": gpu.device[sl], "stream": b["stream"], "tid": key[3], "ts_ns": gpu.start[sl],
                "dur_ns": b["dur"], "end_ns": gpu.end[sl], "name": b["name"], "cat": b["cat"], "kind": gpu.kind[sl],
                "correlation": b["correlation"], "external_id": b["external_id"], "launch_op": ctx["launch_op"][sl],
                "launching_op": ctx["launching"][sl], "annotation": ctx["annot"][sl],
                "top_annotation": ctx["top"][sl], "phase": ph[sl], "microbatch": micro[sl], "step": iteration[sl]}
            a, z = np.searchsorted(coll["pos"], [pos, pos + nb])
            at = coll["pos"][a:z] - pos
            for c in COLL_INT + COLL_STR:
                if z > a:
                    cols[c] = np.full(nb, -1, coll[c].dtype)
                    cols[c][at] = coll[c][a:z]
                else:
                    cols[c] = -1
            writer.write(cols)
            pos += nb
            del b, cols                 # before the next block is unpacked (the writer copied the rows)


def kernel_pools(table_pool, coll_pool):
    """``{string column: StringPool}`` of the kernels table."""
    pools = {c: table_pool for c in ("name", "cat", "launch_op", "launching_op", "annotation", "top_annotation")}
    pools.update({"kind": StringPool(KINDS), "phase": StringPool(C.PHASES)})
    pools.update({c: coll_pool for c in COLL_STR})
    return pools


def _groups(key):
    """Rows grouped by equal ``key``: ``(keys, order, bounds)``, groups in ascending key
    order, group g = ``order[bounds[g]:bounds[g + 1]]``."""
    order = np.argsort(key, kind="stable")
    k = key[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.zeros(0, np.int64)
    keys = k[starts].tolist()
    del k
    return keys, order, np.append(starts, len(order))


def _metrics(summary, device, g_start, g_end, kind, iteration, ph, micro):
    """Fill per-device, per-iteration and per phase x micro-batch metrics (README definitions)."""
    devices = np.unique(device)
    for d in devices.tolist():
        if len(devices) == 1:
            s, e, k, it, p, mb = g_start, g_end, kind, iteration, ph, micro
        else:
            rows = np.flatnonzero(device == d)
            s, e, k, it, p, mb = g_start[rows], g_end[rows], kind[rows], iteration[rows], ph[rows], micro[rows]
            del rows
        summary["devices"][str(d)] = device_metrics(s, e, k)
        u_it, u_mb = np.unique(it), np.unique(mb)
        key = np.searchsorted(u_it, it).astype(np.int64)           # iteration code
        codes, order, bounds = _groups(key)
        for c, x, y in zip(codes, bounds[:-1], bounds[1:]):
            if u_it[c] >= 0:
                sel = order[x:y]
                summary["iterations"].setdefault(str(int(u_it[c])), {})[str(d)] = \
                    device_metrics(s[sel], e[sel], k[sel])
        del order
        key *= len(C.PHASES)
        key += p
        key *= len(u_mb)
        key += np.searchsorted(u_mb, mb)                          # (iteration, phase, micro-batch) code
        codes, order, bounds = _groups(key)
        del key
        for c, x, y in zip(codes, bounds[:-1], bounds[1:]):
            i, m = int(u_it[c // len(u_mb) // len(C.PHASES)]), int(u_mb[c % len(u_mb)])
            sel = order[x:y]
            row = {"device": str(d), "iteration": None if i < 0 else i,
                   "phase": C.PHASES[c // len(u_mb) % len(C.PHASES)], "microbatch": None if m < 0 else m}
            row.update(device_metrics(s[sel], e[sel], k[sel]))
            summary["phases"].append(row)
