"""Files and folders streamtrace writes: nothing half-written, nothing left behind.

* **A file is a unit** (``atomic_output``): written to a temporary file in the target's
  folder, then renamed over the target; on any exception the temporary is deleted.
* **A folder is a unit** (``output_folder``): ``analyze``, ``aggregate`` and ``report`` write
  into a staging folder beside ``OUTDIR`` and swap it in at the end (Linux ``renameat2``
  ``RENAME_EXCHANGE``: one atomic step; elsewhere two renames, which the next run repairs
  if it was cut between them).  A reader sees the complete old folder or the complete new
  one, never a mix; an interrupted or failed run leaves ``OUTDIR`` as it was.
* **Every temporary names its owner** (``owner``: the command's pid and host,
  ``.<name>.<pid>-<host>.<what>``), so ``clean_stale`` can remove those whose process
  is gone (SIGKILL, power loss) at the next run, and leave a running one's alone.
* **Output paths are checked before the work** (``check_output_file``, the start of
  ``output_folder``), and an ``OSError`` while writing becomes one
  ``OutputError`` line naming the output (``output_error``).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import gzip
import json
import os
import re
import shutil
import socket
import stat
import tempfile
from array import array
from pathlib import Path

from .errors import OutputError, StreamtraceError

_OWNER = None
# .<base>.<pid>-<host>.<rest>: the last such tag in a hidden name (base may hold dots), and
# <rest> one of the kinds streamtrace makes (or any, for its own ".streamtrace-*" names)
_TAGGED = re.compile(r"^\.(?P<base>.*)\.(?P<pid>\d+)-(?P<host>[A-Za-z0-9]+)\.(?P<rest>[^.]+(?:\.[^.]+)*)$")
_KINDS = re.compile(r"staging|old|rank\d+\.seg(?:\.\d+)?(?:\.val)?|\w+\.(?:tmp|probe)")
_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM,
                  errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ENOTEMPTY, errno.EBUSY, errno.EXDEV)


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]", "", socket.gethostname().split(".")[0])[:24] or "host"


def owner() -> str:
    """``<pid>-<host>`` of the process that first asked (the command's own process: worker
    processes forked from it inherit the answer), the tag every temporary name carries."""
    global _OWNER
    if _OWNER is None:
        _OWNER = f"{os.getpid()}-{_host()}"
    return _OWNER


def temp_name(name: str, what: str) -> str:
    """``.<name>.<owner>.<what>``: the name of a temporary beside ``name``."""
    return f".{name}.{owner()}.{what}"


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists on this host and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def remove_tree(path) -> None:
    """Delete a file or a folder tree; never raises."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def clean_stale(folder) -> list[str]:
    """Remove the temporaries in ``folder`` (not recursive) whose owner process is gone:
    merge segments, temporary outputs, warm-up, spill and staging folders of a run that
    was killed.  A swapped-out old output (``.<name>.<owner>.old``, left when a run
    without an atomic folder swap was cut between its two renames) is put back when the
    output itself is missing.  Only this host's temporaries are judged (a pid means
    nothing on another host).  Returns the names removed; never raises."""
    done = []
    try:
        entries = [e.name for e in os.scandir(folder) if e.name.startswith(".")]
    except OSError:
        return done
    me = owner()
    host = me.split("-", 1)[1]
    for name in entries:
        m = _tagged(name)
        if not m or m["host"] != host or f"{m['pid']}-{m['host']}" == me or pid_alive(int(m["pid"])):
            continue
        path = os.path.join(folder, name)
        target = os.path.join(folder, m["base"])
        if m["rest"] == "old" and not os.path.lexists(target):
            with contextlib.suppress(OSError):
                os.rename(path, target)
                continue
        remove_tree(path)
        done.append(name)
    return done


def _tagged(name: str):
    m = _TAGGED.match(name)
    if m and (m["base"].startswith("streamtrace-") or _KINDS.fullmatch(m["rest"])):
        return m
    return None


def is_temporary(name: str) -> bool:
    """True for a name streamtrace gives its temporaries (see ``temp_name``)."""
    return _tagged(name) is not None


# -- errors -------------------------------------------------------------------------------

def output_error(target, e: OSError, inside=()) -> StreamtraceError:
    """The one-line error for ``e``, raised while writing the output ``target``: an
    ``OutputError`` naming ``target`` and what went wrong, or, when ``e`` names a file
    outside ``target`` and the folders ``inside`` (its staging folder, ...) and is not about
    space or a read-only file system, a plain error naming that file (an input)."""
    what = e.strerror or (str(e).splitlines()[0] if str(e) else type(e).__name__)
    fn = getattr(e, "filename", None)
    if fn is not None and e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG):
        fn = os.path.abspath(fn)
        mine = [os.path.abspath(p) for p in (target, *inside)]
        if not any(fn == p or fn.startswith(p.rstrip(os.sep) + os.sep) for p in mine) \
                and not os.path.basename(fn).startswith("."):
            return StreamtraceError(f"{fn}: {what}")
    return OutputError(target, f"cannot write: {what}")


