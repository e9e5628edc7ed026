"""The flows of one rank under a time filter (``merge --steps`` / ``--window``): their time extents
from the pre-pass (``FlowExtents``) and the set kept under a keep-window (``KeptFlows``),
held as sorted int64 keys rather than Python tuples, so that merge's byte kernel
(``streamtrace.kernels.rewrite.scan_rewrite``) looks flows up itself.

A flow is the pair ``(cat, id)`` of its events (Python equality: ``(c, 1)`` and ``(c, 1.0)`` are
one flow, as in a dict).  It is kept when every one of its events has ``lo <= ts <= hi``
(the events' ts only, not their ends).  A *plain* flow has a ``str`` cat and an integral id in
[0, 10**18): those live in the arrays, keyed by ``(cat index, id)``; any other flow (a missing cat, a
string id, ...) is kept in a dict / set beside them.
"""
from __future__ import annotations

import numbers
import pickle

import numpy as np

from ..kernels.rewrite import ID_LIMIT
from ..kernels.survey import ID_DIGITS
from ..kernels.texts import text_table

_ID_END = 10 ** ID_DIGITS


def plain_id(v):
    """The int a flow id is equal to (``1``, ``1.0``, ``True``), when it is integral and in
    [0, 10**18); else None."""
    if not isinstance(v, numbers.Number):
        return None
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return i if i == v and 0 <= i < _ID_END else None


def _reduce(cat, fid, lo, hi=None):
    """Group rows by ``(cat, fid)``: ``(cat, fid, min lo, max hi)`` sorted by key (``hi`` None:
    ``lo``).  Gathers one column at a time (a pre-pass of ~10**6 flows stays within a few MB)."""
    if len(cat) == 0:
        return cat, fid, lo, lo if hi is None else hi
    order = np.lexsort((fid, cat))
    cat, fid = cat[order], fid[order]
    new = np.ones(len(cat), bool)
    new[1:] = (cat[1:] != cat[:-1]) | (fid[1:] != fid[:-1])
    at = np.flatnonzero(new)
    del new
    lo_s = lo[order]
    hi_s = lo_s if hi is None else hi[order]
    del order
    return cat[at], fid[at], np.minimum.reduceat(lo_s, at), np.maximum.reduceat(hi_s, at)


_LOW = (1 << 40) - 1


def _split(cats, cat, fid, lo, hi, other):
    """Grouped plain flows -> ``(keys, lo, hi)`` (``keys``: ``cat << 40 | id``, sorted as the
    ``(cat, id)`` rows are); the few with an id of 2**40 or more go to ``other``."""
    big = fid >= int(ID_LIMIT)
    if big.any():
        for c, i, a, b in zip(cat[big].tolist(), fid[big].tolist(), lo[big].tolist(), hi[big].tolist()):
            other[(cats[c], i)] = (a, b)
        small = ~big
        cat, fid, lo, hi = cat[small], fid[small], lo[small], hi[small]
    return (cat << 40) | fid, lo, hi


