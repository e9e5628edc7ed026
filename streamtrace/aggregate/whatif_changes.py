"""The changes a what-if replay can make (``streamtrace.aggregate.whatif``): small declarative
records, their command-line spelling (``KIND[:key=value,...]``, ``parse_change``) and what each
does to the replay's costs.

A change scales *costs* (what a piece of work takes: a CPU op's own time, a host gap, a kernel's or
memcpy's duration, a launch's delay, a collective's transfer after its last member arrived); the
waits (a kernel behind its stream, a collective's members behind the last to arrive, a thread behind
another) are derived again by the replay.  Each record names the ranks it touches (``ranks``: a tuple
of ranks, None every rank; ``Change.local`` False: only the job level, no rank is re-reduced).

============================  =====================================================================
``host_gaps[:rank=R]``        CPU time outside any profiled op (data loading, Python) on the ranks
                              x ``factor`` (default 0: removed)
``ops:name=RE[,rank=R]``      the CPU time inside ops / annotations whose name matches ``RE``
                              (``re.search``; e.g. a ``data_loading`` region) x ``factor`` (default 0)
``median:rank=R[,what=W]``    the rank's compute at the median rank's speed: each CPU op (by name,
                              its self time; host gaps as one) and each kernel (by name) no longer than
                              the median over the ranks that have it (``what``: ``cpu``, ``gpu``,
                              ``compute`` = both, default; ``comm``: its collectives' transfers at the
                              median of the same collective, dimension and size)
``kernels:name=RE,factor=F``  kernels whose name matches ``RE`` (or a class: ``gemm``, ``attention``,
                              ``elementwise``, ``reduce``, ``memcpy``) x ``F`` (every rank unless ``rank``)
``comm[:...]``                collectives' transfers: ``factor=F``, or ``share=S`` (at ``S`` x the link's
                              peak bus bandwidth, never slower than measured; ``gbps=G`` the peak,
                              else the GPU's NVLink inside a node and its network across nodes, as
                              the report's links section), or ``median`` (no longer than the median
                              of the same collective, dimension and size); filtered by ``name=RE``,
                              ``dim=D``, ``rank=R`` (instances with a member there)
``launches[:rank=R]``         every launch with no delay (CUDA graphs): launch delays x 0
============================  =====================================================================

``rank`` takes a list (``0-3,7``; ranks up to ``MAX_RANK``) or ``all``; ``factor`` also reads ``x0.5`` (0 to
``MAX_FACTOR``).  Several ``--change``
options (or a list in Python) are applied together.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..runtime.errors import UsageError
from ..trace.kernel_names import KERNEL_CLASSES
from ..trace.metadata import MAX_RANK
from .critical_graph import Category

CPU_CATS = (Category.cpu_op, Category.host_gap)
GPU_CATS = (Category.compute_kernel, Category.memcpy)
WHATS = ("cpu", "gpu", "compute", "comm")


@dataclass(frozen=True)
class Change:
    """A change of the replay (module docstring); ``ranks`` None: every rank."""
    ranks: tuple | None = None

    local = True

    def touches(self, rank: int) -> bool:
        """Does the change re-weigh rank ``rank``'s own graph?"""
        return self.local and (self.ranks is None or rank in self.ranks)

    def edge_factor(self, view) -> np.ndarray | None:
        """Per edge of one rank's step graph (``EdgeView``) the factor of its cost (None: 1)."""
        return None

    def transfer_factor(self, coll) -> np.ndarray | None:
        """Per collective member of one step (``TransferView``) the factor of its transfer (None: 1)."""
        return None

    def describe(self) -> str:
        """The change in words, as the report says it ("rank 0's host gaps removed")."""
        raise NotImplementedError

    def text(self) -> str:
        """The change's command-line spelling (``KIND:key=value,...``; ``parse_change`` reads it back)."""
        raise NotImplementedError

    def who(self) -> str:
        """Whose work it changes, in words ("rank 0's", "ranks 0-3'", "every rank's")."""
        if self.ranks is None:
            return "every rank's"
        return f"rank {self.ranks[0]}'s" if len(self.ranks) == 1 else f"ranks {_ranks_text(self.ranks)}'"


