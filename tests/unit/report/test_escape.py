"""Untrusted names escaped for where they go (issue 49): Markdown prose and cells, code spans, chart
labels, the terminal.  Expected strings written by hand from CommonMark's rules (a backslash before
ASCII punctuation shows it as text; entities for < > &) and the module's documented escapes."""
from __future__ import annotations

import pytest

from streamtrace.report.escape import Markup, chart_text, md_cell, md_code, md_text
from streamtrace.runtime.console import DroppingStream, printable


@pytest.mark.parametrize("raw,shown", [
    ("aten::mm", "aten::mm"),
    ("compute_kernel 73 %", "compute_kernel 73 %"),                 # an "_" inside a word starts nothing
    ("<script>pg</script>", "&lt;script>pg&lt;/script>"),
    ("> quote", "\\> quote"),
    ("0 -> 1", "0 -> 1"),
    ("[l](javascript:alert(1))", "\\[l\\](javascript:alert(1))"),
    ("a|b", "a\\|b"),
    ("`x`", "\\`x\\`"),
    ("_private_ *bold*", "\\_private\\_ \\*bold\\*"),
    ("R&D $x$ ~y~", "R&amp;D \\$x\\$ \\~y\\~"),
    ("line\nbreak", "line\\\\nbreak"),                               # \n shown as the two characters
    ("op\x1b]0;title\x07", "op\\\\x1b\\]0;title\\\\x07"),
])
def test_md_text_shows_the_text_and_nothing_else(raw, shown):
    assert md_text(raw) == shown


def test_md_text_shortens_long_names_with_a_count():
    s = md_text("k" * 1000, 300)
    assert s == "k" * 300 + "... (700 more characters)"


def test_md_cell_keeps_markup_and_dashes_none():
    assert md_cell(Markup("`a|b`")) == "`a|b`"
    assert md_cell(None) == "-"
    assert md_cell(12) == "12"
    assert md_cell("a|b") == "a\\|b"


@pytest.mark.parametrize("raw,code", [
    ("aten::mm", "`aten::mm`"),
    ("a`b", "``a`b``"),
    ("``x", "``` ``x ```"),
    ("<script>", "`<script>`"),                                     # literal inside a code span
    ("a\nb", "`a\\nb`"),
])
def test_md_code_fence_is_longer_than_any_backtick_run(raw, code):
    assert md_code(raw) == code


def test_md_code_in_a_table_cell_escapes_the_pipe():
    assert md_code("a|b", cell=True) == "`a\\|b`"


def test_chart_text_escapes_mathtext_and_control_characters():
    assert chart_text("cost $5 vs $6") == "cost \\$5 vs \\$6"
    assert chart_text("x\x1b[2J") == "x\\x1b[2J"
    assert chart_text("n" * 100, 10) == "n" * 10 + "... (90 more characters)"


@pytest.mark.parametrize("raw,shown", [
    ("plain é µ →", "plain é µ →"),                   # printable non-ASCII stays
    ("a\x1b]0;x\x07b", "a\\x1b]0;x\\x07b"),
    ("l1\nl2\r\t", "l1\\nl2\\r\\t"),
    ("caf\udce9_\udcff", "caf\\xe9_\\xff"),          # undecodable file-name bytes (surrogateescape)
    ("x\u202ey", "x\\u202ey"),                        # a bidi override
    ("\x9b31m", "\\x9b31m"),                          # a C1 control (CSI)
])
def test_printable_for_the_terminal(raw, shown):
    assert printable(raw) == shown


def test_dropping_stream_drops_after_a_broken_pipe():
    class Broken:
        encoding = "utf-8"

        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")
    s = DroppingStream(Broken())
    assert s.write("hello\n") == 6
    s.flush()
    assert s.broken
