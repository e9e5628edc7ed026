"""The matched collectives as the what-if replay reads them (``streamtrace.aggregate.whatif_job``): their
keys (``Members``: which rank's kernel is a member of which instance), their facts by instance
(``InstanceFacts``: name, dimension, size, bus bandwidth, link peaks) and one step's members as a
change of transfers sees them (``TransferView``: ``Change.transfer_factor`` of
``streamtrace.aggregate.whatif_changes``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .critical_graph import joined_ints, key_codes
from .critical_members import PartMembers


class InstanceFacts:
    """Per matched collective instance (``collectives.parquet``), as columns by instance id:
    ``name``, ``dim`` (str), ``bytes`` (int), ``busbw`` (GB/s, NaN unknown), ``inter`` (its group
    spans nodes), ``gpu_gbps`` / ``nic_gbps`` (the link peaks per direction, NaN unknown).  Columns,
    not a dict per instance: 40,192 instances of 1,024 synthetic ranks held 25 MB as dicts."""

    DEFAULTS = {"name": "", "dim": "", "bytes": 0, "busbw": math.nan, "inter": False, "gpu_gbps": math.nan,
                "nic_gbps": math.nan}
    """Each fact's value for an instance it does not know (and its column's type)."""

    def __init__(self, instance, **columns):
        """``instance``: int ids (any order, each once); ``columns``: a value per id for some of
        ``DEFAULTS``' names (the others take their default)."""
        instance = np.asarray(instance, np.int64).reshape(-1)
        o = None if bool((instance[1:] > instance[:-1]).all()) else np.argsort(instance, kind="stable")
        self.instance = instance if o is None else instance[o]      # (in order, as read: no copies)
        self.cols = {}
        for k, d in self.DEFAULTS.items():
            v = columns.get(k)
            kind = {str: object, float: np.float64}.get(type(d), type(d))
            v = np.full(len(instance), d, kind) if v is None else np.asarray(v, kind).reshape(-1)
            self.cols[k] = v if o is None else v[o]

    READ = ("instance", "collective", "parallel_dim", "msg_bytes", "busbw_gbps", "pg_ranks", "ranks")
    """The columns of ``collectives.parquet`` that ``read`` reads (its text columns as dictionaries)."""

    @classmethod
    def read(cls, path, gpu_gbps: float = math.nan, nic_gbps: float = math.nan,
             batch_rows: int = 1 << 15) -> "InstanceFacts":
        """The facts of ``collectives.parquet`` at ``path``, ``batch_rows`` instances at a time, as columns
        made from each batch's (its texts through their dictionaries: one str object a distinct text, no
        Python object a row; 160 k instances of 4,096 synthetic ranks held ~40 MB of lists of them):
        ``name`` its ``collective``, ``dim`` its ``parallel_dim`` ("" null), ``bytes`` its ``msg_bytes``
        (0 null), ``busbw`` its ``busbw_gbps`` (NaN null), ``inter`` whether its group's ranks (``pg_ranks``,
        else its ``ranks``) span nodes (eight GPUs a node), ``gpu_gbps`` / ``nic_gbps`` the link peaks
        given.  Raises ``DataError`` naming the file (``events.dataset.iter_arrow``)."""
        from ..events.dataset import iter_arrow
        texts: dict = {}                                  # one str object a distinct text, across batches
        cols: dict = {k: [] for k in ("instance", "name", "dim", "bytes", "busbw", "inter")}
        text_cols = ("collective", "parallel_dim", "pg_ranks", "ranks")
        for b in iter_arrow(path, cls.READ, read_dictionary=text_cols, batch_rows=batch_rows):
            col = b.column
            cols["instance"].append(_ints(col("instance"), 0))
            cols["name"].append(_per_text(col("collective"), lambda v: texts.setdefault(str(v), str(v))))
            cols["dim"].append(_per_text(col("parallel_dim"), lambda v: texts.setdefault(v or "", v or "")))
            cols["bytes"].append(_ints(col("msg_bytes"), 0))
            cols["busbw"].append(_floats(col("busbw_gbps")))
            group = _per_text(col("pg_ranks"), lambda v: _spans_nodes(v) if v else -1, np.int8)   # (-1: none
            cols["inter"].append(np.where(group >= 0, group, _per_text(col("ranks"), _spans_nodes, np.int8))  # listed:
                                 .astype(bool))                                                  # the instance's)
            del b, col, group
        joined = {}                      # (a column's batches let go once joined: not all held twice at once)
        for k in list(cols):
            joined[k] = np.concatenate(cols.pop(k)) if cols[k] else \
                np.zeros(0, object if k in ("name", "dim") else np.float64)
        n = len(joined["instance"])
        return cls(joined.pop("instance"), **joined, gpu_gbps=np.full(n, gpu_gbps), nic_gbps=np.full(n, nic_gbps))

    @classmethod
    def from_rows(cls, rows: dict) -> "InstanceFacts":
        """From ``{instance: {fact: value}}``."""
        ids = list(rows)
        return cls(ids, **{k: [rows[i].get(k, d) for i in ids] for k, d in cls.DEFAULTS.items()})

    def __len__(self) -> int:
        return len(self.instance)

    def column(self, fact: str, ids) -> np.ndarray:
        """Fact ``fact`` of each of ``ids`` (its default where an id is not known)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        d, col = self.DEFAULTS[fact], self.cols[fact]
        at = np.searchsorted(self.instance, ids)
        hit = at < len(self.instance)
        hit[hit] = self.instance[at[hit]] == ids[hit]
        out = np.full(len(ids), d, col.dtype)
        out[hit] = col[at[hit]]
        return out

    def get(self, i: int, default=None):
        """One instance's facts as a dict, ``default`` when it is not known."""
        at = int(np.searchsorted(self.instance, i))
        if at >= len(self.instance) or self.instance[at] != i:
            return default
        return {k: c[at].item() if hasattr(c[at], "item") else c[at] for k, c in self.cols.items()}


