"""The parallel topology of a job: which ranks form each TP / CP / EP / DP / PP group, the expert
groups (ETP, EDP, ...) Megatron builds beside them, and the model replicas.

Sources (all give a ``Topology``, whose JSON form is streamtrace's own topology file):
sizes and a rank order (``from_sizes``: the groups of Megatron-LM's ``RankGenerator``),
Megatron-TraceViz's ``unique_parallel_groups_*.txt`` (``traceviz``), the
traces' ``distributedInfo.pg_config``, or a topology JSON
(``streamtrace.topology.sources.load_topology``, which reads traces: import it from there).
Written by ``write_topology`` and ``write_topology_files``.  This package's own names need
numpy only (no numba, no pyarrow): ``streamtrace.topology.capture`` uses them inside training processes.
"""
from .files import TOPOLOGY_JSON, write_topology, write_topology_files
from .model import (DEFAULT_ORDER, DIMS, EXPERT_GROUPS, EXTRA_KEYS, Topology, connected_components, dim_of_desc,
                    from_sizes, infer_order, orthogonal_groups, parse_order, topology_from_groups)
from .traceviz import format_traceviz_txt, parse_traceviz_txt, topology_from_traceviz

__all__ = ["Topology", "DIMS", "DEFAULT_ORDER", "EXPERT_GROUPS", "EXTRA_KEYS", "dim_of_desc", "TOPOLOGY_JSON", "parse_order", "orthogonal_groups",
           "connected_components", "from_sizes", "infer_order", "topology_from_groups", "parse_traceviz_txt", "topology_from_traceviz",
           "format_traceviz_txt", "write_topology", "write_topology_files"]