@contextlib.contextmanager
def writing(target, inside=()):
    """Turn an ``OSError`` raised in the block (the disk filled up, the folder became
    read-only) into ``output_error``'s one line about ``target``."""
    try:
        yield
    except StreamtraceError:
        raise
    except OSError as e:
        raise output_error(target, e, inside) from e


def _check_parents(path: Path):
    """The nearest existing ancestor of ``path`` must be a folder."""
    for anc in path.absolute().parents:
        if os.path.lexists(anc):
            if not anc.is_dir():
                raise OutputError(path, f"cannot create it: {anc} is a file, not a folder")
            return


def _make_folder(folder: Path, target):
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(target, f"cannot create the folder {folder}: {e.strerror or e}") from None


def check_output_file(path, inputs=()) -> Path:
    """Check before any work that the file ``path`` can be written: not a folder, not one of
    ``inputs`` (paths), under a folder (created if missing) where a file can be created.
    Removes stale temporaries there (``clean_stale``).  Raises ``OutputError``."""
    path = Path(path)
    not_a_plain_file(path)
    _check_parents(path)
    for p in inputs:
        if _same_file(p, path):
            raise OutputError(path, f"is one of the inputs ({p}); give another output file")
    _make_folder(path.parent, path)
    clean_stale(path.parent)
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.{owner()}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputError(path, f"cannot write in {path.parent}: {e.strerror or e}") from None
    return path


