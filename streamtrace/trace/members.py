"""The gzip members of a file, walked in flat memory (``gzip_members``): each member's compressed
byte range, the first bytes of its content, its content's length and whether a text occurs in it,
so that a rewriter can copy the members it leaves unchanged as their compressed bytes
(``streamtrace.aggregate.critical_marks``: ``merge`` writes one member per rank segment).
``member_text`` inflates one member again, block by block.

A gzip file is one or more members (RFC 1952, 2.2), each a deflate stream with its own CRC-32
and length, decoded here by ``zlib`` (``wbits`` 31: one member, its trailer checked)."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterator

BLOCK = 1 << 20            # compressed bytes read at a time
CHUNK = 1 << 24            # most content bytes inflated at a time (a gzip bomb is not held)


class MembersError(ValueError):
    """The file is no sequence of whole gzip members: not gzip, a member cut, bytes after the last
    member that are none, a CRC or length that does not match."""


@dataclass(frozen=True)
class Member:
    """One gzip member: compressed bytes ``start:end`` of the file (int offsets), ``head`` its
    content's first bytes (all of it when shorter), ``size`` its content's length in bytes,
    ``found`` whether the ``needle`` given to ``gzip_members`` occurs in its content."""
    start: int
    end: int
    head: bytes
    size: int
    found: bool


def gzip_members(path, needle: bytes = b"", head: int = 4096) -> Iterator[Member]:
    """The gzip members of the file ``path`` in order (``Member``), each inflated once, in
    ``CHUNK`` s, never held whole.  Raises ``MembersError`` (after the members before it were
    yielded) where the file stops being whole gzip members; ``OSError`` when it cannot be read."""
    with open(path, "rb") as f:
        pending, offset = b"", 0
        while True:
            if not pending:
                pending = f.read(BLOCK)
                if not pending:
                    return
            member, pending = _one(f, pending, offset, needle, head)
            offset = member.end
            yield member


def _one(f, data: bytes, offset: int, needle: bytes, head: int) -> tuple[Member, bytes]:
    """The member starting at compressed ``offset`` (its first bytes ``data``, the rest read from
    ``f``): ``(Member, the bytes read past its end)``."""
    d = zlib.decompressobj(31)
    start, first, tail, size, found = offset, b"", b"", 0, False
    keep = max(len(needle) - 1, 0)
    while True:
        if not data:
            data = f.read(BLOCK)
            if not data:
                raise MembersError(f"a gzip member cut short (it starts at byte {start})")
        try:
            out = d.decompress(data, CHUNK)
        except zlib.error as e:
            raise MembersError(f"no whole gzip member at byte {start}: {e}") from None
        rest = d.unused_data if d.eof else d.unconsumed_tail
        offset += len(data) - len(rest)
        if len(first) < head:
            first += out[:head - len(first)]
        if needle and not found:
            found = needle in tail + out[:keep] or needle in out
            tail = (out[-keep:] if len(out) >= keep else (tail + out)[-keep:]) if keep else b""
        size += len(out)
        if d.eof:
            return Member(start, offset, first, size, found), rest
        data = rest


def members_at(path, ranges, head: int = 4096) -> Iterator[Member]:
    """The gzip members of the file ``path`` at the compressed byte ranges ``ranges`` (``[[start,
    end], ...]``, as their writer recorded them: ``streamtrace.merge.output.write_merged``), without
    inflating each whole: only a member's first ``head`` bytes are inflated, its ``size`` is its
    trailer's ISIZE (the length modulo 2**32, RFC 1952 2.3.1) and ``found`` is False (for a file
    whose writer says it holds no needle; ``gzip_members`` looks).  Raises ``MembersError`` when the
    ranges do not tile the file from byte 0 to its end, or a range does not start with a gzip
    member, or holds a member that ends before the range does (nothing yielded then)."""
    ranges = [(int(a), int(b)) for a, b in ranges]
    out = []
    with open(path, "rb") as f:
        total = f.seek(0, 2)
        if not ranges or ranges[0][0] != 0 or ranges[-1][1] != total or \
                any(b - a < 18 for a, b in ranges) or any(x[1] != y[0] for x, y in zip(ranges, ranges[1:])):
            raise MembersError(f"{path}: the recorded gzip members do not tile the file")
        for a, b in ranges:
            out.append(Member(a, b, _head_of(f, a, b, head), _isize(f, b), False))
    yield from out


def _head_of(f, a: int, b: int, head: int) -> bytes:
    """The first ``head`` content bytes of the member at compressed bytes ``a:b`` of ``f`` (at least
    one byte inflated: the range is checked to start a member)."""
    d = zlib.decompressobj(31)
    f.seek(a)
    first, data, left, want = b"", b"", b - a, max(head, 1)
    while not d.eof and len(first) < want:
        if not data:
            if not left:
                raise MembersError(f"a gzip member cut short (it starts at byte {a})")
            data = f.read(min(BLOCK, left))
            left -= len(data)
        try:
            first += d.decompress(data, want - len(first))
        except zlib.error as e:
            raise MembersError(f"no whole gzip member at byte {a}: {e}") from None
        data = d.unconsumed_tail
    if d.eof and (d.unused_data or left):
        raise MembersError(f"the gzip member at byte {a} ends before byte {b}")
    return first[:head]


def _isize(f, end: int) -> int:
    """The ISIZE field of the gzip member that ends at byte ``end`` of ``f``."""
    f.seek(end - 4)
    return int.from_bytes(f.read(4), "little")


def member_text(path, member: Member, block: int = BLOCK) -> Iterator[bytes]:
    """The content of ``member`` of the gzip file ``path``, in pieces of at most ``CHUNK`` bytes.
    Raises ``MembersError`` when the bytes there are no whole member."""
    d = zlib.decompressobj(31)
    with open(path, "rb") as f:
        f.seek(member.start)
        left = member.end - member.start
        while left:
            data = f.read(min(block, left))
            if not data:
                raise MembersError(f"a gzip member cut short (it starts at byte {member.start})")
            left -= len(data)
            while data:
                try:
                    out = d.decompress(data, CHUNK)
                except zlib.error as e:
                    raise MembersError(f"no whole gzip member at byte {member.start}: {e}") from None
                if out:
                    yield out
                data = d.unconsumed_tail
                if d.eof and (data or d.unused_data or left):
                    raise MembersError(f"bytes after the gzip member at byte {member.start}, before byte {member.end}")
    if not d.eof:
        raise MembersError(f"a gzip member cut short (it starts at byte {member.start})")
