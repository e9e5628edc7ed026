"""How the report prints numbers: one module for every Markdown table and chart of
``streamtrace.report`` (the exact values stay in ``report.json`` and the Parquet/CSV tables,
as int ns and int bytes).

* **Bytes** in B, KB, MB, GB, TB (decimal: 1 KB = 1,000 B, as nccl-tests and the bus bandwidth's
  GB/s), the unit chosen per value so that the number is at least 1 (``24.6 KB``, never
  ``0.000 GB`` for traffic that is not zero).
* **Times** (int or float ns in) in ns, us, ms, s, chosen the same way (``268 us``, ``48.7 ms``).
* **Rates** (bytes per second) in B/s ... TB/s.
* Three significant digits by default (``digits``); thousands separators (``1,234``) wherever a
  number reaches four digits in its unit (only the largest unit can: seconds, TB), and in every
  count (``fmt_count``).
* Missing values (None, NaN) print as ``-``; zero as ``0`` (no unit).

Charts pick one unit per axis (``time_axis``, ``bytes_ticks``): the unit that fits the
axis' largest value.
"""
from __future__ import annotations

import math

BYTE_UNITS = (("B", 1.0), ("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12))
TIME_UNITS = (("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9))
RATE_UNITS = tuple((u + "/s", f) for u, f in BYTE_UNITS)


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _number(v, digits, whole=False) -> str:
    """``v`` (in its unit) with ``digits`` significant digits (``whole``: no decimals from 1 up,
    for bytes and nanoseconds), thousands separators from 1,000 up."""
    a = abs(v)
    if a == 0:
        return "0"
    decimals = 0 if whole and a >= 1 else max(0, digits - 1 - int(math.floor(math.log10(max(a, 1e-300)))))
    text = f"{v:,.{decimals}f}"
    if decimals and abs(float(text.replace(",", ""))) >= 10 ** (digits - decimals):
        text = f"{v:,.{decimals - 1}f}"         # 9.995 rounded up to 10.00: one decimal fewer
    return text


def scaled(x, units, digits=3, sign=False) -> str:
    """``x`` in the largest of ``units`` (``(name, factor)`` pairs, ascending) that keeps it at
    least 1, with ``digits`` significant digits; ``sign``: a leading ``+`` for positive values."""
    if _missing(x):
        return "-"
    x = float(x)
    a = abs(x)
    if a == 0:
        return "0"
    name, f = units[0]
    for n, g in units:
        if a >= g * (1 - 0.5 * 10 ** -digits):    # 999.96 us rounds to 1.00 ms, not 1,000 us
            name, f = n, g
    v = x / f
    if abs(v) < 1 and f > units[0][1]:       # just under the unit, rounded up to it: 1.00, not 0.99996
        v = math.copysign(1.0, v)
    text = _number(v, digits, whole=f == units[0][1])
    return ("+" if sign and x > 0 else "") + f"{text} {name}"


def fmt_bytes(n, digits=3) -> str:
    """Bytes (int or float) as ``512 B``, ``24.6 KB``, ``1.23 GB``; ``-`` for None/NaN."""
    return scaled(n, BYTE_UNITS, digits)


def fmt_time(ns, digits=3, sign=False) -> str:
    """Nanoseconds (int or float) as ``850 ns``, ``12.3 us``, ``48.7 ms``, ``1.20 s``; ``-`` for
    None/NaN; ``sign``: ``+`` before positive values (differences)."""
    return scaled(ns, TIME_UNITS, digits, sign)


def fmt_rate(bytes_per_s, digits=3) -> str:
    """Bytes per second as ``850 MB/s``, ``1.10 GB/s``; ``-`` for None/NaN."""
    return scaled(bytes_per_s, RATE_UNITS, digits)


def fmt_gbps(gbps, digits=3) -> str:
    """A bandwidth given in GB/s (1e9 bytes/s, as ``busbw_gbps``) in the unit that fits it."""
    return "-" if _missing(gbps) else fmt_rate(float(gbps) * 1e9, digits)


FLOPS_UNITS = (("FLOP/s", 1.0), ("kFLOP/s", 1e3), ("MFLOP/s", 1e6), ("GFLOP/s", 1e9), ("TFLOP/s", 1e12),
               ("PFLOP/s", 1e15))


def fmt_tflops(tflops, digits=3) -> str:
    """A compute rate given in TFLOP/s (1e12 floating-point operations per second, as ``op_perf``'s
    ``achieved_tflops``) in the unit that fits it: ``0.0007`` TFLOP/s is ``700 MFLOP/s``."""
    return "-" if _missing(tflops) else scaled(float(tflops) * 1e12, FLOPS_UNITS, digits)


FLOP_UNITS = tuple((n[:-2], f) for n, f in FLOPS_UNITS)     # FLOP, kFLOP, ... (an amount, not a rate)


def fmt_flop(n, digits=3) -> str:
    """An amount of floating-point operations as ``786 kFLOP``, ``3.28 GFLOP``; ``-`` for None/NaN."""
    return "-" if _missing(n) else scaled(float(n), FLOP_UNITS, digits)


def fmt_count(n) -> str:
    """An integer count with thousands separators (``2,116``); ``-`` for None/NaN."""
    return "-" if _missing(n) else f"{int(n):,}"


def fmt_pct(x, nd=1) -> str:
    """A percentage (already x 100) with ``nd`` decimals, thousands separators; ``-`` for None/NaN."""
    return "-" if _missing(x) else f"{float(x):,.{nd}f}"


def time_axis(max_ns) -> tuple[float, str]:
    """``(divisor, unit)`` for a chart axis of times (ns) up to ``max_ns``: the unit in which the
    largest value is at least 1 (``(1e6, "ms")`` for 48 ms, ``(1e3, "us")`` for 268 us)."""
    m = 0.0 if _missing(max_ns) else abs(float(max_ns))
    name, f = "us", 1e3
    for n, g in TIME_UNITS[1:]:
        if m >= g:
            name, f = n, g
    return f, name


def bytes_tick(v, _pos=None) -> str:
    """A tick label for a bytes axis (matplotlib ``FuncFormatter``): ``24 KB``, ``1 GB``."""
    return scaled(v, BYTE_UNITS, 3).replace(".00 ", " ").replace(".0 ", " ")


def plain_tick(v, _pos=None) -> str:
    """A tick label for a log axis of plain numbers: ``0.2``, ``1``, ``20``, ``3,000``."""
    if v == 0:
        return "0"
    return _number(v, 3).rstrip("0").rstrip(".") if "." in _number(v, 3) else _number(v, 3)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def short_names(names, n=90) -> list:
    """Kernel / op names as table cells of at most about ``n`` characters: the start of the name
    and an ellipsis (``void at::native::vectorized_elementwise_kernel<4, at::native::sqrt_ker…``;
    the full names are in ``report.json`` and the Parquet tables).  Names that would print alike
    keep, after the start, the part where they differ (``start…differing part…``); two different
    names never print alike (a last resort numbers them ``[2]``, ``[3]``)."""
    names = [str(x) for x in names]
    out = [x if len(x) <= n else x[: n - 1] + "…" for x in names]
    groups: dict = {}
    for i, s in enumerate(out):
        groups.setdefault(s, []).append(i)
    for idx in groups.values():
        if len({names[i] for i in idx}) < 2:
            continue
        for i in idx:
            full = names[i]
            d = max(_common_prefix(full, names[j]) for j in idx if names[j] != full)
            head = full[: max(20, n // 2)]
            part = full[max(len(head), d - 12): d + 30]
            out[i] = full if len(full) <= len(head) + len(part) + 2 else (
                head + "…" + part + ("…" if d + 30 < len(full) else ""))
    seen: dict = {}
    for i, s in enumerate(out):            # a last resort: still alike (differing only past the part shown)
        first = seen.setdefault(s, names[i])
        if first != names[i]:
            k = sum(1 for j in range(i) if out[j].startswith(s))
            out[i] = f"{s} [{k + 1}]"
    return out