def not_a_plain_file(path) -> None:
    """Raise ``OutputError`` when ``path`` (after its links) exists and is not a regular file: a
    folder, or a device, pipe, socket or terminal (``/dev/stdout``, ``/dev/full``).  An atomic write renames its
    temporary file over the path: it would replace the special file itself (as root, ``/dev/full``
    became a Parquet file)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        raise OutputError(path, f"cannot check it: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(path, "is a folder; give a file name")
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(path, "is not a regular file (a device, pipe or socket: streamtrace writes its "
                                "outputs as files, renamed into place); give a file name")


def _same_file(a, b) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b) or (os.path.exists(b) and os.path.samefile(a, b))
    except OSError:
        return False


# -- one file -----------------------------------------------------------------------------

@contextlib.contextmanager
def atomic_output(path, mode="wb", compress=None, compresslevel=1):
    """Write ``path`` atomically: yields a binary file object writing to a
    temporary file in the same folder; on normal exit the file is renamed over
    ``path``; on any exception (KeyboardInterrupt included) it is deleted and the
    target is left untouched.

    ``compress``: None chooses gzip when ``path`` ends with ``.gz``.
    ``compresslevel`` 1 favours speed (traces compress ~10x even at level 1).
    Raises ``OutputError`` when ``path`` is a folder, under a file, or not a regular file
    (``not_a_plain_file``: a device or pipe is never replaced).
    """
    path = Path(path)
    not_a_plain_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputError(path, "a part of its folder is a file, not a folder") from None
    if compress is None:
        compress = path.name.endswith(".gz")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{owner()}.", suffix=".tmp", dir=path.parent)
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


JSON_CHUNK = 1 << 20
"""Characters of JSON text ``write_json`` joins into one write (at least one piece: a longer piece is written
whole).  Counted in characters, not pieces: a ``JsonItems`` item is one piece of a rank's whole entry (5.4 KB at
the synthetic jobs' ranks), and 65,536 pieces a write held all of a 4,096-rank ``summary.json`` three times
(pieces, joined, encoded: +45 MB in analyze's parent at its end, measured 2026-12-06)."""


class JsonItems:
    """A JSON array given as an iterable of its items, read once: as a value of the dict ``write_json``
    writes, its items are encoded one at a time as they come, never all held (analyze's ``summary.json``:
    every rank's entry read back from where it was spilled).  ``spans``, once written: each item's
    ``(start, end)`` byte offsets in the document (its text alone: ``json.loads`` of those bytes is the
    item), flat: ``array("q")`` of ``start, end`` pairs."""

    def __init__(self, items):
        self.items = items
        self.spans = array("q")


def write_json(f, obj, default=None) -> None:
    """``json.dumps(obj, indent=1, default=default)`` written into the binary file ``f`` (UTF-8) about
    ``JSON_CHUNK`` characters at a time, as json's encoder makes its pieces: the same bytes, without the whole text held
    once as ``str``, once as its pieces and once as ``bytes`` (analyze's ``summary.json`` of 4,096 ranks,
    22 MB: +164 MB in its process).  ``obj`` a dict with str keys may hold ``JsonItems`` values: written
    as the lists of their items would be.  Raises what ``json.dumps`` raises (``TypeError`` for a value it
    cannot encode, ``ValueError`` for a circular reference)."""
    enc = json.JSONEncoder(indent=1, default=default)      # (ensure_ascii: one byte a character)
    if not (isinstance(obj, dict) and any(isinstance(v, JsonItems) for v in obj.values())):
        _write_text(f, enc.iterencode(obj))
        return
    _write_text(f, _dict_pieces(enc, obj))


def _dict_pieces(enc, obj: dict):
    """``enc.iterencode(obj)``'s pieces (``indent=1``) for a dict of str keys whose ``JsonItems`` values are
    encoded item by item: json's layout of a nested value is its own text with every line break indented
    one more level (a line break in JSON text is never inside a string: it is escaped there)."""
    at = 0                                        # (characters so far: bytes, the text being ASCII)
    for i, (k, v) in enumerate(obj.items()):
        if not isinstance(k, str):
            raise TypeError(f"write_json: a dict with JsonItems needs str keys, not {type(k).__name__}")
        piece = ("," if i else "{") + "\n " + enc.encode(k) + ": "
        at += len(piece)
        yield piece
        if not isinstance(v, JsonItems):
            for piece in _indented(enc.iterencode(v), 1):
                at += len(piece)
                yield piece
            continue
        spans = array("q")
        for n, item in enumerate(v.items):
            text = enc.encode(item).replace("\n", "\n  ")    # (an item at a time: one string, one replace)
            yield ("," if n else "[") + "\n  " + text
            spans.extend((at + 4, at + 4 + len(text)))      # (after "[" or ",", the line break, its indent)
            at += 4 + len(text)
        v.spans = spans
        piece = "\n ]" if len(spans) else "[]"
        at += len(piece)
        yield piece
    yield "\n}" if obj else "}"


def _indented(pieces, level: int):
    """JSON text pieces (``indent=1``) with every line break indented ``level`` more."""
    pad = "\n" + " " * level
    for piece in pieces:
        yield piece.replace("\n", pad)


def _write_text(f, pieces) -> None:
    """Text ``pieces`` written into the binary file ``f`` (UTF-8), ~``JSON_CHUNK`` characters at a time."""
    buf: list = []
    size = 0
    for piece in pieces:
        buf.append(piece)
        size += len(piece)
        if size >= JSON_CHUNK:
            f.write("".join(buf).encode())
            buf.clear()
            size = 0
    f.write("".join(buf).encode())


def remove_quietly(tmp):
    """Delete the file ``tmp`` (a path or None) if it is there; never raises."""
    if tmp:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# -- one folder ---------------------------------------------------------------------------

@contextlib.contextmanager
def output_folder(outdir, owned=None, carry=None, inputs=()):
    """Make the folder ``outdir`` one unit: yields a new, empty staging folder beside it
    (``.<name>.<owner>.staging``) to write everything into; on normal exit the staging
    folder takes ``outdir``'s place in one step (``swap_in``), on any exception
    (KeyboardInterrupt and SIGTERM included, see ``streamtrace.runtime.lifecycle``) it is
    deleted and ``outdir`` is left as it was.

    An existing ``outdir`` is replaced as a whole, so it may hold only what ``owned(name)``
    says is this command's output (its top-level entries); ``carry(name)`` instead keeps the
    top-level entries it accepts (hard links, else copies) and replaces the others, for a
    command that adds files to a folder it does not own (``report`` into an aggregate folder).

    Checked first, before any work (raises ``OutputError``): ``outdir`` is not a file
    and not under one, not read-only, not the current folder, holds nothing but its own
    output and none of ``inputs`` (paths), and its parent can be created and written.
    Stale temporaries beside it are removed (``clean_stale``).  An ``OSError`` inside the
    block becomes an ``OutputError`` naming ``outdir`` (``writing``)."""
    outdir = Path(os.path.realpath(outdir) if os.path.islink(outdir) else os.path.abspath(outdir))
    _check_replaceable(outdir, owned if carry is None else None, inputs)
    _make_folder(outdir.parent, outdir)
    clean_stale(outdir.parent)
    stage = outdir.parent / temp_name(outdir.name, "staging")
    remove_tree(stage)
    try:
        stage.mkdir()
    except OSError as e:
        raise OutputError(outdir, f"cannot write in {stage.parent}: {e.strerror or e}") from None
    try:
        with writing(outdir, (stage,)):
            if outdir.is_dir():
                os.chmod(stage, os.stat(outdir).st_mode & 0o7777)
                if carry is not None:
                    for entry in sorted(os.listdir(outdir)):
                        if carry(entry) and not is_temporary(entry):
                            link_tree(outdir / entry, stage / entry)
            yield stage
            swap_in(stage, outdir)
    except BaseException:
        remove_tree(stage)
        raise


_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"))


def input_file_problem(path) -> str | None:
    """Why ``path`` cannot be read as an input file, checked without opening it (opening a FIFO
    waits for a writer): "no such file", "is a folder, not a file", "not a regular file (a FIFO)",
    "cannot read: Permission denied"; None when it is a readable regular file (or a symlink to
    one).  Made for one-line errors naming the path (issue 33)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    if stat.S_ISDIR(st.st_mode):
        return "is a folder, not a file"
    for test, kind in _SPECIAL:
        if test(st.st_mode):
            return f"not a regular file ({kind})"
    if not os.access(path, os.R_OK):
        return "cannot read: Permission denied"
    return None


def check_output_folder(outdir, owned=None, inputs=()):
    """``output_folder``'s checks of ``outdir`` alone, for a command that writes a folder of
    output folders (the epilogue): raises ``OutputError`` as ``output_folder`` does."""
    outdir = Path(os.path.realpath(outdir) if os.path.islink(outdir) else os.path.abspath(outdir))
    _check_replaceable(outdir, owned, inputs)


def _check_replaceable(outdir: Path, owned, inputs):
    """``output_folder``'s checks of an output folder before any work."""
    if os.path.lexists(outdir) and not outdir.is_dir():
        raise OutputError(outdir, "is a file, not a folder; give a folder name")
    _check_parents(outdir)
    cwd = os.getcwd()
    if cwd == str(outdir) or cwd.startswith(str(outdir).rstrip(os.sep) + os.sep):
        raise OutputError(outdir, "is the current folder (or holds it), which would be replaced; give another folder")
    for p in inputs:
        p = os.path.abspath(p)
        if p == str(outdir) or p.startswith(str(outdir).rstrip(os.sep) + os.sep):
            raise OutputError(outdir, f"holds the input {p}, and an output folder is replaced as a whole; "
                                      f"give another folder")
    if not outdir.is_dir():
        return
    if not os.access(outdir, os.W_OK | os.X_OK):
        raise OutputError(outdir, "cannot write: the folder is read-only")
    if os.path.ismount(outdir):
        raise OutputError(outdir, "is a mount point; give a folder inside it")
    if owned is not None:
        try:
            foreign = sorted(n for n in os.listdir(outdir) if not owned(n) and not is_temporary(n))
        except OSError as e:
            raise OutputError(outdir, f"cannot read the folder: {e.strerror or e}") from None
        if foreign:
            raise OutputError(outdir, f"holds {foreign[0]!r}, which streamtrace did not write there, and an output "
                                      f"folder is replaced as a whole; give a new or empty folder")


def link_tree(src, dst):
    """Recreate ``src`` (a file, a symlink or a folder tree) at ``dst`` with hard links to
    its files (copies where the file system cannot link)."""
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
    elif os.path.isdir(src):
        os.mkdir(dst)
        shutil.copymode(src, dst)
        for name in os.listdir(src):
            link_tree(os.path.join(src, name), os.path.join(dst, name))
    else:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)


