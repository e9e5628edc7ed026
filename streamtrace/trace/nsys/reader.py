"""The reader of an Nsight Systems SQLite export (``NsysExport``): its processes and their
ranks, and its GPU activity (kernels, memcpy, memset) and CPU activity (CUDA runtime and driver
calls, NVTX ranges) as ``ROW_DTYPE`` batches, in start order or,
cheaper, in the tables' own (rowid) order (``ordered=False``), names as ids resolved on demand
(``NsysExport.names``).

What maps to what (the Kineto trace's terms, as the rest of streamtrace reads them):

* ``CUPTI_ACTIVITY_KIND_KERNEL`` -> category ``kernel``, name ``demangledName`` (else ``shortName``);
  ``..._MEMCPY`` -> ``gpu_memcpy`` named ``Memcpy HtoD`` etc. by ``copyKind``; ``..._MEMSET`` ->
  ``gpu_memset`` ``Memset``; device ``deviceId``, stream ``streamId``, the process ``globalPid``.
* ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``cuda_runtime`` (``eventClass`` 0) or ``cuda_driver`` (1:
  ``cuLaunchKernelEx`` ...), name without its ``_v7000``-style version suffix, on thread
  ``globalTid``; its ``correlationId`` links it to the GPU rows of the same process.
* ``NVTX_EVENTS`` push/pop and start/end ranges (``eventType`` 59, 60, 70, 71) -> ``user_annotation``
  on the thread that opened them, text from ``text`` or ``textId``; marks are left out.  NCCL's
  ranges carry their decoded payload as a collective-args row (``payload``).

Times are int64 ns from the export, unchanged (ns since the session start,
``TARGET_INFO_SESSION_START_TIME.utcEpochNs``)."""
from __future__ import annotations

import re
import sqlite3

import numpy as np

from ...runtime.errors import TraceError
from . import payload
from .db import export_meta, gpu_names, has_rowid, open_export, session_start_ns, Strings, table_columns
from .pagerows import page_batches
from .pages import BATCH_BYTES
from .processes import gpu_process_keys, plan_processes, PID_BITS
from .streams import BATCH, DRIVER, KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, ROW_DTYPE, col, read_order, table_batches

KERNEL_T, MEMCPY_T, MEMSET_T = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_T, NVTX_T = "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
#: ``copyKind`` (CUPTI's CUpti_ActivityMemcpyKind) -> direction, for the memcpy names
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
              10: "PtoP"}
#: NVTX_EVENTS.eventType of ranges: push/pop, start/end (and their NVTXT twins), ENUM_NSYS_EVENT_TYPE
RANGE_TYPES = (59, 60, 70, 71)
DOMAIN_CREATE = 75
TEXTS_T = "streamtrace_nvtx_texts"      # the temporary table of distinct inline NVTX texts
#: ``globalPid >> 24`` of an integer, any other value as it is (read as -1 and counted by
#: ``table_batches``: SQLite's ``'text' >> 24`` is 0, a process that is not there)
_SHIFTED = f"CASE WHEN typeof({{c}}) = 'integer' THEN {{c}} >> {PID_BITS} ELSE {{c}} END"
_VERSION_SUFFIX = re.compile(r"_v\d+$")
NO_PAYLOAD = ("unknown: the export holds no NCCL NVTX payload data (export with `nsys export --type sqlite "
              "--include-blobs=true`, and profile with NVTX tracing on)")


NO_ROWID = ("unknown: NVTX_EVENTS has no rowid (a WITHOUT ROWID table or a view), by which its NCCL payloads "
            "are read")


def _short_text(text="text") -> str:
    """SQL for an NVTX range's inline ``text`` without what PyTorch's ``emit_nvtx`` appends to the
    op name (``aten::add, seq = 12, op_id = 34, sizes = [...]`` -> ``aten::add``): the numbers differ
    on every call, so the names would grow with the capture instead of with the model."""
    cut = f"CASE WHEN instr({text}, ', seq = ') > 0 THEN instr({text}, ', seq = ') ELSE instr({text}, ', op_id = ') END"
    return f"CASE WHEN ({cut}) > 0 THEN substr({text}, 1, ({cut}) - 1) ELSE {text} END"


