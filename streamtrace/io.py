"""Opening trace inputs (plain or gzip, decided by magic bytes) and writing
outputs atomically (temporary file in the target's folder, then ``os.replace``)."""
from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
import zlib
from pathlib import Path

from .errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
BLOCK = 8 << 20  # bytes read per block from an input stream


def is_gzip(path) -> bool:
    """True when the file starts with the gzip magic bytes (whatever its name)."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_input(path):
    """Open ``path`` for binary reading, decompressing gzip transparently.

    Raises :class:`TraceError` when the file cannot be opened.  Decompression
    errors surface later from ``read`` and are translated by :func:`read_block`.
    """
    try:
        if is_gzip(path):
            return gzip.open(path, "rb")
        return open(path, "rb")
    except OSError as e:
        raise TraceError(path, f"cannot open: {e.strerror or e}") from None


def read_block(stream, path, size=BLOCK) -> bytes:
    """Read up to ``size`` bytes, turning gzip/zlib failures into :class:`TraceError`."""
    try:
        return stream.read(size)
    except EOFError:
        raise TraceError(path, "compressed stream ends early (truncated .gz file)") from None
    except (gzip.BadGzipFile, zlib.error, OSError) as e:
        raise TraceError(path, f"corrupt gzip data ({e})") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path, mode="wb", compress=None, compresslevel=1):
    """Write ``path`` atomically: yields a binary file object writing to a
    temporary file in the same folder; on normal exit the file is renamed over
    ``path``; on any exception (KeyboardInterrupt included) it is deleted and the
    target is left untouched.

    ``compress``: None chooses gzip when ``path`` ends with ``.gz``.
    ``compresslevel`` 1 favours speed (traces compress ~10x even at level 1).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress is None:
        compress = path.name.endswith(".gz")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, 0o666 & ~_umask())      # mkstemp makes 0600; give the usual permissions
    raw = os.fdopen(fd, "wb")
    f = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=compresslevel, mtime=0) if compress else raw
    try:
        yield f
        if compress:
            f.close()
        raw.close()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            if compress:
                f.close()
            raw.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
