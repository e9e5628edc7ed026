"""Files streamtrace writes: every output atomically (a temporary file in the target's folder,
then ``os.replace``), temporaries removed quietly."""
from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from pathlib import Path

def umask() -> int:
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
    os.chmod(tmp, 0o666 & ~umask())      # mkstemp makes 0600; give the usual permissions
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


def remove_quietly(tmp):
    """Delete the file ``tmp`` (a path or None) if it is there; never raises."""
    if tmp:
        try:
            os.unlink(tmp)
        except OSError:
            pass
