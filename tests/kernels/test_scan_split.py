"""The split-point scanner (``streamtrace.kernels.scan.split_points``, 8 bytes at a
time) against a plain-Python byte-at-a-time twin, call by call: same boundaries, same
end, same carried state, for any bytes, any block sizes (1-byte blocks included),
any starting state, small ``out`` arrays, unaligned and strided buffers."""
from __future__ import annotations

import gzip
import itertools
import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamtrace.kernels import scan as K
from streamtrace.kernels import texthash

from support import need_shared, real_traces

QUOTE, BSLASH = 34, 92
OPEN, CLOSE = b"{[", b"}]"


def split_points_ref(block: bytes, base, every, cap, state):
    """Plain-Python twin of ``K.split_points``: one byte at a time.  ``state`` is a
    list [in_str, esc, depth, last, closed] updated in place; returns
    ``(boundaries, end)``."""
    in_str, esc, depth, last = state[:4]
    out = []
    for i, c in enumerate(block):
        if esc:                        # the byte after a backslash inside a string
            esc = 0
            continue
        if in_str:
            if c == BSLASH:
                esc = 1
            elif c == QUOTE:
                in_str = 0
            continue
        if c == QUOTE:
            in_str = 1
        elif c in OPEN:
            depth += 1
        elif c in CLOSE:
            if depth == 0:             # the array's own ']'
                state[:] = [in_str, esc, depth, last, 1]
                return out, base + i
            depth -= 1
            if depth == 0 and c == ord("}") and base + i + 1 - last >= every and len(out) < cap:
                last = base + i + 1
                out.append(last)
    state[:4] = [in_str, esc, depth, last]
    return out, -1


def as_buffer(block: bytes, how: str):
    """The block as the kernel's ``buf``: plain, at an odd address, strided, or with
    junk after ``n`` (the kernel must read only ``buf[:n]``)."""
    if how == "unaligned":
        return np.frombuffer(b"x" + block, np.uint8)[1:]
    if how == "strided":
        return np.frombuffer(bytes(itertools.chain.from_iterable((c, 0x7D) for c in block)), np.uint8)[::2]
    if how == "padded":
        return np.frombuffer(block + b'"\\]}{["\\' * 3, np.uint8)
    return np.frombuffer(block, np.uint8)


def compare(doc: bytes, sizes, base=0, every=1, cap=1000, state0=(0, 0, 0, 0, 0), how="plain"):
    """Feed ``doc`` in blocks of ``sizes`` (cycled) to the kernel and the twin; every
    call must agree.  Returns all boundaries and the end."""
    ref_state = list(state0)
    ker_state = np.array(state0, np.int64)
    out = np.full(cap, -7, np.int64)
    pos, got, end = 0, [], -1
    for size in itertools.cycle(sizes):
        if pos >= len(doc):
            break
        block = doc[pos:pos + size]
        want, want_end = split_points_ref(block, base + pos, every, cap, ref_state)
        k, end = K.split_points(as_buffer(block, how), len(block), base + pos, every, out, ker_state)
        assert (out[:k].tolist(), end) == (want, want_end), (pos, size)
        assert ker_state.tolist() == ref_state, (pos, size)
        got += want
        pos += size
        if end >= 0:
            break
    return got, end


# adversarial bytes: quotes, backslash runs, escaped quotes, unicode escapes, brackets
# of both kinds inside and outside strings, multi-byte UTF-8
pieces = st.sampled_from([b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"a", b" ", b'\\"', b"\\\\",
                          b'\\\\"', b"\\u00e9", b"\\ud83d\\ude00", b'"}"', b'"{"', b"\xc3\xa9", b"\xf0\x9f\x98\x80",
                          b'{"a":"', b'"},', b"},{", b"12345678", b'"ts":1.5'])
junk = st.lists(pieces, max_size=120).map(b"".join)

text = st.text(alphabet=st.sampled_from(list('ab{}[]",:\\/é😀 \n\t\x00\x1f\u2028')), max_size=24)
event = st.fixed_dictionaries({"ph": st.just("X"), "name": text, "ts": st.integers(0, 10 ** 12),
                               "args": st.dictionaries(text, text | st.lists(text, max_size=2) | st.integers(),
                                                       max_size=3)})


@st.composite
def events_doc(draw):
    """The content of a ``traceEvents`` array (after its ``[``) and what follows it."""
    evs = draw(st.lists(event, max_size=10))
    kw = dict(indent=draw(st.sampled_from([None, 1])), ensure_ascii=draw(st.booleans()))
    arr = json.dumps(evs, **kw).encode()
    tail = json.dumps({"z": draw(text)}, **kw).encode()
    return arr[1:] + b"," + tail[1:]


