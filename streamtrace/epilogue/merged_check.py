"""What the epilogue says of its merged traces: the problems ``validate`` finds in each merged trace
against those its input traces already had (``merge_record``, the merge stage's record in
``epilogue.json``), and the run's final line (``status_text``): ``OK`` only when no merged trace
has a problem, else e.g. ``merged trace: 2 problems (bad_nesting 2), all present in the inputs``.

The counts are merge's own validation (``streamtrace.validate.merged.merged_validation``: the
inputs' problems summed, the output's, and what merge added), the same checks as ``streamtrace
validate`` (what Perfetto's JSON importer relies on)."""
from __future__ import annotations


def _nonzero(problems: dict | None) -> dict:
    return {k: int(v) for k, v in (problems or {}).items() if v}


def _listed(problems: dict) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in problems.items())


def merge_record(validation: dict | None) -> dict | None:
    """The merge stage's ``"validation"`` entry of ``epilogue.json``: ``problems`` (``{kind: count}``
    in the merged trace), ``in_inputs`` (the input traces'), ``added`` (by merge), and ``text`` (one
    line, ``text_of``); None when the merge was not validated."""
    if not validation:
        return None
    rec = {"problems": _nonzero(validation["output"]["problems"]),
           "in_inputs": _nonzero(validation["input"]["problems"]), "added": _nonzero(validation["added"])}
    rec["text"] = text_of(rec)
    return rec


def text_of(rec: dict) -> str:
    """``no problem``, ``2 problems (bad_nesting 2), all present in the inputs``, or ``3 problems
    (...), 1 added by merge (...)``."""
    n = sum(rec["problems"].values())
    if not n:
        return "no problem"
    head = f"{n:,} problem{'s' if n != 1 else ''} ({_listed(rec['problems'])})"
    added = sum(rec["added"].values())
    if not added:
        return f"{head}, all present in the inputs"
    return f"{head}, {added:,} added by merge ({_listed(rec['added'])})"


def status_text(state: dict) -> str:
    """The final line's status from the stages' ``state`` (``epilogue.json``): ``OK`` when no merged
    trace has a problem, else what each merged trace with problems has (``merged trace: ...``;
    ``merged trace of iteration_4: ...`` when there are several)."""
    found = [(k.rsplit("/", 1)[0], (v.get("result") or {}).get("validation"))
             for k, v in sorted(state.items()) if k.endswith("/merge") and isinstance(v, dict)]
    bad = [(tag, rec) for tag, rec in found if rec and rec.get("problems")]
    if not bad:
        return "OK"
    if len(found) == 1:
        return f"merged trace: {bad[0][1]['text']}"
    return "; ".join(f"merged trace of {tag}: {rec['text']}" for tag, rec in bad)
