"""Processes of an export and the rank of each (``plan_processes``).

Identifiers: ``globalTid`` / ``globalPid`` hold the process and thread ids serialised, as
NVIDIA's "Common SQLite examples" (section "Serialized process and thread identifiers") gives
them: ``PID = globalTid / 0x1000000 % 0x1000000``, ``TID = globalTid % 0x1000000``; a
``globalPid`` is a ``globalTid`` whose TID bits are 0.  The bits above (>> 48) tell the
capturing target (host / VM) apart; ``globalTid >> 24`` is therefore one process of one host
(``process_key``), the key every join uses.

Rank of a process, first answer wins: the ``Rank`` of NCCL's ``ncclCommInitRank`` payload
(the communicator with the most ranks), a ``--rank-map`` entry (``"<pid>"`` or
``"<file name>:<pid>"``), else the process's place in (host, pid) order after ``base_rank``."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .db import open_export, table_columns

PID_BITS = 24


def pid_of(gtid: int) -> int:
    """The OS process id in a ``globalTid`` / ``globalPid``."""
    return (gtid >> PID_BITS) & 0xFFFFFF


def tid_of(gtid: int) -> int:
    """The OS thread id in a ``globalTid``."""
    return gtid & 0xFFFFFF


def host_of(gtid: int) -> int:
    """The capturing target's bits of a ``globalTid`` (0 for the first host)."""
    return gtid >> 48


def process_key(gtid: int) -> int:
    """``globalTid >> 24``: host and pid, the same for every thread of one process."""
    return gtid >> PID_BITS


@dataclass
class Process:
    """One process with GPU activity: ``key`` (``process_key``), ``pid``, ``host``, its
    ``rank`` and where that came from (``rank_source``: "NCCL payload", "rank map", "order")."""
    key: int
    pid: int
    host: int
    rank: int = -1
    rank_source: str = ""
    nccl: dict = field(default_factory=dict)


#: the rows whose process the readers can tell: the batches read any other value (NULL, negative,
#: TEXT ...) as -1, no process (SQLite's ``'text' >> 24`` is 0: a process of pid 0 that is not there)
_INTS = "WHERE typeof(globalPid) = 'integer' AND globalPid >= 0"


def gpu_process_keys(conn, tables) -> tuple[list[int], bool]:
    """Process keys of the processes with GPU activity (``globalPid`` of the kernel, memcpy and
    memset tables), sorted; ``(keys, True)``, or, when no GPU table carries ``globalPid``, the
    processes that made CUDA runtime calls and False.  Only integer ids of 0 or more count (``_INTS``)."""
    keys: set = set()
    found = False
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if t in tables and "globalPid" in tables[t]:
            found = True
            keys |= {r[0] for r in conn.execute(f"SELECT DISTINCT globalPid >> {PID_BITS} FROM [{t}] {_INTS}")}
    if not found and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables and "globalTid" in tables["CUPTI_ACTIVITY_KIND_RUNTIME"]:
        keys = {r[0] for r in conn.execute(f"SELECT DISTINCT globalTid >> {PID_BITS} FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                           f"{_INTS.replace('globalPid', 'globalTid')}")}
    return sorted(keys), found


def plan_processes(path, keys, nccl_ranks: dict, rank_map: dict | None, base_rank: int):
    """One ``Process`` per key, ranks assigned (module docstring); ``nccl_ranks``: process
    key -> (rank, number of ranks) from NCCL payloads.  Returns ``(processes, notices)``."""
    procs = sorted((Process(k, k & 0xFFFFFF, k >> (48 - PID_BITS)) for k in keys), key=lambda p: (p.host, p.pid))
    notices = []
    name = os.path.basename(str(path))
    ordered = 0
    for p in procs:
        if p.key in nccl_ranks:
            p.rank, p.rank_source = nccl_ranks[p.key][0], "NCCL payload"
            continue
        for k in (f"{path}:{p.pid}", f"{name}:{p.pid}", str(p.pid)):
            if rank_map and k in rank_map:
                p.rank, p.rank_source = int(rank_map[k]), "rank map"
                break
        else:
            p.rank, p.rank_source = base_rank + ordered, "order"
            ordered += 1
    if len(procs) > 1 and ordered:
        listing = ", ".join(f"pid {p.pid} -> rank {p.rank}" for p in procs if p.rank_source == "order")
        notices.append(f"{path}: {len(procs)} processes with GPU work and no NCCL rank payload for "
                       f"{ordered} of them: ranks by (host, pid) order ({listing}); --rank-map '<pid> <rank>' "
                       f"lines set them")
    return procs, notices


def count_gpu_processes(path) -> int:
    """How many processes of the export at ``path`` have GPU work (ranks it will hold)."""
    conn = open_export(path)
    try:
        return len(gpu_process_keys(conn, table_columns(conn))[0])
    finally:
        conn.close()


def unowned_warning(path, n: int) -> str:
    """The warning line for ``n`` GPU rows of the export at ``path`` left out because their
    ``globalPid`` is not a process id (not an integer of 0 or more): no process, so no rank."""
    return f"{path}: {n:,} GPU row(s) without a usable process id (globalPid not an integer of 0 or more) left out"
