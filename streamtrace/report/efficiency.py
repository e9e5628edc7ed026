"""The report's "Efficiency" section: tokens/s, samples/s, achieved model TFLOP/s per GPU and MFU
per profiled step, each input with where it came from (``efficiency_section``,
``efficiency_markdown``).

Inputs, the first that gives a value winning:

* tokens per step: ``--tokens-per-step``; ``--global-batch`` x ``--seq-len``; the job's config
  (``--torchtitan-config`` on report, else the one aggregate recorded in ``aggregate.json``
  ``"train_config"``, else the Megatron-LM training arguments recorded in the topology file,
  ``"training"``): global batch, else local batch x DP degree, times the sequence length;
* model FLOPs per token: ``--flops-per-token``; else the config's model shape through
  ``streamtrace.report.flops.flops_per_token``, TorchTitan's formula for a TorchTitan config
  and Megatron-LM's for Megatron arguments (the other one is recorded beside it);
* the GPU's dense peak: ``--peak-tflops``; else ``streamtrace.topology.hardware.gpu_spec`` of
  the traces' ``deviceProperties`` name, for the math the GEMMs ran in
  (``streamtrace.report.precision.gemm_precision``: their kernels' names, else their ops'
  input type, else the config's precision, else bf16 said as assumed), the one peak of the report
  (the roofline chart draws the same);
* GPUs: the job's world size (``aggregate.json``).

A step's time is the report's (``iterations.parquet``: the median over ranks of its
``ProfilerStep#N``), so tokens/s = tokens per step / step time, MFU = tokens/s x FLOPs per token
/ (GPUs x peak), as TorchTitan's and Megatron-LM's loggers compute it over their own step times.
"""
from __future__ import annotations

import numpy as np

from ..topology.hardware import dtype_key, gpu_spec
from ..topology.trainconfig import (TrainConfig, from_megatron_args, from_torchtitan_toml,
                                    train_config_from_json)
from ..aggregate.folder import ITERATIONS, OP_PERF, Aggregate, read_aggregate_table, table_file
from .options import EfficiencyOptions
from .escape import md_cell, md_code, md_text
from .flops import flops_per_token
from .links import link_section
from .precision import gemm_precision
from .section import ChartJob, ReportInput, SectionBase
from .units import fmt_bytes, fmt_count, fmt_flop, fmt_gbps, fmt_pct, fmt_tflops, fmt_time


def job_config(meta: dict, opt: EfficiencyOptions) -> TrainConfig | None:
    """The job's ``TrainConfig`` (see the module docstring for the order), resolved for the
    job's world size; None when nothing gives one.  Raises ``StreamtraceError`` for an
    unreadable config file or degrees that do not fit the world size."""
    world = meta.get("world_size")
    if opt.torchtitan_config:
        return from_torchtitan_toml(opt.torchtitan_config).resolve(world)
    if meta.get("train_config"):
        return train_config_from_json(meta["train_config"])
    training = (meta.get("topology") or {}).get("training")
    if training:
        return from_megatron_args(training, "Megatron-LM arguments in the topology file").resolve(world)
    return None