class FlowExtents:
    """Per flow the ``(min ts, max ts)`` of its events (ns): plain flows with an id below 2**40 as
    sorted int64 ``keys`` (``cat index << 40 | id``, the index into ``cats``) and arrays ``lo``,
    ``hi``; the others in ``other`` ({(cat, id): (lo, hi)})."""

    def __init__(self, cats=(), keys=None, lo=None, hi=None, other=None):
        self.cats = list(cats)
        z = np.zeros(0, np.int64)
        self.keys, self.lo, self.hi = (z if a is None else a for a in (keys, lo, hi))
        self.other = dict(other or {})

    @classmethod
    def build(cls, cats, parts, other) -> "FlowExtents":
        """From chunks ``parts`` [(cat_k, ids, ts)] of plain flow events (cat_k into ``cats``; the list
        is emptied) and the extents ``other`` of the flows read in Python; a flow of ``other`` equal to
        a plain one is folded into it (one dict key before)."""
        cats = list(cats)
        index = {c: k for k, c in enumerate(cats)}
        rest = {}
        fold = [[], [], [], []]
        for (c, v), (a, b) in other.items():
            i = plain_id(v) if isinstance(c, str) else None
            if i is None:
                rest[(c, v)] = (a, b)
                continue
            if c not in index:
                index[c] = len(cats)
                cats.append(c)
            for lst, x in zip(fold, (index[c], i, a, b)):
                lst.append(x)
        if not parts and not fold[0]:
            return cls(cats, other=rest)
        cat_k, ids, ts = (np.concatenate([p[j] for p in parts] + [np.asarray(fold[j], np.int64)]) for j in range(3))
        parts.clear()
        hi = None
        if fold[0]:
            hi = np.concatenate([ts[:len(ts) - len(fold[3])], np.asarray(fold[3], np.int64)])
        return cls(cats, *_split(cats, *_reduce(cat_k, ids, ts, hi), rest), other=rest)

    @classmethod
    def combine(cls, parts) -> "FlowExtents":
        """One rank's extents from those of its byte ranges (min / max per flow)."""
        cats, index, chunks, other = [], {}, [], {}
        for p in parts:
            remap = np.asarray([index.setdefault(c, len(index)) for c in p.cats] or [0], np.int64)
            cats = list(index)
            if len(p.keys):
                chunks.append((remap[p.keys >> 40], p.keys & _LOW, p.lo, p.hi))
            for k, (a, b) in p.other.items():
                lo, hi = other.get(k, (a, b))
                other[k] = (min(lo, a), max(hi, b))
        if not chunks:
            return cls(cats, other=other)
        cols = [np.concatenate([c[j] for c in chunks]) for j in range(4)]
        return cls(cats, *_split(cats, *_reduce(*cols), other), other=other)

    def __len__(self):
        return len(self.keys) + len(self.other)

    def as_dict(self) -> dict:
        """``{(cat, id): (lo, hi)}`` (the pre-pass's former shape; for tests and small traces)."""
        out = {(self.cats[k >> 40], k & _LOW): (a, b) for k, a, b in
               zip(self.keys.tolist(), self.lo.tolist(), self.hi.tolist())}
        out.update(self.other)
        return out

    def spill(self, path) -> "SpilledFlows":
        """Write these extents to ``path`` (a temporary file of merge's): what the worker that found
        them hands on, so that merge's parent process never holds every rank's flows."""
        with open(path, "wb") as f:
            pickle.dump(self, f, protocol=pickle.HIGHEST_PROTOCOL)
        return SpilledFlows(str(path))

    def kept(self, lo, hi) -> "KeptFlows":
        """The flows whose events all lie in ``lo <= ts <= hi`` (ns)."""
        m = self.lo >= lo
        m &= self.hi <= hi
        rest = {k for k, (a, b) in self.other.items() if a >= lo and b <= hi}
        return KeptFlows(self.cats, self.keys[m], rest)


class KeptFlows:
    """The flows kept under a time filter; ``(cat, id) in kept`` as in a set of those pairs.

    For the byte kernel: ``cat_text``/``cat_off`` (the cats' UTF-8 texts, concatenated) and
    ``keys`` (sorted int64 ``cat index << 40 | id`` of the kept plain flows with id < 2**40);
    any other kept flow is in ``rest`` (a set)."""

    def __init__(self, cats, keys, rest=()):
        self.cats = list(cats)
        self.index = {c: k for k, c in enumerate(self.cats)}
        self.keys = keys
        self.rest = set(rest)
        texts = [c.encode("utf-8", "surrogatepass") for c in self.cats]
        self.cat_text, self.cat_off = text_table(texts)

    @classmethod
    def of(cls, flows, keep=None) -> "KeptFlows":
        """``flows``: a KeptFlows (returned as is), a ``SpilledFlows`` (its flows kept under the
        keep-window ``keep`` = ``(lo, hi)`` ns) or any iterable of ``(cat, id)`` pairs."""
        if isinstance(flows, KeptFlows):
            return flows
        if isinstance(flows, SpilledFlows):
            return flows.load().kept(*keep)
        ext = FlowExtents.build([], [], {k: (0, 0) for k in flows})
        return ext.kept(0, 0)

    def __contains__(self, key):
        cat, fid = key
        if isinstance(cat, str) and cat in self.index:
            i = plain_id(fid)
            if i is not None and i < int(ID_LIMIT):
                k = (self.index[cat] << 40) | i
                j = int(np.searchsorted(self.keys, k))
                return j < len(self.keys) and int(self.keys[j]) == k
        return key in self.rest

    def __len__(self):
        return len(self.keys) + len(self.rest)


class SpilledFlows:
    """A rank's ``FlowExtents`` in the file ``path`` (written by ``FlowExtents.spill``; read
    back by the worker that rewrites the rank, ``KeptFlows.of``)."""

    def __init__(self, path):
        self.path = path

    def load(self) -> FlowExtents:
        with open(self.path, "rb") as f:
            return pickle.load(f)
