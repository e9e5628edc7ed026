"""The report of ``bench/bench_analyze.py``: its table, the comm/compute overlap table, the
targets' verdicts and HTA's phase notes, from the rows that script measured.

Each input is a dict (``tag``, ``path``, ``kind``: ``real``/``big``/``chunked-big``, ``bytes``
uncompressed, ``disk_bytes``, ``rows``); each row a dict of ``harness.measure``'s fields
plus ``tool`` (``hta``, ``streamtrace``, ``streamtrace-chunked``), ``label``, ``ok``, ``why``,
``reps``, and the tool's own results (``hta``: the worker's JSON; ``summary``: streamtrace's
``summary.json``).
"""
from __future__ import annotations

import json
from pathlib import Path

from harness import SHARED, fmt_s, mb, md_head, md_row

REFERENCE = SHARED / "reference"

TARGET_SPEEDUP = 6.0          # HTA wall / streamtrace wall
TARGET_RSS_RATIO = 8.0        # HTA peak RSS / streamtrace peak RSS
TARGET_RSS_FRACTION = 0.25    # streamtrace (in memory) peak RSS / uncompressed trace size
TARGET_CHUNKED_MB = 400.0     # streamtrace --chunked peak RSS on the 2 GB trace, MB of 2^20


def _dev_overlaps(summary):
    """{(rank, device): overlap_pct} from streamtrace's summary.json."""
    out = {}
    for rk in (summary or {}).get("ranks", []):
        for dev, m in (rk.get("devices") or {}).items():
            out[(rk.get("rank"), dev)] = m.get("overlap_pct")
    return out


def _hta_overlaps(h):
    if not h:
        return {}
    return {row.get("rank"): row.get("comp_comm_overlap_pctg") for row in h.get("comm_comp_overlap", [])}


def _ref_overlap(path: Path):
    name = path.name
    for suf in (".json.gz", ".json"):
        if name.endswith(suf):
            name = name[: -len(suf)]
    f = REFERENCE / f"{name}.metrics.json"
    try:
        d = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return {dev: m.get("overlap_pct") for dev, m in (d.get("devices") or {}).items()}


def _size(inp):
    s = f"{inp['bytes'] / 1e6:,.0f} MB"
    if inp["path"].suffix == ".gz":
        s += f" ({inp['disk_bytes'] / 1e6:,.1f} MB .gz)"
    return s


def table(inputs):
    lines = md_head(["input", "uncompressed", "tool", "wall s", "CPU s", "MB/s", "peak RSS MB",
                     "speed vs HTA (HTA wall / wall)", "speed vs HTA by CPU s", "RSS ratio (HTA / this)",
                     "peak RSS / uncompressed size", "overlap %", "other load, cores"])
    for inp in inputs:
        hta = next((r for r in inp["rows"] if r["tool"] == "hta"), None)
        for r in inp["rows"]:
            mbps = inp["bytes"] / 1e6 / r["wall"]
            status = "" if r["ok"] else f" **{r.get('why', 'FAILED')}**"
            cpu = r.get("cpu_s")
            hcpu = hta.get("cpu_s") if hta else None
            if r["tool"] == "hta":
                speed_cpu = "1.0x (baseline)" if r["ok"] else "-"
            elif hcpu and cpu:
                speed_cpu = ("" if hta["ok"] else "> ") + f"{hcpu / cpu:.1f}x"
            else:
                speed_cpu = "n/a"
            if r["tool"] == "hta":
                speed = "1.0x (baseline)" if r["ok"] else "-"
                rss_ratio = "1.0x (baseline)" if r["ok"] else "-"
                ov = _hta_overlaps(r.get("hta"))
                ovs = ", ".join(f"{v:.2f}" for v in ov.values() if v is not None) or "-"
            else:
                if hta and hta["ok"]:
                    speed = f"{hta['wall'] / r['wall']:.1f}x"
                    rss_ratio = f"{hta['peak_rss'] / r['peak_rss']:.1f}x"
                elif hta:   # killed or timed out: lower bounds
                    speed = f"> {hta['wall'] / r['wall']:.1f}x (HTA did not finish)"
                    rss_ratio = f"> {hta['peak_rss'] / r['peak_rss']:.1f}x (HTA did not finish)"
                else:
                    speed = rss_ratio = "n/a (HTA not run)"
                ov = _dev_overlaps(r.get("summary"))
                ovs = ", ".join(f"{v:.3f}" for v in ov.values() if v is not None) or "-"
            frac = f"{r['peak_rss'] / inp['bytes']:.3f}"
            reps = f" (median of {r['reps']})" if r.get("reps", 1) > 1 else ""
            lines.append(md_row([
                f"{inp['tag']}", _size(inp), f"{r['label']}{status}", fmt_s(r["wall"], 2) + reps,
                fmt_s(cpu, 2) if cpu else "n/a", f"{mbps:,.1f}", f"{mb(r['peak_rss']):,.0f}", speed, speed_cpu, rss_ratio,
                frac, ovs, f"{r['other_cores']:.2f}" if "other_cores" in r else "n/a"]))
    return "\n".join(lines)


