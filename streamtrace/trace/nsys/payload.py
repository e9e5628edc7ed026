"""NCCL's NVTX payloads in an export: the communicator, rank, world size and message size that
NCCL attaches to its NVTX ranges (domain ``"NCCL"``), decoded with the payload schemas the export
holds (``NVTX_PAYLOAD_SCHEMAS`` / ``NVTX_PAYLOAD_SCHEMA_ENTRIES``).

Sources: NVIDIA/nccl ``src/include/nvtx_payload_schemas.h`` (each range's payload is a C struct:
``NcclNvtxParamsCommInitRank`` = communicator id (uint64), number of ranks (int), rank (int), CUDA
device (int); the collectives' = communicator id, message size in bytes (size_t) and, by kind, the
reduction operation, the root or the peer rank) and NVTX's ``nvToolsExtPayload.h`` (the entry type
codes of ``ENTRY_TYPES``; a registered enum, code >= 2**24, is an ``int``).

An export made with ``nsys export --include-blobs=true`` holds each range's payload bytes in
``NVTX_EVENTS.binaryData`` (decoded here as the struct, little-endian, each entry at the schema's
``offset`` or, where the export leaves it NULL, at the next naturally aligned place); older exports
render it as JSON in ``jsonText`` (decoded as a ``{entry name: value}`` object).  The schema of a
payload is the one of the NCCL domain whose entry names fit the range's NCCL function
(``FAMILIES``) and whose size is the payload's."""
from __future__ import annotations

import json
import re
import struct

#: NVTX payload entry type code -> struct format (little-endian, LP64), from nvToolsExtPayload.h
ENTRY_TYPES = {1: "b", 2: "B", 3: "h", 4: "H", 5: "i", 6: "I", 7: "q", 8: "Q", 9: "q", 10: "Q", 11: "b",
               12: "B", 13: "h", 14: "H", 15: "i", 16: "I", 17: "q", 18: "Q", 19: "f", 20: "d", 22: "Q", 23: "Q"}
ENUM_BASE = 1 << 24          # entry types from here up are registered enums (an int)

COMM, RANK, NRANKS, DEVICE = "NCCL communicator ID", "Rank", "No. of ranks", "CUDA device"
SIZE, REDOP, PEER, ROOT = "Message size [bytes]", "Reduction operation", "Peer rank", "Root"

#: NCCL function (range name) -> the entry names its payload schema has, after nvtx_payload_schemas.h
FAMILIES = [
    (re.compile(r"^ncclCommInitRank"), {COMM, NRANKS, RANK, DEVICE}),
    (re.compile(r"^nccl(Send|Recv)$"), {COMM, SIZE, PEER}),
    (re.compile(r"^nccl(AllReduce|ReduceScatter)$"), {COMM, SIZE, REDOP}),
    (re.compile(r"^ncclReduce$"), {COMM, SIZE, ROOT, REDOP}),
    (re.compile(r"^ncclBroadcast$"), {COMM, SIZE, ROOT}),
    (re.compile(r"^nccl(AllGather|AlltoAll|AllToAll|Gather|Scatter)$"), {COMM, SIZE}),
]


def load_schemas(conn, tables, domain_id) -> list[dict]:
    """The payload schemas of NVTX domain ``domain_id``: ``[{"id", "size", "entries": [(name,
    type code, offset or None)]}]`` in schema id order; [] when the export has none."""
    s, e = "NVTX_PAYLOAD_SCHEMAS", "NVTX_PAYLOAD_SCHEMA_ENTRIES"
    if s not in tables or e not in tables or domain_id is None:
        return []
    out = {}
    for sid, size in conn.execute(f"SELECT schemaId, payloadSize FROM [{s}] WHERE domainId = ?", (domain_id,)):
        out.setdefault(sid, {"id": sid, "size": size, "entries": []})
    for sid, name, typ, off in conn.execute(f"SELECT schemaId, name, type, offset FROM [{e}] WHERE domainId = ? "
                                            "ORDER BY schemaId, idx", (domain_id,)):
        if sid in out:
            out[sid]["entries"].append((str(name), int(typ or 0), off))
    return [out[k] for k in sorted(out)]