sizes = st.one_of(st.just([1]), st.lists(st.integers(1, 80), min_size=1, max_size=6),
                  st.just([1 << 20]))
states = st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(0, 3), st.just(0), st.just(0))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk | events_doc(), sizes, st.integers(0, 10 ** 12), st.integers(1, 64),
       st.sampled_from([1, 2, 3, 1000]), states, st.sampled_from(["plain", "unaligned", "strided", "padded"]))
def test_split_points_matches_twin(doc, block_sizes, base, every, cap, state0, how):
    state0 = (*state0[:3], base, 0)
    compare(doc, block_sizes, base, every, cap, state0, how)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events_doc(), sizes)
def test_split_points_events_any_blocks(doc, block_sizes):
    """On a real array: one boundary after every event, whatever the block sizes."""
    whole, end = compare(doc, [len(doc)])
    got, end2 = compare(doc, block_sizes)
    assert got == whole and end2 == end >= 0
    arr = json.loads(b"[" + doc[:end + 1])
    assert len(whole) == len(arr)
    for idx, b in enumerate(whole):       # each boundary is just past an event
        assert json.loads(b"[" + doc[:b] + b"]") == arr[:idx + 1]


def test_split_points_edges():
    # a backslash as the last byte of a block, then an escaped quote in the next one
    doc = b'{"a":"x\\"}"},{"b":"\\\\"},{}]'
    assert [e for e in json.loads(b"[" + doc)] == [{"a": 'x"}'}, {"b": "\\"}, {}]
    for cut in range(1, len(doc)):
        got, end = compare(doc, [cut, len(doc)])
        assert got == [12, 23, 26] and end == len(doc) - 1
    # long strings of escapes, braces and brackets across many words, at every phase
    s = b'{"k":"' + b'\\"{[}]\\\\' * 50 + b'"}'
    for lead in range(9):
        doc = b" " * lead + b",".join([s] * 3) + b"]"
        got, end = compare(doc, [1 << 20])
        assert got == [lead + len(s), lead + 2 * len(s) + 1, lead + 3 * len(s) + 2] and end == len(doc) - 1
    # empty block: nothing changes
    st0 = np.array([1, 1, 2, 5, 0], np.int64)
    assert K.split_points(np.zeros(0, np.uint8), 0, 9, 1, np.empty(4, np.int64), st0) == (0, -1)
    assert st0.tolist() == [1, 1, 2, 5, 0]


def test_split_points_real_trace_prefix():
    """The first 2 MB of real Kineto arrays (compact and indented), twin vs kernel."""
    need_shared()
    for path in real_traces()[:4]:
        raw = gzip.decompress(path.read_bytes())
        i = raw.find(b'"traceEvents"')
        if i < 0:
            continue
        doc = raw[raw.index(b"[", i) + 1:][:2 << 20]
        for block_sizes in ([1 << 22], [4093, 7, 64, 65536]):
            compare(doc, block_sizes, base=12345, every=1000)


# -- scan_bounds: scan_events' byte ranges, a word at a time ---------------------------

def bounds_both(doc: bytes, sizes, cap, sep0, how):
    """Feed growing windows of ``doc`` (as the reader does: resume at the returned
    position, more bytes when the window ends inside an event) to scan_bounds and to
    its twin scan_events; every call must return the same count, status, position,
    byte ranges and separator state."""
    a_st, a_en = np.full(cap, -7, np.int64), np.full(cap, -7, np.int64)
    b_st, b_en = np.full(cap, -7, np.int64), np.full(cap, -7, np.int64)
    ts, dur, fl = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.uint8)
    sa, sb = np.array([sep0], np.int64), np.array([sep0], np.int64)
    pos, n, calls = 0, 0, 0
    grow = itertools.cycle(sizes)
    found = []
    while True:
        buf = as_buffer(doc[:n], how) if how != "strided" or n else np.zeros(0, np.uint8)
        ka, status_a, pa = K.scan_bounds(buf, pos, n, a_st, a_en, sa)
        kb, status_b, pb = K.scan_events(np.ascontiguousarray(buf), pos, n, b_st, b_en, ts, dur, fl, sb)
        assert (ka, status_a, pa, sa[0]) == (kb, status_b, pb, sb[0]), (pos, n)
        assert a_st[:ka].tolist() == b_st[:kb].tolist() and a_en[:ka].tolist() == b_en[:kb].tolist()
        found += list(zip(a_st[:ka].tolist(), a_en[:ka].tolist()))
        calls += 1
        pos = pa
        if status_a != K.NEED_MORE:
            return found, status_a
        if ka < cap:
            if n >= len(doc):
                return found, status_a
            n = min(len(doc), n + next(grow))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk | events_doc(), sizes, st.sampled_from([1, 2, 3, 1000]), st.integers(0, 2),
       st.sampled_from(["plain", "unaligned", "strided", "padded"]))
