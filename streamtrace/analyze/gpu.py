"""One rank's GPU events as a few compact columns (~70 bytes each) while its CPU tracks are
analysed (``GpuEvents``), and the per-string lookups derived from the patterns that every
pass uses (``Names``)."""
from __future__ import annotations

import numpy as np

from . import classify
from .metrics import COMM, COMPUTE, MEMORY

#: the kernels table's ``kind`` values, by the class codes of ``streamtrace.analyze.metrics``
KINDS = ("compute", "communication", "memory")
#: the launch context a call tree writes for each GPU row it owns (name ids)
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
        ph, fb, rc, st, sd = classify.name_flags(strings, pats)
        self.phase = np.append(ph, 0)
        self.fallback = np.append(fb, 0)
        self.recompute = np.append(rc, False)
        self.step = np.append(st, -1)
        self.stack_dim = np.append(sd, "")
        self.has_stack_dim = np.asarray([bool(x) for x in self.stack_dim], bool)
        self.user_annotation = table.ids.get("user_annotation", -2)


def _expand(lo, hi):
    """Concatenation of ``arange(lo[i], hi[i])`` (and the position i of each element)."""
    cnt = hi - lo
    tot = int(cnt.sum())
    which = np.repeat(np.arange(len(lo)), cnt)
    first = np.cumsum(cnt) - cnt
    return lo[which] + (np.arange(tot) - first[which]), which


class GpuEvents:
    """The rank's GPU events as compact columns, in store order (``gkeys`` order, each
    key's rows as added).  ``comm_pos``: the communication rows; ``comm_name``, ``comm_own``: their
    name ids and their own collective-args rows (-1: none), in ``comm_pos`` order.
    ``ctx``: the launch context the call trees write (see
    ``TreeStream``), name ids as int16 when the
    string table has at most 2**15 - 1 strings.  ``link=False`` (a rank without CPU events, e.g.
    ``analyze --gpu-only``): no launch can claim a row, so the correlation index is not built
    (``by_corr``/``corr_sorted`` empty) and ``ctx`` holds read-only views of -1 (``t_launch``:
    ``start`` itself): ~30 bytes a row and the index's temporaries saved."""

    def __init__(self, store, gkeys, nm, device_mode, pmap, link=True):
        self.keys = gkeys
        self.sizes = [store.rows(k) for k in gkeys]
        M = self.M = sum(self.sizes)
        self.start, self.end = (np.empty(M, np.int64) for _ in range(2))
        self.device = None                 # filled by load_devices(), after the CPU tracks
        self._dev = []
        self.kind = np.empty(M, np.int8)
        own = []                           # each communication row's own collective-args row
        corr = np.empty(M if link else 0, np.int64)
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
                if link:
                    corr[sl] = np.where(b["correlation"] >= 0, b["correlation"], -1)
                comm_names.append(b["name"][kind == COMM])
                own.append(np.where(b["comm"] >= 0, b["comm"], -1)[kind == COMM].astype(np.int32))
                pos += len(b)
        self.comm_pos = np.flatnonzero(self.kind == COMM).astype(np.int32 if M < 2 ** 31 else np.int64)
        self.comm_name = np.concatenate(comm_names) if comm_names else np.zeros(0, np.int32)
        self.comm_own = np.concatenate(own) if own else np.zeros(0, np.int32)
        # GPU rows with a correlation id, by id (ties: in row order): one stable sort of every row,
        # the rows without an id (-1) first, cut off (fewer temporaries than sorting a subset)
        rows = np.argsort(corr, kind="stable")
        rows = rows[int(np.count_nonzero(corr < 0)):]
        self.by_corr = rows.astype(np.int32) if M < 2 ** 31 else rows   # GPU rows by correlation id
        del rows
        # their ids, int32 when every id is below 2**31 - 1 (claim clips the ids it looks up)
        narrow = len(corr) == 0 or int(corr.max()) < 2 ** 31 - 1
        self.corr_sorted = corr[self.by_corr].astype(np.int32 if narrow else np.int64)
        del corr
        self.free = np.ones(M, bool)
        names = np.int16 if len(nm.names) <= 2 ** 15 else np.int32    # name ids (and -1)
        # without launches every context stays -1: read-only views of one -1 (no memory)
        new = (lambda dt: np.full(M, -1, dt)) if link else (lambda dt: np.broadcast_to(np.array(-1, dt), (M,)))
        self.ctx = {k: new(names) for k in GPU_CTX}
        # the innermost communication op (collective-args row) each launch ran under; the GPU
        # row's own args stay in comm_own (collective_facts reads both)
        self.ctx["comm_row"] = new(np.int32)
        # a kernel no launch claims: its GPU start
        self.ctx["t_launch"] = self.start.copy() if link else self.start
        self.linked = None
        self.launched = None

    def done_linking(self):
        """Forget what only linking needs (no launch claims GPU rows after this); keep which
        rows a launch claimed (``launched``, bool)."""
        if self.linked is None:
            self.launched = ~self.free
            self.linked = int(np.count_nonzero(self.launched))
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
        the first such launch.  Returns ``(owner position, GPU row)`` pairs by owner.
        Linear in launches + GPU rows: only each id's first launch is looked up (the later ones
        would find its rows taken; one id shared by 500,000 launches and 500,000 kernels made every
        launch x kernel pair, 2.5e11 of them: issue 49)."""
        if self.corr_sorted.dtype == np.int32:            # an id >= 2**31 - 1 matches no row
            corr = np.minimum(corr, 2 ** 31 - 1).astype(np.int32)
        if len(corr) > 1:                                 # each id's first launch (by position in the block)
            order = np.argsort(corr, kind="stable")
            s = corr[order]
            first = order[np.concatenate([[True], s[1:] != s[:-1]])]
            first.sort()
            corr, owner = corr[first], owner[first]
        lo = np.searchsorted(self.corr_sorted, corr, "left")
        hi = np.searchsorted(self.corr_sorted, corr, "right")
        hit = hi > lo
        if not hit.any():
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        pos, which = _expand(lo[hit], hi[hit])
        rows = self.by_corr[pos]
        own = owner[hit][which]
        ok = self.free[rows]                             # (each row once: its id is looked up once)
        rows, own = rows[ok], own[ok]
        self.free[rows] = False
        return own, rows
