"""The parallel topology model: which ranks form each TP / CP / EP / DP / PP group, and the model
replicas (``Topology``); Megatron's rank order (``parse_order``, the one parser of it),
the groups Megatron-LM's ``RankGenerator`` builds from sizes and an order (``from_sizes``,
``megatron/core/parallel_state.py``), and a topology from the groups of a running job
(``topology_from_groups``, for ``streamtrace.topology.capture``).

Group lists are ordered as Megatron orders them: every group ascending, groups by their first rank.
(Megatron's ``generate_masked_orthogonal_rank_groups`` enumerates group and member indices in
mixed radix with increasing strides, so both enumerations are increasing in the rank.)

Expert groups (Megatron's expert ``RankGenerator``, ``--etp`` defaulting to ``--tp``) sit beside the five
dimensions, in ``Topology.extra`` and the JSON under their own keys (``EXPERT_GROUPS``): ``etp``
(expert tensor parallel, ``EXPERT_TENSOR_PARALLEL_GROUP``), ``edp`` (expert data parallel,
``EXPERT_DATA_PARALLEL_GROUP``: MoE gradient reduction), ``etp_ep``
(``EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP``: token dispatch with the all-gather dispatcher) and
``etp_ep_pp`` (``EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP``).  ``Topology.dim_of`` names a
process group ``ETP`` / ``EDP`` / ``EP`` by them only when no dense group has the same ranks (with
``etp = 1`` and ``ep = tp`` the EP groups *are* the TP groups): a Megatron group description
(``dim_of_desc``) is the exact answer and wins over rank sets.

A **model replica** is a set of ranks that together hold one full copy of the model: the connected
components of the TP, CP, EP and PP groups (ranks linked by any of them).  With EP = 1 this is "all
ranks of one DP index", as TraceViz's ``FULL MODEL RANK GROUPS (by DP Rank)``; with EP > 1 the
expert-parallel groups join ``ep`` consecutive DP indices (Megatron's expert-data-parallel index).
Other sources of a topology: ``sources`` (files, traces) and
``traceviz`` (Megatron-TraceViz's text).
"""
from __future__ import annotations

import itertools
from collections import Counter

import numpy as np

from ..runtime.errors import StreamtraceError, TopologyError

DIMS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
#: expert groups: key -> (the expert RankGenerator's token, the dimension ``Topology.dim_of`` names them)
EXPERT_GROUPS = {"etp": ("tp", "ETP"), "edp": ("dp", "EDP"), "etp_ep": ("tp-ep", "EP"), "etp_ep_pp": ("tp-ep-pp", None)}
#: group lists a topology may hold beside the five dimensions (JSON keys; ``dp_cp``: DP x CP)
EXTRA_KEYS = ("dp_cp",) + tuple(EXPERT_GROUPS)
#: Megatron-LM's process-group descriptions (``group_desc`` in ``megatron/core/parallel_state.py``, seen
#: as ``pg_desc`` in traces) that name exactly one parallel dimension; combined groups (MODEL_PARALLEL,
#: TENSOR_AND_DATA_PARALLEL, ...) and EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP name none
MEGATRON_GROUP_DIM = {
    "TENSOR_MODEL_PARALLEL_GROUP": "TP", "CONTEXT_PARALLEL_GROUP": "CP", "PIPELINE_MODEL_PARALLEL_GROUP": "PP",
    "DATA_PARALLEL_GROUP": "DP", "DATA_PARALLEL_GROUP_WITH_CP": "DP", "DATA_PARALLEL_GROUP_WITH_CP_AG": "DP",
    "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP": "DP", "EXPERT_MODEL_PARALLEL_GROUP": "EP",
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": "EP", "EXPERT_TENSOR_PARALLEL_GROUP": "ETP",
    "EXPERT_DATA_PARALLEL_GROUP": "EDP"}


def dim_of_desc(desc) -> str | None:
    """The dimension (``"TP"``, ``"EDP"``, ...) a Megatron-LM process-group description names
    exactly (``MEGATRON_GROUP_DIM``; the hierarchical parts of a distributed-optimizer group,
    ``HIERARCHICAL_<desc>_L<k>``, and the ``_GLOO`` twins as their group), else None."""
    d = str(desc or "")
    if d.startswith("HIERARCHICAL_"):
        d = d[len("HIERARCHICAL_"):].rsplit("_L", 1)[0]
    if d.endswith("_GLOO"):
        d = d[:-len("_GLOO")]
    return MEGATRON_GROUP_DIM.get(d)