def entry_layout(entries) -> list[tuple[str, str, int]]:
    """``(name, struct format, byte offset)`` of each decodable entry: the given offset, else the
    end of the previous entry rounded up to the entry's own size (C's natural alignment)."""
    out, pos = [], 0
    for name, typ, off in entries:
        fmt = "i" if typ >= ENUM_BASE else ENTRY_TYPES.get(typ)
        if fmt is None:
            return out                       # an entry we cannot size: nothing after it is placed
        size = struct.calcsize("<" + fmt)
        pos = off if isinstance(off, int) else (pos + size - 1) // size * size
        out.append((name, fmt, pos))
        pos += size
    return out


def decode_struct(blob: bytes, entries) -> dict:
    """``{entry name: value}`` of a payload struct laid out by ``entries`` (entries past the
    blob's end are left out)."""
    out = {}
    for name, fmt, off in entry_layout(entries):
        size = struct.calcsize("<" + fmt)
        if off + size <= len(blob):
            out[name] = struct.unpack_from("<" + fmt, blob, off)[0]
    return out


def pick_schema(range_name: str, size: int, schemas) -> dict | None:
    """The schema of a payload of ``size`` bytes on the NCCL range ``range_name``: the one whose
    entry names are the function's (``FAMILIES``) and whose size is ``size`` (or unknown)."""
    want = next((names for rx, names in FAMILIES if rx.search(range_name)), None)
    if want is None:
        return None
    for s in schemas:
        if {e[0] for e in s["entries"]} == want and (not s["size"] or s["size"] == size):
            return s
    return None


def decode(range_name: str, blob, json_text, schemas) -> dict | None:
    """The payload of one NCCL range: from ``binaryData`` (``blob``) with its schema, else from
    ``jsonText``; None when there is none or it cannot be read."""
    if isinstance(blob, (bytes, bytearray, memoryview)) and len(blob):
        s = pick_schema(range_name, len(blob), schemas)
        return decode_struct(bytes(blob), s["entries"]) if s else None
    if isinstance(json_text, str) and json_text.strip().startswith("{"):
        try:
            v = json.loads(json_text)
        except ValueError:
            return None
        return v if isinstance(v, dict) else None
    return None


def comm_args(range_name: str, p: dict, nranks: dict, comm_ranks: dict | None = None) -> dict:
    """The collective-args row (Kineto's ``record_param_comms`` keys, as
    ``streamtrace.analyze.classify.collective_info`` reads them) of one decoded NCCL payload:
    message bytes as ``In/Out msg nelems`` of ``uint8``, the communicator id (hex) as the process
    group name, its size from ``nranks`` (communicator id -> ``No. of ranks`` of its
    ``ncclCommInitRank``), its members as ``Process Group Ranks`` from ``comm_ranks`` (communicator
    id -> the job's rank of each of its ranks, where the export holds them all: the group a Send /
    Recv's peer is found in), marked ``"@source": "nvtx_payload"`` (the ``bytes_source`` it gives,
    ``streamtrace.analyze.collective_facts``)."""
    comm = p.get(COMM)
    row = {"@source": "nvtx_payload",
           "Collective name": range_name[4:] if range_name.startswith("nccl") else range_name}
    if isinstance(p.get(SIZE), int):
        row.update({"In msg nelems": p[SIZE], "Out msg nelems": p[SIZE], "dtype": "uint8"})
    if isinstance(comm, int):
        row["Process Group Name"] = f"{comm:#x}"
        if comm in nranks:
            row["Group size"] = nranks[comm]
        if comm_ranks and comm in comm_ranks:
            row["Process Group Ranks"] = str(list(comm_ranks[comm]))
    return row