class NsysExport:
    """One export, read-only.  ``rank_map``: ``{"<pid>" or "<file>:<pid>": rank}``; ``base_rank``:
    the first rank given to processes ranked by order.  Attributes: ``version`` (the schema
    version string, or None when the export does not say), ``tables``, ``processes``
    (``Process``, by rank), ``notices``, ``warnings``,
    ``comm_rows`` (filled while ``cpu_batches`` runs), ``collective_bytes`` (``"from NCCL NVTX
    payloads"`` or the reason they are unknown), ``read_by`` (``{table: "pages" or "sql"}``, filled as
    the streams start).  ``pages``: read the integer tables (kernels, memcpy, memset, runtime) from the
    file's pages (``pagerows``, ``page_bytes`` of pages a batch) where it
    can, else with SQL (``batch`` rows a fetch); NVTX ranges always with SQL.  Raises
    ``TraceError`` for a file that is not a readable SQLite database
    or holds no activity table."""

    def __init__(self, path, rank_map=None, base_rank=0, batch=BATCH, pages=True, page_bytes=BATCH_BYTES):
        self.path = str(path)
        self.conn = open_export(path)
        self.tables = table_columns(self.conn)
        self.batch = batch
        self.pages, self.page_bytes = pages, page_bytes
        self.read_by: dict[str, str] = {}
        self.odd: list = []                      # non-integer values the page reader or SQL read as -1
        self.negative: set = set()               # negative string ids met (named "<string id N>")
        if not any(t in self.tables for t in (KERNEL_T, MEMCPY_T, MEMSET_T, RUNTIME_T, NVTX_T)):
            raise TraceError(path, "an SQLite database without Nsight Systems activity tables "
                                   "(CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS)")
        meta = export_meta(self.conn, self.tables)
        self.version = meta.get("EXPORT_SCHEMA_VERSION")
        self.product = meta.get("EXPORT_PRODUCT_VERSION")
        self.session_start_ns = session_start_ns(self.conn, self.tables)
        self.gpus = gpu_names(self.conn, self.tables)
        self.strings = Strings(self.conn, self.tables)
        self.local: dict[str, int] = {}          # reader-local names (memcpy kinds, inline NVTX text)
        self.local_text: list[str] = []          # their texts, local id i at [-2 - i]
        self.text_ids: dict[int, int] = {}       # row of the temporary NVTX text table -> local id
        self.comm_rows: list = []
        self.warnings: list = []
        self.nvtx_rowid = has_rowid(self.conn, NVTX_T)   # the ranges' payloads are read by rowid
        self.nccl_domain = self._domain("NCCL")
        self.schemas = payload.load_schemas(self.conn, self.tables, self.nccl_domain)
        self.nranks: dict = {}                   # communicator id -> its size
        self.members: dict = {}                  # communicator id -> {rank in it: process key}
        keys, by_pid = gpu_process_keys(self.conn, self.tables)
        self.gpu_by_pid = by_pid
        nccl = self._nccl_ranks()
        self.processes, self.notices = plan_processes(self.path, keys, nccl, rank_map, base_rank)
        self.rank_of = {p.key: p.rank for p in self.processes}
        self.comm_ranks = {c: [self.rank_of[m[i]] for i in range(self.nranks[c])] for c, m in self.members.items()
                           if c in self.nranks and all(i in m and m[i] in self.rank_of for i in range(self.nranks[c]))}
        if not by_pid and len(keys) > 1:
            self.warnings.append(f"{self.path}: the GPU tables carry no process (globalPid): every GPU event is "
                                 f"given to rank {self.processes[0].rank}")
        self.collective_bytes = "from NCCL NVTX payloads" if nccl or self._has_payloads() else NO_PAYLOAD
        if not self.nvtx_rowid and self._has_payloads():
            self.collective_bytes = NO_ROWID
        self.unusable = 0                        # rows without a usable start/end, left out

    # -- names
    def local_id(self, text: str) -> int:
        """A reader-local name id (< -1) for ``text``."""
        i = self.local.get(text)
        if i is None:
            i = self.local[text] = -2 - len(self.local)
            self.local_text.append(text)
        return i

    def names(self, ids) -> dict[int, str]:
        """``{id: text}`` for name ids of the batches (``StringIds`` ids and local ones)."""
        ids = [int(i) for i in ids]
        out = self.strings.get([i for i in ids if i >= 0])
        n = len(self.local_text)
        out.update({i: self.local_text[-2 - i] if -2 - i < n else f"<string id {i}>" for i in ids if i < -1})
        if -1 in ids:
            out[-1] = ""
        return out

    # -- the streams
    def gpu_batches(self, ordered=True):
        """Kernels, memcpy and memset rows of every process (``ROW_DTYPE``): in start order, or,
        ``ordered=False``, table after table, each in its rowid order (no SQLite sort: ``read_order``)."""
        streams = []
        for t, kind in ((KERNEL_T, KERNEL), (MEMCPY_T, MEMCPY), (MEMSET_T, MEMSET)):
            if t not in self.tables:
                continue
            c = self.tables[t]
            fields, cols = ["ts", "dur"], ["start", "coalesce([end] - start, -1)"]
            by_page = {"ts": "start", "dur": "end"}
            consts = {"kind": kind}
            if kind == KERNEL:
                name = next((n for n in ("demangledName", "shortName", "mangledName") if n in c), None)
            else:
                name = "copyKind" if kind == MEMCPY and "copyKind" in c else None
            if kind == MEMSET:
                consts["name"] = self.local_id("Memset")
            for f, n, expr in (("name", name, None), ("proc", "globalPid", _SHIFTED),
                               ("device", "deviceId", None), ("stream", "streamId", None),
                               ("correlation", "correlationId", None)):
                if n is not None and n in c:
                    fields.append(f)
                    cols.append(col(self.tables, t, n, expr))
                    by_page[f] = n
            sql = f"SELECT {', '.join(cols)} FROM [{t}]" + (" ORDER BY start" if ordered else "")
            fix = self._memcpy_names if kind == MEMCPY else self._file_names if kind == KERNEL else None
            streams.append(self._table(t, sql, fields, by_page, consts, fix, ordered))
        return self._usable(streams, ordered)

    def _table(self, t, sql, fields, by_page, consts=None, fix=None, ordered=True):
        """One table's batches, in start order or (``ordered=False``) rowid order: from its pages when
        ``pages`` and the page reader can (``page_batches``),
        else by ``sql`` (columns ``fields``)."""
        if self.pages and {"start", "end"} <= self.tables[t]:
            try:
                rows = page_batches(self.path, self.conn, t, by_page, consts, fix, ordered=ordered,
                                    batch_bytes=self.page_bytes, odd=self.odd)
            except sqlite3.DatabaseError as e:
                raise TraceError(self.path, f"cannot read the SQLite database ({e})") from None
            if rows is not None:
                self.read_by[t] = "pages"
                return rows
        self.read_by[t] = "sql"
        return table_batches(self.conn, sql, fields, consts, fix, self.batch, odd=self.odd)

    def cpu_batches(self, ordered=True, runtime=True, nvtx=True):
        """CUDA runtime/driver calls (``runtime``) and NVTX ranges (``nvtx``) of every process: in start
        order, or, ``ordered=False``, the runtime table's rows then the NVTX ranges, each in rowid order."""
        streams = []
        if runtime and RUNTIME_T in self.tables:
            t = RUNTIME_T
            sql = (f"SELECT start, coalesce([end] - start, -1), {RUNTIME} + ({col(self.tables, t, 'eventClass')} = 1), "
                   f"{col(self.tables, t, 'nameId')}, {col(self.tables, t, 'globalTid')}, "
                   f"{col(self.tables, t, 'correlationId')} FROM [{t}]" + (" ORDER BY start" if ordered else ""))
            by_page = {f: n for f, n in (("ts", "start"), ("dur", "end"), ("kind", "eventClass"), ("name", "nameId"),
                                         ("gtid", "globalTid"), ("correlation", "correlationId"))
                       if n in self.tables[t]}
            streams.append(self._runtime_names(self._table(
                t, sql, ["ts", "dur", "kind", "name", "gtid", "correlation"], by_page, {"kind": RUNTIME},
                self._file_names, ordered)))
        if nvtx and NVTX_T in self.tables and "eventType" in self.tables[NVTX_T]:
            streams.append(table_batches(self.conn, self._nvtx_sql(ordered), ["ts", "dur", "name", "gtid", "comm"],
                                         {"kind": NVTX}, self._nvtx_fix, self.batch, odd=self.odd))
        return self._usable(streams, ordered)

    def _usable(self, streams, ordered):
        """The rows of ``streams`` with a usable start and duration (the others counted in
        ``unusable``), as ``read_order`` gives them; an SQLite error while reading (a file cut short)
        becomes a ``TraceError``.  Each stream loses its unusable rows before the merge by start:
        SQLite sorts a TEXT ``start`` after every integer, and it reads as -1."""
        try:
            yield from read_order([self._kept(s) for s in streams], ordered)
        except sqlite3.DatabaseError as e:
            raise TraceError(self.path, f"cannot read the SQLite database ({e})") from None
        if self.odd:
            self.warnings.append(f"{self.path}: {sum(self.odd):,} value(s) of integer columns are not integers "
                                 f"(REAL, TEXT or BLOB): read as -1")
            self.odd.clear()
        if self.negative:
            some = ", ".join(map(str, sorted(self.negative)[:5])) + (", ..." if len(self.negative) > 5 else "")
            self.warnings.append(f"{self.path}: {len(self.negative):,} negative string id(s) ({some}; StringIds "
                                 f"holds none): each named \"<string id N>\"")
            self.negative.clear()

    def _kept(self, batches):
        for b in batches:
            ok = (b["ts"] >= 0) & (b["dur"] >= 0)
            if not ok.all():
                self.unusable += int(np.count_nonzero(~ok))
                b = b[ok]
            if len(b):
                yield b

    def _file_names(self, a, _=None):
        """A batch's name ids as the file holds them: a negative one (``StringIds`` holds none; below
        -1 it would read as a reader-local name) becomes the local name ``"<string id N>"``, as an id
        missing from ``StringIds`` is named, and is noted in ``negative``.  -1 is no name, as NULL."""
        ids = a["name"]
        if (ids < -1).any():
            was = ids.copy()
            for v in np.unique(was[was < -1]).tolist():
                ids[was == v] = self.local_id(f"<string id {v}>")
                self.negative.add(v)
        return a

    def _memcpy_names(self, a, rows):
        kinds = a["name"].copy()
        for k in np.unique(kinds).tolist():
            a["name"][kinds == k] = self.local_id(f"Memcpy {COPY_KINDS.get(k, 'other')}")
        return a

    def _runtime_names(self, batches):
        """Runtime names without the version suffix (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``),
        as Kineto and ``nsys stats`` show them: those names become local ids."""
        fixed: dict = {}
        for a in batches:
            ids = np.unique(a["name"])
            new = [i for i in ids.tolist() if i not in fixed]
            for i, text in self.names(new).items():
                fixed[i] = self.local_id(_VERSION_SUFFIX.sub("", text)) if _VERSION_SUFFIX.search(text) else i
            lut = np.asarray([fixed[i] for i in ids.tolist()], np.int64)
            a["name"] = lut[np.searchsorted(ids, a["name"])]
            yield a

    def _nvtx_sql(self, ordered=True) -> str:
        """The NVTX ranges' query: all int columns.  An inline ``text`` comes as ``-2 - k``, ``k`` its
        row in a temporary table of the distinct (shortened) texts (0: none), so that each text
        reaches Python once (cut by ``_short_text``), not once a row; a row with an NCCL payload has ``comm`` = ``-2 - rowid``
        (its payload read by rowid, ``_nvtx_fix``)."""
        t, c = NVTX_T, self.tables[NVTX_T]
        has = [n for n in ("binaryData", "jsonText") if n in c]
        paid = (f"n.domainId = {int(self.nccl_domain)} AND ({' OR '.join(f'n.[{h}] IS NOT NULL' for h in has)})"
                if self.nccl_domain is not None and has and "domainId" in c and self.nvtx_rowid else "0")
        inline = "n.textId IS NULL" if "textId" in c else "1"
        neg = "(typeof(n.textId) = 'integer' AND n.textId < -1)" if "textId" in c else "0"
        label = "'<string id ' || n.textId || '>'"     # a negative textId's name (as ``_file_names``)
        name, join = "-2", ""
        if "text" in c or "textId" in c:
            self.conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {TEXTS_T} (id INTEGER PRIMARY KEY, raw TEXT UNIQUE)")
            if "text" in c:
                self.conn.execute(f"INSERT OR IGNORE INTO temp.{TEXTS_T} (raw) SELECT text FROM [{t}] WHERE "
                                  f"{inline.replace('n.', '')} AND text IS NOT NULL AND eventType IN {RANGE_TYPES}")
            self._negative_texts(neg)
            key = f"CASE WHEN {inline} THEN {'n.text' if 'text' in c else 'NULL'} WHEN {neg} THEN {label} END"
            name, join = "-2 - coalesce(x.id, 0)", f"LEFT JOIN temp.{TEXTS_T} x ON x.raw = {key}"
        name = f"CASE WHEN {inline} OR {neg} THEN {name} ELSE n.textId END" if "textId" in c else name
        return (f"SELECT n.start, coalesce(n.[end] - n.start, -1), {name}, "
                f"{col(self.tables, t, 'globalTid', 'n.{c}')}, "
                f"{f'CASE WHEN {paid} THEN -2 - n.rowid ELSE -1 END' if paid != '0' else '-1'} FROM [{t}] n {join} "
                f"WHERE n.eventType IN {RANGE_TYPES}" + (" ORDER BY n.start" if ordered else ""))

    def _negative_texts(self, neg):
        """The negative ``textId`` s of the NVTX ranges (``neg``: the SQL test of one) into ``negative``
        and, as their names ``"<string id N>"``, into the temporary table of texts."""
        if neg == "0":
            return
        ids = [v for v, in self.conn.execute(f"SELECT DISTINCT n.textId FROM [{NVTX_T}] n WHERE {neg} AND "
                                             f"n.eventType IN {RANGE_TYPES}")]
        self.negative.update(ids)
        self.conn.executemany(f"INSERT OR IGNORE INTO temp.{TEXTS_T} (raw) VALUES (?)",
                              [(f"<string id {v}>",) for v in ids])

    def _nvtx_fix(self, a, _):
        """Inline NVTX texts as local names (first seen, first numbered); NCCL payloads (rows whose
        ``comm`` is ``-2 - rowid``) as collective-args rows."""
        inline = np.flatnonzero(a["name"] < -1)
        if len(inline):
            k = -2 - a["name"][inline]
            u, first = np.unique(k, return_index=True)
            u = u[np.argsort(first)].tolist()
            new = [i for i in u if i not in self.text_ids]
            if new:
                texts = dict(self.conn.execute(f"SELECT id, {_short_text('raw')} FROM temp.{TEXTS_T} WHERE id IN "
                                               f"({','.join(map(str, new))})").fetchall()) if new != [0] else {}
                for i in new:
                    t = texts.get(i)
                    self.text_ids[i] = self.local_id(t if isinstance(t, str) else "")
            lut_k = np.asarray(u, np.int64)
            o = np.argsort(lut_k)
            lut_v = np.asarray([self.text_ids[i] for i in u], np.int64)[o]
            a["name"][inline] = lut_v[np.searchsorted(lut_k[o], k)]
        paid = np.flatnonzero(a["comm"] < -1)
        if len(paid):
            rowids = (-2 - a["comm"][paid]).tolist()
            cols = ", ".join(f"[{n}]" if n in self.tables[NVTX_T] else "NULL" for n in ("binaryData", "jsonText"))
            blobs = {r: (b, j) for r, b, j in self.conn.execute(
                f"SELECT rowid, {cols} FROM [{NVTX_T}] WHERE rowid IN ({','.join(map(str, rowids))})")}
            for j, r in zip(paid.tolist(), rowids):
                nid = int(a["name"][j])
                name = self.names([nid])[nid]
                p = payload.decode(name, *blobs.get(r, (None, None)), self.schemas)
                a["comm"][j] = -1
                if p:
                    a["comm"][j] = len(self.comm_rows)
                    self.comm_rows.append(payload.comm_args(name, p, self.nranks, self.comm_ranks))
        return a

    # -- NCCL domain, ranks
    def _domain(self, name):
        t = NVTX_T
        if t not in self.tables or not {"eventType", "domainId", "text"} <= self.tables[t]:
            return None
        row = self.conn.execute(f"SELECT domainId FROM [{t}] WHERE eventType = {DOMAIN_CREATE} AND text = ? LIMIT 1",
                                (name,)).fetchone()
        return row[0] if row and isinstance(row[0], int) else None

    def _has_payloads(self) -> bool:
        c = self.tables.get(NVTX_T, set())
        if self.nccl_domain is None or not ({"binaryData", "jsonText"} & c):
            return False
        cond = " OR ".join(f"[{n}] IS NOT NULL" for n in ("binaryData", "jsonText") if n in c)
        return self.conn.execute(f"SELECT 1 FROM [{NVTX_T}] WHERE domainId = ? AND ({cond}) LIMIT 1",
                                 (self.nccl_domain,)).fetchone() is not None

    def _nccl_ranks(self) -> dict:
        """process key -> (rank, number of ranks) from ``ncclCommInitRank`` payloads (the largest
        communicator of each process); fills ``self.nranks`` and ``self.members`` (each communicator's
        processes by their rank in it: ``comm_ranks``, the job's ranks of a communicator whose every
        member is in this export, is made of them)."""
        if not self._has_payloads():
            return {}
        c = self.tables[NVTX_T]
        cols = ", ".join(f"[{n}]" if n in c else "NULL" for n in ("binaryData", "jsonText", "text"))
        q = (f"SELECT {_SHIFTED.format(c='globalTid')}, {col(self.tables, NVTX_T, 'textId')}, {cols} FROM [{NVTX_T}] "
             f"WHERE domainId = ? AND eventType IN {RANGE_TYPES}")
        out: dict = {}
        for proc, tid, blob, js, text in self.conn.execute(q, (self.nccl_domain,)):
            known = isinstance(tid, int) and tid >= 0
            name = text if isinstance(text, str) else self.names([tid])[tid] if known else ""
            if not name.startswith("ncclCommInitRank"):
                continue
            p = payload.decode(name, blob, js, self.schemas) or {}
            rank, n, comm = p.get(payload.RANK), p.get(payload.NRANKS), p.get(payload.COMM)
            if isinstance(comm, int) and isinstance(n, int):
                self.nranks[comm] = n
                if isinstance(rank, int) and isinstance(proc, int):
                    self.members.setdefault(comm, {})[rank] = proc
            if isinstance(rank, int) and isinstance(n, int) and isinstance(proc, int):
                if proc not in out or n > out[proc][1]:
                    out[proc] = (rank, n)
        return out

    def close(self):
        self.conn.close()
