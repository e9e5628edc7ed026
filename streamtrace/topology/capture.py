"""Training-side helpers: profile a training job so that streamtrace can read it afterwards.

Three pieces, for ``torch.profiler.profile`` in any training loop (plain PyTorch, TorchTitan,
Megatron-LM through ``patch/enable_traceviz.patch``)::

    from streamtrace import capture
    capture.dump_topology(out_dir, groups={"tp": tp_group, "dp": dp_group})   # once, after the groups exist
    prof = torch.profiler.profile(schedule=capture.profiler_schedule(),
                                  on_trace_ready=capture.trace_handler(out_dir))

torch is imported lazily, inside the functions that need it: importing this module never
requires torch, and neither does the environment parsing (``schedule_params``,
``should_profile``).

Environment variables (read when the functions are called):

``PROFILE_ALLRANKS``        1/true/yes/on: every rank runs the profiler (0/false/no/off or unset:
                            rank 0 only, see ``should_profile``)
``PROFILER_WAIT_STEPS``     steps to skip before warm-up (default 10)
``PROFILER_WARMUP_STEPS``   warm-up steps, traced but discarded (default 3)
``PROFILER_ACTIVE_STEPS``   steps recorded in one trace (default 1)
``PROFILER_REPEAT``         number of wait/warmup/active windows (default 1: one window, one trace
                            per rank).  0 means *forever* to ``torch.profiler.schedule``: a new trace
                            every wait+warmup+active steps until the profiler stops.

A bad value raises ValueError naming the variable, when the schedule is built (at start-up).
Writing a trace or the topology never stops the training job: a failure to write is logged
(logger ``streamtrace.topology.capture``) and skipped.  (``dump_topology`` does raise ValueError, on
every rank alike, for groups that do not split the ranks consistently.)
"""
from __future__ import annotations

import datetime as _dt
import gzip
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from . import DEFAULT_ORDER, DIMS, topology_from_groups, write_topology_files
from .trainconfig import megatron_args_dict

log = logging.getLogger("streamtrace.topology.capture")

ENV_ALLRANKS = "PROFILE_ALLRANKS"
ENV_WAIT = "PROFILER_WAIT_STEPS"
ENV_WARMUP = "PROFILER_WARMUP_STEPS"
ENV_ACTIVE = "PROFILER_ACTIVE_STEPS"
ENV_REPEAT = "PROFILER_REPEAT"

DEFAULT_WAIT, DEFAULT_WARMUP, DEFAULT_ACTIVE, DEFAULT_REPEAT = 10, 3, 1, 1
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


# ---------------------------------------------------------------------------------------------
# environment

def _env_flag(name: str) -> bool:
    raw = os.environ.get(name, "")
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r}: expected one of 1/true/yes/on or 0/false/no/off")


