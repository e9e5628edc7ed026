"""Parallel topology: which ranks form each TP / CP / EP / DP / PP group.

Read from streamtrace's own topology JSON (``{"tp": [[0, 1], ...], "cp": ..., "ep": ...,
"dp": ..., "pp": ..., "replicas": ...}``), from a ``parallel_topology.json`` with
``tp_groups``/``dp_groups``/... keys, or from Megatron-TraceViz's
``unique_parallel_groups_<timestamp>.txt``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .errors import StreamtraceError

DIMS = ("tp", "cp", "ep", "dp", "pp")
_TXT_SECTION = re.compile(r"^(TENSOR|CONTEXT|EXPERT|DATA|PIPELINE) PARALLEL \((TP|CP|EP|DP|PP)\) GROUPS", re.M)
_TXT_GROUP = re.compile(r"^Group \d+: \[([\d,\s]*)\]", re.M)


class Topology:
    """Groups per dimension (lists of rank lists) and a lookup from a group's rank
    set to its dimension name (``"TP"`` ...)."""

    def __init__(self, groups: dict):
        self.groups = {d: [list(map(int, g)) for g in groups.get(d) or []] for d in DIMS}
        self._by_set = {}
        for d in DIMS:
            for g in self.groups[d]:
                if len(g) > 1:
                    self._by_set.setdefault(frozenset(g), d.upper())

    def dim_of(self, ranks) -> str | None:
        """Dimension of a process group given its ranks, or None when no group matches."""
        return self._by_set.get(frozenset(ranks)) if ranks else None

    def to_json(self) -> dict:
        return dict(self.groups)


def parse_traceviz_txt(text: str) -> dict:
    """Groups from Megatron-TraceViz's ``unique_parallel_groups_*.txt``."""
    out = {}
    sections = list(_TXT_SECTION.finditer(text))
    for k, m in enumerate(sections):
        end = sections[k + 1].start() if k + 1 < len(sections) else len(text)
        body = text[m.end():end]
        stop = body.find("Total groups")
        body = body[:stop] if stop >= 0 else body
        out[m.group(2).lower()] = [[int(x) for x in g.split(",") if x.strip()] for g in _TXT_GROUP.findall(body)]
    return out


def load_topology(path) -> Topology:
    """Read a topology file (JSON or TraceViz text).  Raises :class:`StreamtraceError`."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise StreamtraceError(f"{path}: cannot read topology ({e.strerror})") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise StreamtraceError(f"{path}: invalid topology JSON ({e})") from None
        groups = {d: data.get(d) if isinstance(data.get(d), list) else data.get(f"{d}_groups") for d in DIMS}
        return Topology(groups)
    groups = parse_traceviz_txt(text)
    if not groups:
        raise StreamtraceError(f"{path}: not a topology file (no '... PARALLEL (TP) GROUPS' sections)")
    return Topology(groups)