@dataclass
class Members:
    """The matched collectives of the job: ``key`` ``{(part, correlation, stream): instance}`` (or
    ``arrays``' pair, or a ``critical_members.PartMembers``: by part, 16 bytes a member) and ``info``,
    their ``InstanceFacts`` (given as ``{instance: {fact: value}}``, made columns)."""
    key: object
    info: object

    def __post_init__(self):
        if isinstance(self.info, dict):
            self.info = InstanceFacts.from_rows(self.info)

    @staticmethod
    def empty() -> "Members":
        """No matched collective (an aggregate of one rank, or without ``collectives_ranks``)."""
        return Members({}, {})

    def facts(self) -> "Members":
        """The same ``info`` without the keys (what a built graph keeps: the keys are joined into it,
        ~21 MB at 4,096 synthetic ranks)."""
        return Members((np.zeros((0, 3), np.int64), np.zeros(0, np.int64)), self.info)

    def arrays(self) -> tuple:
        """``key`` as ``(keys int64[n, 3] (part, correlation, stream), instance int64[n])`` (``key``
        may be given as that pair, as the dict or as a ``PartMembers``)."""
        if isinstance(self.key, tuple):
            return self.key
        if isinstance(self.key, PartMembers):
            k = self.key
            return np.c_[k.part, k.correlation, k.stream].astype(np.int64), np.asarray(k.instance, np.int64)
        k = np.asarray(list(self.key), np.int64).reshape(-1, 3)
        return k, np.asarray(list(self.key.values()), np.int64)

    def by_part(self) -> PartMembers:
        """``key`` as a ``PartMembers`` (itself when given as one)."""
        if isinstance(self.key, PartMembers):
            return self.key
        k, i = self.arrays()
        return PartMembers(k[:, 0], k[:, 1], k[:, 2], i)