@dataclass(frozen=True)
class HostGaps(Change):
    """``host_gaps``: the ranks' host gaps (CPU time outside any profiled op) x ``factor``."""
    factor: float = 0.0

    def edge_factor(self, view):
        return np.where(view.cat == Category.host_gap, self.factor, 1.0)

    def describe(self) -> str:
        return f"{self.who()} host gaps " + ("removed" if self.factor == 0 else f"x {self.factor:g}")

    def text(self) -> str:
        return _text("host_gaps", rank=self.ranks, factor=self.factor if self.factor else None)


@dataclass(frozen=True)
class Ops(Change):
    """``ops``: the CPU time inside ops / annotations matching ``pattern`` on the ranks x ``factor``."""
    pattern: str = ""
    factor: float = 0.0

    def edge_factor(self, view):
        inside = view.inside(self.pattern) & np.isin(view.cat, CPU_CATS)
        return np.where(inside, self.factor, 1.0)

    def describe(self) -> str:
        plain = re.sub(r"\\(.)", r"\1", self.pattern)            # a literal name, escaped: shown as the name
        name = plain if re.escape(plain) == self.pattern else self.pattern
        return f"{self.who()} CPU time in {name!r} " + ("removed" if self.factor == 0 else f"x {self.factor:g}")

    def text(self) -> str:
        return _text("ops", name=self.pattern, rank=self.ranks, factor=self.factor if self.factor else None)


@dataclass(frozen=True)
class AtMedian(Change):
    """``median``: the rank's ``what`` (``cpu``, ``gpu``, ``compute``, ``comm``) at the median rank's speed."""
    what: str = "compute"

    @property
    def local(self):
        return self.what != "comm"

    def edge_factor(self, view):
        out = np.ones(len(view.cat))
        if self.what in ("cpu", "compute"):
            m = view.cat == Category.cpu_op
            out[m] = view.median_factor("cpu", view.name[m])
            out[view.cat == Category.host_gap] = view.median_factor("host", None)
        if self.what in ("gpu", "compute"):
            m = np.isin(view.cat, GPU_CATS)
            out[m] = view.median_factor("gpu", view.name[m])
        return out

    def transfer_factor(self, coll):
        return coll.median_factor(coll.has_member(self.ranks)) if self.what == "comm" else None

    def describe(self) -> str:
        part = {"cpu": "CPU", "gpu": "GPU kernels", "compute": "compute (CPU and kernels)",
                "comm": "collectives"}[self.what]
        return f"{self.who()} {part} at the median rank's speed"

    def text(self) -> str:
        return _text("median", rank=self.ranks, what=self.what if self.what != "compute" else None)


@dataclass(frozen=True)
class Kernels(Change):
    """``kernels``: kernels matching ``pattern`` (or of a class of ``KERNEL_CLASSES``) x ``factor``."""
    pattern: str = ""
    factor: float = 1.0

    def edge_factor(self, view):
        rx = re.compile(KERNEL_CLASSES.get(self.pattern.lower(), self.pattern), re.IGNORECASE)
        hit = view.matches(rx, np.isin(view.cat, GPU_CATS))
        return np.where(hit, self.factor, 1.0)

    def describe(self) -> str:
        what = f"every {self.pattern.upper() if self.pattern.lower() == 'gemm' else self.pattern} kernel" \
            if self.pattern.lower() in KERNEL_CLASSES else f"kernels {self.pattern!r}"
        return f"{what}{'' if self.ranks is None else ' on ranks ' + _ranks_text(self.ranks)} x {self.factor:g}"

    def text(self) -> str:
        return _text("kernels", name=self.pattern, rank=self.ranks, factor=self.factor)