def test_scan_bounds_matches_scan_events(doc, block_sizes, cap, sep0, how):
    bounds_both(doc, block_sizes, cap, sep0, how)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events_doc(), sizes)
def test_scan_bounds_finds_every_event(doc, block_sizes):
    """On a real array: one byte range per event, each exactly that event's JSON."""
    found, status = bounds_both(doc, block_sizes, 1000, 0, "plain")
    assert status == K.DONE
    end = doc.index(b"]", found[-1][1] if found else 0)
    assert [json.loads(doc[s:e]) for s, e in found] == json.loads(b"[" + doc[:end + 1])


def test_scan_bounds_real_traces():
    """Every real trace: the same event byte ranges as scan_events, in 64 KiB windows."""
    need_shared()
    for path in real_traces():
        data = gzip.open(path).read() if str(path).endswith(".gz") else open(path, "rb").read()
        i = data.find(b"[", data.find(b'"traceEvents"'))
        if i < 0 or b'"traceEvents"' not in data:
            continue
        bounds_both(data[i + 1:], [1 << 16], 4096, 0, "plain")


# -- scan_rewrite: scan_bounds' byte ranges, found while rewriting -----------------------

pid_event = st.fixed_dictionaries({"ph": st.sampled_from(["X", "i", "s"]), "pid": st.sampled_from([0, 7, "x"]),
                                   "tid": st.integers(0, 3), "ts": st.integers(0, 10 ** 12), "name": text,
                                   "args": st.dictionaries(st.sampled_from(["correlation", "a"]),
                                                           st.integers(0, 99) | text, max_size=2)})


@st.composite
def rewrite_doc(draw):
    """A ``traceEvents`` array's content with events merge rewrites itself (a pid, a ts)."""
    evs = draw(st.lists(pid_event | event, max_size=12))
    arr = json.dumps(evs, indent=draw(st.sampled_from([None, 1]))).encode()
    return arr[1:] + b',"z": 1}'


class Pids:
    """scan_rewrite's pid arrays for the pid texts registered so far (merged pid 100 + k)."""

    def __init__(self):
        self.texts = []
        self.build()

    def build(self):
        self.text = np.frombuffer(b"".join(self.texts) or b"\0", np.uint8)
        self.off = np.concatenate([[0], np.cumsum([len(t) for t in self.texts])]).astype(np.int64)
        self.new = np.arange(100, 100 + max(1, len(self.texts)), dtype=np.int64)
        self.kind = np.zeros(max(1, len(self.texts)), np.int64)
        self.used = np.zeros(max(1, len(self.texts)), np.uint8)
        self.slots = np.zeros(texthash.slots_for(len(self.texts)), np.int64)     # the texts' hash index
        texthash.index_texts(self.text, self.off, len(self.texts), self.slots)