def verdicts(inputs, floor):
    out = []

    def pairs(tool):
        for inp in inputs:
            hta = next((r for r in inp["rows"] if r["tool"] == "hta"), None)
            st = next((r for r in inp["rows"] if r["tool"] == tool and r["ok"]), None)
            if hta and st:
                yield inp, hta, st

    for tool, name in (("streamtrace", "in memory"), ("streamtrace-chunked", "--chunked")):
        sp, rs = [], []
        for inp, hta, st in pairs(tool):
            bound = "" if hta["ok"] else ">= "
            cpu = hta["cpu_s"] / st["cpu_s"] if hta.get("cpu_s") and st.get("cpu_s") else None
            sp.append((inp["tag"], hta["wall"] / st["wall"], bound, cpu))
            rs.append((inp["tag"], hta["peak_rss"] / st["peak_rss"], bound))
        if sp:
            ok = all(v >= TARGET_SPEEDUP for _, v, _, _ in sp)
            ok_cpu = all(c is not None and c >= TARGET_SPEEDUP for _, _, _, c in sp)
            out.append(f"- >= {TARGET_SPEEDUP:g}x faster than HTA ({name}): by wall time **{'MET' if ok else 'NOT MET'}**, "
                       f"by CPU time (less disturbed by other load) **{'MET' if ok_cpu else 'NOT MET'}** ("
                       + "; ".join(f"{t}: wall {b}{v:.1f}x" + (f", CPU {b}{c:.1f}x" if c is not None else "")
                                   for t, v, b, c in sp) + ")")
            ok = all(v >= TARGET_RSS_RATIO for _, v, _ in rs)
            out.append(f"- peak RSS <= 1/{TARGET_RSS_RATIO:g} of HTA's ({name}): **{'MET' if ok else 'NOT MET'}** ("
                       + "; ".join(f"{t}: HTA / streamtrace = {b}{v:.1f}x" for t, v, b in rs) + ")")
    fr = [(inp, r) for inp in inputs for r in inp["rows"] if r["tool"] == "streamtrace" and r["ok"]]
    if fr:
        ok = all(r["peak_rss"] / inp["bytes"] <= TARGET_RSS_FRACTION for inp, r in fr)
        txt = "; ".join(f"{inp['tag']}: {r['peak_rss'] / inp['bytes']:.3f}x ({mb(r['peak_rss']):,.0f} MB of "
                        f"{inp['bytes'] / 1e6:,.0f} MB)" for inp, r in fr)
        extra = ""
        if floor:
            extra = (f"; the fixed floor of any `streamtrace analyze` process (a 0.05 MB trace) is "
                     f"{mb(floor['peak_rss']):,.0f} MB, so on a small trace this ratio measures the interpreter "
                     f"and its libraries more than the trace; above the floor: "
                     + "; ".join(f"{inp['tag']}: {max(0, r['peak_rss'] - floor['peak_rss']) / inp['bytes']:.3f}x"
                                 for inp, r in fr))
        out.append(f"- in-memory peak RSS <= {TARGET_RSS_FRACTION:g}x the uncompressed trace: "
                   f"**{'MET' if ok else 'NOT MET'}** ({txt}{extra})")
    ch = [(inp, r) for inp in inputs if inp["kind"] == "chunked-big"
          for r in inp["rows"] if r["tool"] == "streamtrace-chunked"]
    if ch:
        inp, r = ch[0]
        ok = r["ok"] and mb(r["peak_rss"]) <= TARGET_CHUNKED_MB
        out.append(f"- `--chunked` peak RSS <= {TARGET_CHUNKED_MB:g} MB on the {inp['bytes'] / 1e9:.1f} GB trace: "
                   f"**{'MET' if ok else 'NOT MET'}** ({mb(r['peak_rss']):,.0f} MB"
                   + ("" if r["ok"] else f", run {r.get('why', 'failed')}") + ")")
    return "\n".join(out)


