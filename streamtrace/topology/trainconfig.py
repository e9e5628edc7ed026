"""A training job's own configuration, as far as efficiency needs it: tokens per step, the
parallel degrees, the model's shape (``TrainConfig``), read from a TorchTitan TOML file
(``from_torchtitan_toml``) or from the Megatron-LM training arguments that
``streamtrace.topology.capture.dump_topology`` records in ``streamtrace_topology.json`` under
``"training"`` (``from_megatron_args``).

TorchTitan's fields (``torchtitan/config/job_config.py``; the TOML sections):
``[model] name, flavor``; ``[training] local_batch_size`` (``batch_size`` before 2025),
``global_batch_size`` (-1 or absent: ``local_batch_size`` x DP, no gradient accumulation),
``seq_len``, ``mixed_precision_param`` (also read from ``[parallelism]``); ``[parallelism]
data_parallel_replicate_degree``,
``data_parallel_shard_degree`` (-1: what the world size leaves), ``tensor_parallel_degree``,
``pipeline_parallel_degree``, ``context_parallel_degree``, ``expert_parallel_degree``,
``expert_tensor_parallel_degree`` (older files keep some of these in ``[training]`` or
``[experimental]``: read from there too).  The device mesh is laid out in TorchTitan's order
``TORCHTITAN_MESH_ORDER`` (``ParallelDims`` in ``torchtitan/distributed/parallel_dims.py``:
``pp, dp_replicate, dp_shard, cp, tp``, the last varying fastest); EP borrows from
``dp_shard x cp`` (x ``tp`` when ETP = 1), so it adds no mesh dimension of its own.  In
Megatron's notation (first token fastest) that is the rank order ``tp-cp-dp-pp`` with
DP = ``dp_replicate x dp_shard``.

A TOML file names the model (``name``/``flavor``) but not its shape, which lives in TorchTitan's
code: ``KNOWN_MODELS`` holds the shapes of the flavours
of ``llama3``, ``qwen3``, ``deepseek_v3`` and ``gpt_oss`` (sources in that module).
"""
from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field

from ..runtime.errors import StreamtraceError
from .model import from_sizes
from .modelshape import ModelShape, torchtitan_ffn_hidden  # noqa: F401  (re-exported)
from .torchtitan_models import KNOWN_MODELS

if sys.version_info >= (3, 11):
    import tomllib
else:                                   # the same parser, as a package before Python 3.11
    import tomli as tomllib

#: TorchTitan's device-mesh dimensions, outermost first (``ParallelDims``)
TORCHTITAN_MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@dataclass
class TrainConfig:
    """What a job's configuration says about one training step.

    ``source``: where it was read (a file path, ``"megatron args"``); ``model``: the
    ``ModelShape`` (None when unknown) and ``model_name`` (e.g. ``"llama3 8B"``);
    ``seq_len`` (tokens per sequence), ``local_batch`` (sequences per DP rank and micro-step) and
    ``global_batch`` (sequences per optimizer step; None: ``local_batch`` x DP); ``degrees``: the
    parallel degrees by TorchTitan's names (``pp, dp_replicate, dp_shard, cp, tp``, then ``ep``,
    ``etp`` where set; ``dp_shard`` = -1 until ``resolve`` fills it from the world size),
    ``mesh_order``: their layout, outermost first; ``dtype``: the training precision when the
    config names it."""
    source: str
    model_name: str | None = None
    model: ModelShape | None = None
    seq_len: int | None = None
    local_batch: int | None = None
    global_batch: int | None = None
    degrees: dict = field(default_factory=dict)
    mesh_order: tuple = TORCHTITAN_MESH_ORDER
    dtype: str | None = None

    @property
    def dp(self) -> int | None:
        """The data-parallel degree (``dp_replicate x dp_shard``; None while ``dp_shard`` is -1)."""
        r, s = self.degrees.get("dp_replicate", 1), self.degrees.get("dp_shard", 1)
        return None if s < 1 else r * s

    def resolve(self, world_size: int | None) -> "TrainConfig":
        """Fill ``dp_shard`` = -1 from ``world_size`` as ``ParallelDims`` does (world / (dp_replicate
        x cp x tp x pp)).  Raises ``StreamtraceError`` when the degrees do not multiply to
        ``world_size``."""
        d = dict(self.degrees)
        rest = d.get("dp_replicate", 1) * d.get("cp", 1) * d.get("tp", 1) * d.get("pp", 1)
        if d.get("dp_shard", 1) < 1:
            if not world_size:
                return self
            d["dp_shard"] = world_size // rest
        if world_size and rest * d.get("dp_shard", 1) != world_size:
            raise StreamtraceError(f"{self.source}: parallel degrees {_degrees_text(d)} do not multiply to the "
                                   f"world size {world_size}")
        out = TrainConfig(**{**self.__dict__, "degrees": d})
        return out

    def sequences_per_step(self) -> int | None:
        """Sequences per optimizer step: ``global_batch``, else ``local_batch`` x DP."""
        if self.global_batch:
            return self.global_batch
        if self.local_batch and self.dp:
            return self.local_batch * self.dp
        return None

    def tokens_per_step(self) -> int | None:
        """Tokens per optimizer step (``sequences_per_step`` x ``seq_len``), None when unknown."""
        n = self.sequences_per_step()
        return n * self.seq_len if n and self.seq_len else None

    def megatron_sizes(self) -> dict:
        """The degrees as streamtrace's topology sizes (``tp, cp, ep, dp, pp``; DP = replicate x shard)
        and ``order``: Megatron's notation of TorchTitan's mesh (``tp-cp-dp-pp``, first fastest)."""
        d = self.degrees
        return {"tp": d.get("tp", 1), "cp": d.get("cp", 1), "ep": d.get("ep", 1), "dp": self.dp or 1,
                "pp": d.get("pp", 1), "order": "tp-cp-dp-pp"}

    def to_json(self) -> dict:
        out = asdict(self)
        out["mesh_order"] = list(self.mesh_order)
        out["tokens_per_step"] = self.tokens_per_step()
        return out