def unique_inverse(values) -> tuple:
    """``np.unique(values, return_inverse=True)`` of an integer array, the inverse int32 (an index of the
    distinct values, fewer than the members): by a table of the values present where they are non-negative
    and span at most ``4 * len(values) + 1024`` (a byte and an int32 code a value; no sort: numpy's makes an
    int64 order, a sorted copy and two int64 inverses, ~23 MB by their sizes over 650 k members of 4,096
    synthetic ranks; the replay's level after ``TransferView``'s build 216.6 -> 207.1 MB, probe), else numpy's."""
    v = np.asarray(values).reshape(-1)
    if not len(v) or v.dtype.kind not in "iu" or int(v.min()) < 0 or int(v.max()) > 4 * len(v) + 1024:
        uniq, inv = np.unique(v, return_inverse=True)
        return uniq, inv.reshape(-1).astype(np.int32)
    present = np.zeros(int(v.max()) + 1, bool)
    present[v] = True
    uniq = np.flatnonzero(present).astype(v.dtype)
    code = np.cumsum(present, dtype=np.int32)
    del present
    code -= 1
    return uniq, code[v]


def _shared_text(col) -> np.ndarray:
    """``col`` (any array) as an object array of str (``str`` of each value), one str object a distinct value
    (a str an element: 160 k instances' names and dimensions held 19 MB of copies of a few texts), through
    a dict of the texts seen: not numpy's fixed-width text array and its sort (4 bytes a character a value:
    160 k names of 80 characters were +159 MB at once, ``tracemalloc``)."""
    col, seen = np.asarray(col, object).reshape(-1), {}
    out = np.empty(len(col), object)
    out[:] = [seen.setdefault(t, t) for t in map(str, col)]
    return out


def _ints(arr, null: int) -> np.ndarray:
    """An Arrow integer column (or one of nulls alone: Parquet's ``null`` type) as int64, ``null`` where it is
    null."""
    import pyarrow as pa
    import pyarrow.compute as pc
    return np.asarray(pc.fill_null(arr.cast(pa.int64()), null).to_numpy(zero_copy_only=False), np.int64)


def _floats(arr) -> np.ndarray:
    """An Arrow number column (or one of nulls alone) as float64, NaN where it is null."""
    import pyarrow as pa
    return np.asarray(arr.cast(pa.float64()).to_numpy(zero_copy_only=False), np.float64)


def _per_text(arr, made, dtype=object) -> np.ndarray:
    """An Arrow text column (a dictionary, plain text, or nulls alone: Parquet's ``null`` type) as an array of
    ``made(text)`` a row (``made(None)`` for a null), ``made`` called once a distinct text
    (``alignment.dictionary_numpy``'s values, then indexed)."""
    import pyarrow as pa
    from .alignment import dictionary_numpy
    if not pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string())
    values, idx = dictionary_numpy(pa.chunked_array([arr]))
    made_values = np.empty(len(values), dtype)
    made_values[:] = [made(v) for v in values.tolist()]
    return made_values[idx]