def _env_int(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected an integer >= {minimum}") from None
    if value < minimum:
        raise ValueError(f"{name}={raw!r}: expected an integer >= {minimum}")
    return value


def profile_all_ranks() -> bool:
    """True when ``PROFILE_ALLRANKS`` is 1/true/yes/on (case-insensitive).  Raises ValueError
    for any other non-empty value."""
    return _env_flag(ENV_ALLRANKS)


def global_rank() -> int:
    """This process's global rank: ``torch.distributed.get_rank()`` when torch is loaded and the
    default process group is initialised, else the ``RANK`` environment variable (set by
    torchrun / Slurm launchers), else 0."""
    if sys.modules.get("torch") is not None:   # no process group can exist before torch is loaded
        try:
            import torch.distributed as dist
        except ImportError:
            dist = None
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    raw = os.environ.get("RANK")
    if raw is None or not raw.strip():
        return 0
    try:
        rank = int(raw.strip())
    except ValueError:
        raise ValueError(f"RANK={raw!r}: expected a non-negative integer") from None
    if rank < 0:
        raise ValueError(f"RANK={raw!r}: expected a non-negative integer")
    return rank


def should_profile(rank: int | None = None, ranks=None) -> bool:
    """Whether ``rank`` (default: ``global_rank``) runs the profiler.

    Every rank when ``PROFILE_ALLRANKS`` is set; otherwise only the ranks in ``ranks`` (default
    None: rank 0 only).  An empty ``ranks`` means every rank, as Megatron's ``--profile-ranks``.
    Raises ValueError when ``PROFILE_ALLRANKS`` is not a recognised yes/no value.
    """
    if profile_all_ranks():
        return True
    if rank is None:
        rank = global_rank()
    ranks = [0] if ranks is None else list(ranks)
    return not ranks or int(rank) in ranks


def schedule_params(*, wait: int = DEFAULT_WAIT, warmup: int = DEFAULT_WARMUP,
                    active: int = DEFAULT_ACTIVE, repeat: int = DEFAULT_REPEAT) -> dict:
    """``{"wait", "warmup", "active", "repeat"}`` for ``torch.profiler.schedule``: each from its
    environment variable (``PROFILER_WAIT_STEPS``, ``PROFILER_WARMUP_STEPS``,
    ``PROFILER_ACTIVE_STEPS``, ``PROFILER_REPEAT``) when set, else the keyword given here
    (defaults 10, 3, 1, 1).  ``repeat`` 1 is one window; 0 means forever (torch's convention).
    Raises ValueError naming the variable (or keyword) when a value is not an integer, or
    negative, or ``active`` < 1."""
    for name, value, low in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1), ("repeat", repeat, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}={value!r}: expected an integer >= {low}")
    return {"wait": _env_int(ENV_WAIT, wait, 0), "warmup": _env_int(ENV_WARMUP, warmup, 0),
            "active": _env_int(ENV_ACTIVE, active, 1), "repeat": _env_int(ENV_REPEAT, repeat, 0)}


def profiler_schedule(*, wait: int = DEFAULT_WAIT, warmup: int = DEFAULT_WARMUP,
                      active: int = DEFAULT_ACTIVE, repeat: int = DEFAULT_REPEAT):
    """A ``torch.profiler.schedule`` from the environment (see ``schedule_params``; the
    keywords are the defaults the environment variables override).

    Profiler steps 0 .. wait-1 do nothing, the next ``warmup`` steps are traced and discarded,
    the next ``active`` steps are recorded and the trace is handed to ``on_trace_ready`` when
    the last of them ends.  ``repeat`` windows (default 1: a single trace); ``PROFILER_REPEAT=0``
    keeps repeating until the profiler stops (torch's meaning of repeat=0).  With the defaults
    the trace records profiler step 13 (steps 0-9 wait, 10-12 warm up)."""
    import torch.profiler
    return torch.profiler.schedule(**schedule_params(wait=wait, warmup=warmup, active=active, repeat=repeat))


# ---------------------------------------------------------------------------------------------
# trace handler

def last_recorded_step(prof) -> int:
    """The profiler step number of the last step a just-finished trace records: the K of its
    last ``ProfilerStep#K`` annotation.

    ``on_trace_ready`` runs either inside ``prof.step()`` (the schedule's last active step has
    just ended; ``prof.step_num`` has already moved on to the next step, so K =
    ``step_num - 1``) or inside ``prof.stop()`` / leaving the ``with`` block (the window is cut
    short; K = ``step_num``).  Which of the two is running is read from the call stack; called
    from anywhere else, K = ``step_num``."""
    step_num = int(prof.step_num)
    f = sys._getframe(1)
    for _ in range(32):
        if f is None:
            break
        if f.f_code.co_name in ("step", "stop") and f.f_locals.get("self") is prof:
            return step_num - 1 if f.f_code.co_name == "step" else step_num
        f = f.f_back
    return step_num


