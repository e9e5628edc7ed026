"""``streamtrace.trace.members``: the gzip members of a file, against the members as they were
written (each ``gzip.compress`` d by the test, its offsets summed by hand), with small read and
inflate sizes so that reads, inflated pieces and the searched text fall across their edges."""
from __future__ import annotations

import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtrace.trace import members as M

NEEDLE = b'"critical_path"'

_content = st.one_of(st.binary(max_size=300),
                     st.lists(st.sampled_from([b"ab", b'"critical', b'_path"', b",", b"x" * 50]), max_size=40)
                     .map(b"".join))


@settings(max_examples=150, deadline=None)
@given(contents=st.lists(_content, min_size=1, max_size=8), level=st.integers(0, 9),
       block=st.integers(1, 64), chunk=st.integers(1, 64), head=st.integers(0, 40))
def test_members_as_written(tmp_path_factory, monkeypatch_module, contents, level, block, chunk, head):
    path = tmp_path_factory.mktemp("m") / "f.gz"
    blobs = [gzip.compress(c, compresslevel=level, mtime=0) for c in contents]
    path.write_bytes(b"".join(blobs))
    monkeypatch_module.setattr(M, "BLOCK", block)
    monkeypatch_module.setattr(M, "CHUNK", chunk)
    got = list(M.gzip_members(path, NEEDLE, head=head))
    ends = [sum(len(b) for b in blobs[:k + 1]) for k in range(len(blobs))]
    assert [(m.start, m.end) for m in got] == list(zip([0] + ends[:-1], ends))
    assert [m.head for m in got] == [c[:head] for c in contents]
    assert [m.size for m in got] == [len(c) for c in contents]
    assert [m.found for m in got] == [NEEDLE in c for c in contents]
    assert [b"".join(M.member_text(path, m, block=block)) for m in got] == contents
    known = list(M.members_at(path, [(m.start, m.end) for m in got], head=head))       # the writer's ranges
    assert [(m.start, m.end, m.head, m.size, m.found) for m in known] == \
        [(m.start, m.end, m.head, m.size, False) for m in got]
    if len(got) > 1:                  # a gap; two members in one range when the first ends within the head
        bad = [[(0, got[0].end - 1)] + [(m.start, m.end) for m in got[1:]]]
        if len(contents[0]) < head:
            bad.append([(0, got[1].end)] + [(m.start, m.end) for m in got[2:]])
        for ranges in bad:
            with pytest.raises(M.MembersError):
                list(M.members_at(path, ranges, head=head))
        with pytest.raises(M.MembersError):                  # member_text: bytes after the member
            b"".join(M.member_text(path, M.Member(0, got[1].end, b"", 0, False), block=block))


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.mark.parametrize("damage", ["garbage after", "cut", "not gzip", "bad crc"])
def test_damaged_files_raise_after_the_whole_members(tmp_path, damage):
    good = [gzip.compress(b"one" * 100, mtime=0), gzip.compress(b"two" * 100, mtime=0)]
    data = b"".join(good)
    if damage == "garbage after":
        data += b"not a member"
    elif damage == "cut":
        data = data[:-5]
    elif damage == "not gzip":
        data = b"{}" + data
    else:
        last = bytearray(good[1])
        last[-6] ^= 0xFF                    # its CRC-32
        data = good[0] + bytes(last)
    p = tmp_path / "f.gz"
    p.write_bytes(data)
    seen = []
    with pytest.raises(M.MembersError):
        for m in M.gzip_members(p):
            seen.append(m)
    assert len(seen) == {"garbage after": 2, "cut": 1, "not gzip": 0, "bad crc": 1}[damage]
