"""Parallel topology: which ranks form each TP / CP / EP / DP / PP group, and the model replicas.

Sources (all convert to :class:`Topology`, whose JSON form is streamtrace's own topology file):

* sizes and a rank order (``--tp 2 --pp 2 --cp 1 --ep 1 --order tp-cp-ep-dp-pp --world-size 8``):
  :func:`from_sizes`, the same groups as Megatron-LM's ``RankGenerator``
  (``megatron/core/parallel_state.py``) for every order and size combination;
* Megatron-TraceViz's ``unique_parallel_groups_<timestamp>.txt``: :func:`parse_traceviz_txt`
  (and :meth:`Topology.to_traceviz_txt` writes that layout);
* the traces themselves: ``distributedInfo.pg_config`` (process-group descriptions and ranks) of every
  rank trace in a folder: :func:`from_pg_config`, :func:`from_trace_folder`;
* streamtrace's topology JSON ``{"world_size", "order", "sizes", "tp", "cp", "ep", "dp", "pp",
  "replicas"}`` (each group key a list of rank lists) or a ``parallel_topology.json`` with
  ``tp_groups`` / ``dp_groups`` / ... keys: :func:`load_topology`.

Group lists are ordered as Megatron orders them: every group ascending, groups by their first rank.
(Megatron's ``generate_masked_orthogonal_rank_groups`` enumerates group and member indices in
mixed radix with increasing strides, so both enumerations are increasing in the rank.)

A **model replica** is a set of ranks that together hold one full copy of the model: the connected
components of the TP, CP, EP and PP groups (ranks linked by any of them).  With EP = 1 this is "all
ranks of one DP index", as TraceViz's ``FULL MODEL RANK GROUPS (by DP Rank)``; with EP > 1 the
expert-parallel groups join ``ep`` consecutive DP indices (Megatron's expert-data-parallel index).
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np

from .errors import StreamtraceError

DIMS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
_TXT_SECTION = re.compile(r"^(TENSOR|CONTEXT|EXPERT|DATA|PIPELINE) PARALLEL \((TP|CP|EP|DP|PP)\) GROUPS", re.M)
_TXT_GROUP = re.compile(r"^Group \d+: \[([\d,\s]*)\]", re.M)
_TXT_REPLICAS = re.compile(r"^FULL MODEL RANK GROUPS", re.M)
_TXT_SIZE = re.compile(r"^(TP|PP|CP|EP|DP|World) Size:\s*(\d+)", re.M)
_TXT_GBS = re.compile(r"^Global Batch Size:\s*(\d+)", re.M)
# process-group descriptions (distributedInfo.pg_config[].pg_desc) naming exactly one dimension:
# Megatron-LM's names, short *_GROUP names, and TorchTitan's DeviceMesh names (mesh_<dim>)
_PG_DESC_DIM = [
    ("tp", re.compile(r"^(TENSOR_MODEL_PARALLEL|TENSOR_PARALLEL|TP)(_GROUPS?)?$|^mesh_tp$", re.I)),
    ("pp", re.compile(r"^(PIPELINE_MODEL_PARALLEL|PIPELINE_PARALLEL|PP)(_GROUPS?)?$|^mesh_pp$", re.I)),
    ("cp", re.compile(r"^(CONTEXT_PARALLEL|CP)(_GROUPS?)?$|^mesh_cp$", re.I)),
    ("ep", re.compile(r"^(EXPERT_MODEL_PARALLEL|EXPERT_PARALLEL|EP)(_GROUPS?)?$|^mesh_ep$", re.I)),
    ("dp", re.compile(r"^(DATA_PARALLEL|DP)(_GROUPS?)?$|^mesh_dp(_shard)?$", re.I)),
    ("dp_cp", re.compile(r"^DATA_PARALLEL_GROUP_WITH_CP$|^mesh_dp_shard_cp$", re.I)),
]


# -- Megatron's rank order ------------------------------------------------------------

def normalize_order(order: str, sizes: dict) -> list[str]:
    """The order's tokens, with every dimension of size 1 that it omits appended (as
    Megatron's ``RankGenerator`` does).  Raises :class:`StreamtraceError` for an unknown or
    repeated token, or a dimension of size > 1 missing from the order."""
    toks = [t for t in str(order).lower().replace(" ", "").split("-") if t]
    bad = [t for t in toks if t not in DIMS]
    if bad or len(set(toks)) != len(toks):
        raise StreamtraceError(f"bad --order {order!r}: use the tokens tp, cp, ep, dp, pp once each, e.g. "
                               f"{DEFAULT_ORDER}")
    for d in DIMS:
        if d not in toks:
            if sizes.get(d, 1) != 1:
                raise StreamtraceError(f"--order {order!r} omits {d} whose size is {sizes[d]}")
            toks.append(d)
    return toks


def orthogonal_groups(sizes: dict, order, token: str) -> list[list[int]]:
    """Rank groups of the dimensions in ``token`` (e.g. ``"dp"``, ``"tp-pp"``) for the sizes
    ``{"tp": .., "cp": .., "ep": .., "dp": .., "pp": ..}`` laid out in ``order`` (first token
    varies fastest).

    A rank's coordinate in dimension ``i`` of the order is ``(rank // stride_i) % size_i`` with
    ``stride_i`` the product of the sizes before it; a group is the set of ranks that agree on
    every coordinate outside ``token``.  Returns ``world / prod(sizes in token)`` groups, each
    ascending, ordered by first rank: the same as Megatron's
    ``RankGenerator(...).get_ranks(token)`` (``megatron/core/parallel_state.py``)."""
    toks = normalize_order(order, sizes) if isinstance(order, str) else list(order)
    want = [t for t in token.lower().split("-") if t]
    if any(t not in toks for t in want):
        raise StreamtraceError(f"bad group token {token!r}")
    shape = np.asarray([int(sizes.get(t, 1)) for t in toks], np.int64)
    world = int(np.prod(shape))
    stride = np.concatenate([[1], np.cumprod(shape)[:-1]])
    ranks = np.arange(world, dtype=np.int64)
    own = np.zeros(world, np.int64)            # the part of each rank spelled by the token's coordinates
    for i, t in enumerate(toks):
        if t in want:
            own += (ranks // stride[i]) % shape[i] * stride[i]
    base = ranks - own                        # equal within a group: its first rank
    order_ = np.lexsort((ranks, base))
    b = base[order_]
    cuts = np.flatnonzero(np.diff(b)) + 1
    return [g.tolist() for g in np.split(ranks[order_], cuts)]


def connected_components(world: int, group_lists) -> list[list[int]]:
    """Connected components of ranks 0..world-1 joined by the given groups (union-find)."""
    parent = list(range(world))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for groups in group_lists:
        for g in groups:
            g = [r for r in g if 0 <= r < world]
            for r in g[1:]:
                a, b = find(g[0]), find(r)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    comps: dict = {}
    for r in range(world):
        comps.setdefault(find(r), []).append(r)
    return sorted(comps.values())


# -- the topology -------------------------------------------------------------------

class Topology:
    """Groups per dimension (``groups[d]``: list of ascending rank lists, ``d`` in :data:`DIMS`),
    ``replicas`` (model replicas, lists of ranks), ``world_size``, ``order`` (a Megatron order
    string when known) and ``source`` (where it came from).  Missing dimensions are singletons.

    ``dim_of(ranks)`` names the dimension (``"TP"`` ...) of a process group from its ranks."""

    def __init__(self, groups: dict, world_size: int | None = None, replicas=None, order: str | None = None,
                 source: str = "", extra: dict | None = None):
        self.groups = {d: sorted(sorted(map(int, g)) for g in (groups.get(d) or [])) for d in DIMS}
        seen = [r for d in DIMS for g in self.groups[d] for r in g] + [r for g in replicas or [] for r in g]
        self.world_size = int(world_size) if world_size else (max(seen) + 1 if seen else 0)
        for d in DIMS:
            if not self.groups[d]:
                self.groups[d] = [[r] for r in range(self.world_size)]
        self.extra = {k: sorted(sorted(map(int, g)) for g in v) for k, v in (extra or {}).items() if v}
        self.replicas = sorted(sorted(map(int, g)) for g in replicas) if replicas else \
            connected_components(self.world_size, [self.groups[d] for d in ("tp", "cp", "ep", "pp")])
        self.order = order
        self.source = source
        self._by_set = {}
        for d in DIMS:
            for g in self.groups[d]:
                if len(g) > 1:
                    self._by_set.setdefault(frozenset(g), d.upper())
        for g in self.extra.get("dp_cp", []):
            if len(g) > 1:
                self._by_set.setdefault(frozenset(g), "DP")

    # sizes: the size of the groups of each dimension (the largest, should they differ)
    @property
    def sizes(self) -> dict:
        return {d: max((len(g) for g in self.groups[d]), default=1) for d in DIMS}

    def dim_of(self, ranks) -> str | None:
        """Dimension of a process group given its ranks, or None when no group matches."""
        return self._by_set.get(frozenset(ranks)) if ranks else None

    def group_of(self, dim: str, rank: int) -> list[int] | None:
        """The ``dim`` group (``"tp"`` ...) that holds ``rank``, or None."""
        for g in self.groups[dim]:
            if rank in g:
                return g
        return None

    def stage_of(self, rank: int) -> int:
        """Pipeline stage of ``rank``: its position in its PP group (0 when it has none)."""
        g = self.group_of("pp", rank)
        return g.index(rank) if g else 0

    def replica_of(self, rank: int) -> int:
        """Index of the model replica holding ``rank`` (-1 when none)."""
        for i, g in enumerate(self.replicas):
            if rank in g:
                return i
        return -1

    def to_json(self) -> dict:
        """streamtrace's topology JSON (see the module docstring)."""
        out = {"format": "streamtrace-topology", "version": 1, "world_size": self.world_size,
               "order": self.order, "sizes": self.sizes}
        out.update({d: self.groups[d] for d in DIMS})
        out["replicas"] = self.replicas
        out.update(self.extra)
        if self.source:
            out["source"] = self.source
        return out

    def to_traceviz_txt(self, timestamp=None, global_batch_size: int | None = None) -> str:
        """Megatron-TraceViz's ``unique_parallel_groups_<timestamp>.txt`` text for this topology
        (written by :func:`streamtrace.topology_io.format_traceviz_txt`; read back by
        :func:`parse_traceviz_txt`)."""
        from .topology_io import format_traceviz_txt
        topo = {"world_size": self.world_size, **{d: self.groups[d] for d in DIMS}, "replicas": self.replicas}
        return format_traceviz_txt(topo, timestamp, global_batch_size)

    def summary_line(self) -> str:
        s = self.sizes
        return (f"world {self.world_size}: TP{s['tp']} x CP{s['cp']} x EP{s['ep']} x DP{s['dp']} x PP{s['pp']}"
                f"{', order ' + self.order if self.order else ''}; {len(self.replicas)} model replicas of "
                f"{len(self.replicas[0]) if self.replicas else 0} ranks; {len(self.groups['pp'])} PP groups")