def _degrees_text(d: dict) -> str:
    return " x ".join(f"{k} {v}" for k, v in d.items())


def _pick(doc: dict, key: str, sections: tuple, default=None):
    for s in sections:
        v = (doc.get(s) or {}).get(key)
        if v is not None:
            return v
    return default


def from_torchtitan_toml(path) -> TrainConfig:
    """``TrainConfig`` of a TorchTitan ``--job.config_file`` TOML (field names in the module
    docstring).  Raises ``StreamtraceError`` (one line, naming the file) when it cannot be
    read or parsed, or a degree is not an integer >= 1 (``dp_shard`` may be -1)."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise StreamtraceError(f"{path}: cannot read the TorchTitan config ({e.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise StreamtraceError(f"{path}: not a TOML file ({e})") from None
    par = ("parallelism", "training", "experimental")
    names = {"pp": "pipeline_parallel_degree", "dp_replicate": "data_parallel_replicate_degree",
             "dp_shard": "data_parallel_shard_degree", "cp": "context_parallel_degree",
             "tp": "tensor_parallel_degree", "ep": "expert_parallel_degree", "etp": "expert_tensor_parallel_degree"}
    degrees = {}
    for k, key in names.items():
        v = _pick(doc, key, par, -1 if k == "dp_shard" else 1)
        if not isinstance(v, int) or isinstance(v, bool) or (v < 1 and not (k == "dp_shard" and v == -1)):
            raise StreamtraceError(f"{path}: {key} = {v!r}: expected an integer >= 1")
        if k in ("ep", "etp") and v == 1:
            continue
        degrees[k] = v
    model = doc.get("model") or {}
    name, flavor = model.get("name"), model.get("flavor")
    train = doc.get("training") or {}
    local = train.get("local_batch_size", train.get("batch_size"))
    gb = train.get("global_batch_size")
    for key, v in (("local_batch_size", local), ("seq_len", train.get("seq_len")), ("global_batch_size", gb)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise StreamtraceError(f"{path}: training.{key} = {v!r}: expected an integer")
    return TrainConfig(source=str(path), model_name=" ".join(str(x) for x in (name, flavor) if x) or None,
                       model=KNOWN_MODELS.get((name, flavor)), seq_len=train.get("seq_len"), local_batch=local,
                       global_batch=gb if gb and gb > 0 else None, degrees=degrees,
                       dtype=_pick(doc, "mixed_precision_param", ("training", "parallelism")))


#: Megatron-LM argument names (``megatron/training/arguments.py``) recorded by dump_topology
MEGATRON_ARGS = ("global_batch_size", "micro_batch_size", "seq_length", "num_layers", "hidden_size",
                 "ffn_hidden_size", "num_attention_heads", "num_query_groups", "group_query_attention",
                 "kv_channels", "padded_vocab_size", "swiglu", "num_experts", "moe_router_topk",
                 "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "tensor_model_parallel_size",
                 "pipeline_model_parallel_size", "context_parallel_size", "expert_model_parallel_size",
                 "data_parallel_size", "bf16", "fp16", "fp8")


def from_megatron_args(args: dict, source: str = "megatron args") -> TrainConfig:
    """``TrainConfig`` of Megatron-LM's training arguments (a dict of ``MEGATRON_ARGS``;
    missing ones unknown).  GQA: ``num_query_groups`` counts only when ``group_query_attention``;
    ``kv_channels`` is the head dim; MoE experts' inner size ``moe_ffn_hidden_size``, else
    ``ffn_hidden_size``, as ``num_floating_point_operations`` reads them."""
    a = {k: v for k, v in (args or {}).items() if v is not None}
    model = None
    need = ("num_layers", "hidden_size", "num_attention_heads", "padded_vocab_size")
    if all(k in a for k in need):
        heads = int(a["num_attention_heads"])
        experts = int(a.get("num_experts") or 0)
        ffn = int(a.get("ffn_hidden_size") or 4 * a["hidden_size"])
        model = ModelShape("megatron", int(a["num_layers"]), int(a["hidden_size"]),
                           int(a.get("moe_ffn_hidden_size") or ffn) if experts else ffn, heads,
                           int(a["num_query_groups"]) if a.get("group_query_attention") and a.get("num_query_groups")
                           else heads, int(a["padded_vocab_size"]), bool(a.get("swiglu", False)), experts,
                           int(a.get("moe_router_topk") or 0) if experts else 0,
                           int(a.get("moe_shared_expert_intermediate_size") or 0), int(a.get("kv_channels") or 0))
    degrees = {"pp": int(a.get("pipeline_model_parallel_size", 1)), "dp_replicate": 1,
               "dp_shard": int(a.get("data_parallel_size", -1)), "cp": int(a.get("context_parallel_size", 1)),
               "tp": int(a.get("tensor_model_parallel_size", 1))}
    if int(a.get("expert_model_parallel_size", 1)) > 1:
        degrees["ep"] = int(a["expert_model_parallel_size"])
    dtype = "fp8" if a.get("fp8") else "bfloat16" if a.get("bf16") else "float16" if a.get("fp16") else None
    return TrainConfig(source=source, model_name="megatron" if model else None, model=model,
                       seq_len=a.get("seq_length"), local_batch=a.get("micro_batch_size"),
                       global_batch=a.get("global_batch_size"), degrees=degrees,
                       mesh_order=("pp", "dp_shard", "cp", "tp"), dtype=dtype)


def megatron_args_dict(args) -> dict:
    """The ``MEGATRON_ARGS`` of a Megatron ``args`` namespace that it has, as plain values."""
    out = {}
    for k in MEGATRON_ARGS:
        v = getattr(args, k, None)
        if isinstance(v, (bool, int, float, str)) and not (isinstance(v, float) and math.isnan(v)):
            out[k] = v
    return out


def config_topology(cfg: TrainConfig, world_size: int):
    """The ``Topology`` of TorchTitan's device mesh for ``cfg`` on
    ``world_size`` ranks: the mesh ``pp, dp_replicate, dp_shard, cp, tp`` (tp fastest) is Megatron's
    rank order ``tp-cp-dp-pp`` with DP = ``dp_replicate x dp_shard``; EP borrows the strides right
    after TP (``cp`` then ``dp_shard``; after nothing with ETP = 1), which is the layout of
    Megatron's expert rank generator, so ``from_sizes`` builds the
    EP groups too.  Raises ``StreamtraceError`` when the degrees do not fit ``world_size``."""
    c = cfg.resolve(world_size)
    d = c.degrees
    t = from_sizes(world_size, tp=d.get("tp", 1), pp=d.get("pp", 1), cp=d.get("cp", 1), ep=d.get("ep", 1),
                   order="tp-cp-ep-dp-pp", etp=d.get("etp", d.get("tp", 1)))
    t.source = f"TorchTitan config {cfg.source}, mesh {', '.join(f'{k} {d[k]}' for k in c.mesh_order if k in d)}"
    return t


def train_config_from_json(data: dict | None) -> TrainConfig | None:
    """A ``TrainConfig`` back from ``TrainConfig.to_json`` (None for None)."""
    if not data:
        return None
    kw = {k: data.get(k) for k in ("source", "model_name", "seq_len", "local_batch", "global_batch", "dtype")}
    m = data.get("model")
    return TrainConfig(**kw, model=ModelShape(**m) if m else None, degrees=dict(data.get("degrees") or {}),
                       mesh_order=tuple(data.get("mesh_order") or TORCHTITAN_MESH_ORDER))
