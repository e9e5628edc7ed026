"""Process groups of the synthetic jobs (``streamtrace.synth.job``): Megatron's rank order and groups.

``spec`` is a ``SynthSpec`` (``world_size``, ``tp``, ``pp``, ``dp``)."""
from __future__ import annotations

ORDER = "tp-cp-ep-dp-pp"
PG_DESC = {"DP": "DATA_PARALLEL_GROUP", "TP": "TENSOR_MODEL_PARALLEL_GROUP", "PP": "PIPELINE_MODEL_PARALLEL_GROUP"}


def build_topology(spec) -> dict:
    """Megatron groups for order tp-cp-ep-dp-pp (cp = ep = 1); ``replicas`` = ranks per DP replica."""
    tp, pp, ws = spec.tp, spec.pp, spec.world_size
    if min(tp, pp, ws) < 1 or ws % (tp * pp):
        raise ValueError(f"world_size {ws} is not a multiple of tp*pp = {tp * pp}")
    co = [(r % tp, (r // tp) % spec.dp, r // (tp * spec.dp)) for r in range(ws)]

    def groups(*dims):   # ranks sharing the coordinates ``dims`` (tp=0, dp=1, pp=2)
        d: dict = {}
        for r in range(ws):
            d.setdefault(tuple(co[r][i] for i in dims), []).append(r)
        return sorted(d.values())
    one = [[r] for r in range(ws)]
    return {"tp": groups(1, 2), "cp": one, "ep": one, "dp": groups(0, 2), "pp": groups(0, 1),
            "replicas": groups(1), "world_size": ws, "order": ORDER}


def process_groups(spec, topo: dict) -> list:
    """(pg_name, pg_desc, ranks) in Megatron's creation order: default, all DP, all TP, all PP groups."""
    return [(str(i), d, g) for i, (d, g) in enumerate([("default_pg", list(range(spec.world_size)))] + [(PG_DESC[k], g) for k in PG_DESC for g in topo[k.lower()]])]
