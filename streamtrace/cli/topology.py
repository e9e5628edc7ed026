"""``streamtrace topology``: TP / CP / EP / DP / PP groups and model replicas."""
from __future__ import annotations

import json

from .common import Console, option

EXAMPLES = """
  streamtrace topology --tp 2 --pp 2 --world-size 8
  streamtrace topology --from runs/job42/iteration_10 --json
  streamtrace topology --tp 2 --pp 2 --world-size 8 --write unique_parallel_groups_x.txt
"""


@option("--tp", type=int, help="tensor-parallel size")
@option("--pp", type=int, help="pipeline-parallel size")
@option("--cp", type=int, help="context-parallel size")
@option("--ep", type=int, help="expert-parallel size")
@option("--etp", type=int, help="expert tensor-parallel size (default: --tp)")
@option("--order", help="Megatron rank order, first varies fastest (default: tp-cp-ep-dp-pp)")
@option("--world-size", type=int, help="number of ranks (dp = world / (tp*pp*cp))")
@option("--from", dest="source",
        help="TraceViz unique_parallel_groups_*.txt, a trace folder (distributedInfo.pg_config) "
        "or a topology JSON")
@option("--json", dest="as_json", action="store_true", help="print streamtrace's topology JSON")
@option("--write", help="write the topology to FILE (.txt: TraceViz layout; else JSON)")
@option("-q", "--quiet", action="store_true", help="print nothing but errors (with --write)")
@option("-v", "--verbose", action="store_true", help="every group, not only the first 8 (and tracebacks of errors)")
def topology(*, tp=None, pp=None, cp=None, ep=None, etp=None, order="tp-cp-ep-dp-pp", world_size=None, source=None,
             as_json=False, write=None, quiet=False, verbose=False):
    """Parallel groups (TP/CP/EP/DP/PP) and model replicas, from sizes + rank order (as Megatron-LM's
    RankGenerator), a TraceViz file, a trace folder's pg_config, or a topology JSON."""
    from ..topology import from_sizes, write_topology      # (the CLI's convention: see streamtrace.cli)
    from ..runtime.errors import StreamtraceError, UsageError
    from ..topology.sources import load_topology
    con = Console(quiet, verbose)
    if source:
        if any(v is not None for v in (tp, pp, cp, ep, etp, world_size)):
            raise UsageError("give either --from FILE or the sizes (--tp/--pp/... --world-size), not both")
        topo = load_topology(source)
    else:
        if world_size is None:
            raise UsageError("give --world-size N (with --tp/--pp/--cp/--ep), or --from FILE")
        try:
            topo = from_sizes(world_size, tp or 1, pp or 1, cp or 1, ep or 1, order, etp)
        except StreamtraceError as e:        # sizes from the command line that do not fit: a usage error
            raise UsageError(str(e)) from None
    if write:
        write_topology(topo, write)
    if as_json:
        print(json.dumps(topo.to_json(), indent=1))
    else:
        show = None if verbose else 8
        con.info(topo.summary_line())
        expert = [k for k in ("etp", "edp") if topo.has_experts() and k in topo.extra]
        for d in ("tp", "cp", "ep", "dp", "pp", *expert):
            g = topo.groups[d] if d in topo.groups else topo.extra[d]
            if max(len(x) for x in g) > 1:
                more = f" ... ({len(g)} groups)" if show and len(g) > show else ""
                con.info(f"  {d.upper()} groups: {' '.join(str(x).replace(' ', '') for x in g[:show])}{more}")
        con.info(f"  replicas: {' '.join(str(g).replace(' ', '') for g in topo.replicas[:show])}"
                 f"{' ...' if show and len(topo.replicas) > show else ''}")
        if write:
            con.info(f"wrote {write}")


topology.EXAMPLES = EXAMPLES
