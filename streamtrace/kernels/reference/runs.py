"""Plain-Python twins of ``streamtrace.kernels.runs``."""
from __future__ import annotations

__all__ = ["sort_group_py", "union_into_py"]


def sort_group_py(s, e, lo, hi):
    """Twin of ``sort_group``: ``s[lo:hi]`` (with ``e``) sorted
    by start, stably, in place, by Python's ``sorted`` of the (start, end) pairs."""
    pairs = sorted(zip(list(s[lo:hi]), list(e[lo:hi])), key=lambda p: p[0])
    for i, (a, b) in enumerate(pairs):
        s[lo + i] = a
        e[lo + i] = b


def union_into_py(src_s, src_e, lo, hi):
    """Twin of ``union_into``: the union of the non-empty
    intervals ``src[lo:hi]`` as sorted disjoint ``[(start, end)]`` (touching ones joined) and
    its covered length, by marking every covered unit step (small inputs only)."""
    covered = set()
    for a, b in zip(list(src_s[lo:hi]), list(src_e[lo:hi])):
        covered.update(range(int(a), int(b)))
    out = []
    for x in sorted(covered):
        if out and out[-1][1] == x:
            out[-1][1] = x + 1
        else:
            out.append([x, x + 1])
    return [tuple(p) for p in out], len(covered)