@dataclass(frozen=True)
class Comm(Change):
    """``comm``: the selected collectives' transfers x ``factor``, at ``share`` of the link, or at the median."""
    pattern: str | None = None
    dim: str | None = None
    factor: float | None = None
    share: float | None = None
    gbps: float | None = None
    median: bool = False

    local = False

    def transfer_factor(self, coll):
        sel = coll.select(self.pattern, self.dim, self.ranks)
        if self.median:
            return coll.median_factor(sel)
        if self.share is not None:
            return coll.share_factor(sel, self.share, self.gbps)
        return np.where(sel, 1.0 if self.factor is None else self.factor, 1.0)

    def describe(self) -> str:
        what = " ".join(x for x in ("collectives" if not self.pattern else f"collectives {self.pattern!r}",
                                    f"of {self.dim}" if self.dim else "",
                                    f"with a member on {_ranks_text(self.ranks)}" if self.ranks else "") if x)
        if self.median:
            return f"{what} at the median of the same collective"
        if self.share is not None:
            return f"{what} at {100 * self.share:g} % of the link's peak bus bandwidth"
        return f"{what} x {1.0 if self.factor is None else self.factor:g}"

    def text(self) -> str:
        return _text("comm", name=self.pattern, dim=self.dim, rank=self.ranks, factor=self.factor, share=self.share,
                     gbps=self.gbps, median=self.median or None)


@dataclass(frozen=True)
class Launches(Change):
    """``launches``: every launch of the ranks with no delay (CUDA graphs)."""
    def edge_factor(self, view):
        return np.where(view.cat == Category.launch_delay, 0.0, 1.0)

    def describe(self) -> str:
        return ("every" if self.ranks is None else self.who()) + " launch with no delay (CUDA graphs)"

    def text(self) -> str:
        return _text("launches", rank=self.ranks)


KINDS = {"host_gaps": HostGaps, "ops": Ops, "median": AtMedian, "kernels": Kernels, "comm": Comm,
         "launches": Launches}
_KEYS = {"host_gaps": {"rank", "factor"}, "ops": {"name", "rank", "factor"}, "median": {"rank", "what"},
         "kernels": {"name", "rank", "factor"}, "comm": {"name", "dim", "rank", "factor", "share", "gbps", "median"},
         "launches": {"rank"}}


@dataclass
class EdgeView:
    """One rank's step graph as a change sees it: per edge ``cat`` (int8
    ``Category``), ``lane`` and ``name`` (int32 codes of ``texts``, the part's texts by code:
    ``streamtrace.aggregate.critical_graph.Texts``), ``t0`` /
    ``t1`` (int64 ns, aligned), the rank, its op columns ``ops`` (aligned ``ts_ns``, ``dur_ns``,
    ``tid``, ``name``) and ``medians``: ``{("cpu" | "gpu", name) or ("host", None): factor}``;
    ``memo``: what depends on ``ops`` alone (the op rows a pattern matches) or on a text, shared by
    the views of one part's steps (the same ``ops``, codes of the same texts)."""
    cat: np.ndarray
    lane: np.ndarray
    name: np.ndarray
    texts: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    rank: int
    ops: dict
    medians: dict
    memo: dict = field(default_factory=dict)

    def matches(self, rx, among=None) -> np.ndarray:
        """Per edge: its name matches the compiled pattern ``rx`` (``search``); ``among``: a mask of
        the edges to look at (the others are False).  Each distinct text is searched once per ``memo``."""
        seen = self.memo.setdefault(("search", rx.pattern, rx.flags), {})
        hit = _matching(self.texts, rx, seen)[self.name]
        return hit if among is None else hit & among

    def inside(self, pattern: str) -> np.ndarray:
        """Per edge: it lies inside an op whose name matches ``pattern`` on the edge's own thread."""
        out = np.zeros(len(self.cat), bool)
        hit = self.memo.get(("ops", pattern))
        if hit is None:
            hit = self.memo[("ops", pattern)] = np.flatnonzero(_matching(self.ops["name"], re.compile(pattern)))
        tids = self._by_text("tid", _thread_id, np.int64)[self.lane]
        for tid in np.unique(self.ops["tid"][hit]).tolist():
            r = hit[self.ops["tid"][hit] == tid]
            s0, s1 = self.ops["ts_ns"][r], self.ops["ts_ns"][r] + self.ops["dur_ns"][r]
            o = np.argsort(s0, kind="stable")
            s0, reach = s0[o], np.maximum.accumulate(s1[o])
            m = tids == tid
            j = np.searchsorted(s0, self.t0[m], "right") - 1
            out[m] = (j >= 0) & (reach[np.maximum(j, 0)] >= self.t1[m])
        return out

    def median_factor(self, kind: str, names) -> np.ndarray | float:
        """The factors of ``names`` (codes of ``texts``; kind ``cpu`` / ``gpu``; 1 where unknown), or
        the host gaps' one (``names`` None)."""
        if names is None:
            return float(self.medians.get((kind, None), 1.0))
        factor = lambda x: self.medians.get((kind, str(x)), 1.0)  # noqa: E731
        return self._by_text(("median", kind, id(self.medians)), factor, float)[names]

    def _by_text(self, key, fn, dtype) -> np.ndarray:
        """``fn(text)`` of every text of ``texts``, by code (kept in ``memo`` under ``key``; extended
        when a later step's ``texts`` has more)."""
        done = self.memo.get(key, np.zeros(0, dtype))
        if len(done) < len(self.texts):
            more = np.fromiter((fn(x) for x in self.texts[len(done):].tolist()), dtype, len(self.texts) - len(done))
            done = self.memo[key] = np.concatenate([done, more])
        return done