def overlap_report(inputs, extra_hta):
    lines = md_head(["input", "device", "HTA comp_comm_overlap_pctg (default)",
                     "HTA (include_last_profiler_step=True)", "streamtrace overlap_pct (in memory)",
                     "streamtrace --chunked", "reference definition"])
    for inp in inputs:
        hta = next((r for r in inp["rows"] if r["tool"] == "hta"), None)
        ho = _hta_overlaps(hta.get("hta") if hta else None)
        hl = _hta_overlaps(extra_hta.get(inp["tag"]))
        st = next((r for r in inp["rows"] if r["tool"] == "streamtrace" and r["ok"]), None)
        sc = next((r for r in inp["rows"] if r["tool"] == "streamtrace-chunked" and r["ok"]), None)
        so = _dev_overlaps(st.get("summary") if st else None)
        sco = _dev_overlaps(sc.get("summary") if sc else None)
        ref = _ref_overlap(inp["path"]) if inp["kind"] == "real" else None
        keys = list(so) or list(sco) or [(k, "?") for k in ho]
        for rank, dev in keys:
            def f(v, nd=2):
                return "-" if v is None else f"{v:.{nd}f}"
            lines.append(md_row([inp["tag"], f"rank {rank} GPU {dev}", f(ho.get(rank)), f(hl.get(rank)),
                                 f(so.get((rank, dev)), 3), f(sco.get((rank, dev)), 3),
                                 f((ref or {}).get(dev), 3) if ref else "-"]))
    return "\n".join(lines)


def hta_phases(inputs):
    out = []
    for inp in inputs:
        for r in inp["rows"]:
            h = r.get("hta") if r["tool"] == "hta" else None
            if h and h.get("phases"):
                ph = "; ".join(f"{p['phase']} {p['s']:.1f} s (VmHWM then {mb(p['hwm']):,.0f} MB)" for p in h["phases"])
                out.append(f"[{inp['tag']}] HTA phases: {ph}" + ("" if h.get("done") else " -- did not get further"))
            elif r["tool"] == "hta":
                out.append(f"[{inp['tag']}] HTA did not finish its import")
            if h and h.get("temporal_breakdown"):
                tb = h["temporal_breakdown"][0]
                st = next((x for x in inp["rows"] if x["tool"] == "streamtrace" and x["ok"]), None)
                extra = ""
                if st and st.get("summary"):
                    for rk in st["summary"].get("ranks", []):
                        for dev, m in (rk.get("devices") or {}).items():
                            extra = (f"; streamtrace rank {rk.get('rank')} GPU {dev}: busy {m.get('busy_us', 0) / 1e3:,.1f} ms, "
                                     f"compute {m.get('compute_us', 0) / 1e3:,.1f} ms, comm {m.get('comm_us', 0) / 1e3:,.1f} ms, "
                                     f"memory {m.get('memory_us', 0) / 1e3:,.1f} ms, idle {m.get('idle_us', 0) / 1e3:,.1f} ms")
                out.append(f"[{inp['tag']}] HTA temporal breakdown rank {tb.get('rank')}: idle "
                           f"{tb.get('idle_time(us)', 0) / 1e3:,.1f} ms ({tb.get('idle_time_pctg')} %), compute "
                           f"{tb.get('compute_time(us)', 0) / 1e3:,.1f} ms, non-compute {tb.get('non_compute_time(us)', 0) / 1e3:,.1f} ms"
                           + extra)
    return out
