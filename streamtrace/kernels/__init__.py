"""Numba kernels of streamtrace, their plain-Python reference twins (``reference``)
and the Python facades the stages call them through (``rewriter``,
``surveyor``, ``validator``, ``keeper``,
``nsys_writer``: each owns a kernel's state arrays under named fields and its
status loop).

Every kernel is compiled with ``cache=True``.  Importing this package does nothing else: each module that
defines kernels first calls ``ensure_cache`` (once per process), which
has numba keep the machine code in a per-user folder keyed by streamtrace's version and the kernel sources
(``~/.cache/streamtrace/<version>/...``, ``cachedir``), which survives reinstalling
the same version, or falls back to numba's default folders (and, where nothing can be written, a private
temporary folder with one notice on stderr).
"""