def _thread_id(text) -> int:
    """The thread id of a lane ``thread <tid>[ (backward)]``; -1 for any other text (a stream's lane,
    an event's name)."""
    m = _THREAD_LANE.match(str(text))
    return int(m.group(1)) if m else -1


_THREAD_LANE = re.compile(r"thread (-?\d+)(?:\s|$)")


def _matching(names, rx, seen=None) -> np.ndarray:
    """Per entry of ``names`` (an object array of str): ``rx.search`` finds it; each distinct name
    searched once (a dict, not ``np.unique`` of fixed-width unicode: C++ kernel names run to 1,000+
    characters); ``seen``: that dict, ``{name: found}`` for ``rx``, kept by the caller."""
    seen = {} if seen is None else seen
    return np.fromiter((seen[x] if x in seen else seen.setdefault(x, bool(rx.search(str(x))))
                        for x in names.tolist()), bool, len(names))


def parse_change(text: str) -> Change:
    """``KIND[:key=value,...]`` (module docstring) -> a ``Change``.  Raises
    ``UsageError`` naming the problem."""
    kind, _, rest = str(text).strip().partition(":")
    if kind not in KINDS:
        raise UsageError(f"bad --change {text!r}: the kind is one of {', '.join(KINDS)}")
    kv = {}
    for item in filter(None, (x.strip() for x in _split(rest))):
        k, eq, v = item.partition("=")
        if k not in _KEYS[kind]:
            raise UsageError(f"bad --change {text!r}: {kind} takes {', '.join(sorted(_KEYS[kind]))}, not {k!r}")
        kv[k] = v if eq else "1"
    try:
        return _build(kind, kv)
    except (ValueError, re.error) as e:
        raise UsageError(f"bad --change {text!r}: {e}") from None


def _split(rest: str) -> list:
    """``key=value`` items split at the commas that start a new key (a rank list keeps its commas)."""
    out = []
    for piece in rest.split(","):
        if out and "=" not in piece and re.fullmatch(r"\s*\d+(-\d+)?\s*", piece) and out[-1].startswith("rank="):
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


