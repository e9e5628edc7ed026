"""Process tuning, kept out of the algorithms: what streamtrace does to the Python process it
runs in, and why.

* ``trim`` -- hand freed heap memory back to the OS between phases (glibc ``malloc_trim``);
* ``freeze_for_fork``, ``thaw`` -- keep what a parent loaded out of its forked children's garbage
  collections;
* ``tune_malloc`` -- undo the frozen mmap threshold dask's nanny leaves in its workers;
* ``map_big_arrays`` -- large arrays mapped on their own, returned at once when freed (aggregate's job level);
* ``Parking`` -- an object's arrays on disk while the passes that do not read them run;
* ``few_malloc_arenas`` -- the ``streamtrace`` command's threads share two glibc arenas, not one each;
* ``release_library_pages`` -- LLVM's code, touched once by numba's set-up, out of the process's resident set;
* ``skip_numba_blas``, ``use_system_allocator``, ``skip_pandas``, ``quiet_llvm_lock`` -- start-up settings
  of the ``streamtrace`` command's own process (not of a program importing streamtrace);
* ``leave`` -- end the command's process at once, after flushing its output.

Each says what it saves, measured.  All are no-ops where they do not apply (not Linux, not glibc).
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

_LIBC = None


def trim():
    """Give the memory freed by the last phase back to the OS (glibc's ``malloc_trim``;
    a no-op elsewhere).  glibc keeps freed blocks of its heap for reuse: between phases
    that allocate differently sized arrays this holds tens of MB for nothing."""
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


# glibc mallopt(): M_MMAP_THRESHOLD, and the ceiling glibc's own adaptive threshold
# reaches on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
# environment variables that make glibc freeze its mmap threshold at 128 KiB
_FREEZING_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
_MALLOC_TUNED = None


class Parking:
    """An object's numpy arrays on disk while passes that do not read them run:
    ``only(names)`` parks the arrays ``getattr(obj, name)`` of ``names`` in ``folder`` (an existing folder;
    one ``.npy`` file each; the attribute None) and brings back those parked that ``names`` leaves out; an
    array parked in both sets stays on disk, not read back and written again.  ``peek`` lends parked arrays
    as read-only memory maps of their files, for a pass that reads a few of their values.  Used as a
    context manager: every parked array comes back when the block ends (also when it raises), the same
    dtype, shape and values, and its file is removed; an attribute the block set to something other than
    None keeps that value.  A name whose value is not an array is left as it is.

    Why: aggregate's critical path parks the job graph's node and member columns while its passes run.
    Read back between two passes whose parked sets differ by two columns, all ten came back beside the
    solve's earliest and latest times (4,096 synthetic ranks: 39 MB, the process's heap high-water mark)."""

    def __init__(self, obj, folder):
        self.obj, self.folder = obj, Path(folder)
        self.paths: dict = {}

    def __enter__(self) -> "Parking":
        return self

    def __exit__(self, *exc):
        self.only(())

    def only(self, names) -> "Parking":
        """Park the arrays of ``names`` (those not parked yet), bring back the parked ones not in ``names``.
        Raises OSError when a file cannot be written (that array left in place; those parked before it
        come back when the block ends)."""
        import numpy as np
        names = tuple(names)
        for name in [k for k in self.paths if k not in names]:
            path = self.paths.pop(name)
            if getattr(self.obj, name) is None:
                setattr(self.obj, name, np.load(path, allow_pickle=False))
            path.unlink(missing_ok=True)
        for name in names:
            a = getattr(self.obj, name, None)
            if name not in self.paths and isinstance(a, np.ndarray):
                path = self.folder / f"{name}.npy"
                np.save(path, a, allow_pickle=False)
                self.paths[name] = path
                setattr(self.obj, name, None)
            del a
        return self

    @contextmanager
    def peek(self):
        """The parked arrays as read-only memory maps of their files while the block runs (only the pages
        read come in, and they are the page cache's, not the process's heap), None again after it."""
        import numpy as np
        lent = [k for k in self.paths if getattr(self.obj, k) is None]
        try:
            for name in lent:
                setattr(self.obj, name, np.load(self.paths[name], mmap_mode="r", allow_pickle=False))
            yield self.obj
        finally:
            for name in lent:
                setattr(self.obj, name, None)


LLVM_LIBRARIES = ("libllvmlite", "libLLVM")
"""The shared libraries numba's set-up touches ~68 MB of (``release_library_pages``): llvmlite's, which holds
LLVM in the wheels, and LLVM's own where a distribution's llvmlite links it as a library of its own."""

MADV_DONTNEED = 4          # <sys/mman.h> on Linux


def release_library_pages(libraries: tuple | str = LLVM_LIBRARIES) -> int:
    """Drop from this process's resident set the pages of the shared libraries whose path contains one of
    ``libraries`` in their mappings that hold nothing but the file's own bytes: no write permission, no
    private copy of a page and no page not yet written back (``Anonymous``, ``Private_Dirty`` and
    ``Shared_Dirty`` 0 in ``/proc/self/smaps``), so that ``madvise(MADV_DONTNEED)`` loses nothing -- a
    page touched again is mapped back from the file (the page cache) on its next access, as at the
    library's first load, or as after the kernel reclaimed it under memory pressure.  Returns the kB of
    the mappings advised (resident or not; 0 where not Linux, or nothing matched).  Never raises.

    The mappings found clean are remembered (``_CLEAN``; a read-only mapping cannot become dirty): a later
    call, here or in a forked child, checks only that they are still mapped (``/proc/self/maps``, ~1 ms)
    instead of reading ``smaps`` again (~8 ms: the kernel walks every mapping's pages for it).

    Why: numba's set-up of its CPU target (the first kernel loaded in a process) runs LLVM's static
    initialisers and target set-up, which touch ~68 MB of ``libllvmlite.so``'s 178 MB of code and
    read-only data; the process keeps them mapped, and its RSS counts them, for as long as it runs.
    Loading more kernels after they are dropped maps back ~12 MB (measured on this project's 2-core VM:
    ``set_up`` 151.5 MB -> 85.4 MB; then aggregate's 17 units 103.5 MB, against 160.0 MB without).
    The pages are clean copies of the file, so the machine's free memory does not change: what
    changes is the process's RSS (what ``time``'s maximum resident size, a scheduler's MaxRSS and the
    kernel's choice of a process to kill under memory pressure count)."""
    key = (libraries,) if isinstance(libraries, str) else tuple(libraries)
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        found = _CLEAN.get(key)
        if found is None or found[0] != _mapped(key):
            found = _CLEAN[key] = _clean_mappings(key)
    except (OSError, AttributeError, ValueError):
        return 0
    return sum((end - start) // 1024 for start, end, _ in found[1]
               if libc.madvise(start, end - start, MADV_DONTNEED) == 0)


_CLEAN: dict = {}
"""``release_library_pages``' mappings by library names: ``(every read-only one, the clean ones)``, each a
set of ``(start, end, path)``."""


def _mapped(libraries: tuple) -> set:
    """``{(start, end, path)}`` of this process's mappings without write permission of a file whose path
    contains one of ``libraries`` (``/proc/self/maps``)."""
    with open("/proc/self/maps") as fh:
        return {span for span in (_library_span(line, libraries) for line in fh) if span is not None}


def _library_span(line: str, libraries: tuple) -> tuple | None:
    """``(start, end, path)`` of a mapping's line (of ``/proc/PID/maps``, or the first of an ``smaps`` entry)
    when the mapping has no write permission and its file's path contains one of ``libraries``, else None."""
    fields = line.split(maxsplit=5)
    if len(fields) < 6 or "w" in fields[1]:
        return None
    path = fields[5].rstrip("\n")
    if not any(x in path for x in libraries):
        return None
    start, end = (int(x, 16) for x in fields[0].split("-"))
    return start, end, path


def _clean_mappings(libraries: tuple) -> tuple:
    """``clean_spans`` of this process's ``/proc/self/smaps``."""
    with open("/proc/self/smaps") as fh:
        return clean_spans(fh, libraries)


DIRTY_FIELDS = ("Anonymous:", "Private_Dirty:", "Shared_Dirty:")
"""The smaps fields of a mapping that ``clean_spans`` needs to read, each 0, to call it clean."""


def clean_spans(lines, libraries: tuple) -> tuple:
    """``(every, clean)`` from the lines of a ``/proc/PID/smaps`` text: ``{(start, end, path)}`` of the
    mappings without write permission of a file whose path contains one of ``libraries`` (as ``_mapped``),
    and of those that hold no private copy of a page and no page not yet written back: every one of
    ``DIRTY_FIELDS`` present and 0 (a kernel or sandbox whose smaps leaves one out: not clean)."""
    out, cur = [], None
    for line in lines:
        head, _, rest = line.partition(" ")
        if "-" in head and ":" not in head:                    # a mapping's first line
            span = _library_span(line, libraries)
            cur = None
            if span is not None:
                cur = {"span": span, "zero": set(), "dirty": False}
                out.append(cur)
        elif cur is not None and head in DIRTY_FIELDS:
            if int(rest.split()[0]):
                cur["dirty"] = True
            else:
                cur["zero"].add(head)
    clean = {c["span"] for c in out if not c["dirty"] and len(c["zero"]) == len(DIRTY_FIELDS)}
    return {c["span"] for c in out}, clean


def freeze_for_fork():
    """Move every object this process holds now to the garbage collector's permanent generation
    (``gc.freeze``), for a parent about to fork children that inherit what it loaded (numba, pyarrow,
    the stages' modules: ~110 k objects).  A child's full collections then skip them: without it
    each traverses them (a full collection 8 -> 69 ms measured) and writes their headers, copying
    the shared pages.  Measured: the report of 1,024 synthetic ranks in a child of a process that
    loaded them, 4 alternating runs, medians: 5.86 CPU-s, frozen 5.23 (the process that had loaded
    only numba's import, as before: 5.47).  Objects frozen are never collected: call it after
    loading, not with garbage pending."""
    import gc
    gc.collect()
    gc.freeze()


def thaw():
    """Undo ``freeze_for_fork`` (``gc.unfreeze``): the frozen objects are collected again, in the
    oldest generation.  For a function that froze a caller's process (the epilogue's ``run`` in a
    notebook) and leaves it as it found it."""
    import gc
    gc.unfreeze()


def tune_malloc() -> bool:
    """Let glibc reuse freed arrays again in a worker started by dask's nanny; once
    per process, a no-op elsewhere.  Returns True when it changed the setting.

    The nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (config
    ``distributed.nanny.pre-spawn-environ``).  Setting any of those variables also
    switches off glibc's adaptive mmap threshold, so every allocation above 128 KiB --
    each numpy array a task builds -- is a fresh ``mmap`` whose pages the kernel faults
    in and zeroes, then ``munmap``.  Measured on 126 MB ranks: 3-4x the page faults,
    0.8 s instead of 0.3 s system CPU per rank, +25-40 % CPU per task.  This restores
    the threshold glibc's adaptive rule would reach, ``MMAP_THRESHOLD`` (32 MiB);
    the trim threshold (memory handed back to the OS) is left as configured.  Costs
    about 30 MB more peak RSS per worker (126 MB ranks: 336 MB instead of ~300 MB).  An
    explicit ``MALLOC_MMAP_THRESHOLD_`` is respected."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED is not None:
        return False
    _MALLOC_TUNED = False
    env = os.environ
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in env \
            or not any(k in env for k in _FREEZING_ENV):
        return False
    try:
        import ctypes
        _MALLOC_TUNED = bool(ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):    # not glibc
        pass
    return _MALLOC_TUNED


BIG_ARRAYS_MAPPED = 4 << 20
"""``map_big_arrays``' threshold (bytes)."""


def map_big_arrays(threshold: int = BIG_ARRAYS_MAPPED) -> bool:
    """Have glibc map every allocation of ``threshold`` bytes or more on its own (``mallopt``
    ``M_MMAP_THRESHOLD``, which also stops glibc's adaptive rule from raising it to 32 MiB), so that
    a freed large array is handed back to the OS at once, not kept in the heap until the next
    ``trim``.  For a process that builds and drops arrays of many MB in a row, whose resident
    peak is then its live arrays, not those plus the ones freed since the last trim: aggregate's
    job-level processes (the critical path's, the what-if replay's).  Measured at 4,096 synthetic
    ranks: the replay's process 442 -> 393 MB, the same CPU (bench/RESULTS.md, issue 48, the
    thirty-fourth session).  Returns True when set; a no-op (False) where not glibc, or where
    ``MALLOC_MMAP_THRESHOLD_`` is set."""
    return _mallopt(M_MMAP_THRESHOLD, threshold, "MALLOC_MMAP_THRESHOLD_")


def _mallopt(param: int, value: int, env: str) -> bool:
    """glibc's ``mallopt(param, value)`` unless the environment variable ``env`` (glibc's own for that
    setting) is set: True when set, False where not glibc (a no-op)."""
    if not sys.platform.startswith("linux") or env in os.environ:
        return False
    try:
        import ctypes
        return bool(ctypes.CDLL("libc.so.6").mallopt(param, int(value)))
    except (OSError, AttributeError):    # not glibc
        return False


M_ARENA_MAX = -8
MALLOC_ARENAS = 2
"""``few_malloc_arenas``' number of glibc arenas (glibc's own limit: 8 a core)."""


def few_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Have the threads of the ``streamtrace`` command's process (and of the processes it forks)
    share ``arenas`` glibc heaps (``mallopt`` ``M_ARENA_MAX``), not one each: the main thread's and
    one for the rest (Arrow's thread pool, which reads and writes Parquet through the system
    allocator: ``use_system_allocator``).  Memory a thread frees in its own arena is reused by that
    arena only, so each arena kept its own high-water mark of freed blocks.  Measured at 4,096
    synthetic ranks (``aggregate -j 2``, peak RSS of each process, medians of 4-6 runs, MB): parent
    368 -> 358, rank workers 200 -> 191, the job level's unchanged (~377 each), the same CPU; one
    arena saved twice that (348, 178) but puts every thread of a many-core node on one lock
    (bench/RESULTS.md, issue 48, the thirty-sixth session).  Called by ``streamtrace.cli.command``
    before any thread starts (glibc reads the limit when a thread first needs an arena); a program
    that imports streamtrace as a library keeps its own.  Returns True when set; a no-op (False) where
    not glibc, or where ``MALLOC_ARENA_MAX`` is set."""
    return _mallopt(M_ARENA_MAX, arenas, "MALLOC_ARENA_MAX")


def skip_numba_blas():
    """Keep numba from importing SciPy's BLAS bindings in the ``streamtrace`` command's
    own process.  At the first kernel it loads, numba registers its NumPy
    implementations and probes ``scipy.linalg.cython_blas`` (for ``np.dot`` and
    friends inside jitted code) whenever SciPy is installed; that import costs about
    0.3-0.5 s and 18 MB of RSS per process, and no streamtrace kernel does linear
    algebra.  Marking ``scipy.linalg`` unimportable makes numba record "no BLAS"; numba's
    import also imports ``scipy`` itself only to check its version (~0.12 s), so ``scipy`` is
    marked unimportable as well.
    The same first load imports ``numba.core.typing.cffi_utils``, which builds a cffi
    parser (pycparser's lexer: ~0.1 CPU-s, ~0.3 s wall measured) whenever cffi is
    installed; no kernel calls cffi functions, so ``cffi`` is marked unimportable too.
    Only the command-line process (and the workers it forks) do this: a program that
    imports streamtrace as a library keeps SciPy and cffi as they are."""
    _unimportable("scipy", "scipy.linalg", "cffi")


def quiet_llvm_lock():
    """Stop numba from turning each of llvmlite's calls into LLVM into two events in the
    ``streamtrace`` command's process.  numba registers a callback on llvmlite's lock that
    starts and ends a ``numba:llvm_lock`` event around every call (numba's own compile timers
    read them); loading one kernel from the cache makes ~200 such calls, so the events are
    ~1 ms of each kernel's load (measured: aggregate's 15 per-rank units 63-64 -> 50-52 ms).
    Called by the commands once numba is imported (``streamtrace.cli.common``); the workers they
    fork inherit it.  Never raises: with numba's internals changed it does nothing."""
    try:
        import numba.core.base  # noqa: F401 - registers the callbacks when first imported
        from llvmlite.binding import ffi
        for acq, rel in list(ffi.lib._lock._cblist):
            if getattr(acq, "__module__", "") == "numba.core.base":
                ffi.unregister_lock_callback(acq, rel)
    except Exception:              # noqa: BLE001 - a start-up setting, never an error
        pass


def skip_pandas():
    """Keep pyarrow from importing pandas in the ``streamtrace`` command's own process.
    pyarrow imports pandas, when it is installed, at its first conversion of anything (reading
    a Parquet file, ``pa.array``, any ``pyarrow.compute`` call: it checks whether the argument
    is a pandas object): ~0.25 s of every ``aggregate`` and ``report`` (measured: 0.23 s of
    the demo's 1.46 s aggregate).  No command uses pandas, so a finder first on
    ``sys.meta_path`` answers "not installed" for it (a ``None`` entry in ``sys.modules``, as
    for SciPy, is not enough: pyarrow's compiled import reads ``sys.modules`` directly).
    Called by ``command`` only -- not by ``main``,
    which tests and programs call in a process that may use pandas afterwards."""
    if "pandas" not in sys.modules and NoPandas not in sys.meta_path:
        sys.meta_path.insert(0, NoPandas)


class NoPandas:
    """A ``sys.meta_path`` finder for which pandas is not installed (``skip_pandas``)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("pandas is not used by the streamtrace command", name=name)
        return None


def _unimportable(*names):
    """Make ``import name`` raise ImportError for each of ``names`` not imported yet (a
    ``None`` entry in ``sys.modules``, Python's documented way)."""
    for name in names:
        if name not in sys.modules:
            sys.modules[name] = None


def use_system_allocator():
    """Make the system allocator Arrow's default memory pool in the ``streamtrace``
    command's process (and the workers it forks), unless ``ARROW_DEFAULT_MEMORY_POOL``
    says otherwise.  The Parquet writer takes its encoders' and pages' buffers (~8 MB per
    row group of ops) from Arrow's process-wide default pool whatever ``memory_pool`` it is
    given, and the wheels' default, mimalloc, keeps the memory it frees mapped: ~12 MB of
    resident memory beside glibc's heap, which would reuse it for the numpy arrays of the
    next step (peak RSS of ``analyze`` on the 1.1 GB benchmark trace: -12 MB).  Arrow reads
    the variable once, when pyarrow is imported; a program that imports streamtrace as a
    library chooses its own pool."""
    if "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def leave(code: int):
    """End the ``streamtrace`` command's process with ``code``: flush stdout and stderr, then
    ``os._exit``.  Every output is written and closed by then; what the skipped interpreter
    teardown would do is destroy numba's and llvmlite's compiled code objects and the modules
    one by one, ~0.3-0.4 s of every run (measured on a 0.05 MB trace: 1.48 -> 1.13 s median of 6)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:           # None: started with the descriptor closed (``>&-``)
                stream.flush()
        except (OSError, ValueError):        # a closed pipe: nothing more to say
            pass
    os._exit(code)
