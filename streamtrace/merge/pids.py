"""Process and id rewriting of ``streamtrace merge``: every (rank, original pid) becomes a
distinct merged process, ``pid = 1 + rank * PID_STRIDE + slot`` (slot 0-99: CPU processes,
100 + d: GPU device d, 900+: string pids such as ``"Spans"``), named and sorted rank by rank by
merge's own process metadata events; flow ids, correlations and external ids become
``rank * 2**ID_BITS + id`` (``unique_id``)."""
from __future__ import annotations

from ..trace.writer import dumps_event, us_fragment

PID_STRIDE = 1000


ID_BITS = 40


GPU_PID_LIMIT = 1024   # Kineto gives GPU devices pid = device index; CPU processes their OS pid


GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"})


FLOW_PHASES = frozenset({"s", "f", "t"})


PROCESS_META = frozenset({"process_name", "process_labels", "process_sort_index"})


def unique_id(rank: int, raw):
    """Make a correlation / flow id unique across ranks: ``rank * 2**40 + raw`` for
    integers in [0, 2**40); other values become the string ``"r<rank>:<raw>"``.
    The transform is the same for flow ids and correlations, so an ``ac2g`` flow id
    still equals its launch's correlation after the merge."""
    if type(raw) is int and 0 <= raw < (1 << ID_BITS):
        return (rank << ID_BITS) | raw
    return f"r{rank}:{raw}"


def hashable(v):
    return v if isinstance(v, (int, str, float)) or v is None else dumps_event(v)


def classify_pid(pid):
    if type(pid) is int and 0 <= pid < GPU_PID_LIMIT:
        return "gpu"
    if type(pid) is int:
        return "cpu"
    return "other"


class PidMap:
    def __init__(self, rank):
        self.rank = rank
        self.map = {}
        self.info = {}
        self.ncpu = 0
        self.nother = 0

    def get(self, pid):
        key = hashable(pid)
        mp_ = self.map.get(key)
        if mp_ is None:
            kind = classify_pid(pid)
            if kind == "gpu":
                slot = 100 + pid
            elif kind == "cpu":
                slot = min(self.ncpu, 99)
                self.ncpu += 1
            else:
                slot = 900 + min(self.nother, 99)
                self.nother += 1
            mp_ = 1 + self.rank * PID_STRIDE + slot
            self.map[key] = mp_
            self.info[mp_] = {"rank": self.rank, "pid": pid, "kind": kind,
                              "device": pid if kind == "gpu" else None, "slot": slot}
        return mp_


def process_label(info, host=None, devices=None) -> str:
    """Perfetto process name for a merged pid, e.g. ``Rank 3 · GPU 3 (NVIDIA H100 80GB HBM3)``."""
    r = info["rank"]
    if info["kind"] == "gpu":
        dev = (devices or {}).get(info["device"])
        return f"Rank {r} · GPU {info['device']}" + (f" ({dev})" if dev else "")
    if info["kind"] == "cpu":
        where = f"host {host}, pid {info['pid']}" if host else f"pid {info['pid']}"
        return f"Rank {r} · CPU ({where})"
    return f"Rank {r} · {info['pid'] or 'global'}"


def process_meta_events(pmap: dict, rank: int, host, devices, first_out) -> list:
    """merge's own process metadata: ``process_name``, ``process_sort_index`` and
    ``process_labels`` for each merged pid of ``pmap`` (merged pid -> info, sorted),
    at the rank's earliest output ts ``first_out``."""
    t0 = us_fragment(first_out or 0)
    mevs = []
    for mpid, info_ in pmap.items():
        label = process_label(info_, host, devices)
        sort_index = rank * PID_STRIDE + info_["slot"]
        for name, args in (("process_name", {"name": label}),
                           ("process_sort_index", {"sort_index": sort_index}),
                           ("process_labels", {"labels": f"rank {rank}"})):
            mevs.append({"ph": "M", "name": name, "pid": mpid, "tid": 0,
                         "ts": t0, "args": dict(args, rank=rank)})
    return mevs
