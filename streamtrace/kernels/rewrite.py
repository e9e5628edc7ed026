"""Numba kernel that rewrites merge events *as bytes*, without decoding them.

For each event of the ``traceEvents`` array (found as it goes, the way ``streamtrace.kernels.scan.scan_bounds``
finds them) it locates the top-level ``ph``/``pid``/``ts``/``id``/``cat``/``name``/``args`` values and, inside
``args``, ``correlation`` / ``External id`` / ``external id``; then it copies the event to ``out`` with the merge
rewrites applied (see ``streamtrace.merge``): the pid replaced by the merged pid, ``ts`` shifted and written as
exact decimal microseconds, flow ids and correlations made unique (``rank * 2**40 + raw``), ``"raw ..."`` copies
and ``"rank"`` appended to ``args``.  Filtered events are skipped.  Anything unusual (a string id, a key already
named ``rank``, ...) is handed back to Python with ``NEED_PYTHON``; the Python twin
``streamtrace.merge.rewrite_dict`` defines the semantics and the property tests check that both agree.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .keep import C_CLASS, C_FLOW, C_KEPT, C_STEP, C_WINDOW, NO_T0, NO_T1, R_BITS, R_END, R_FLOW, R_PID, R_T0, R_T1
from .jsoncheck import MAX_DEPTH, MEMBERS_CAP, MEMBERS_INVALID, bytes_equal, object_members
from .numtext import put_int, put_us
from .scan import DONE, NEED_MORE, OBJECT, next_element, parse_ns, skip_value
from .texthash import find_text
from .validate import member_fields, span_fields
from .cachedir import ensure_cache

ensure_cache()      # numba's cache folder chosen before the first kernel is defined (kernels/cachedir.py)

__all__ = ["OK", "UNKNOWN_PID", "NEED_PYTHON", "OUT_FULL", "NEW_CAT", "KIND_CPU", "KIND_GPU", "KIND_OTHER",
           "ID_LIMIT", "K_RAW", "CUR_POS", "CUR_END", "CUR_FOUND", "CUR_NEXT", "CUR_OUT", "CUR_LEN", "ST_COMMA",
           "ST_WRITTEN", "ST_FIRST_OUT", "ST_HAS_FIRST_OUT", "ST_OUT_BASE", "ST_SEQ0", "ST_FIRST_IN",
           "ST_HAS_FIRST_IN", "ST_LEN", "INFO_START", "INFO_END", "INFO_LEN", "scan_rewrite"]

OK = 0
UNKNOWN_PID = 1
NEED_PYTHON = 2
OUT_FULL = 3
NEW_CAT = 4         # a deferred filter met a flow category not yet in its table (info: its text's span)

KIND_CPU, KIND_GPU, KIND_OTHER = 0, 1, 2

# ``cur`` (int64[CUR_LEN]), the cursor of ``scan_rewrite``: where scanning resumes, the bytes in the
# window, the events found in this batch, the next event to rewrite, the bytes used in ``out``
CUR_POS, CUR_END, CUR_FOUND, CUR_NEXT, CUR_OUT = 0, 1, 2, 3, 4
CUR_LEN = 5
# ``state`` (int64[ST_LEN]), carried from batch to batch: a comma before the next event written, events
# written, the earliest shifted ts written and whether it is set, the output offset of ``out[0]``, with
# ``defer`` the seq of the batch's first event, the earliest ts read (any event but metadata) and whether set
ST_COMMA, ST_WRITTEN, ST_FIRST_OUT, ST_HAS_FIRST_OUT, ST_OUT_BASE, ST_SEQ0, ST_FIRST_IN, ST_HAS_FIRST_IN = range(8)
ST_LEN = 8
# ``info`` (int64[INFO_LEN]): the byte span the caller is asked about (UNKNOWN_PID, NEW_CAT)
INFO_START, INFO_END = 0, 1
INFO_LEN = 2

ID_LIMIT = np.int64(1) << np.int64(40)


def _lit(s):
    return np.frombuffer(s.encode(), np.uint8).copy()


K_PH, K_PID, K_TID, K_TS, K_DUR, K_ID, K_CAT, K_NAME, K_ARGS = (_lit(s) for s in (
    "ph", "pid", "tid", "ts", "dur", "id", "cat", "name", "args"))
K_CORR, K_EXT, K_EXT2, K_RANK = (_lit(s) for s in ("correlation", "External id", "external id", "rank"))
K_RAW = _lit("raw ")
K_STEP = _lit('"ProfilerStep#')
M_PNAME, M_PLABELS, M_PSORT = (_lit(s) for s in ("process_name", "process_labels", "process_sort_index"))
T_RAWCORR, T_RAWEXT, T_RAWEXT2, T_RANK, T_ARGS = (_lit(s) for s in (
    ',"raw correlation":', ',"raw External id":', ',"raw external id":', '"rank":', ',"args":{'))


@njit(cache=True)
def _startswith(buf, s, e, lit):
    if e - s < lit.shape[0]:
        return False
    for j in range(lit.shape[0]):
        if buf[s + j] != lit[j]:
            return False
    return True


@njit(cache=True)
def _read_uint(buf, s, e):
    """Value of a plain non-negative integer literal buf[s:e], or -1."""
    if e <= s or e - s > 18:
        return np.int64(-1)
    v = np.int64(0)
    for j in range(s, e):
        c = buf[j]
        if c < 48 or c > 57:
            return np.int64(-1)
        v = v * 10 + (c - 48)
    return v


@intrinsic
def _copy(typingctx, dst, o, src, s, n):
    """``dst[o:o + n] = src[s:s + n]`` as one ``memcpy`` (no bounds checks, no overlap: the
    caller guarantees both): a numba slice assignment costs about 70 ns of view building and
    broadcast checks per call, and merge copies ~7 short spans per event.  Contiguous uint8
    arrays only (a typing error otherwise)."""
    for a in (dst, src):
        if not (isinstance(a, types.Array) and a.dtype == types.uint8 and a.ndim == 1 and a.layout == "C"):
            return None

    def codegen(context, builder, sig, args):
        d, do, sa, so, cnt = args
        dst_a = context.make_array(sig.args[0])(context, builder, d)
        src_a = context.make_array(sig.args[2])(context, builder, sa)
        cgutils.raw_memcpy(builder, builder.gep(dst_a.data, [do]), builder.gep(src_a.data, [so]), cnt, 1)
        return context.get_dummy_value()
    return types.void(dst, o, src, s, n), codegen


@njit(cache=True)
def _put(out, o, src, s, e):
    n = e - s
    if n > 0:
        _copy(out, o, src, s, n)
    return o + max(n, 0)


@njit(cache=True)
def _put_lit(out, o, lit):
    for j in range(lit.shape[0]):      # a loop, not a slice assignment (whose error path
        out[o + j] = lit[j]            # costs numba ~1 s of string formatting to compile)
    return o + lit.shape[0]


@njit(cache=True)
def _value_ns(buf, s, e):
    """``(ok, ns)``: the member value ``buf[s:e]`` read as microseconds into exact
    int64 ns, the way ``streamtrace.kernels.scan.scan_events`` reads ``ts``/``dur``
    (a number text that fits); ``ok`` is False for an absent member (``s`` < 0) or
    any other value."""
    if s < 0:
        return False, np.int64(0)
    c = buf[s]
    if c != 45 and not (48 <= c <= 57):
        return False, np.int64(0)
    ok, v, _ = parse_ns(buf, s, e)
    return ok, v


@njit(cache=True)
def _flow_cat(buf, cat_s, cat_e, id_s, id_e, fcat_text, fcat_off, nfcats):
    """``(cat index, id)`` of the flow event whose ``cat``/``id`` values are ``buf[cat_s:cat_e]`` /
    ``buf[id_s:id_e]``: index -1 when its cat is not among the ``nfcats`` texts, -2 when Python must
    tell (no ``cat``, one that is not a string or holds an escape, an ``id`` that is not a plain
    integer below ID_LIMIT)."""
    if cat_s < 0 or buf[cat_s] != 34 or id_s < 0:
        return -2, np.int64(0)
    for j in range(cat_s + 1, cat_e - 1):
        if buf[j] == 92:
            return -2, np.int64(0)
    idv = _read_uint(buf, id_s, id_e)
    if idv < 0 or idv >= ID_LIMIT:
        return -2, np.int64(0)
    for q in range(nfcats):
        a = fcat_off[q]
        n = fcat_off[q + 1] - a
        if n == cat_e - cat_s - 2:
            same = True
            for t in range(n):
                if fcat_text[a + t] != buf[cat_s + 1 + t]:
                    same = False
                    break
            if same:
                return q, idv
    return -1, idv


@njit(cache=True)
def _flow_kept(buf, cat_s, cat_e, id_s, id_e, fcat_text, fcat_off, nfcats, fkeys):
    """1 when the flow event whose ``cat``/``id`` values are ``buf[cat_s:cat_e]`` / ``buf[id_s:id_e]``
    is among the kept ``fkeys`` (see ``scan_rewrite``), 0 when not, -1 when Python must tell
    (see ``_flow_cat``)."""
    c, idv = _flow_cat(buf, cat_s, cat_e, id_s, id_e, fcat_text, fcat_off, nfcats)
    if c == -2:
        return -1
    if c < 0:
        return 0
    key = (np.int64(c) << np.int64(40)) | idv
    j = np.searchsorted(fkeys, key)
    return 1 if j < fkeys.shape[0] and fkeys[j] == key else 0


@njit(cache=True)
def _park(cur, at, found_n, i, o):
    """The cursor saved before ``scan_rewrite`` returns to its caller."""
    cur[CUR_POS], cur[CUR_FOUND], cur[CUR_NEXT], cur[CUR_OUT] = at, found_n, i, o


@njit(cache=True)
def scan_rewrite(buf, cur, starts, ends, sep, out, state,
                 pid_text, pid_off, pid_new, pid_kind, pid_used, npids, pid_slots,
                 drop_text, drop_off, ndrop,
                 rank, shift_ns, gpu_only, has_window, lo, hi, fcat_text, fcat_off, nfcats, fkeys,
                 info, kept, fields, defer, rec, rcls):
    """Find the events of the ``traceEvents`` array in the byte window ``buf`` and rewrite
    each one into ``out`` as it is found: ``streamtrace.kernels.scan.scan_bounds`` and
    the rewrite in one pass over the bytes (the member walk that locates an event's fields
    also finds where it ends).

    Callers use it through ``streamtrace.kernels.rewriter.Rewriter``, which owns these arrays
    and the status loop.  ``cur`` (int64[CUR_LEN]) is the cursor, read and updated: ``cur[CUR_POS]``
    the byte position where scanning resumes, ``cur[CUR_END]`` the bytes in ``buf``, ``cur[CUR_FOUND]``
    ``k``, the events found in this batch (their byte ranges in ``starts``/``ends``, as scan_bounds
    fills them; at most ``len(starts)``), ``cur[CUR_NEXT]`` ``i``, the next event of the batch to
    rewrite (events ``i .. k-1`` were found but not yet rewritten: they are rewritten first),
    ``cur[CUR_OUT]`` the bytes used in ``out``.  ``sep``: the separator state of
    ``scan_events``.
    ``kept[j]`` (uint8, length >= len(starts)) is set to 1 for each event j written; when
    ``fields`` has rows (int64[len(starts), NF]), row j gets event j's validate fields
    (``streamtrace.kernels.validate.member_fields``, read from the same member walk).

    ``ts``/``dur`` are read from their number text (exact int64 ns, as
    ``streamtrace.kernels.scan.scan_events`` reads them).
    ``state`` (int64[ST_LEN]): ``ST_COMMA`` 1 when a comma must precede the next event written,
    ``ST_WRITTEN`` events written, ``ST_FIRST_OUT`` the earliest ts written (ns, shifted; ``ST_HAS_FIRST_OUT``
    1 once set), ``ST_OUT_BASE`` the output offset of ``out[0]`` (kept by the caller; only ``defer`` reads
    it), with ``defer``: ``ST_SEQ0`` the seq of the batch's first event, ``ST_FIRST_IN`` the earliest ts
    of any event but metadata (ns, before any filter; an unreadable ts goes to Python; ``ST_HAS_FIRST_IN``
    1 once set).
    ``pid_text``/``pid_off``: concatenated raw JSON texts of known pids (entry k is
    ``pid_text[pid_off[k]:pid_off[k+1]]``; ``npids`` of them), looked up in their hash index
    ``pid_slots`` (``streamtrace.kernels.texthash``), ``pid_new``/``pid_kind`` their merged pid
    and kind (KIND_CPU/GPU/OTHER); ``pid_used[k]`` is set to 1 when pid k gets an event.
    ``drop_text``/``drop_off``: categories to drop (raw string contents).  ``lo``/``hi``:
    keep window in rank-local ns.  ``fcat_text``/``fcat_off`` (``nfcats`` texts, as the pid texts)
    and ``fkeys`` (sorted int64 ``cat index << 40 | id``): the flows kept under the window
    (``streamtrace.merge.flows.KeptFlows``); a flow event in the window with a plain string
    ``cat`` and an ``id`` below ID_LIMIT is kept when its key is there, else dropped.

    Returns ``(status, scan_status)``.  ``status`` OK: the batch ends, ``scan_status`` as
    scan_bounds returns it (NEED_MORE at the window's end or with ``len(starts)`` events
    found, DONE past the closing ``]``, BAD at a syntax error; ``cur[CUR_POS]`` = that
    position).  Otherwise event ``i`` = ``cur[CUR_NEXT]`` needs the caller: UNKNOWN_PID with
    ``info[INFO_START:INFO_END + 1]`` = the pid's byte span (register it, call again); NEED_PYTHON
    (rewrite it with the Python twin, set ``cur[CUR_NEXT]`` = i + 1, call again); OUT_FULL (``out``
    cannot take it: empty ``out``, call again).  Counts written events in ``state[ST_WRITTEN]``.
    ``defer`` (a time filter decided after the pass, ``streamtrace.merge.deferred``; ``has_window``
    is then False): every event is written as without a filter, and ``rcls[j]`` (uint8, length >=
    len(starts)) / ``rec[j]`` (int64[len(starts), R_COLS]) tell what decides it afterwards: the class
    (C_KEPT, C_WINDOW, C_FLOW; 0: not written), C_STEP for a ProfilerStep candidate (flagged before
    any filter, for Python to decode), ``rec[j, R_BITS]`` = ``(state[ST_SEQ0] + j) << 8 | class`` (its
    seq: ``state[ST_SEQ0]`` is the index of the batch's first event in the rank), ``rec[j, R_T0]`` its ts and
    ``R_T1`` its end (ts + dur when dur > 0; ns, rank-local; NO_T0 / NO_T1 for C_KEPT), ``R_END`` the output
    offset just past it (``state[ST_OUT_BASE]``: the offset of ``out[0]`` in the whole output), ``R_FLOW`` a flow's
    ``cat index << 40 | id`` (the cat texts in ``fcat_text``/``fcat_off``: NEW_CAT with ``info`` = the span
    of a text not there yet: add it, call again), ``R_PID`` the merged pid.  Twins: scan_bounds (the byte
    ranges) and ``streamtrace.merge.rank.rewrite_dict`` (the rewrite), both property-tested."""
    cap = out.shape[0]
    bcap = starts.shape[0]
    at, nbytes, found_n, i, o = cur[CUR_POS], cur[CUR_END], cur[CUR_FOUND], cur[CUR_NEXT], cur[CUR_OUT]
    want_fields = fields.shape[0] > 0
    spans = np.empty((8, 3), np.int64)
    vstack = np.zeros(MAX_DEPTH, np.uint8)
    mem = np.empty((MEMBERS_CAP, 4), np.int64)
    amem = np.empty((MEMBERS_CAP, 4), np.int64)
    whole = np.bool_(True)         # typed flags, not literals: one compiled object_members for all callers
    open_end = np.bool_(False)
    while True:
        if i < found_n:                        # found before the caller stepped in: walk it again
            s = starts[i]
            e = ends[i]
            nm, na, arow, _ = object_members(buf, s, e, vstack, mem, amem, K_ARGS, whole)
        else:
            found, at = next_element(buf, at, nbytes, sep)
            if found != OBJECT or found_n >= bcap:
                _park(cur, at, found_n, i, o)
                return OK, (found if found != OBJECT else NEED_MORE)
            s = at
            # -- find its end, validate it and locate the fields in one pass --------
            nm, na, arow, e = object_members(buf, s, nbytes, vstack, mem, amem, K_ARGS, open_end)
            if nm == MEMBERS_INVALID:    # invalid, or cut by the window's end
                done, e = skip_value(buf, s, nbytes)
                if done != DONE:
                    _park(cur, at, found_n, i, o)
                    return OK, NEED_MORE
                nm, na, arow, _ = object_members(buf, s, e, vstack, mem, amem, K_ARGS, whole)
            starts[found_n] = s
            ends[found_n] = e
            found_n += 1
            sep[0] = 1
            at = e
        if cap - o < (e - s) + 200:
            _park(cur, at, found_n, i, o)
            return OUT_FULL, NEED_MORE
        if nm < 0:
            if want_fields:
                member_fields(buf, nm, na, arow, mem, amem, fields, i)
            _park(cur, at, found_n, i, o)
            return NEED_PYTHON, NEED_MORE        # Python decodes it (and reports invalid JSON)
        tid_s = tid_e = np.int64(-1)
        tid_dup = False
        # typed -1: literal ones would make numba compile _value_ns / _read_uint once
        # more for Literal[int](-1) arguments
        ph_s = ph_e = pid_s = pid_e = ts_s = ts_e = dur_s = dur_e = id_s = id_e = np.int64(-1)
        cat_s = cat_e = name_s = name_e = np.int64(-1)
        args_close = np.int64(-1)
        corr_s = corr_e = ext_s = ext_e = ext2_s = ext2_e = np.int64(-1)
        bad = arow >= 0 and na < 0               # args that is not an object
        args_empty = na <= 0
        if na >= 0:
            args_close = mem[arow, 3] - 1
        for r in range(nm):
            ks, ke, vs, ve = mem[r, 0], mem[r, 1], mem[r, 2], mem[r, 3]
            if ke - ks > 4 or r == arow:
                continue
            if bytes_equal(buf, ks, ke, K_PH):
                bad |= ph_s >= 0
                ph_s, ph_e = vs, ve
            elif bytes_equal(buf, ks, ke, K_PID):
                bad |= pid_s >= 0
                pid_s, pid_e = vs, ve
            elif bytes_equal(buf, ks, ke, K_TID):
                tid_dup |= tid_s >= 0
                tid_s, tid_e = vs, ve
            elif bytes_equal(buf, ks, ke, K_TS):
                bad |= ts_s >= 0
                ts_s, ts_e = vs, ve
            elif bytes_equal(buf, ks, ke, K_DUR):
                bad |= dur_s >= 0
                dur_s, dur_e = vs, ve
            elif bytes_equal(buf, ks, ke, K_ID):
                bad |= id_s >= 0
                id_s, id_e = vs, ve
            elif bytes_equal(buf, ks, ke, K_CAT):
                bad |= cat_s >= 0
                cat_s, cat_e = vs, ve
            elif bytes_equal(buf, ks, ke, K_NAME):
                bad |= name_s >= 0
                name_s, name_e = vs, ve
        for r in range(max(na, 0)):
            aks, ake, avs, ave = amem[r, 0], amem[r, 1], amem[r, 2], amem[r, 3]
            if bytes_equal(buf, aks, ake, K_CORR):
                bad |= corr_s >= 0
                corr_s, corr_e = avs, ave
            elif bytes_equal(buf, aks, ake, K_EXT):
                bad |= ext_s >= 0
                ext_s, ext_e = avs, ave
            elif bytes_equal(buf, aks, ake, K_EXT2):
                bad |= ext2_s >= 0
                ext2_s, ext2_e = avs, ave
            elif bytes_equal(buf, aks, ake, K_RANK) or _startswith(buf, aks, ake, K_RAW):
                bad = True
        if bad or ph_s < 0 or pid_s < 0 or ph_e - ph_s != 3 or buf[ph_s] != 34:
            if want_fields:
                member_fields(buf, nm, na, arow, mem, amem, fields, i)
            _park(cur, at, found_n, i, o)
            return NEED_PYTHON, NEED_MORE
        if want_fields and (tid_dup or not span_fields(buf, fields, i, ph_s, pid_s, pid_e, tid_s, tid_e, ts_s, ts_e,
                                                       dur_s, dur_e, cat_s, cat_e, id_s, id_e)):
            member_fields(buf, nm, na, arow, mem, amem, fields, i)
        ph = buf[ph_s + 1]
        is_flow = ph == 115 or ph == 102 or ph == 116      # s f t
        if defer and ph == 88 and name_s >= 0 and buf[name_s] == 34:
            step = True     # its name starts ProfilerStep#, or has an escape before leaving that prefix
            for j in range(1, K_STEP.shape[0]):
                c = buf[name_s + j] if name_s + j < name_e - 1 else 34
                if c == 92:
                    break
                if c != K_STEP[j]:
                    step = False
                    break
            if step:
                rcls[i] |= C_STEP
        if defer and (ndrop > 0 or gpu_only) and ph != 77 and ts_s >= 0:    # the earliest ts, filtered or not
            ok0, t_first = _value_ns(buf, ts_s, ts_e)
            if not ok0:
                _park(cur, at, found_n, i, o)
                return NEED_PYTHON, NEED_MORE
            if state[ST_HAS_FIRST_IN] == 0 or t_first < state[ST_FIRST_IN]:
                state[ST_FIRST_IN] = t_first
                state[ST_HAS_FIRST_IN] = 1
        # -- filters ---------------------------------------------------------
        if ndrop > 0 and cat_s >= 0 and buf[cat_s] == 34:
            dropped = False
            for k in range(ndrop):
                if bytes_equal(buf, cat_s + 1, cat_e - 1, drop_text[drop_off[k]:drop_off[k + 1]]):
                    dropped = True
                    break
            if dropped:
                i += 1
                continue
        if ph == 77 and name_s >= 0 and buf[name_s] == 34 and (
                bytes_equal(buf, name_s + 1, name_e - 1, M_PNAME) or bytes_equal(buf, name_s + 1, name_e - 1, M_PLABELS)
                or bytes_equal(buf, name_s + 1, name_e - 1, M_PSORT)):
            i += 1
            continue
        k = find_text(buf, pid_s, pid_e, pid_text, pid_off, pid_slots) if npids > 0 else -1
        if k < 0:
            info[INFO_START] = pid_s
            info[INFO_END] = pid_e
            _park(cur, at, found_n, i, o)
            return UNKNOWN_PID, NEED_MORE
        if gpu_only and (is_flow or pid_kind[k] != KIND_GPU):
            i += 1
            continue
        ts_ok, tsv = _value_ns(buf, ts_s, ts_e)
        if ts_s >= 0 and not ts_ok:
            _park(cur, at, found_n, i, o)
            return NEED_PYTHON, NEED_MORE
        if defer and ts_ok and ph != 77 and (state[ST_HAS_FIRST_IN] == 0 or tsv < state[ST_FIRST_IN]):
            state[ST_FIRST_IN] = tsv
            state[ST_HAS_FIRST_IN] = 1
        dur_ok, durv = _value_ns(buf, dur_s, dur_e)
        if dur_s >= 0 and not dur_ok:       # a dur in a string, null, a boolean, beyond int64 ns
            _park(cur, at, found_n, i, o)
            return NEED_PYTHON, NEED_MORE
        if has_window and ts_ok and ph != 77:
            t0 = tsv
            t1 = t0
            if dur_ok and durv > 0:
                t1 = t0 + durv
            if t1 < lo or t0 > hi:
                i += 1
                continue
            if is_flow:
                fk = _flow_kept(buf, cat_s, cat_e, id_s, id_e, fcat_text, fcat_off, nfcats, fkeys)
                if fk < 0:
                    _park(cur, at, found_n, i, o)
                    return NEED_PYTHON, NEED_MORE
                if fk == 0:
                    i += 1
                    continue
        cls = C_KEPT
        fkey = np.int64(-1)
        if defer and ts_s >= 0 and ph != 77:
            cls = C_WINDOW
            rec[i, R_T0] = tsv
            rec[i, R_T1] = tsv + durv if dur_ok and durv > 0 else tsv
            if is_flow:
                c, fid = _flow_cat(buf, cat_s, cat_e, id_s, id_e, fcat_text, fcat_off, nfcats)
                if c == -2:
                    _park(cur, at, found_n, i, o)
                    return NEED_PYTHON, NEED_MORE
                if c == -1:
                    info[INFO_START] = cat_s + 1
                    info[INFO_END] = cat_e - 1
                    _park(cur, at, found_n, i, o)
                    return NEW_CAT, NEED_MORE
                cls = C_FLOW
                fkey = (np.int64(c) << np.int64(40)) | fid
        idv = np.int64(-1)
        if is_flow and id_s >= 0:
            idv = _read_uint(buf, id_s, id_e)
            if idv < 0 or idv >= ID_LIMIT:
                _park(cur, at, found_n, i, o)
                return NEED_PYTHON, NEED_MORE
        corr = ext = ext2 = np.int64(-1)
        if corr_s >= 0:
            corr = _read_uint(buf, corr_s, corr_e)
            if corr < 0 or corr >= ID_LIMIT:
                _park(cur, at, found_n, i, o)
                return NEED_PYTHON, NEED_MORE
        if ext_s >= 0:
            ext = _read_uint(buf, ext_s, ext_e)
            if ext < 0 or ext >= ID_LIMIT:
                _park(cur, at, found_n, i, o)
                return NEED_PYTHON, NEED_MORE
        if ext2_s >= 0:
            ext2 = _read_uint(buf, ext2_s, ext2_e)
            if ext2 < 0 or ext2 >= ID_LIMIT:
                _park(cur, at, found_n, i, o)
                return NEED_PYTHON, NEED_MORE
        # -- emit ------------------------------------------------------------
        ns = 0
        spans[ns, 0], spans[ns, 1], spans[ns, 2] = pid_s, pid_e, 0
        ns += 1
        if ts_s >= 0:
            spans[ns, 0], spans[ns, 1], spans[ns, 2] = ts_s, ts_e, 1
            ns += 1
        if idv >= 0:
            spans[ns, 0], spans[ns, 1], spans[ns, 2] = id_s, id_e, 2
            ns += 1
        if corr >= 0:
            spans[ns, 0], spans[ns, 1], spans[ns, 2] = corr_s, corr_e, 3
            ns += 1
        if ext >= 0:
            spans[ns, 0], spans[ns, 1], spans[ns, 2] = ext_s, ext_e, 3
            ns += 1
        if ext2 >= 0:
            spans[ns, 0], spans[ns, 1], spans[ns, 2] = ext2_s, ext2_e, 3
            ns += 1
        if args_close >= 0:
            spans[ns, 0], spans[ns, 1], spans[ns, 2] = args_close, args_close, 4
        else:
            spans[ns, 0], spans[ns, 1], spans[ns, 2] = e - 1, e - 1, 5
        ns += 1
        for a in range(1, ns):                   # insertion sort by position
            b = a
            while b > 0 and spans[b - 1, 0] > spans[b, 0]:
                for c3 in range(3):
                    tmp = spans[b - 1, c3]
                    spans[b - 1, c3] = spans[b, c3]
                    spans[b, c3] = tmp
                b -= 1
        if state[ST_COMMA] != 0:
            out[o] = 44
            o += 1
        pos = s
        for a in range(ns):
            o = _put(out, o, buf, pos, spans[a, 0])
            what = spans[a, 2]
            if what == 0:
                o = put_int(out, o, pid_new[k])
            elif what == 1:
                o = put_us(out, o, tsv + shift_ns)
            elif what == 2:
                o = put_int(out, o, (np.int64(rank) << np.int64(40)) | idv)
            elif what == 3:
                v = _read_uint(buf, spans[a, 0], spans[a, 1])
                o = put_int(out, o, (np.int64(rank) << np.int64(40)) | v)
            elif what == 4:
                if corr >= 0:
                    o = _put_lit(out, o, T_RAWCORR)
                    o = put_int(out, o, corr)
                if ext >= 0:
                    o = _put_lit(out, o, T_RAWEXT)
                    o = put_int(out, o, ext)
                if ext2 >= 0:
                    o = _put_lit(out, o, T_RAWEXT2)
                    o = put_int(out, o, ext2)
                if not args_empty or corr >= 0 or ext >= 0 or ext2 >= 0:
                    out[o] = 44
                    o += 1
                o = _put_lit(out, o, T_RANK)
                o = put_int(out, o, rank)
            else:
                o = _put_lit(out, o, T_ARGS)
                o = _put_lit(out, o, T_RANK)
                o = put_int(out, o, rank)
                out[o] = 125
                o += 1
            pos = spans[a, 1]
        o = _put(out, o, buf, pos, e)
        if defer:
            rcls[i] = (rcls[i] & ~C_CLASS) | cls
            rec[i, R_BITS] = ((state[ST_SEQ0] + i) << 8) | cls
            if cls == C_KEPT:
                rec[i, R_T0], rec[i, R_T1] = NO_T0, NO_T1
            rec[i, R_END] = state[ST_OUT_BASE] + o
            rec[i, R_FLOW] = fkey
            rec[i, R_PID] = pid_new[k]
        state[ST_COMMA] = 1
        state[ST_WRITTEN] += 1
        kept[i] = 1
        pid_used[k] = 1
        if ts_s >= 0 and ph != 77:
            t_out = tsv + shift_ns
            if state[ST_HAS_FIRST_OUT] == 0 or t_out < state[ST_FIRST_OUT]:
                state[ST_FIRST_OUT] = t_out
                state[ST_HAS_FIRST_OUT] = 1
        i += 1