def _spans_nodes(text) -> bool:
    """Whether the ranks listed in ``text`` (numbers in any separators; None: none) lie on more than one
    node of eight GPUs."""
    import re
    return text is not None and len({int(x) // 8 for x in re.findall(r"\d+", text)}) > 1


class TransferView:
    """The collective members of one step as a change sees them (``Change.transfer_factor``):
    per member ``instance``, ``rank``, ``transfer`` (ns) and the instance's facts (``Members``),
    held once an instance (``_facts``) and read per member through ``inv`` (its instance's index):
    650 k members of 4,096 synthetic ranks held five per-member fact columns, 26 MB, for 160 k
    instances.  ``rank`` and ``inv`` are int32 where they fit (7.5 MB less there), ``instance`` made from
    ``inv`` when read."""

    def __init__(self, instance, rank, transfer, members: Members):
        self.rank, self.transfer = joined_ints(rank), transfer
        info = members.info
        uniq, self.inv = unique_inverse(instance)                # looked up once an instance (``inv``: an index
        self.uniq = uniq                                          # of ``uniq``, int32: fewer than the members)
        text = lambda k: _shared_text(info.column(k, uniq))  # noqa: E731
        peak = np.where(info.column("inter", uniq).astype(bool), info.column("nic_gbps", uniq).astype(float),
                        info.column("gpu_gbps", uniq).astype(float))
        self._facts = {"name": text("name"), "dim": text("dim"), "bytes": info.column("bytes", uniq).astype(np.int64),
                       "busbw": info.column("busbw", uniq).astype(float), "peak": peak}
        self._med = None

    @property
    def instance(self) -> np.ndarray:
        """Per member, its instance id (made from ``inv``: not held beside it)."""
        return self.uniq[self.inv]

    def __len__(self) -> int:
        return len(self.inv)

    def fact(self, name) -> np.ndarray:
        """Per member, its instance's ``name`` / ``dim`` (object, str), ``bytes`` (int64), ``busbw``
        (GB/s, NaN unknown) or ``peak`` (the link's peak bus bandwidth per direction, GB/s: the
        network's when the instance's group spans nodes, else NVLink's; NaN unknown)."""
        return self._facts[name][self.inv]

    def select(self, pattern, dim, ranks) -> np.ndarray:
        """Members of the instances whose name matches ``pattern`` (``re.search``), of dimension
        ``dim`` (case-insensitive) and with a member on ``ranks`` (None: any)."""
        import re
        sel = np.ones(len(self._facts["name"]), bool)             # (an instance at a time)
        if pattern:
            rx = re.compile(pattern)
            sel &= np.asarray([bool(rx.search(x)) for x in self._facts["name"]], bool)
        if dim:
            sel &= np.char.lower(self._facts["dim"].astype(str)) == dim.lower()
        return sel[self.inv] & self.has_member(ranks)

    def has_member(self, ranks) -> np.ndarray:
        """Members of the instances with a member on ``ranks`` (None: every member)."""
        if ranks is None:
            return np.ones(len(self.inv), bool)
        hit = np.zeros(len(self._facts["name"]), bool)
        hit[self.inv[np.isin(self.rank, list(ranks))]] = True
        return hit[self.inv]

    def median_factor(self, sel) -> np.ndarray:
        """The selected members' transfers no longer than the median transfer of the members of the
        same collective, dimension and size (all instances of the step)."""
        if not len(self.inv):
            return np.ones(0)
        group, med = self._medians()
        f = med[group][self.inv]                      # (per member: its group's median, through its instance's)
        s = sel & (self.transfer > f)
        np.divide(f, self.transfer, out=f, where=s)   # (in place: one member-long float array, not four;
        f[~s] = 1.0                                   # 650 k members, 160 k instances: a second call's peak
        return f                                      # 16.3 -> 7.2 MB over the view, tracemalloc)

    def _medians(self) -> tuple:
        """``(group, median)``: each instance's group (same collective, dimension and size; int64 codes) and
        each group's median transfer (``np.median``'s: the two middle values' mean, float ns), made once
        (the members' sort is not repeated for each change at the median; its temporaries not held beside
        the factors)."""
        if self._med is None:
            code = lambda k: np.unique(self._facts[k], return_inverse=True)[1].reshape(-1)  # noqa: E731
            group = key_codes(np.c_[code("name"), code("dim"), self._facts["bytes"]].astype(np.int64))
            by = group.astype(np.int32)[self.inv]    # (fewer groups than instances: int32)
            o = np.lexsort((self.transfer, by))       # (the groups keyed an instance at a time, then by member)
            v = np.asarray(self.transfer, float)[o]
            del o
            n = np.bincount(by)                       # (every group has a member: counts by group)
            del by
            lo = np.cumsum(n) - n
            self._med = group, (v[lo + (n - 1) // 2] + v[lo + n // 2]) / 2
        return self._med

    def share_factor(self, sel, share, gbps=None) -> np.ndarray:
        """The selected members' transfers at ``share`` x the link's peak bus bandwidth (``gbps``, else
        the instance's link), never slower: factor = min(1, busbw / (share x peak)); 1 where the bus
        bandwidth or the peak is unknown."""
        busbw = self._facts["busbw"]                               # (an instance at a time)
        peak = np.full(len(busbw), float(gbps)) if gbps else self._facts["peak"]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):     # (a peak of 0, tiny or unknown)
            f = np.minimum(1.0, busbw / (share * peak))
        f = np.where(np.isfinite(f) & (f > 0), f, 1.0)[self.inv]     # (an instance at a time, then per member)
        f[~sel] = 1.0
        return f