def rewrite_windows(doc: bytes, sizes, cap, sep0, how, out_bytes, defer=False):
    """Feed growing windows of ``doc`` to scan_rewrite (stepping in where it asks: a new pid,
    an event for Python, a full ``out``, with ``defer`` a new flow category) and to scan_bounds;
    every call must return the same count, status, position, byte ranges and separator state.
    Returns the bytes written and the (start, end) of the events handed to Python."""
    from streamtrace.kernels import keep as RWK
    from streamtrace.kernels import rewrite as RW
    from streamtrace.kernels import validate as KV
    a_st, a_en = np.full(cap, -7, np.int64), np.full(cap, -7, np.int64)
    b_st, b_en = np.full(cap, -7, np.int64), np.full(cap, -7, np.int64)
    sa, sb = np.array([sep0], np.int64), np.array([sep0], np.int64)
    pids, cur, state, info = Pids(), np.zeros(5, np.int64), np.zeros(8, np.int64), np.zeros(2, np.int64)
    cats = []
    out, written, to_python = np.empty(out_bytes, np.uint8), bytearray(), []
    empty = np.zeros(1, np.uint8)
    pos, n = 0, 0
    grow = itertools.cycle(sizes)
    while True:
        buf = as_buffer(doc[:n], how)
        cur[:] = (pos, n, 0, 0, 0)
        kept, fields = np.zeros(cap, np.uint8), np.zeros((cap, KV.NF), np.int64)
        rec, rcls = np.zeros((cap, RWK.R_COLS), np.int64), np.zeros(cap, np.uint8)
        while True:
            ctext = np.frombuffer(b"".join(cats) or b"\0", np.uint8)
            coff = np.concatenate([[0], np.cumsum([len(c) for c in cats])]).astype(np.int64)
            status, scanned = RW.scan_rewrite(buf, cur, a_st, a_en, sa, out, state, pids.text, pids.off, pids.new,
                                              pids.kind, pids.used, len(pids.texts), pids.slots, empty, np.zeros(1, np.int64), 0,
                                              3, 0, False, False, 0, 0, ctext, coff, len(cats),
                                              np.zeros(0, np.int64), info, kept, fields, defer, rec, rcls)
            if status == RW.OK:
                break
            i = int(cur[3])
            assert 0 <= i < cur[2] <= cap
            if status == RW.OUT_FULL:
                written += out[:cur[4]].tobytes()
                state[4] += cur[4]
                if cur[4] == 0:
                    out = np.empty(2 * len(out) + int(a_en[i] - a_st[i]), np.uint8)
                cur[4] = 0
            elif status == RW.UNKNOWN_PID:
                pids.texts.append(buf[info[0]:info[1]].tobytes())
                pids.build()
            elif status == RW.NEW_CAT:
                assert defer
                cats.append(buf[info[0]:info[1]].tobytes())
            else:
                to_python.append((int(a_st[i]), int(a_en[i])))
                cur[3] = i + 1
        written += out[:cur[4]].tobytes()
        kb, status_b, pb = K.scan_bounds(buf, pos, n, b_st, b_en, sb)
        assert (int(cur[2]), scanned, int(cur[0]), sa[0]) == (kb, status_b, pb, sb[0]), (pos, n)
        assert a_st[:kb].tolist() == b_st[:kb].tolist() and a_en[:kb].tolist() == b_en[:kb].tolist()
        assert cur[3] == cur[2] and not kept[kb:].any()
        pos = pb
        if status_b != K.NEED_MORE or (kb < cap and n >= len(doc)):
            return bytes(written), to_python, status_b
        if kb < cap:
            n = min(len(doc), n + next(grow))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk | events_doc() | rewrite_doc(), sizes, st.sampled_from([1, 2, 3, 1000]), st.integers(0, 2),
       st.sampled_from(["plain", "unaligned", "padded"]), st.sampled_from([1, 64, 1 << 16]), st.booleans())
def test_scan_rewrite_finds_what_scan_bounds_finds(doc, block_sizes, cap, sep0, how, out_bytes, defer):
    """Whatever the bytes, windows, batch size and output room: the events scan_rewrite
    finds are scan_bounds' (a property-tested twin of scan_events), and what it writes
    does not depend on where the windows end (with a deferred filter's records too: its flows
    without a plain cat and id go to Python)."""
    got = rewrite_windows(doc, block_sizes, cap, sep0, how, out_bytes, defer)
    assert got == rewrite_windows(doc, [len(doc) + 1], 1000, sep0, "plain", 1 << 16, defer)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rewrite_doc(), sizes)
def test_scan_rewrite_writes_each_event_once(doc, block_sizes):
    """On a real array: each event is written once, as JSON, in order, unless it is handed to
    Python (those are events of the array too); every event with an integer pid, a ph and
    plain args is written by the kernel."""
    written, to_python, status = rewrite_windows(doc, block_sizes, 3, 0, "plain", 64)
    assert status == K.DONE
    evs = json.loads(b"[" + doc[:doc.rindex(b"]") + 1])
    bounds, _ = bounds_both(doc, [len(doc)], 1000, 0, "plain")
    assert set(to_python) <= set(bounds)
    py = {bounds.index(b) for b in to_python}
    got = json.loads(b"[" + written + b"]")
    assert [g["name"] for g in got] == [e["name"] for j, e in enumerate(evs) if j not in py]
    assert all(g["args"]["rank"] == 3 and g["pid"] >= 100 for g in got)
    assert not any(isinstance(evs[j].get("pid"), int) and evs[j]["ph"] == "X"
                   and all(isinstance(v, int) or k != "correlation" for k, v in evs[j]["args"].items())
                   for j in py)