# -- Megatron's rank order ------------------------------------------------------------

def parse_order(order: str, sizes: dict | None = None) -> list[str]:
    """A Megatron rank order (``"tp-cp-ep-dp-pp"``: the first token varies fastest) as its tokens,
    with every dimension it omits appended, as Megatron's ``RankGenerator`` does (they must then
    have size 1 in ``sizes``, when given).  Raises ``TopologyError`` for
    an unknown or repeated token, or a dimension of size > 1 missing from the order."""
    toks = [t for t in str(order).lower().replace(" ", "").split("-") if t]
    bad = [t for t in toks if t not in DIMS]
    if bad or len(set(toks)) != len(toks) or not toks:
        raise TopologyError(f"bad rank order {order!r}: use the tokens tp, cp, ep, dp, pp once each, e.g. "
                            f"{DEFAULT_ORDER}")
    for d in DIMS:
        if d not in toks:
            if (sizes or {}).get(d, 1) != 1:
                raise TopologyError(f"rank order {order!r} omits {d} whose size is {sizes[d]}")
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
    toks = parse_order(order, sizes) if isinstance(order, str) else list(order)
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


def _first_holding(groups) -> dict:
    """``{rank: index of the first of groups (lists of ranks) that holds it}``."""
    out: dict = {}
    for i, g in enumerate(groups):
        for r in g:
            out.setdefault(r, i)
    return out


# -- the topology -------------------------------------------------------------------