def swap_in(stage, outdir):
    """Put the folder ``stage`` at ``outdir`` and delete what was there: a rename when
    ``outdir`` does not exist, else an atomic exchange (Linux ``renameat2``), else
    ``outdir`` -> ``.<name>.<owner>.old``, ``stage`` -> ``outdir`` (a cut between the two
    is undone by the next run's ``clean_stale``)."""
    stage, outdir = Path(stage), Path(outdir)
    if not os.path.lexists(outdir):
        try:
            os.rename(stage, outdir)
            return
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    if exchange(stage, outdir):
        remove_tree(stage)                       # it holds the old folder now
        return
    old = outdir.parent / temp_name(outdir.name, "old")
    remove_tree(old)
    os.rename(outdir, old)
    try:
        os.rename(stage, outdir)
    except BaseException:
        os.rename(old, outdir)
        raise
    remove_tree(old)


_RENAMEAT2 = None
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a, b) -> bool:
    """Swap the paths ``a`` and ``b`` in one atomic step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``).  False where that is not available (other systems, old kernels,
    file systems without it); raises ``OSError`` when it fails for another reason."""
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        try:
            f = ctypes.CDLL(None, use_errno=True).renameat2
            f.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            _RENAMEAT2 = f
        except (OSError, AttributeError):
            _RENAMEAT2 = False
    if not _RENAMEAT2:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))
