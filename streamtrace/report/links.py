"""Collectives against their links (``link_section``): each collective kind x parallel
dimension x scope (``intra``: every member of its process group on one host, ``inter``: spanning
hosts) with its median bus bandwidth (``collectives.parquet``'s ``busbw_gbps``, nccl-tests'
definition) as a percentage of the link's peak, and the traffic split intra / inter node.

The link and its peak (``streamtrace.topology.hardware``): inside a node what joins that GPU
model's boards (named by the ``deviceProperties`` name: NVLink on SXM boards, the PCIe slot
between PCIe cards, Infinity Fabric), per direction; across hosts the network per GPU, ``--nic-gbps`` or the
platform's default; a CPU-only job (every rank without GPU events, e.g. gloo) has no GPU link and
no % of link.  A rank's host comes from its trace file's name only when it is the PyTorch
profiler's ``tensorboard_trace_handler`` default (``<host>_<pid>.<ns>.pt.trace.json``: the worker
name being ``socket.gethostname()`` and the pid, the time ``time.time_ns()``, 19 digits); a name
like ``worker0_step_12.1694128201545`` (13-digit ms time, one "pid" on every rank) is not trusted;
next from a host field of the trace's metadata in ``aggregate.json``'s parts (``host_name`` /
``hostname`` / ``host``); otherwise ranks are packed ``gpus_per_node`` to a host in rank order
(torchrun's and Slurm's default block placement): an assumption the section states.  A bus
bandwidth above 100 % of its link is physically impossible: such a row is flagged
(``over_peak``) as a sign of wrong hosts or a wrong peak.  Message sizes and bus bandwidth are read as the tables hold them; a collective whose
size is unknown (``msg_bytes`` <= 0) has no bandwidth and counts in no traffic.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..aggregate.folder import COLLECTIVES, Aggregate, columns, read_aggregate_table, table_file

_WORKER = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d{19}\.pt\.trace\.json(\.gz)?$")
_HOST_KEYS = ("host_name", "hostname", "host")
CPU_ONLY = "none (CPU-only job: no GPU link)"


def rank_hosts(parts: list, gpus_per_node: int) -> tuple[dict, str]:
    """``({rank: host}, how)`` from ``aggregate.json``'s ``parts`` (module docstring)."""
    ranks = {int(p["rank"]) for p in parts}
    named, meta = {}, {}
    for p in parts:
        m = _WORKER.match(Path(str(p.get("source") or "")).name)
        if m:
            named[int(p["rank"])] = m.group("host")
        h = next((p[k] for k in _HOST_KEYS if p.get(k)), None)
        if h:
            meta[int(p["rank"])] = str(h)
    if parts and len(named) == len(ranks):
        return named, "host names in the trace file names (tensorboard_trace_handler's <host>_<pid>.<ns> default)"
    if parts and len(meta) == len(ranks):
        return meta, "the host field of the trace metadata (file names not the <host>_<pid>.<ns> default)"
    return {}, (f"ranks packed {gpus_per_node} to a host in rank order (file names not the "
                "tensorboard_trace_handler <host>_<pid>.<ns> default, no host in the trace metadata)")


def _members(text) -> list:
    return [int(x) for x in re.findall(r"\d+", str(text or ""))]


def spans_hosts(meta: dict, gpus_per_node: int = 8):
    """``(fn, how)``: ``fn(pg_ranks, ranks)`` is True when a collective's process group (its
    ``pg_ranks`` text, else the ranks seen in it) spans more than one host (module docstring)."""
    hosts, how = rank_hosts(meta.get("parts") or [], gpus_per_node)

    def host(r):
        return hosts.get(r, f"node{r // gpus_per_node}") if hosts else r // gpus_per_node

    def fn(pg_ranks, ranks) -> bool:
        members = _members(pg_ranks) or _members(ranks)
        return len({host(r) for r in members}) > 1
    return fn, how


def inter_node(pg_ranks, ranks, meta: dict, gpus_per_node: int = 8) -> tuple[np.ndarray, str]:
    """``(bool array, how)``: per collective (its ``pg_ranks`` and ``ranks`` columns), whether its
    group spans hosts (``spans_hosts``, worked out once per distinct pair of strings)."""
    spans, how = spans_hosts(meta, gpus_per_node)
    cache: dict = {}
    out = np.zeros(len(pg_ranks), bool)
    for i, key in enumerate(zip(pg_ranks, ranks)):
        v = cache.get(key)
        if v is None:
            v = cache[key] = spans(*key)
        out[i] = v
    return out, how


def link_section(aggdir, meta: dict, spec, nic_gbps: float | None, gpus_per_node: int = 8) -> dict:
    """The section as a dict: ``rows`` (per collective, dim, scope: ``count``, ``bytes``,
    ``busbw_gbps_median``, ``link``, ``link_gbps``, ``pct_of_link``), ``traffic`` (bytes and % intra
    / inter), ``hosts_from``, ``nic_gbps`` and ``nic_from``.  ``spec``: the GPU's
    ``GpuSpec`` or None."""
    want = columns(COLLECTIVES, "collective", "parallel_dim", "pg_ranks", "ranks", "msg_bytes", "busbw_gbps")
    t = read_aggregate_table(aggdir, COLLECTIVES, want)
    n = len(t.get("collective", []))
    inter, how = inter_node(t["pg_ranks"], t["ranks"], meta, gpus_per_node) if n else (np.zeros(0, bool), "")
    cpu_only = meta.get("sources") == ["cpu"]
    nic = nic_gbps or (spec.nic_gbps if spec else None)
    size = np.asarray(t["msg_bytes"], np.int64) if n else np.zeros(0, np.int64)
    bw = np.asarray(t["busbw_gbps"], float) if n else np.zeros(0)
    known = size > 0
    groups: dict = defaultdict(list)                   # (collective, dim, scope) -> row numbers
    for i, key in enumerate(zip(t.get("collective", []), t.get("parallel_dim", []), inter.tolist())):
        groups[key].append(i)
    rows = []
    for (coll, dim, is_inter), idx in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2])):
        idx = np.asarray(idx)
        scope = "inter" if is_inter else "intra"
        link = "network" if is_inter else (spec.link if spec else "intra-node (GPU model unknown)")
        peak = nic if is_inter else (spec.link_gbps if spec else None)
        if cpu_only:
            link, peak = CPU_ONLY, None
        ok = idx[known[idx] & ~np.isnan(bw[idx])]
        med = float(np.median(bw[ok])) if len(ok) else None
        pct = 100 * med / peak if med is not None and peak else None
        rows.append({"collective": coll, "parallel_dim": dim or "", "scope": scope, "count": len(idx),
                     "bytes": int(size[idx][known[idx]].sum()), "busbw_gbps_median": med,
                     "link": link, "link_gbps": peak, "pct_of_link": pct,
                     "over_peak": pct is not None and pct > 100})
    traffic = {"intra": int(size[known & ~inter].sum()), "inter": int(size[known & inter].sum())}
    total = traffic["intra"] + traffic["inter"]
    return {"rows": rows, "traffic": {k: {"bytes": v, "pct": 100 * v / total if total else None}
                                      for k, v in traffic.items()},
            "hosts_from": how, "gpus_per_node": gpus_per_node, "cpu_only": cpu_only, "nic_gbps": nic,
            "nic_from": "--nic-gbps" if nic_gbps else (f"{spec.name} platform default" if spec else None),
            "from": f"{table_file(COLLECTIVES)}, {Aggregate.marker}"}
