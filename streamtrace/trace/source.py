"""The bytes of a trace file: plain or gzip (decided by the magic bytes, not the name), read in
blocks with exact accounting (``ByteSource``), a byte range of a plain file read as a bare
array, a gzip file decompressed once to a plain copy (byte ranges need random access), and the
uncompressed size of a file without reading it."""
from __future__ import annotations

import os
import shutil
import tempfile
import zlib

from ..runtime.errors import TraceError
from ..runtime.files import input_file_problem, owner

GZIP_MAGIC = b"\x1f\x8b"
BLOCK = 8 << 20  # bytes read per block from an input stream
LEAN_BLOCK = 2 << 20  # the same for passes that hold little else (merge's rewrite, validate): ~30 MB less
                      # resident memory per process at the same CPU time (bench/RESULTS.md)
FIRST_BLOCK = 64 << 10  # the first block: the keys before traceEvents need no more; doubled per read up to BLOCK
# A gzip trace inflates ~20x (the real traces of ../shared: 18-20x).  One that claims more than
# HINT_RATIO times its size is not believed when deciding to cut it into byte ranges (its size field
# is the size modulo 4 GiB), and a decompressed copy stops at COPY_RATIO times it: a 4.8 MB gzip of
# 4.56 GiB of whitespace was copied to disk whole (issue 49).  Read as a stream, it costs no disk.
HINT_RATIO = 32
COPY_RATIO = 64


class InflateBoundError(TraceError):
    """A gzip trace inflates beyond ``COPY_RATIO`` times its size (or the disk's free space):
    no decompressed copy is made; the caller reads it as a stream, in one process."""


def is_gzip(path) -> bool:
    """True when the file starts with the gzip magic bytes (whatever its name)."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def plain_copy(path, folder) -> str | None:
    """Decompress a gzip file to a temporary plain file in ``folder`` and return its
    path, or None when ``path`` is not gzip.  The caller deletes it.  Raises
    ``TraceError`` for corrupt gzip data; a truncated gzip gives the
    bytes before the cut (the parse of the copy reports the truncation); ``InflateBoundError``
    (the partial copy removed) once the copy passes ``COPY_RATIO`` times the file's size or half
    the free space of ``folder``'s file system: the caller reads the file as a stream instead."""
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            return None
    try:
        free = shutil.disk_usage(folder).free // 2
    except OSError:
        free = None
    bound = COPY_RATIO * max(os.path.getsize(path), 1)
    bound = bound if free is None else min(bound, free)
    fd, tmp = tempfile.mkstemp(prefix=f".streamtrace-plain.{owner()}.", suffix=".json", dir=folder)
    src = ByteSource(path, block=LEAN_BLOCK)     # bounded blocks: 8 MB read whole were ~90 MB of JSON
    try:
        with os.fdopen(fd, "wb") as dst:
            written = 0
            while data := src.read():
                written += len(data)
                if written > bound:
                    raise InflateBoundError(path, f"inflates beyond {bound:,} bytes ({COPY_RATIO}x its size, or half "
                                                  f"the free disk): no decompressed copy made, read as a stream")
                dst.write(data)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        src.close()
    return tmp


class ByteSource:
    """Binary input stream (plain or gzip by magic bytes) with exact accounting
    of how many uncompressed bytes were produced; reports truncated gzip members
    instead of losing the tail the way ``gzip.GzipFile`` does.  Blocks start at
    ``FIRST_BLOCK`` bytes and double up to ``block``, so that reading only a trace's
    head (``streamtrace.trace.discover.identify``) decompresses ~64 KB, not 8 MB."""

    def __init__(self, path, block=BLOCK, byte_range=None):
        self.path = str(path)
        self.block = block
        self.next_block = min(block, FIRST_BLOCK)
        problem = input_file_problem(path)
        if problem is not None:
            raise TraceError(path, problem)
        self.f = None
        try:
            self.f = open(path, "rb")
            self.gz = self.f.read(2) == GZIP_MAGIC
            self.f.seek(0)
        except OSError as e:          # (one that opens but cannot be read: /proc/self/mem, EIO)
            what = "open" if self.f is None else "read"
            if self.f is not None:
                self.f.close()
            raise TraceError(path, f"cannot {what}: {e.strerror or e}") from None
        self.range = None
        if byte_range is not None:
            # a slice of a plain file's traceEvents array, read as a bare array: "[" slice "]"
            if self.gz:
                raise TraceError(path, "byte ranges need an uncompressed file")
            a, b = byte_range
            self.f.seek(a)
            self.range = [b"[", b - a, b"]"]
        self.z = zlib.decompressobj(31) if self.gz else None
        self.pending = b""         # compressed bytes read but not decompressed yet
        self.compressed_read = 0   # bytes of the file consumed so far (for progress bars)
        self.eof = False
        self.gzip_truncated = False

    def read(self) -> bytes:
        """Next block of uncompressed bytes; b"" at the end.  Raises
        ``TraceError`` when the file cannot be read (``EIO``)."""
        try:
            return self._read()
        except OSError as e:
            raise TraceError(self.path, f"cannot read: {e.strerror or e}", offset=self.compressed_read) from None

    def _read(self) -> bytes:
        if self.eof:
            return b""
        if self.range is not None:
            head, left, tail = self.range
            data = self.f.read(min(self.block, left)) if left > 0 else b""
            self.compressed_read += len(data)
            left -= len(data)
            if left > 0 and data:
                self.range = [b"", left, tail]
                return head + data
            self.range = [b"", 0, b""]          # range done (or the file ended early)
            out = head + data + tail
            self.eof = not out
            return out
        block, self.next_block = self.next_block, min(self.block, 2 * self.next_block)
        if not self.gz:
            data = self.f.read(block)
            if not data:
                self.eof = True
            self.compressed_read += len(data)
            return data
        out = []
        produced = 0
        while produced < block:                 # decompressed output bounded by max_length: a
            if not self.pending:                # block of highly compressed JSON is ``block`` bytes,
                self.pending = self.f.read(max(1, block // 4))    # not 10-20x the bytes read
                if not self.pending:
                    if not self.z.eof and self.compressed_read > 0:
                        self.gzip_truncated = True
                    self.eof = True
                    break
                self.compressed_read += len(self.pending)
            try:
                data = self.z.decompress(self.pending, block - produced)
            except zlib.error as e:
                raise TraceError(self.path, f"corrupt gzip data ({e})",
                                 offset=self.compressed_read) from None
            if self.z.eof:
                self.pending = self.z.unused_data
                if self.pending:                    # concatenated gzip members
                    self.z = zlib.decompressobj(31)
            else:
                self.pending = self.z.unconsumed_tail
            out.append(data)
            produced += len(data)
        return b"".join(out)

    def close(self):
        self.f.close()


def size_hint(path, size) -> int:
    """Uncompressed size estimate of a trace: its size, or for gzip the larger of the
    compressed size and the last member's ISIZE field (the size modulo 4 GiB), believed up to
    ``HINT_RATIO`` times the compressed size."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC:
                return size
            f.seek(-4, os.SEEK_END)
            return max(size, min(int.from_bytes(f.read(4), "little"), HINT_RATIO * size))
    except OSError:
        return size