def trace_path(out_dir, iteration: int, rank: int, compress: bool = True) -> Path:
    """``out_dir/iteration_<N>/rank_<RRRR>_iter_<N>.pt.trace.json[.gz]`` (rank on 4+ digits)."""
    name = f"rank_{int(rank):04d}_iter_{int(iteration)}.pt.trace.json" + (".gz" if compress else "")
    return Path(out_dir) / f"iteration_{int(iteration)}" / name


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _retitle(file, old: str, new: str, tail: int = 1 << 16) -> bool:
    """Kineto records the path it wrote to as ``"traceName"`` near the end of the trace: put the
    final path there instead of the temporary one (the tail is rewritten in place)."""
    with open(file, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - tail)
        f.seek(start)
        buf = f.read()
        key = buf.rfind(b'"traceName"')
        if key < 0:
            return False
        for o, n in ((old.encode(), new.encode()), (json.dumps(old)[1:-1].encode(), json.dumps(new)[1:-1].encode())):
            at = buf.find(b'"' + o + b'"', key, key + 64 + len(o))
            if at >= 0:
                f.seek(start + at + 1)
                f.write(n + buf[at + 1 + len(o):])
                f.truncate()
                return True
    return False


def export_trace(prof, path, compress: bool = True, compresslevel: int = 1) -> Path:
    """Export ``prof``'s trace to ``path`` atomically: Kineto writes a temporary file in the
    target's folder (hidden, ``.tmp`` suffix, so trace discovery skips it), which is gzipped
    (level ``compresslevel``, streamed) into a second temporary file when ``compress``, then
    renamed over ``path``.  On any failure nothing is left at ``path`` and the temporary files
    are removed; the exception propagates."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, raw = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".json.tmp", dir=path.parent)
    os.close(fd)
    tmps = [raw]
    try:
        prof.export_chrome_trace(raw)
        _retitle(raw, raw, str(path))
        if compress:
            fd, gz = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".gz.tmp", dir=path.parent)
            tmps.append(gz)
            with os.fdopen(fd, "wb") as out, open(raw, "rb") as src, \
                    gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=compresslevel, mtime=0) as z:
                shutil.copyfileobj(src, z, 8 << 20)
            final = gz
        else:
            final = raw
        os.chmod(final, 0o666 & ~_umask())
        os.replace(final, path)
        tmps.remove(final)
        return path
    finally:
        for t in tmps:
            try:
                os.unlink(t)
            except FileNotFoundError:
                pass


def trace_handler(out_dir, rank: int | None = None, compress: bool = True, *, iteration=None,
                  strict: bool = False, compresslevel: int = 1):
    """An ``on_trace_ready`` callback for ``torch.profiler.profile`` writing each trace to
    ``<out_dir>/iteration_<N>/rank_<RRRR>_iter_<N>.pt.trace.json[.gz]``, atomically
    (temporary file in that folder, then rename: a crash leaves no partial trace).

    ``N``: by default the profiler step number of the last step the trace records, i.e. the K
    of its last ``ProfilerStep#K`` annotation (``last_recorded_step``: ``prof.step_num - 1``
    when the schedule's window closes in ``prof.step()``, ``prof.step_num`` when ``prof.stop()``
    cuts it).  When the profiler is started just before the first training iteration and
    ``prof.step()`` is called at the end of each one, K is the loop's 0-based iteration index.
    ``iteration``: a callable ``K -> N`` for another numbering (e.g. ``lambda k: k + resumed_from``).

    ``rank``: the global rank (default: ``global_rank`` when the trace is written:
    torch.distributed's rank, else env ``RANK``, else 0), written on 4 digits.
    ``compress``: gzip the trace (level ``compresslevel``, default 1: fast, ~10x smaller).

    The callback returns the path written.  A failure to write (full disk, ...) is logged and
    the callback returns None so the training job carries on; ``strict=True`` re-raises.
    """
    if out_dir is None or str(out_dir) == "":
        raise ValueError("trace_handler: out_dir is required (Megatron-LM: pass --tensorboard-dir)")
    if iteration is not None and not callable(iteration):
        raise ValueError(f"trace_handler: iteration must be a callable K -> N, got {iteration!r}")
    out_dir = Path(out_dir)

    def handler(prof):
        path = None
        try:
            k = last_recorded_step(prof)
            n = int(iteration(k)) if iteration is not None else k
            if n < 0:
                raise ValueError(f"iteration number {n} < 0 (profiler step {k})")
            r = global_rank() if rank is None else int(rank)
            path = trace_path(out_dir, n, r, compress)
            export_trace(prof, path, compress, compresslevel)
            log.info("streamtrace: wrote %s", path)
            return path
        except Exception as e:
            if strict:
                raise
            log.error("streamtrace: could not write the profiler trace%s: %s: %s",
                      f" {path}" if path else "", type(e).__name__, e)
            return None

    handler.out_dir = out_dir
    return handler


# ---------------------------------------------------------------------------------------------
# topology

def _ranks_of(group, dist):
    """Ranks of one dimension's entry: a ProcessGroup (this rank's group), a list of ranks
    (this rank's group) or a list of rank lists (every group of the dimension)."""
    if group is None:
        return None
    if isinstance(group, (list, tuple)):
        items = list(group)
        if items and all(isinstance(x, (list, tuple)) for x in items):
            return {"all": [sorted(int(r) for r in g) for g in items]}
        if items and not all(isinstance(x, int) for x in items):   # Megatron: a list of groups
            items = dist.get_process_group_ranks(items[0])
        return {"mine": sorted(int(r) for r in items)}
    return {"mine": sorted(int(r) for r in dist.get_process_group_ranks(group))}


def megatron_groups():
    """This rank's TP/CP/EP/DP/PP process groups from ``megatron.core.parallel_state``, or None
    when Megatron is not importable or its model-parallel state is not initialised.  DP is the
    data-parallel group without context parallelism, as Megatron-TraceViz records it."""
    try:
        from megatron.core import parallel_state as ps
    except Exception:
        return None
    try:
        if not ps.model_parallel_is_initialized():
            return None
    except Exception:
        return None
    getters = {"tp": lambda: ps.get_tensor_model_parallel_group(),
               "cp": lambda: ps.get_context_parallel_group(),
               "ep": lambda: ps.get_expert_model_parallel_group(),
               "dp": lambda: ps.get_data_parallel_group(with_context_parallel=False),
               "pp": lambda: ps.get_pipeline_model_parallel_group()}
    out = {}
    for d, get in getters.items():
        try:
            g = get()
        except Exception:      # e.g. an older Megatron without this dimension
            g = None
        if g is not None:
            out[d] = g
    return out


def _megatron_global_batch_size():
    try:
        from megatron.training.global_vars import get_args
        return getattr(get_args(), "global_batch_size", None)
    except Exception:
        return None


def _megatron_training_args():
    """The training arguments efficiency needs (``MEGATRON_ARGS``:
    batch, sequence, model shape, MoE, parallel sizes, precision) of the running Megatron-LM, or None."""
    try:
        from megatron.training.global_vars import get_args
        return megatron_args_dict(get_args()) or None
    except Exception:
        return None


def dump_topology(out_dir, groups: dict | None = None, world_size: int | None = None,
                  order: str = DEFAULT_ORDER, *, global_batch_size: int | None = None,
                  training: dict | None = None):
    """Gather every rank's parallel groups and have rank 0 write them to ``out_dir``:
    ``streamtrace_topology.json`` (``{"world_size", "order", "sizes", "tp", "cp", "ep", "dp",
    "pp", "replicas"}``, each group entry a sorted, de-duplicated list of rank lists) and Megatron-TraceViz's
    ``unique_parallel_groups_<YYYYmmdd_HHMMSS>.txt``.  Both are written atomically.

    A collective: call it on every rank, once, after the process groups exist.  Groups come
    from ``groups`` when given, else from Megatron's ``megatron.core.parallel_state`` when it
    is importable and initialised (its ``get_*_group`` helpers).  ``groups``: ``{"tp":
    ProcessGroup | [ranks of this rank's group] | [[every group]], "dp": ...}`` (any of
    tp/cp/ep/dp/pp; missing dimensions have size 1).  Every rank's groups travel to every rank
    with ``torch.distributed.all_gather_object``; without an initialised process group this is
    a single-process job (``world_size`` must then be 1 or None, unless ``groups`` lists every
    group of each dimension).

    Replicas (one per DP index, each holding a full model): the ranks linked through TP, CP, EP
    or PP groups, which is what TraceViz derives from the sizes under the rank order
    tp-cp-ep-dp-pp, and stays right under other orders.  ``order`` (Megatron's rank order:
    tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with ``--use-tp-pp-dp-mapping``) is recorded in the JSON.

    ``training``: the job's training arguments to record under ``"training"`` in the JSON (a dict
    of ``MEGATRON_ARGS``, read by the report's Efficiency
    section); default: Megatron-LM's own arguments when it is the source.

    Returns the topology dict on every rank.  Inconsistent groups raise ValueError on every
    rank alike (no rank is left waiting); a failure to write on rank 0 is logged, not raised.
    """
    if out_dir is None or str(out_dir) == "":
        raise ValueError("dump_topology: out_dir is required (Megatron-LM: pass --tensorboard-dir)")
    try:
        import torch.distributed as dist
    except ImportError:          # no torch: a single process with groups given as rank lists
        dist = None
    distributed = dist is not None and dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    ws = dist.get_world_size() if distributed else int(world_size or 1)
    if world_size is not None and int(world_size) != ws:
        raise ValueError(f"dump_topology: world_size={world_size} but torch.distributed has {ws} ranks")
    mg = megatron_groups() if not groups else None
    source = "megatron" if mg is not None else "groups"
    src = mg if mg is not None else dict(groups or {})
    unknown = sorted(set(src) - set(DIMS))
    if unknown:
        raise ValueError(f"dump_topology: unknown parallel dimension(s) {unknown}: expected {', '.join(DIMS)}")
    try:
        payload = {d: _ranks_of(g, dist) for d, g in src.items() if g is not None}
    except Exception as e:       # reported by every rank after the gather, not raised here
        payload = {"error": f"rank {rank}: {type(e).__name__}: {e}"}
    if distributed:
        gathered = [None] * ws
        dist.all_gather_object(gathered, payload)
    else:
        gathered = [payload]
    if not any(payload for payload in gathered):
        log.warning("streamtrace: topology: no parallel groups (no Megatron parallel state, no groups=): "
                    "every dimension is written with size 1")
    errors = [p["error"] for p in gathered if "error" in p]
    merged = {}
    for p in gathered:
        for d, entry in p.items():
            if d == "error" or entry is None:
                continue
            merged.setdefault(d, []).extend(entry.get("all") or [entry["mine"]])
    for e in errors:
        log.warning("streamtrace: topology: %s", e)
    topo = topology_from_groups(merged, ws, order, check=not errors)
    training = training if training is not None else (_megatron_training_args() if source == "megatron" else None)
    if training:
        topo["training"] = training
    if rank == 0:
        gbs = global_batch_size if global_batch_size is not None else (
            _megatron_global_batch_size() if source == "megatron" else None)
        try:
            paths = write_topology_files(out_dir, topo, _dt.datetime.now(), gbs,
                                         valid_ranks=ws - len(errors), error_ranks=len(errors))
            log.info("streamtrace: wrote %s and %s", *paths)
        except Exception as e:
            log.error("streamtrace: could not write the topology to %s: %s: %s", out_dir, type(e).__name__, e)
    return topo
