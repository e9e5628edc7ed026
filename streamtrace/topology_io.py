"""Writing a job's parallel topology: streamtrace's topology JSON and Megatron-TraceViz's
``unique_parallel_groups_<timestamp>.txt`` (read back by :func:`streamtrace.topology.parse_traceviz_txt`
and by Megatron-TraceViz itself).

Pure Python (no torch): :mod:`streamtrace.capture` gathers each rank's groups in a running job and
hands them to :func:`topology_from_groups` and :func:`write_topology_files`.
"""
from __future__ import annotations

import datetime as _dt
import json
from collections import Counter
from pathlib import Path

from .io import atomic_output

DIMS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
TOPOLOGY_JSON = "streamtrace_topology.json"
TRACEVIZ_PREFIX = "unique_parallel_groups_"

_RULE = "=" * 80
_DASH = "-" * 50
# TraceViz sections, in the order it writes them (EP only when EP > 1). CP is not in
# TraceViz's layout; it is added after EP only when CP > 1 so the groups survive a round trip.
_SECTIONS = (("tp", "TENSOR PARALLEL (TP) GROUPS"), ("pp", "PIPELINE PARALLEL (PP) GROUPS"),
             ("dp", "DATA PARALLEL (DP) GROUPS"), ("ep", "EXPERT PARALLEL (EP) GROUPS"),
             ("cp", "CONTEXT PARALLEL (CP) GROUPS"))


def parse_order(order: str) -> list:
    """``"tp-cp-ep-dp-pp"`` -> ``["tp", "cp", "ep", "dp", "pp"]`` (first = fastest-varying rank
    coordinate, as in Megatron's ``RankGenerator``).  Dimensions left out are appended (they must
    then have size 1).  Raises ValueError on unknown or repeated names."""
    names = [d.strip().lower() for d in str(order).split("-") if d.strip()]
    bad = [d for d in names if d not in DIMS]
    if bad or len(set(names)) != len(names) or not names:
        raise ValueError(f"bad rank order {order!r}: expected a '-'-separated permutation of "
                         f"{'-'.join(DIMS)}")
    return names + [d for d in DIMS if d not in names]


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
        raise ValueError(f"{dim.upper()} groups do not split ranks 0..{world_size - 1} "
                         f"(ranks in two groups: {dup[:8]}, missing: {miss[:8]}, out of range: {extra[:8]})")
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"{dim.upper()} groups have different sizes {sorted(sizes)}")
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
        raise ValueError(f"world size {world_size} is not a multiple of tp*cp*ep*pp = {other}")
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
    from .topology import connected_components
    return connected_components(world_size, [groups.get(d) or [] for d in ("tp", "cp", "ep", "pp")])


def topology_from_groups(groups: dict, world_size: int, order: str = DEFAULT_ORDER,
                         check: bool = True) -> dict:
    """streamtrace's topology dict from the groups of each dimension.

    ``groups``: ``{"tp": [[0, 1], [2, 3]], "dp": ...}`` (any of tp/cp/ep/dp/pp; missing ones
    mean size 1, each rank alone).  Returns ``{"world_size", "order", "sizes", "tp", "cp", "ep",
    "dp", "pp", "replicas"}``, every group entry a sorted, de-duplicated list of sorted rank lists;
    ``order`` is recorded as given (validated).

    Replicas (one per DP index, each a full model): :func:`replicas_from_groups`, the ranks linked
    through TP/CP/EP/PP groups -- the same sets TraceViz derives from the sizes under the rank order
    tp-cp-ep-dp-pp (:func:`replicas_by_order`), but right for any order.  ``check``: raise
    ValueError unless each dimension's groups split the world into equal parts.
    """
    world_size = int(world_size)
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    order_dims = parse_order(order)
    unknown = sorted(set(groups) - set(DIMS))
    if unknown:
        raise ValueError(f"unknown parallel dimension(s) {unknown}: expected {', '.join(DIMS)}")
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
            raise ValueError(f"ranks {bad[:8]} are outside 0..{world_size - 1}")
    out["replicas"] = replicas_from_groups(out, world_size)
    return out