class Topology:
    """Groups per dimension (``groups[d]``: list of ascending rank lists, ``d`` in ``DIMS``),
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
        self.training = None      # Megatron-LM's training arguments when recorded (streamtrace.topology.capture)
        self._by_set = {}
        for d in DIMS:
            for g in self.groups[d]:
                if len(g) > 1:
                    self._by_set.setdefault(frozenset(g), d.upper())
        for g in self.extra.get("dp_cp", []):
            if len(g) > 1:
                self._by_set.setdefault(frozenset(g), "DP")
        for key, (_, name) in EXPERT_GROUPS.items():      # after the dense ones: equal rank sets stay dense
            for g in self.extra.get(key, []) if name else []:
                if len(g) > 1:
                    self._by_set.setdefault(frozenset(g), name)
        self._of_rank = {d: _first_holding(gs) for d, gs in self.groups.items()}
        self._replica_of = _first_holding(self.replicas)

    # sizes: the size of the groups of each dimension (the largest, should they differ)
    @property
    def sizes(self) -> dict:
        return {d: max((len(g) for g in self.groups[d]), default=1) for d in DIMS}

    def dim_of(self, ranks) -> str | None:
        """Dimension of a process group given its ranks (``"TP"`` ... ``"PP"``, then ``"EDP"``,
        ``"ETP"``, ``"EP"`` for expert groups no dense group equals), or None when no group matches."""
        return self._by_set.get(frozenset(ranks)) if ranks else None

    def group_of(self, dim: str, rank: int) -> list[int] | None:
        """The ``dim`` group (``"tp"`` ...) that holds ``rank`` (the first, should groups overlap), or
        None.  O(1): a lookup in an index built once (a scan of the groups was O(world size) a call,
        and aggregate asks it for each rank's collectives)."""
        i = self._of_rank[dim].get(rank)
        return None if i is None else self.groups[dim][i]

    def stage_of(self, rank: int) -> int:
        """Pipeline stage of ``rank``: its position in its PP group (0 when it has none)."""
        g = self.group_of("pp", rank)
        return g.index(rank) if g else 0

    def replica_of(self, rank: int) -> int:
        """Index of the model replica holding ``rank`` (the first, should replicas overlap; -1 when
        none).  O(1), as ``group_of``."""
        return self._replica_of.get(rank, -1)

    def to_json(self) -> dict:
        """streamtrace's topology JSON (see the module docstring)."""
        out = {"format": "streamtrace-topology", "version": 1, "world_size": self.world_size,
               "order": self.order, "sizes": self.sizes}
        out.update({d: self.groups[d] for d in DIMS})
        out["replicas"] = self.replicas
        out.update(self.extra)
        if self.source:
            out["source"] = self.source
        if self.training:
            out["training"] = self.training
        return out

    @property
    def expert_sizes(self) -> dict:
        """``{"etp": n, "edp": n}``: the size of the expert groups the topology holds (none: ``{}``)."""
        return {k: max(len(g) for g in self.extra[k]) for k in ("etp", "edp") if self.extra.get(k)}

    def has_experts(self) -> bool:
        """True when the expert groups differ from the dense ones (EP > 1, or ETP != TP)."""
        es = self.expert_sizes
        return self.sizes["ep"] > 1 or es.get("etp", self.sizes["tp"]) != self.sizes["tp"]

    def summary_line(self) -> str:
        s, es = self.sizes, self.expert_sizes
        experts = f"; experts ETP{es.get('etp', s['tp'])} x EP{s['ep']} x EDP{es['edp']}" \
            if self.has_experts() and "edp" in es else ""
        return (f"world {self.world_size}: TP{s['tp']} x CP{s['cp']} x EP{s['ep']} x DP{s['dp']} x PP{s['pp']}"
                f"{', order ' + self.order if self.order else ''}{experts}; {len(self.replicas)} model replicas of "
                f"{len(self.replicas[0]) if self.replicas else 0} ranks; {len(self.groups['pp'])} PP groups")


def from_sizes(world_size: int, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1, order: str = DEFAULT_ORDER,
               etp: int | None = None) -> Topology:
    """Megatron-LM's groups for these sizes (``initialize_model_parallel``): ``dp = world / (tp*pp*cp)``;
    TP, CP, DP, PP from the dense ``RankGenerator(tp, ep=1, dp, pp, cp, order)``; EP and the expert
    groups (``extra``: etp, edp, etp_ep, etp_ep_pp; ``EXPERT_GROUPS``) from the expert
    ``RankGenerator(etp, ep, edp = world / (etp*ep*pp), pp, cp=1, order)``, ``etp`` (expert tensor
    parallel size) defaulting to ``tp``.  Raises ``StreamtraceError`` where Megatron refuses:
    sizes that do not fit, an order missing a dimension of size > 1 of either generator, an order not
    ending in ``pp`` (tested on the order as given, as Megatron does) whose dense and expert data-parallel
    sizes differ (pp > 1), dense and expert PP groups that differ."""
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
    toks = parse_order(order, {**dense, "ep": ep})
    etoks = parse_order(order, expert)        # Megatron checks each generator's sizes against the order
    if not (str(order).endswith("pp") or pp == 1 or edp == dp):      # Megatron tests the order as given
        raise StreamtraceError(f"--order {order!r}: without pp last, the data-parallel sizes of the dense ({dp}) "
                               f"and expert ({edp}) layers must be equal (as Megatron requires)")
    groups = {d: orthogonal_groups(dense, toks, d) for d in ("tp", "cp", "dp", "pp")}
    if orthogonal_groups(expert, etoks, "pp") != groups["pp"]:
        raise StreamtraceError(f"--order {order!r}: the expert layers' PP groups would differ from the dense ones "
                               f"(Megatron refuses this order for these sizes)")
    groups["ep"] = orthogonal_groups(expert, etoks, "ep")
    extra = {"dp_cp": orthogonal_groups(dense, toks, "dp-cp")} if cp > 1 else {}
    for key, (tok, _) in EXPERT_GROUPS.items():
        extra[key] = orthogonal_groups(expert, etoks, tok)
    return Topology(groups, world_size, order="-".join(toks), source="sizes", extra=extra)


def infer_order(topo: Topology) -> str | None:
    """The first Megatron order (the default first, then every permutation of tp, cp, ep, dp, pp)
    whose generated TP/CP/DP/PP/EP groups (and expert groups, those ``topo`` has; expert TP size from
    its ``etp`` groups) equal ``topo``'s, or None."""
    s = topo.sizes
    if topo.world_size % max(1, s["tp"] * s["pp"] * s["cp"]):
        return None
    etp = max((len(g) for g in topo.extra.get("etp", [])), default=None)
    cands = [DEFAULT_ORDER] + ["-".join(p) for p in itertools.permutations(DIMS)]
    for o in cands:
        try:
            t = from_sizes(topo.world_size, s["tp"], s["pp"], s["cp"], s["ep"], o, etp)
        except StreamtraceError:
            continue
        if all(t.groups[d] == topo.groups[d] for d in DIMS) and \
                all(t.extra[k] == topo.extra[k] for k in EXPERT_GROUPS if k in topo.extra):
            return o
    return None


# -- readers -------------------------------------------------------------------------


def _normalise(groups) -> list:
    """Sorted, de-duplicated list of sorted rank tuples."""
    return sorted({tuple(sorted({int(r) for r in g})) for g in groups if len(g)})


def _as_lists(groups) -> list:
    return [list(g) for g in _normalise(groups)]


def _check_partition(dim: str, groups: list, world_size: int) -> int:
    """Groups of one dimension must split ``range(world_size)`` into equal parts; returns the size."""
    seen = [r for g in groups for r in g]
    if sorted(seen) != list(range(world_size)):
        dup = sorted(r for r, n in Counter(seen).items() if n > 1)
        miss = sorted(set(range(world_size)) - set(seen))
        extra = sorted(r for r in set(seen) if not 0 <= r < world_size)
        raise TopologyError(f"{dim.upper()} groups do not split ranks 0..{world_size - 1} "
                         f"(ranks in two groups: {dup[:8]}, missing: {miss[:8]}, out of range: {extra[:8]})")
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        raise TopologyError(f"{dim.upper()} groups have different sizes {sorted(sizes)}")
    return sizes.pop()


def replicas_by_order(sizes: dict, world_size: int, order: str = DEFAULT_ORDER) -> list:
    """Model replicas as Megatron-TraceViz computes them (one per DP coordinate: every rank holding
    that DP index) assuming the rank layout ``order``: rank = c0 + s0*(c1 + s1*(c2 + ...)) over the
    dimensions of ``order``, the first varying fastest.  ``sizes`` gives tp/cp/ep/pp; dp is the rest of the world."""
    dims = parse_order(order)
    other = 1
    for d in ("tp", "cp", "ep", "pp"):
        other *= int(sizes.get(d, 1))
    if other < 1 or world_size % other:
        raise TopologyError(f"world size {world_size} is not a multiple of tp*cp*ep*pp = {other}")
    full = dict(sizes, dp=world_size // other)
    stride = 1
    for d in dims:
        if d == "dp":
            break
        stride *= int(full.get(d, 1))
    dp = full["dp"]
    return [[r for r in range(world_size) if (r // stride) % dp == i] for i in range(dp)]


def replicas_from_groups(groups: dict, world_size: int) -> list:
    """Model replicas from the groups themselves: the sets of ranks linked through TP, CP, EP or PP
    groups (connected components).  Each holds one full copy of the model; with EP = 1 replica i
    is every rank with DP index i, whatever the rank order, and with EP > 1 Megatron's expert groups
    join the DP indices one replica spans.  Sorted by first rank."""
    return connected_components(world_size, [groups.get(d) or [] for d in ("tp", "cp", "ep", "pp")])


def topology_from_groups(groups: dict, world_size: int, order: str = DEFAULT_ORDER,
                         check: bool = True) -> dict:
    """streamtrace's topology dict from the groups of each dimension.

    ``groups``: ``{"tp": [[0, 1], [2, 3]], "dp": ...}`` (any of tp/cp/ep/dp/pp; missing ones
    mean size 1, each rank alone).  Returns ``{"world_size", "order", "sizes", "tp", "cp", "ep",
    "dp", "pp", "replicas"}``, every group entry a sorted, de-duplicated list of sorted rank lists;
    ``order`` is recorded as given (validated).

    Replicas (one per DP index, each a full model): ``replicas_from_groups``, the ranks linked
    through TP/CP/EP/PP groups -- the same sets TraceViz derives from the sizes under the rank order
    tp-cp-ep-dp-pp (``replicas_by_order``), but right for any order.  ``check``: raise
    ValueError unless each dimension's groups split the world into equal parts.
    """
    world_size = int(world_size)
    if world_size < 1:
        raise TopologyError(f"world size must be >= 1, got {world_size}")
    order_dims = parse_order(order)
    unknown = sorted(set(groups) - set(DIMS))
    if unknown:
        raise TopologyError(f"unknown parallel dimension(s) {unknown}: expected {', '.join(DIMS)}")
    out = {"world_size": world_size, "order": "-".join(order_dims), "sizes": {}}
    for d in DIMS:
        g = _as_lists(groups.get(d) or [])
        if not g:
            g = [[r] for r in range(world_size)]
        out["sizes"][d] = _check_partition(d, g, world_size) if check else max(len(x) for x in g)
        out[d] = g
    if not check:    # ranks outside the world cannot be placed in a replica
        bad = sorted({r for d in DIMS for x in out[d] for r in x if not 0 <= r < world_size})
        if bad:
            raise TopologyError(f"ranks {bad[:8]} are outside 0..{world_size - 1}")
    out["replicas"] = replicas_from_groups(out, world_size)
    return out
