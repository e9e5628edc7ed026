"""Writing a topology: streamtrace's topology JSON (``TOPOLOGY_JSON``) and Megatron-TraceViz's
``unique_parallel_groups_<timestamp>.txt``, atomically (``write_topology``,
``write_topology_files``).  Pure Python, no torch: ``streamtrace.topology.capture`` writes the
groups of a running job with it."""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from ..runtime.files import atomic_output
from .model import Topology
from .traceviz import format_traceviz_txt, traceviz_name

TOPOLOGY_JSON = "streamtrace_topology.json"


def dumps_topology(topo: dict) -> str:
    """The topology JSON text: one key a line, each value compact."""
    body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, separators=(', ', ': '))}" for k, v in topo.items())
    return "{\n" + body + "\n}\n"


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


def write_topology(topo: Topology, path) -> Path:
    """Write ``topo`` atomically: TraceViz text when ``path`` ends with ``.txt``, JSON otherwise."""
    p = Path(path)
    data = format_traceviz_txt(topo.to_json()) if p.suffix == ".txt" else json.dumps(topo.to_json(), indent=1) + "\n"
    with atomic_output(p, compress=False) as f:
        f.write(data.encode())
    return p