def _tokens(cfg, tokens_per_step, global_batch, seq_len) -> tuple:
    """``(tokens per step, sequences per step, source)``."""
    if tokens_per_step is not None:
        seqs = global_batch or (tokens_per_step // cfg.seq_len if cfg and cfg.seq_len else None)
        return int(tokens_per_step), seqs, "--tokens-per-step"
    if global_batch is not None and seq_len is not None:
        return global_batch * seq_len, global_batch, "--global-batch x --seq-len"
    if cfg is None or cfg.tokens_per_step() is None:
        return None, None, None
    if cfg.global_batch:
        how = f"global batch {cfg.global_batch} x seq len {cfg.seq_len}"
    else:
        how = f"local batch {cfg.local_batch} x DP {cfg.dp} x seq len {cfg.seq_len}"
    return cfg.tokens_per_step(), cfg.sequences_per_step(), f"{cfg.source}: {how}"


def _flops(cfg, opt, seq_len) -> tuple:
    """``(FLOPs per token, source, {convention: value})``."""
    if opt.flops_per_token:
        return float(opt.flops_per_token), "--flops-per-token", {}
    s = seq_len or (cfg.seq_len if cfg else None)
    if cfg is None or cfg.model is None or not s:
        why = "no model shape" if cfg is None or cfg.model is None else "no sequence length"
        if cfg is not None and cfg.model is None and cfg.model_name:
            why = f"no model shape for {cfg.model_name}, not a known TorchTitan flavour"
        return None, f"unknown ({why}: give --flops-per-token, or a config naming a known model)", {}
    conv = "megatron" if cfg.source.startswith("Megatron") else "torchtitan"
    both = {}
    for c in ("torchtitan", "megatron"):
        try:
            both[c] = flops_per_token(cfg.model, s, c)
        except ValueError:              # a shape one formula does not cover (Megatron's MLA)
            continue
    label = "TorchTitan's 6N + 12LHQT" if conv == "torchtitan" else "Megatron-LM's num_floating_point_operations"
    return both[conv], f"{label} for {cfg.model_name or cfg.model.name}, seq len {s} ({cfg.source})", both


def _peak(meta, cfg, opt, aggdir=None) -> tuple:
    """``(peak TFLOP/s per GPU, source, dtype)``: the GPU's dense peak for the math the job's GEMMs
    ran in (``gemm_precision``; dtype None for ``--peak-tflops``)."""
    if opt.peak_tflops:
        return float(opt.peak_tflops), "--peak-tflops", None
    devices = meta.get("devices") or []
    spec = gpu_spec(devices[0]) if devices else None
    if spec is None:
        what = f"GPU {devices[0]} not in the table" if devices else "the traces name no GPU"
        return None, f"unknown ({what}: give --peak-tflops)", None
    dt, why = gemm_precision(aggdir, cfg, lambda d: bool(spec.peak(d)))
    p = spec.peak(dt)
    if p is None:
        return None, f"unknown ({spec.name} has no {dt} peak in the table, {dt} from {why}: give --peak-tflops)", dt
    return p, f"{spec.source}: {spec.name} dense {dt}, {dt} from {why}", dt


def efficiency_section(meta: dict, steps: list, opt: EfficiencyOptions | None = None, tokens_per_step=None,
                       global_batch=None, seq_len=None, aggdir=None, top: int = 10) -> dict:
    """The section as a dict: ``config`` (the job's config, JSON), ``inputs`` (tokens and sequences
    per step, FLOPs per token, peak, GPUs, each with ``*_from``), ``steps`` (per step of ``steps``,
    the report's ``[{"iteration", "step", "step_ns"}]``: ``tokens_per_s``, ``samples_per_s``,
    ``model_tflops_per_gpu``, ``mfu_pct``; None where an input is unknown) and ``overall`` (the
    same over all steps' summed time); with ``aggdir``: ``ops`` (the ``top`` GEMM / attention rows of
    ``op_perf.parquet`` losing the most time against their roofline bound) and ``links``
    (``link_section``).  Raises ``StreamtraceError`` on a bad config."""
    opt = opt or EfficiencyOptions()
    cfg = job_config(meta, opt)
    tokens, seqs, tokens_from = _tokens(cfg, tokens_per_step, global_batch, seq_len)
    fpt, fpt_from, both = _flops(cfg, opt, seq_len)
    peak, peak_from, peak_dtype = _peak(meta, cfg, opt, aggdir)
    gpus = meta.get("world_size")
    inputs = {"tokens_per_step": tokens, "tokens_per_step_from": tokens_from, "sequences_per_step": seqs,
              "flops_per_token": fpt, "flops_per_token_from": fpt_from, "flops_per_token_by_convention": both,
              "peak_tflops": peak, "peak_from": peak_from, "peak_dtype": peak_dtype, "gpus": gpus,
              "gpus_from": meta.get("world_size_from") or Aggregate.marker}
    rows = [dict(iteration=s["iteration"], step=s["step"], step_ns=s["step_ns"], **_rates(s["step_ns"], inputs))
            for s in steps]
    total = sum(s["step_ns"] or 0 for s in steps)
    overall = _rates(total / len(steps) if steps and total else None, inputs)
    devices = meta.get("devices") or []
    spec = gpu_spec(devices[0]) if devices else None
    sec = {"config": cfg.to_json() if cfg else None, "inputs": inputs, "steps": rows, "overall": overall,
           "gpu": spec.name if spec else None, "from": f"{table_file(ITERATIONS)}, {Aggregate.marker}"}
    if aggdir is not None:
        sec["ops"] = top_ops(aggdir, top)
        sec["links"] = link_section(aggdir, meta, spec, opt.nic_gbps, opt.gpus_per_node)
    return sec


def top_ops(aggdir, top: int = 10) -> list:
    """The ``top`` rows of ``op_perf.parquet`` with FLOPs (GEMMs, attention), by ``lost_ns``
    (the table's order); ``[]`` without the table (analysed without ``--op-perf``)."""
    t = read_aggregate_table(aggdir, OP_PERF)
    rows = [{k: _py(t[k][i]) for k in t} for i in range(len(t.get("name", []))) if t["flops"][i] > 0]
    return rows[:top]


def _py(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return None if np.isnan(v) else float(v)
    return v


def _rates(step_ns, inp) -> dict:
    out = dict.fromkeys(("tokens_per_s", "samples_per_s", "model_tflops_per_gpu", "mfu_pct"))
    if not step_ns:
        return out
    sec = step_ns / 1e9
    if inp["tokens_per_step"]:
        out["tokens_per_s"] = inp["tokens_per_step"] / sec
    if inp["sequences_per_step"]:
        out["samples_per_s"] = inp["sequences_per_step"] / sec
    if out["tokens_per_s"] and inp["flops_per_token"] and inp["gpus"]:
        out["model_tflops_per_gpu"] = out["tokens_per_s"] * inp["flops_per_token"] / inp["gpus"] / 1e12
        if inp["peak_tflops"]:
            out["mfu_pct"] = 100.0 * out["model_tflops_per_gpu"] / inp["peak_tflops"]
    return out


def _n(v, nd=1):
    """A plain number (FLOP rates, tokens/s: no unit of ``.units`` fits them) with ``nd``
    decimals, more where a non-zero value would print as zero (``0.004``, never ``0.0``)."""
    if v is None:
        return "-"
    while v and nd < 6 and abs(v) < 10 ** -nd:
        nd += 1
    return f"{v:,.{nd}f}"


def efficiency_markdown(sec: dict | None) -> list:
    """The section's Markdown lines (none without a section)."""
    if not sec:
        return []
    inp, L = sec["inputs"], ["## Efficiency", ""]
    if sec["config"]:
        c = sec["config"]
        deg = ", ".join(f"{k} {c['degrees'][k]}" for k in list(c["mesh_order"]) + ["ep", "etp"] if k in c["degrees"])
        L += [f"Job config {md_code(c['source'])}: model {md_text(c['model_name'] or 'unnamed')}; mesh ({deg}); "
              f"seq len {c['seq_len'] or '?'}; local batch {c['local_batch'] or '?'}; "
              f"global batch {c['global_batch'] or 'local x DP'}.", ""]
    o = sec["overall"]
    if o["tokens_per_s"] is None:
        L += ["No throughput or MFU: give `--torchtitan-config` (or a Megatron run with the patch), or "
              "`--tokens-per-step` / `--global-batch` and `--seq-len`.", ""]
    else:
        L += _throughput_md(sec)
    fpt, peak = inp["flops_per_token"], inp["peak_tflops"]
    L += ["Where each number came from:", "",
          "- tokens per step: " + (f"{fmt_count(inp['tokens_per_step'])} ({md_text(inp['tokens_per_step_from'])})"
                                    if inp["tokens_per_step"] else "not given"),
          "- model FLOPs per token: " + (f"{fmt_flop(fpt)} ({md_text(inp['flops_per_token_from'])})" if fpt
                                         else md_text(inp["flops_per_token_from"])),
          "- peak per GPU: " + (f"{_n(peak)} TFLOP/s ({md_text(inp['peak_from'])})" if peak
                                else md_text(inp["peak_from"])),
          f"- GPUs: {fmt_count(inp['gpus']) if inp['gpus'] else 'unknown'} ({md_text(inp['gpus_from'])})"]
    lk = sec.get("links")
    if lk and lk.get("hosts_from"):
        L += ["- link per collective: " + ("none (CPU-only job)" if lk.get("cpu_only") else
                                           f"hosts of the ranks from {md_text(lk['hosts_from'])}")]
    both = inp["flops_per_token_by_convention"]
    if len(both) == 2:
        L += [f"- the two conventions: TorchTitan {_n(both['torchtitan'] / 1e9, 2)} GFLOP/token, Megatron-LM "
              f"{_n(both['megatron'] / 1e9, 2)} (docs/efficiency.md says where they differ)"]
    L += [""] + _ops_md(sec.get("ops"), sec.get("gpu")) + _links_md(sec.get("links"))
    return L


def _table(head, rows) -> str:
    out = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]      # names escaped (issue 49)
    return "\n".join(out)


def _ops_md(ops, gpu) -> list:
    if ops is None:
        return []
    L = ["### GEMMs and attention against the roofline", ""]
    if not ops:
        return L + ["No per-op FLOPs: analyse with `--op-perf` (the epilogue does) from traces recorded with "
                    "`record_shapes=True`.", ""]
    L += [f"The ops losing the most GPU time against their roofline bound on the {md_text(gpu or 'unknown GPU')} "
          f"(`{table_file(OP_PERF)}`; bound = max(FLOPs / peak, bytes / memory bandwidth)):", ""]
    L += [_table(["op", "dtype", "input shapes", "calls", "GPU time", "compute rate", "memory bandwidth", "FLOP/byte",
                  "bound", "% of bound", "lost"],
                 [[r["name"], r["dtype"] or "-", md_code(r["input_dims"], cell=True), fmt_count(r["count"]),
                   fmt_time(r["gpu_busy_ns"]), fmt_tflops(r["achieved_tflops"]), fmt_gbps(r["achieved_gbps"]),
                   _n(r["intensity"]), r["bound"] or "-", fmt_pct(r["pct_of_bound"]), fmt_time(r["lost_ns"])]
                  for r in ops]), ""]
    return L


def _links_md(lk) -> list:
    if not lk or not lk["rows"]:
        return []
    L = ["### Collectives against their links", "",
         f"Bus bandwidth (median) as a % of the link's peak per direction; hosts from {md_text(lk['hosts_from'])}; "
         f"network {fmt_gbps(lk['nic_gbps'])} per GPU ({md_text(lk['nic_from'] or 'unknown')}).", ""]
    L += [_table(["collective", "dim", "scope", "count", "bytes", "busbw median", "link", "link peak", "% of link"],
                 [[r["collective"], r["parallel_dim"] or "-", r["scope"], fmt_count(r["count"]),
                   fmt_bytes(r["bytes"]) if r["bytes"] > 0 else "unknown", fmt_gbps(r["busbw_gbps_median"]),
                   r["link"], fmt_gbps(r["link_gbps"]), fmt_pct(r["pct_of_link"]) + (" (!)" if r.get("over_peak") else "")]
                  for r in lk["rows"]]), ""]
    if lk.get("cpu_only"):
        L += ["A CPU-only job (gloo): no GPU link, so no % of link.", ""]
    if any(r.get("over_peak") for r in lk["rows"]):
        L += ["(!) above 100 % of the link's peak, which no link can do: a sign of wrong hosts "
              "(check `--gpus-per-node` / the trace file names) or a wrong peak (`--nic-gbps`, the GPU model, "
              "an NVLink bridge between PCIe cards).", ""]
    tr = lk["traffic"]
    if tr["intra"]["bytes"] + tr["inter"]["bytes"] > 0:
        L += [f"Traffic: {fmt_bytes(tr['intra']['bytes'])} inside nodes ({fmt_pct(tr['intra']['pct'])} %), "
              f"{fmt_bytes(tr['inter']['bytes'])} across nodes ({fmt_pct(tr['inter']['pct'])} %).", ""]
    else:
        L += ["Traffic: unknown (no message size on these collectives; bytes `unknown` above).", ""]
    return L


def _against(inp) -> str:
    """``" against the V100 PCIe's dense fp32 peak, 14.0 TFLOP/s"``: the one peak MFU is measured
    against, named in the MFU sentence; ``""`` without a peak."""
    if not inp.get("peak_tflops"):
        return ""
    if not inp.get("peak_dtype"):
        return f" against {_n(inp['peak_tflops'])} TFLOP/s per GPU (--peak-tflops)"
    gpu = inp["peak_from"].split(": ", 1)[-1].split(" dense ")[0]
    return f" against the {gpu}'s dense {inp['peak_dtype']} peak, {_n(inp['peak_tflops'])} TFLOP/s"


def _throughput_md(sec) -> list:
    o = sec["overall"]
    L = [f"**{_n(o['tokens_per_s'], 0)} tokens/s, {_n(o['samples_per_s'], 2)} samples/s, "
          f"{fmt_tflops(o['model_tflops_per_gpu'])} model compute per GPU, MFU {fmt_pct(o['mfu_pct'])} %** (mean step)"
          + _against(sec["inputs"]) + ".", ""]
    L += [_table(["iteration", "step", "step time", "tokens/s", "samples/s", "model FLOP/s per GPU", "MFU %"],
                 [[r["iteration"] if r["iteration"] >= 0 else "-", r["step"] if r["step"] >= 0 else "-",
                   fmt_time(r["step_ns"]), _n(r["tokens_per_s"], 0), _n(r["samples_per_s"], 2),
                   fmt_tflops(r["model_tflops_per_gpu"]), fmt_pct(r["mfu_pct"])] for r in sec["steps"]]),
          ""]
    return L


class EfficiencySection(SectionBase):
    """``efficiency``: ``efficiency_section`` of the report's ``steps``; ``throughput`` (when the
    tokens per step are known: the options', else the efficiency's config): ``{"tokens_per_step",
    "steps", "time_ns", "tokens_per_s"}`` = tokens per step x profiled steps / the sum of their step
    times (ns); its charts (``efficiency_charts``) listed with the
    report's."""
    key, chart_rank = "efficiency", 2

    def data(self, inp: ReportInput, rep: dict) -> dict:
        tps = inp.tokens_per_step if inp.tokens_per_step is not None else (
            inp.global_batch * inp.seq_len if inp.global_batch is not None else None)
        eff = efficiency_section(inp.meta, rep["steps"], inp.efficiency, inp.tokens_per_step, inp.global_batch,
                                 inp.seq_len, inp.aggdir)
        out = {self.key: eff}
        tps = tps if tps is not None else eff["inputs"]["tokens_per_step"]
        if tps is not None:
            total = sum(s["step_ns"] for s in rep["steps"] if s["step_ns"])
            out["throughput"] = {"tokens_per_step": int(tps), "steps": len(rep["steps"]), "time_ns": int(total),
                                 "tokens_per_s": tps * len(rep["steps"]) / (total / 1e9) if total else None,
                                 "from": table_file(ITERATIONS)}
        return out

    def markdown(self, rep: dict, charts: list) -> list:
        return efficiency_markdown(rep.get(self.key))

    def charts(self, job: ChartJob, rep: dict) -> list:
        from .effcharts import efficiency_charts          # (matplotlib: only when charts are drawn)
        return [(efficiency_charts, (rep.get(self.key), job.aggdir, job.folder, job.meta, job.formats))]
