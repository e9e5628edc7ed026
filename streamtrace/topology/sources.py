"""Where a topology comes from besides sizes: the traces' ``distributedInfo.pg_config``
(``from_pg_config``, ``from_trace_folder``), streamtrace's topology JSON or a
``parallel_topology.json`` (``tp_groups`` / ``dp_groups`` / ... keys), or a TraceViz text file --
any of them through ``load_topology``."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..runtime.errors import StreamtraceError
from ..runtime.files import input_file_problem
from ..trace.discover import expand_inputs
from ..trace.metadata import MAX_RANK, pg_config_entries, world_size_of
from ..trace.reader import TraceReader
from .model import DIMS, EXTRA_KEYS, Topology, infer_order
from .traceviz import topology_from_traceviz

# process-group descriptions (distributedInfo.pg_config[].pg_desc) naming exactly one dimension:
# Megatron-LM's names, short *_GROUP names, and TorchTitan's DeviceMesh names (mesh_<dim>)
_PG_DESC_DIM = [
    ("tp", re.compile(r"^(TENSOR_MODEL_PARALLEL|TENSOR_PARALLEL|TP)(_GROUPS?)?$|^mesh_tp$", re.I)),
    ("pp", re.compile(r"^(PIPELINE_MODEL_PARALLEL|PIPELINE_PARALLEL|PP)(_GROUPS?)?$|^mesh_pp$", re.I)),
    ("cp", re.compile(r"^(CONTEXT_PARALLEL|CP)(_GROUPS?)?$|^mesh_cp$", re.I)),
    ("ep", re.compile(r"^(EXPERT_MODEL_PARALLEL|EXPERT_PARALLEL|EP)(_GROUPS?)?$|^mesh_ep$", re.I)),
    ("dp", re.compile(r"^(DATA_PARALLEL|DP)(_GROUPS?)?$|^mesh_dp(_shard)?$", re.I)),
    ("dp_cp", re.compile(r"^DATA_PARALLEL_GROUP_WITH_CP$|^mesh_dp_shard_cp$", re.I)),
    ("etp", re.compile(r"^(EXPERT_TENSOR_PARALLEL_GROUP|ETP_GROUP)$", re.I)),
    ("edp", re.compile(r"^(EXPERT_DATA_PARALLEL_GROUP|EDP_GROUP)$", re.I)),
    ("etp_ep", re.compile(r"^EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP$", re.I)),
    ("etp_ep_pp", re.compile(r"^EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP$", re.I)),
]


def from_pg_config(entries, world_size: int | None = None, source: str = "pg_config") -> Topology:
    """``Topology`` from process-group entries (``pg_desc`` names the dimension; see
    ``_PG_DESC_DIM``), e.g. the union of every rank's ``distributedInfo.pg_config``.
    Raises ``StreamtraceError`` when no entry names a TP/CP/EP/DP/PP group."""
    groups: dict = {}
    seen_entries: set = set()
    for e in entries:
        if not isinstance(e, dict):                   # (a damaged or foreign summary.json: not a group)
            continue
        desc, ranks = str(e.get("pg_desc") or ""), e.get("ranks")
        if _repeated(seen_entries, desc, ranks):
            continue
        if isinstance(ranks, str):
            ranks = [int(x) for x in re.findall(r"\d+", ranks)]
        if not isinstance(ranks, list) or not ranks:
            continue
        try:
            g = tuple(sorted(int(r) for r in ranks))
        except (TypeError, ValueError):               # (a rank that is not a number: not a group)
            continue
        for dim, rx in _PG_DESC_DIM:
            if rx.search(desc):
                groups.setdefault(dim, set()).add(g)
                break
    if not any(d in groups for d in DIMS):
        raise StreamtraceError(f"{source}: no process group in distributedInfo.pg_config names a TP/CP/EP/DP/PP "
                               f"group (pg_desc such as TENSOR_MODEL_PARALLEL_GROUP or TP_GROUP)")
    seen = [r for gs in groups.values() for g in gs for r in g]
    if min(seen) < 0 or max(seen) > MAX_RANK:
        raise StreamtraceError(f"{source}: a process group lists rank {min(seen) if min(seen) < 0 else max(seen):,}, "
                               f"not a rank from 0 to {MAX_RANK:,}")
    for d, gs in groups.items():
        flat = [r for g in gs for r in g]
        if len(flat) != len(set(flat)):
            raise StreamtraceError(f"{source}: {d.upper()} groups overlap: {sorted(gs)}")
    world = max(world_size_of(world_size) or 0, max(seen) + 1)
    t = Topology({d: [list(g) for g in groups.get(d, ())] for d in DIMS}, world, source=source,
                 extra={k: [list(g) for g in groups.get(k, ())] for k in EXTRA_KEYS})
    t.order = infer_order(t)
    return t


def _repeated(seen: set, desc: str, ranks) -> bool:
    """Whether ``from_pg_config`` has read an entry of this description and ranks before (added to
    ``seen`` otherwise): every rank lists the groups it knows, so the union of a job's ranks' entries
    repeats each group once for each rank that lists it (4,096 synthetic ranks: 16,384 entries,
    2,065 distinct, 17.9 M ranks parsed and sorted, 2.4 s; once each: a copy as a tuple, in C).  An
    entry whose ranks cannot be a key (not a str or a list of hashable values) is never a repeat."""
    key = ranks if isinstance(ranks, str) else tuple(ranks) if isinstance(ranks, list) else None
    if key is None:
        return False
    try:
        if (desc, key) in seen:
            return True
        seen.add((desc, key))
    except TypeError:                                  # (a list holding a list or a dict)
        pass
    return False


def from_trace_folder(folder) -> Topology:
    """``Topology`` from the ``distributedInfo.pg_config`` of every trace under ``folder``
    (each rank lists only the groups it belongs to; their union is the whole topology).
    Failing that, a topology file in the folder or its parents (``unique_parallel_groups_*.txt``,
    ``streamtrace_topology.json``, ``parallel_topology.json``)."""
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
                           f"groups and there is no topology file beside them; give one (streamtrace topology "
                           f"--tp N --pp N --world-size N --write FILE writes one)")


def from_json(data: dict, source: str) -> Topology:
    """A ``Topology`` from a topology JSON's dict (``source``: where it came from, for messages)."""
    groups = {}
    for d in DIMS:
        v = data.get(d)
        groups[d] = v if isinstance(v, list) else data.get(f"{d}_groups")
    if not any(groups.values()):
        raise StreamtraceError(f"{source}: not a topology JSON (no tp/dp/pp group lists)")
    world = data.get("world_size")
    extra = {k: data.get(k) for k in EXTRA_KEYS if isinstance(data.get(k), list)}
    t = Topology(groups, world if isinstance(world, int) else None, replicas=data.get("replicas") or None,
                 order=data.get("order") if isinstance(data.get("order"), str) else None, source=source,
                 extra=extra)
    if t.order is None:
        t.order = infer_order(t)
    if isinstance(data.get("training"), dict):
        t.training = data["training"]
    return t


def load_topology(path) -> Topology:
    """Read a topology: a streamtrace / ``parallel_topology.json`` JSON file, a TraceViz text file,
    or a folder of traces (see ``from_trace_folder``).  Raises ``StreamtraceError``."""
    p = Path(path)
    if p.is_dir():
        return from_trace_folder(p)
    problem = input_file_problem(p)
    if problem is not None:                # (a FIFO would be waited on)
        raise StreamtraceError(f"{path}: cannot read topology ({problem})")
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
        return from_json(data, str(path))
    return topology_from_traceviz(text, str(path))
