"""Megatron-TraceViz's ``unique_parallel_groups_<timestamp>.txt``, read
(``parse_traceviz_txt``, ``topology_from_traceviz``) and written
(``format_traceviz_txt``) in one place.  TraceViz's sections, in the order it writes them;
CP is not in TraceViz's layout and is added after EP only when CP > 1, and the expert groups
Megatron builds (``EXPERT TENSOR PARALLEL (ETP)``, ``EXPERT DATA PARALLEL (EDP)``) after those when
the topology has experts (EP > 1 or ETP != TP), so the groups survive a round trip."""
from __future__ import annotations

import datetime as _dt
import re

from ..runtime.errors import StreamtraceError
from .model import DIMS, Topology, infer_order

_TXT_SECTION = re.compile(r"^(TENSOR|CONTEXT|EXPERT|DATA|PIPELINE|EXPERT TENSOR|EXPERT DATA) PARALLEL "
                          r"\((TP|CP|EP|DP|PP|ETP|EDP)\) GROUPS", re.M)


_TXT_GROUP = re.compile(r"^Group \d+: \[([\d,\s]*)\]", re.M)


_TXT_REPLICAS = re.compile(r"^FULL MODEL RANK GROUPS", re.M)


_TXT_SIZE = re.compile(r"^(TP|PP|CP|EP|DP|ETP|EDP|World) Size:\s*(\d+)", re.M)


_TXT_GBS = re.compile(r"^Global Batch Size:\s*(\d+)", re.M)


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
    """``Topology`` from a TraceViz text; raises ``StreamtraceError`` when it has no sections."""
    p = parse_traceviz_txt(text)
    if not any(d in p for d in DIMS):
        raise StreamtraceError(f"{source}: not a topology file (no '... PARALLEL (TP) GROUPS' sections)")
    world = p.get("sizes", {}).get("world")
    t = Topology({d: p.get(d) for d in DIMS}, world, replicas=p.get("replicas") or None, source=source,
                 extra={k: p[k] for k in ("etp", "edp") if p.get(k)})
    t.order = infer_order(t)
    return t


_RULE = "=" * 80


_DASH = "-" * 50


_SECTIONS = (("tp", "TENSOR PARALLEL (TP) GROUPS"), ("pp", "PIPELINE PARALLEL (PP) GROUPS"),
             ("dp", "DATA PARALLEL (DP) GROUPS"), ("ep", "EXPERT PARALLEL (EP) GROUPS"),
             ("cp", "CONTEXT PARALLEL (CP) GROUPS"), ("etp", "EXPERT TENSOR PARALLEL (ETP) GROUPS"),
             ("edp", "EXPERT DATA PARALLEL (EDP) GROUPS"))


TRACEVIZ_PREFIX = "unique_parallel_groups_"


def group_sizes(topo: dict) -> dict:
    """``{"tp": 2, ...}``: the size of each dimension's groups (1 when absent)."""
    return {d: max((len(g) for g in topo.get(d) or []), default=1) for d in DIMS}


def format_traceviz_txt(topo: dict, timestamp=None, global_batch_size=None,
                        valid_ranks=None, error_ranks: int = 0) -> str:
    """The text of Megatron-TraceViz's ``unique_parallel_groups_<timestamp>.txt`` for ``topo``
    (a dict from ``topology_from_groups``), in TraceViz's layout: configuration, statistics,
    TP / PP / DP groups, EP groups when EP > 1 (and CP groups when CP > 1, an addition; ETP and EDP
    groups when the topology has experts, EP > 1 or an expert TP size other than TP, additions too),
    then the full-model replicas.  ``timestamp``: a datetime (default now); ``global_batch_size``:
    written as given (``unknown`` when None)."""
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
    etp = max((len(g) for g in topo.get("etp") or []), default=s["tp"])
    experts = bool(topo.get("edp")) and (s["ep"] > 1 or etp != s["tp"])
    for dim, title in _SECTIONS:
        if dim in ("ep", "cp") and s[dim] <= 1 or dim in ("etp", "edp") and not experts:
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


def traceviz_name(timestamp) -> str:
    """``unique_parallel_groups_<YYYYmmdd_HHMMSS>.txt``."""
    return f"{TRACEVIZ_PREFIX}{timestamp.strftime('%Y%m%d_%H%M%S')}.txt"