def _build(kind: str, kv: dict) -> Change:
    ranks = parse_ranks(kv["rank"]) if "rank" in kv else None
    f = _factor(kv["factor"]) if "factor" in kv else None
    if kind == "host_gaps":
        return HostGaps(ranks, 0.0 if f is None else f)
    if kind == "launches":
        return Launches(ranks)
    if kind == "ops":
        re.compile(kv.get("name", ""))
        if not kv.get("name"):
            raise ValueError("ops needs name=PATTERN")
        return Ops(ranks, kv["name"], 0.0 if f is None else f)
    if kind == "median":
        what = kv.get("what", "compute")
        if what not in WHATS or ranks is None:
            raise ValueError(f"median needs rank=R and what in {', '.join(WHATS)}")
        return AtMedian(ranks, what)
    if kind == "kernels":
        if not kv.get("name") or f is None:
            raise ValueError("kernels needs name=PATTERN (or a class: " + ", ".join(KERNEL_CLASSES) + ") and factor=F")
        re.compile(KERNEL_CLASSES.get(kv["name"].lower(), kv["name"]))
        return Kernels(ranks, kv["name"], f)
    share = _positive(kv["share"], "share", top=MAX_FACTOR) if "share" in kv else None
    gbps = _positive(kv["gbps"], "gbps") if "gbps" in kv else None
    if kv.get("name"):
        re.compile(kv["name"])
    return Comm(ranks, kv.get("name"), kv.get("dim"), f, share, gbps, "median" in kv)


MAX_FACTOR = 1e6
"""The largest ``factor`` / ``share`` a change takes: a cost a million times longer is past any question a
replay answers, and the ns times it makes stay well inside int64 (a 1,000 s capture x 1e6 = 1e18 ns)."""


def _number(v: str, what: str) -> float:
    try:
        return float(v)
    except ValueError:
        raise ValueError(f"{what} must be a number, not {v!r}") from None


def _factor(v: str) -> float:
    x = _number(v[1:] if v.startswith("x") else v, "factor")
    if not 0 <= x <= MAX_FACTOR:                   # (NaN and inf fail too)
        raise ValueError(f"factor must be a number from 0 to {MAX_FACTOR:,.0f}, not {v}")
    return x


def _positive(v: str, what: str, top: float | None = None) -> float:
    """``share`` / ``gbps``: a finite number > 0, at most ``top`` when given."""
    x = _number(v, what)
    if not (0 < x < float("inf") and (top is None or x <= top)):
        raise ValueError(f"{what} must be a number > 0" + (f" and at most {top:,.0f}" if top is not None else "")
                         + f", not {v}")
    return x


def parse_ranks(text: str) -> tuple | None:
    """``0-3,7`` -> ``(0, 1, 2, 3, 7)``; ``all`` -> None.  ValueError (naming the problem) on anything else:
    not a rank, a range that runs down, a rank past ``MAX_RANK``."""
    if str(text).strip() == "all":
        return None
    out = []
    for piece in str(text).split(","):
        a, _, b = piece.strip().partition("-")
        try:
            lo, hi = int(a), int(b if b else a)
        except ValueError:
            raise ValueError(f"rank takes ranks, ranges (0-3) and lists (0-3,7), or all: not {piece.strip()!r}") from None
        if not 0 <= lo <= hi <= MAX_RANK:
            raise ValueError(f"rank range {piece.strip()!r}: ranks from 0 to {MAX_RANK:,}, a range from low to high")
        out += range(lo, hi + 1)
    return tuple(sorted(set(out)))


def _ranks_text(ranks) -> str:
    ranks = sorted(ranks)
    runs, start = [], ranks[0]
    for a, b in zip(ranks, ranks[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ",".join(runs)


def _text(kind: str, **kv) -> str:
    """The command-line spelling of a change (``None`` values left out)."""
    items = []
    for k, v in kv.items():
        if v is None:
            continue
        if k == "rank":
            v = _ranks_text(v)
        elif isinstance(v, bool):
            items.append(k)
            continue
        elif isinstance(v, float):
            v = f"{v:g}"
        items.append(f"{k}={v}")
    return kind + (":" + ",".join(items) if items else "")


def as_changes(changes) -> list:
    """``changes`` (a ``Change``, a ``KIND:...`` string, or a list of either) as a list of records."""
    if changes is None:
        return []
    if isinstance(changes, (str, Change)):
        changes = [changes]
    return [c if isinstance(c, Change) else parse_change(c) for c in changes]
