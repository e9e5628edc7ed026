"""Axis and legend helpers of the charts (``streamtrace.report.charts``), so that every chart
reads the same way: a time axis in the unit that fits its largest value (``time_scale``),
log axes with at least two labelled ticks (``log_ticks``), bytes axes in B/KB/MB/GB
(``bytes_axis``), integer ticks where the positions count things (instances, micro-batches:
``count_ticks``), and legends from explicit patches (``patch_legend``: one entry per
colour, whether or not a panel drew that part).
"""
from __future__ import annotations

import numpy as np

from .units import bytes_tick, plain_tick, time_axis


def time_scale(*arrays) -> tuple[float, str]:
    """``(divisor, unit)`` for a chart whose times (ns) are ``arrays``: the unit that fits the
    largest absolute value (``streamtrace.report.units.time_axis``)."""
    vals = [np.abs(np.asarray(a, np.float64)) for a in arrays if np.size(a)]
    top = max((float(np.nanmax(v)) for v in vals if np.isfinite(v).any()), default=0.0)
    return time_axis(top)


def log_ticks(axis, fmt=plain_tick):
    """Label a log-scaled ``axis`` (``ax.xaxis`` / ``ax.yaxis``) with ``fmt``; when its view spans
    less than about two decades (one labelled power of ten or none), the 2x and 5x ticks are
    labelled too, so that a reader always has two labels to read a value between; over more decades
    the unlabelled minor ticks are the 2x and 5x ones only (matplotlib's 2x-9x make each decade eight
    tick objects to build and draw: half of a report's ticks came from its three log-log charts)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    lo, hi = sorted(axis.get_view_interval())
    lo = max(lo, 1e-300)
    decades = np.log10(hi) - np.log10(lo)
    if decades < 2:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    else:
        axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(fmt))
    axis.set_minor_formatter(NullFormatter())


def bytes_axis(axis):
    """A log axis of bytes, labelled ``1 KB``, ``20 KB``, ``1 MB``."""
    log_ticks(axis, bytes_tick)


def count_ticks(axis, n: int, first=0, per=1, max_labels=12):
    """Integer ticks on an axis of ``n`` positions 0..n-1 standing for things numbered ``first``,
    ``first + per``, ... (e.g. instance columns of ``per`` instances each): at most
    ``max_labels`` labels, never at half positions."""
    step = max(1, int(np.ceil(n / max_labels)))
    pos = np.arange(0, n, step)
    axis.set_ticks(pos)
    axis.set_ticklabels([f"{first + int(p) * per:,}" for p in pos])


def patch_legend(target, parts, **kw):
    """A legend of ``parts`` = ``[(label, colour)]`` (filled patches) and optional line entries
    ``kw.pop("lines")`` = ``[(label, style, colour)]`` on ``target`` (a figure or an axes)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = [Patch(color=c, label=lab) for lab, c in parts]
    handles += [Line2D([], [], linestyle="-", marker=m, color=c, label=lab) for lab, m, c in kw.pop("lines", [])]
    return target.legend(handles=handles, **kw)