def from_sizes(world_size: int, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1, order: str = DEFAULT_ORDER,
               etp: int | None = None) -> Topology:
    """Megatron-LM's groups for these sizes (``initialize_model_parallel``): ``dp = world / (tp*pp*cp)``;
    TP, CP, DP, PP from the dense ``RankGenerator(tp, ep=1, dp, pp, cp, order)``; EP from the expert
    ``RankGenerator(etp, ep, world / (etp*ep*pp), pp, cp=1, order)`` with ``etp`` (expert tensor
    parallel size) defaulting to ``tp``.  Raises :class:`StreamtraceError` on sizes that do not fit."""
    world_size, tp, pp, cp, ep = (int(x) if x is not None else 1 for x in (world_size, tp, pp, cp, ep))
    etp = tp if etp is None else int(etp)
    if min(world_size, tp, pp, cp, ep, etp) < 1:
        raise StreamtraceError("sizes and --world-size must be positive integers")
    if world_size % (tp * pp * cp):
        raise StreamtraceError(f"--world-size {world_size} is not a multiple of TP x PP x CP = {tp * pp * cp}")
    if world_size % (etp * ep * pp):
        raise StreamtraceError(f"--world-size {world_size} is not a multiple of expert TP x EP x PP = "
                               f"{etp * ep * pp}")
    dp, edp = world_size // (tp * pp * cp), world_size // (etp * ep * pp)
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    expert = {"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp}
    toks = normalize_order(order, {**dense, "ep": ep})
    if not (str(order).lower().endswith("pp") or pp == 1 or edp == dp):
        raise StreamtraceError(f"--order {order!r}: without pp last, the data-parallel sizes of the dense ({dp}) "
                               f"and expert ({edp}) layers must be equal (as Megatron requires)")
    groups = {d: orthogonal_groups(dense, toks, d) for d in ("tp", "cp", "dp", "pp")}
    groups["ep"] = orthogonal_groups(expert, toks, "ep")
    extra = {"dp_cp": orthogonal_groups(dense, toks, "dp-cp")} if cp > 1 else {}
    return Topology(groups, world_size, order="-".join(toks), source="sizes", extra=extra)


def infer_order(topo: Topology) -> str | None:
    """The first Megatron order (the default first, then every permutation of tp, cp, ep, dp, pp)
    whose generated TP/CP/DP/PP/EP groups equal ``topo``'s, or None."""
    s = topo.sizes
    if topo.world_size % max(1, s["tp"] * s["pp"] * s["cp"]):
        return None
    cands = [DEFAULT_ORDER] + ["-".join(p) for p in itertools.permutations(DIMS)]
    for o in cands:
        try:
            t = from_sizes(topo.world_size, s["tp"], s["pp"], s["cp"], s["ep"], o)
        except StreamtraceError:
            continue
        if all(t.groups[d] == topo.groups[d] for d in DIMS):
            return o
    return None


# -- readers -------------------------------------------------------------------------

def parse_traceviz_txt(text: str) -> dict:
    """Groups from Megatron-TraceViz's ``unique_parallel_groups_*.txt``: ``{"tp": [[0, 1], ...],
    ...}`` for each section present, plus ``"replicas"`` (``FULL MODEL RANK GROUPS``), ``"sizes"``
    (the ``XX Size:`` lines; ``world``) and ``"global_batch_size"`` when given."""
    out: dict = {}
    marks = [(m.start(), m.end(), m.group(2).lower()) for m in _TXT_SECTION.finditer(text)]
    marks += [(m.start(), m.end(), "replicas") for m in _TXT_REPLICAS.finditer(text)]
    marks.sort()
    for k, (_, end, key) in enumerate(marks):
        stop = marks[k + 1][0] if k + 1 < len(marks) else len(text)
        body = text[end:stop]
        cut = min([i for i in (body.find("Total groups"), body.find("Total model replicas")) if i >= 0],
                  default=len(body))
        out[key] = [[int(x) for x in g.split(",") if x.strip()] for g in _TXT_GROUP.findall(body[:cut])]
    sizes = {m.group(1).lower(): int(m.group(2)) for m in _TXT_SIZE.finditer(text)}
    if sizes:
        out["sizes"] = sizes
    m = _TXT_GBS.search(text)
    if m:
        out["global_batch_size"] = int(m.group(1))
    return out


def topology_from_traceviz(text: str, source: str = "traceviz") -> Topology:
    """:class:`Topology` from a TraceViz text; raises :class:`StreamtraceError` when it has no sections."""
    p = parse_traceviz_txt(text)
    if not any(d in p for d in DIMS):
        raise StreamtraceError(f"{source}: not a topology file (no '... PARALLEL (TP) GROUPS' sections)")
    world = p.get("sizes", {}).get("world")
    t = Topology({d: p.get(d) for d in DIMS}, world, replicas=p.get("replicas") or None, source=source)
    t.order = infer_order(t)
    return t


def pg_config_entries(metadata: dict, rank: int | None = None) -> tuple[list, int | None]:
    """``(entries, world_size)`` from one trace's metadata: the ``distributedInfo.pg_config`` list
    (``{"pg_name", "pg_desc", "ranks", ...}``; a dict keyed by name is accepted) — for a
    streamtrace merged trace, every recorded rank's (or only ``rank``'s)."""
    infos = []
    st = metadata.get("streamtrace")
    if isinstance(st, dict) and st.get("kind") == "merged":
        infos = [r.get("distributedInfo") for r in st.get("ranks") or [] if rank is None or r.get("rank") == rank]
    infos.append(metadata.get("distributedInfo"))
    entries, world = [], None
    for di in infos:
        if not isinstance(di, dict):
            continue
        world = world or (di.get("world_size") if isinstance(di.get("world_size"), int) else None)
        cfg = di.get("pg_config")
        if isinstance(cfg, dict):
            cfg = [dict(v, pg_name=k) for k, v in cfg.items() if isinstance(v, dict)]
        entries += [e for e in cfg or [] if isinstance(e, dict)]
    return entries, world


def from_pg_config(entries, world_size: int | None = None, source: str = "pg_config") -> Topology:
    """:class:`Topology` from process-group entries (``pg_desc`` names the dimension; see
    :data:`_PG_DESC_DIM`), e.g. the union of every rank's ``distributedInfo.pg_config``.
    Raises :class:`StreamtraceError` when no entry names a TP/CP/EP/DP/PP group."""
    groups: dict = {}
    for e in entries:
        desc, ranks = str(e.get("pg_desc") or ""), e.get("ranks")
        if isinstance(ranks, str):
            ranks = [int(x) for x in re.findall(r"\d+", ranks)]
        if not isinstance(ranks, list) or not ranks:
            continue
        for dim, rx in _PG_DESC_DIM:
            if rx.search(desc):
                g = tuple(sorted(int(r) for r in ranks))
                groups.setdefault(dim, set()).add(g)
                break
    if not any(d in groups for d in DIMS):
        raise StreamtraceError(f"{source}: no process group in distributedInfo.pg_config names a TP/CP/EP/DP/PP "
                               f"group (pg_desc such as TENSOR_MODEL_PARALLEL_GROUP or TP_GROUP)")
    for d, gs in groups.items():
        flat = [r for g in gs for r in g]
        if len(flat) != len(set(flat)):
            raise StreamtraceError(f"{source}: {d.upper()} groups overlap: {sorted(gs)}")
    seen = [r for gs in groups.values() for g in gs for r in g]
    world = max(int(world_size or 0), max(seen) + 1)
    t = Topology({d: [list(g) for g in groups.get(d, ())] for d in DIMS}, world, source=source,
                 extra={"dp_cp": [list(g) for g in groups.get("dp_cp", ())]})
    t.order = infer_order(t)
    return t


def from_trace_folder(folder) -> Topology:
    """:class:`Topology` from the ``distributedInfo.pg_config`` of every trace under ``folder``
    (each rank lists only the groups it belongs to; their union is the whole topology).
    Failing that, a topology file in the folder or its parents (``unique_parallel_groups_*.txt``,
    ``streamtrace_topology.json``, ``parallel_topology.json``)."""
    from .discover import expand_inputs
    from .reader import TraceReader
    entries, world = [], None
    for p in expand_inputs([folder]):
        r = TraceReader(p)
        try:
            head = r.read_head()
            if not r.has_events:
                continue
            if "distributedInfo" not in head:
                head = TraceReader(p, salvage=True).read_metadata()
        except StreamtraceError:
            continue
        e, w = pg_config_entries(head)
        entries += e
        world = world or w
    if entries:
        try:
            return from_pg_config(entries, world, source=f"{folder} (distributedInfo.pg_config)")
        except StreamtraceError:
            pass
    for d in [Path(folder), *list(Path(folder).resolve().parents)[:2]]:
        cands = sorted(d.glob("unique_parallel_groups_*.txt")) + [d / "streamtrace_topology.json",
                                                                  d / "parallel_topology.json"]
        for c in cands:
            if c.is_file():
                return load_topology(c)
    raise StreamtraceError(f"{folder}: no topology: the traces carry no distributedInfo.pg_config naming TP/DP/PP "
                           f"groups and there is no topology file; give --tp/--pp/... or --topology FILE")


def _from_json(data: dict, source: str) -> Topology:
    groups = {}
    for d in DIMS:
        v = data.get(d)
        groups[d] = v if isinstance(v, list) else data.get(f"{d}_groups")
    if not any(groups.values()):
        raise StreamtraceError(f"{source}: not a topology JSON (no tp/dp/pp group lists)")
    world = data.get("world_size")
    extra = {"dp_cp": data.get("dp_cp")} if isinstance(data.get("dp_cp"), list) else {}
    t = Topology(groups, world if isinstance(world, int) else None, replicas=data.get("replicas") or None,
                 order=data.get("order") if isinstance(data.get("order"), str) else None, source=source,
                 extra=extra)
    if t.order is None:
        t.order = infer_order(t)
    return t


def load_topology(path) -> Topology:
    """Read a topology: a streamtrace / ``parallel_topology.json`` JSON file, a TraceViz text file,
    or a folder of traces (see :func:`from_trace_folder`).  Raises :class:`StreamtraceError`."""
    p = Path(path)
    if p.is_dir():
        return from_trace_folder(p)
    try:
        text = p.read_text()
    except OSError as e:
        raise StreamtraceError(f"{path}: cannot read topology ({e.strerror})") from None
    except UnicodeDecodeError:
        raise StreamtraceError(f"{path}: not a topology file (not text)") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise StreamtraceError(f"{path}: invalid topology JSON ({e})") from None
        if "traceEvents" in data:
            e, w = pg_config_entries(data)
            return from_pg_config(e, w, source=str(path))
        return _from_json(data, str(path))
    return topology_from_traceviz(text, str(path))


def write_topology(topo: Topology, path) -> Path:
    """Write ``topo`` atomically: TraceViz text when ``path`` ends with ``.txt``, JSON otherwise."""
    from .io import atomic_output
    p = Path(path)
    data = topo.to_traceviz_txt() if p.suffix == ".txt" else json.dumps(topo.to_json(), indent=1) + "\n"
    with atomic_output(p, compress=False) as f:
        f.write(data.encode())
    return p