def group_sizes(topo: dict) -> dict:
    """``{"tp": 2, ...}``: the size of each dimension's groups (1 when absent)."""
    return {d: max((len(g) for g in topo.get(d) or []), default=1) for d in DIMS}


def format_traceviz_txt(topo: dict, timestamp=None, global_batch_size=None,
                        valid_ranks=None, error_ranks: int = 0) -> str:
    """The text of Megatron-TraceViz's ``unique_parallel_groups_<timestamp>.txt`` for ``topo``
    (a dict from :func:`topology_from_groups`), in TraceViz's layout: configuration, statistics,
    TP / PP / DP groups, EP groups when EP > 1 (and CP groups when CP > 1, an addition), then the
    full-model replicas.  ``timestamp``: a datetime (default now); ``global_batch_size``: written
    as given (``unknown`` when None)."""
    ts = timestamp or _dt.datetime.now()
    ws = int(topo["world_size"])
    s = group_sizes(topo)
    gbs = "unknown" if global_batch_size is None else global_batch_size
    valid = ws - error_ranks if valid_ranks is None else valid_ranks
    lines = [_RULE, "MEGATRON PARALLEL CONFIGURATION", _RULE,
             f"Timestamp: {ts if isinstance(ts, str) else ts.strftime('%Y-%m-%d %H:%M:%S.%f')}",
             f"TP Size: {s['tp']}", f"PP Size: {s['pp']}", f"CP Size: {s['cp']}", f"EP Size: {s['ep']}",
             f"World Size: {ws}", "", f"Global Batch Size: {gbs}", "",
             "STATISTICS", _DASH, f"Total Ranks: {ws}", f"Valid Ranks: {valid}", f"Error Ranks: {error_ranks}", ""]
    for dim, title in _SECTIONS:
        if dim in ("ep", "cp") and s[dim] <= 1:
            continue
        groups = topo.get(dim) or []
        lines += [title, _DASH]
        lines += [f"Group {k}: [{', '.join(map(str, g))}]" for k, g in enumerate(groups, 1)]
        lines += [f"Total groups: {len(groups)}", ""]
    replicas = topo.get("replicas") or []
    full = s["tp"] * s["ep"] * s["pp"] * s["cp"]
    lines += ["FULL MODEL RANK GROUPS (by DP Rank)", _DASH,
              "Each DP rank contains ONE complete model replica with ALL shards.",
              f"Full model = TP{s['tp']} x EP{s['ep']} x PP{s['pp']} x CP{s['cp']} = {full} ranks", _DASH]
    lines += [f"Group {k}: [{', '.join(map(str, g))}]" for k, g in enumerate(replicas)]
    lines += ["", f"Total model replicas (DP): {len(replicas)}"]
    return "\n".join(lines) + "\n"


def dumps_topology(topo: dict) -> str:
    """The topology JSON text: one key a line, each value compact."""
    body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, separators=(', ', ': '))}" for k, v in topo.items())
    return "{\n" + body + "\n}\n"


def traceviz_name(timestamp) -> str:
    """``unique_parallel_groups_<YYYYmmdd_HHMMSS>.txt``."""
    return f"{TRACEVIZ_PREFIX}{timestamp.strftime('%Y%m%d_%H%M%S')}.txt"


def write_topology_files(out_dir, topo: dict, timestamp=None, global_batch_size=None,
                         valid_ranks=None, error_ranks: int = 0) -> tuple:
    """Write ``out_dir/streamtrace_topology.json`` and ``out_dir/unique_parallel_groups_<ts>.txt``
    atomically (temporary file in ``out_dir``, then rename).  Returns both paths.
    Raises OSError when a file cannot be written (nothing is left at that path)."""
    out = Path(out_dir)
    ts = timestamp or _dt.datetime.now()
    json_path = out / TOPOLOGY_JSON
    txt_path = out / traceviz_name(ts)
    with atomic_output(json_path, compress=False) as f:
        f.write(dumps_topology(topo).encode())
    with atomic_output(txt_path, compress=False) as f:
        f.write(format_traceviz_txt(topo, ts, global_batch_size, valid_ranks, error_ranks).encode())
    return json_path, txt_path
