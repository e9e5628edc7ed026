"""report/units.py: every number the report prints, in the unit that fits it (values checked by
hand, and a property: the printed text read back is the value to its significant digits)."""
from __future__ import annotations

import re

from hypothesis import given, strategies as st

from streamtrace.report.units import fmt_bytes, fmt_count, fmt_gbps, fmt_time, short_names

FACTOR = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}


def test_hand_checked_values():
    # the TP=2 job's 24 KB all-reduces (6,144 fp32 elements) and its 13 of them
    assert fmt_bytes(6144 * 4) == "24.6 KB" and fmt_bytes(13 * 6144 * 4) == "319 KB"
    assert fmt_bytes(0) == "0" and fmt_bytes(512) == "512 B" and fmt_bytes(1_500_000_000) == "1.50 GB"
    assert fmt_bytes(2.5e15) == "2,500 TB"                            # separators in the largest unit
    assert fmt_time(268_507) == "269 us" and fmt_time(48_696_000) == "48.7 ms" and fmt_time(1.2e9) == "1.20 s"
    assert fmt_time(999_960) == "1.00 ms"                             # rounds up into the next unit, not "1,000 us"
    assert fmt_time(3_600e9) == "3,600 s" and fmt_time(850) == "850 ns"
    assert fmt_time(-1234, sign=True) == "-1.23 us" and fmt_time(1234, sign=True) == "+1.23 us"
    assert fmt_time(None) == "-" and fmt_time(float("nan")) == "-" and fmt_bytes(None) == "-"
    assert fmt_gbps(1.1) == "1.10 GB/s" and fmt_gbps(0.131) == "131 MB/s" and fmt_gbps(None) == "-"
    assert fmt_count(2116) == "2,116" and fmt_count(7) == "7"


@given(st.floats(min_value=1, max_value=1e15))
def test_printed_value_reads_back_within_its_digits(x):
    for fmt in (fmt_bytes, fmt_time):
        text = fmt(x)
        m = re.fullmatch(r"(-?[\d,]+(?:\.\d+)?) (\w+)", text)
        assert m, text
        num, unit = float(m.group(1).replace(",", "")), m.group(2)
        assert num >= 1 or text.startswith("0")
        assert num < 1000 or unit in ("TB", "s")                 # a smaller unit never reaches 1,000
        assert abs(num * FACTOR[unit] - x) <= 0.006 * x + 0.5     # 3 significant digits (whole B and ns)
        assert "," not in m.group(1) or num >= 1000


def test_short_names_keep_the_start_and_stay_apart():
    base = "void at::native::vectorized_elementwise_kernel<4, at::native::"
    tail = ", at::detail::Array<char*, 2> >(int, " + "x" * 200 + ")"
    names = [base + "sqrt_kernel_cuda" + tail, base + "addcmul_cuda_kernel" + tail,
             base + "AUnaryFunctor<float>" + "y" * 80 + "A" + tail, base + "AUnaryFunctor<float>" + "y" * 80 + "B" + tail,
             "volta_sgemm_128x32_nt"]
    short = short_names(names)
    assert short[-1] == "volta_sgemm_128x32_nt"                      # short names stay whole
    assert len(set(short)) == len(names)                              # never two alike
    for full, s in zip(names[:-1], short[:-1]):
        assert len(s) < 140 and s.startswith(full[:40]) and "…" in s


def test_compute_rates_fit_their_unit():
    """TFLOP/s as the tables hold them, shown in the unit that keeps the value >= 1 (worked by hand)."""
    from streamtrace.report.units import fmt_tflops
    assert fmt_tflops(0.0007) == "700 MFLOP/s"
    assert fmt_tflops(312.0) == "312 TFLOP/s"
    assert fmt_tflops(1979.0) == "1.98 PFLOP/s"
    assert fmt_tflops(None) == "-" and fmt_tflops(float("nan")) == "-"


def test_flop_amounts_fit_their_unit():
    """FLOPs per token (an amount): 786,432 FLOP is 786 kFLOP, not 0.0008 GFLOP (worked by hand)."""
    from streamtrace.report.units import fmt_flop
    assert fmt_flop(786432) == "786 kFLOP"
    assert fmt_flop(3278897152) == "3.28 GFLOP"
    assert fmt_flop(5.8e10) == "58.0 GFLOP"
    assert fmt_flop(None) == "-"
