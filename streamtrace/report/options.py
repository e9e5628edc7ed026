"""The report's options (``ReportOptions``), in a module of their own so that the epilogue and
the command line can build them without importing the report (matplotlib, pyarrow): the report's own
(``ReportOptions``) and its Efficiency section's (``EfficiencyOptions``)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReportOptions:
    """Options of ``report`` (the ``streamtrace report`` flags).

    Attributes:
        name: the run's name in the report and the Markdown file's name (str); None (default): the
            job's, the folder that holds its traces (above ``iteration_N/``, ``tb/``, ...).
        tokens_per_step: tokens per training step (int), for tokens/s; or give ``global_batch``
            (sequences) and ``seq_len`` (tokens per sequence).  None (default): no throughput.
        global_batch: global batch size in sequences (int), with ``seq_len``; None.
        seq_len: sequence length in tokens (int), with ``global_batch``; None.
        charts: render the charts into ``charts/`` (bool, default True).
        chart_formats: their file formats, ``png`` and/or ``svg`` (tuple, default ``("png",)``).
        jobs: processes drawing the charts (int); 0 (default) = all cores.
        chart_ranks: ranks that get per-rank charts (sorted list of int); None (default): all up
            to 8, else the first PP group's stages and the top straggler.
        progress: a progress bar over the charts (bool); None (default): only on a terminal.
        efficiency: the Efficiency section's inputs (``EfficiencyOptions``: ``--torchtitan-config``,
            ``--peak-tflops``, ``--flops-per-token``, ``--nic-gbps``, ``--gpus-per-node``); None: defaults.
    """
    name: str | None = None
    tokens_per_step: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    charts: bool = True
    chart_formats: tuple = ("png",)
    jobs: int = 0
    chart_ranks: list | None = None
    progress: bool | None = None
    efficiency: EfficiencyOptions | None = None


@dataclass
class EfficiencyOptions:
    """Options of the Efficiency section (``streamtrace report`` / ``epilogue`` flags).

    Attributes:
        torchtitan_config: the job's TorchTitan TOML file (str); None: the config aggregate recorded,
            else Megatron arguments in the topology, else none.
        peak_tflops: dense peak TFLOP/s of one GPU (float), instead of the datasheet table's; None.
        flops_per_token: model FLOPs per token, forward + backward (float), instead of the formula; None.
        nic_gbps: network bandwidth per GPU, GB/s (float), for collectives that span hosts; None: the
            platform's default (``streamtrace.topology.hardware``).
        gpus_per_node: ranks per host when the trace file names give no host (int, default 8;
            ``streamtrace.report.links``).
    """
    torchtitan_config: str | None = None
    peak_tflops: float | None = None
    flops_per_token: float | None = None
    nic_gbps: float | None = None
    gpus_per_node: int = 8
