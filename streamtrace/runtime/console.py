"""What the command's process writes to the terminal, made safe for it (issue 49).

Every name streamtrace prints comes from a file someone passed around (a kernel, op or thread name,
a process-group description) or from a path (a run folder named ``job_caf\\xe9``, or holding an
escape sequence).  A terminal acts on control characters: ``ESC ] 0 ; ... BEL`` retitles it,
``ESC [ 2 J`` clears it, a carriage return or a newline forges a line.  So:

* ``printable`` -- one line's text with every character a terminal would act on shown as
  text: control characters (C0, DEL, C1) as ``\\xNN``, newline, tab and carriage return as ``\\n``,
  ``\\t``, ``\\r``, the bytes of a file name that are not UTF-8 (Python's ``surrogateescape``: the
  character ``U+DCNN``) as ``\\xNN``, other characters Python does not call printable (format
  characters such as the bidi override ``U+202E``, separators other than the space, unassigned
  code points) as ``\\uNNNN``; optionally shortened, with the count of what was cut.  Every line
  the CLI and the epilogue's log print passes through it (``Console``,
  ``StageLog``, the error line);
* ``setup_console`` -- once, at the start of the ``streamtrace`` command's process: a standard
  descriptor that is closed (``>&-``, as a Slurm epilogue may run) is opened on ``/dev/null``,
  so that no file the command opens later takes its number (a log line would be written into
  it); stdout and stderr drop what cannot be printed (a closed pipe, ``| head``) instead of
  raising, and write what the locale cannot encode (``LC_ALL=C``: ASCII) as backslash escapes.
  The work, its record and the exit code do not depend on the terminal.
"""
from __future__ import annotations

import io
import os
import sys

__all__ = ["printable", "shorten", "setup_console", "DroppingStream"]

_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
def _escape(ch: str) -> str:
    c = ord(ch)
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if c < 0x100:
        return f"\\x{c:02x}"
    if 0xDC80 <= c <= 0xDCFF:            # an undecodable byte of a file name (surrogateescape)
        return f"\\x{c - 0xDC00:02x}"
    return f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"


def shorten(text: str, limit: int) -> str:
    """``text`` cut to its first ``limit`` characters followed by ``... (N more characters)`` when
    it is longer (``limit`` > 0), else unchanged."""
    if limit and len(text) > limit:
        return f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    return text


def printable(text, limit: int | None = None) -> str:
    """``str(text)`` as one line a terminal shows as it is (see the module docstring): what a terminal
    would act on, written as a backslash escape.  ``limit``: at most that many characters of the
    text are kept (``shorten``, counted before escaping).  Never raises for any ``str``."""
    text = text if isinstance(text, str) else str(text)
    if limit:
        text = shorten(text, limit)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


class DroppingStream(io.TextIOBase):
    """A text stream (stdout or stderr) that drops what cannot be written instead of raising: after
    a write or flush fails with ``OSError`` (a closed pipe: ``EPIPE``; ``EBADF``, ``EIO``) or
    ``ValueError`` (closed), every later one is dropped too.  Characters the stream's encoding lacks
    are written as backslash escapes.  Everything else is the wrapped stream's (``fileno``,
    ``isatty``, ``encoding``, ``buffer``)."""

    def __init__(self, stream):
        super().__init__()
        self._stream = stream
        self.broken = False
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass

    def write(self, s):
        if not self.broken:
            try:
                self._stream.write(s)
            except (OSError, ValueError):
                self.broken = True
        return len(s)

    def flush(self):
        if not self.broken:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self.broken = True

    def writable(self):
        return True

    def isatty(self):
        try:
            return not self.broken and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self):
        return self._stream.fileno()

    def close(self):            # the descriptor is the process's: never closed through this
        self.flush()

    @property
    def closed(self):
        return False

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _open_null(fd: int) -> None:
    """Give the closed descriptor ``fd`` (0, 1 or 2) to ``/dev/null``."""
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def setup_console() -> None:
    """At the start of the ``streamtrace`` command's process (see the module docstring): reopen a closed
    standard descriptor on ``/dev/null``, and wrap stdout and stderr in ``DroppingStream``.
    Idempotent."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            _open_null(fd)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, DroppingStream):
            continue
        if stream is None:               # Python found the descriptor closed at start-up
            stream = open(1 if name == "stdout" else 2, "w", encoding="utf-8", errors="backslashreplace",
                          closefd=False, buffering=1)
        setattr(sys, name, DroppingStream(stream))
