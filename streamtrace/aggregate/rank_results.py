"""What aggregate's parent keeps of each rank's result (``streamtrace.aggregate.run``'s per-rank task) as
it comes back, in any order, until the job's tables are written: the ranks' top kernels summed as
they come (``TopKernels``), the ranks' phase rows pickled (``Kept``).  At 4,096 synthetic ranks the
phase rows as dicts held ~52 MiB and every rank's top kernels ~28 MiB (``tracemalloc``, a rank's result
unpickled) while the ranks ran; kept this way (and the explaining tables written a row group at a time),
the parent's heap peak fell 218.3 -> 168.6 MiB (memray, ``--no-critical-path``)."""
from __future__ import annotations

import pickle


class TopKernels:
    """The job's top kernels ``{name: [kind, count, total_ns]}`` summed over the ranks' (``add``, in any
    order of ranks), as summing them in part order gives them (``result``): each name in the place, and
    with the kind, of its first appearance in part order (the least part, then its place in that part's
    dict); counts and totals summed (int).  Holds one entry a distinct name, not every rank's dict."""

    def __init__(self):
        self._acc: dict = {}

    def add(self, part: int, top: dict):
        """Part ``part``'s top kernels ``{name: (kind, count, total_ns)}``."""
        for pos, (name, (kind, count, total)) in enumerate(top.items()):
            a = self._acc.get(name)
            if a is None:
                self._acc[name] = [kind, count, total, part, pos]
                continue
            a[1] += count
            a[2] += total
            if (part, pos) < (a[3], a[4]):
                a[0], a[3], a[4] = kind, part, pos

    def result(self) -> dict:
        """``{name: [kind, count, total_ns]}`` in the order of the names' first appearance."""
        return {n: a[:3] for n, a in sorted(self._acc.items(), key=lambda x: (x[1][3], x[1][4]))}


PHASE, TOP, PART = 0, 4, 9
"""The places in a rank's result of its phase rows, its top kernels and its part index."""


class Kept:
    """``run_tasks``' ``on_result`` for aggregate's ranks: each result with its top kernels taken into
    ``top`` (None in their place) and its phase rows pickled (``phase_rows`` reads them back)."""

    def __init__(self):
        self.top = TopKernels()

    def __call__(self, r: tuple) -> tuple:
        self.top.add(r[PART], r[TOP])
        return (pickle.dumps(r[PHASE], protocol=pickle.HIGHEST_PROTOCOL),) + r[1:TOP] + (None,) + r[TOP + 1:]


def phase_rows(kept) -> list:
    """A result's phase rows (list of dicts), pickled by ``Kept`` or as the task returned them."""
    return pickle.loads(kept) if isinstance(kept, bytes) else kept
