"""A job's own config (issue 31): TorchTitan TOML fields, tokens per step, TorchTitan's device-mesh
order as a topology, Megatron-LM's training arguments through the topology file.

References, never the code under test: the mesh is checked against a plain row-major reshape of
``range(world)`` in TorchTitan's order (``ParallelDims._build_mesh_without_ep`` /
``build_mesh`` in ``torchtitan/distributed/parallel_dims.py`` give the dims outermost first as
``pp, dp_replicate, dp_shard, cp, tp`` to ``init_device_mesh``, which lays ``arange(world)`` out
row-major); tokens per step are multiplied out by hand; the real cpu-3d run's groups come from
its own ``parallel_topology.json``."""
from __future__ import annotations

import json

import numpy as np
import pytest

from support import REAL, need_shared, run_cli
from streamtrace import capture
from streamtrace.runtime.errors import StreamtraceError
from streamtrace.topology.sources import load_topology
from streamtrace.topology.trainconfig import (config_topology, from_megatron_args, from_torchtitan_toml,
                                              train_config_from_json)

LLAMA3_8B = """
# torchtitan/models/llama3/train_configs/llama3_8b.toml (2025 field names), degrees changed
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 2
seq_len = 8192
mixed_precision_param = "bfloat16"
[parallelism]
data_parallel_replicate_degree = 2
data_parallel_shard_degree = -1
tensor_parallel_degree = 2
pipeline_parallel_degree = 2
context_parallel_degree = 1
"""

OLD_LAYOUT = """
# the 2024 layout: batch_size and the degrees under [training] / [experimental]
[model]
name = "llama3"
flavor = "70B"
[training]
batch_size = 1
seq_len = 4096
data_parallel_replicate_degree = 1
data_parallel_shard_degree = 4
tensor_parallel_degree = 8
[experimental]
pipeline_parallel_degree = 2
context_parallel_degree = 1
"""


def _write(tmp_path, text, name="cfg.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_torchtitan_toml_tokens_per_step_and_degrees(tmp_path):
    cfg = from_torchtitan_toml(_write(tmp_path, LLAMA3_8B)).resolve(32)
    # dp_shard = 32 / (dp_replicate 2 x cp 1 x tp 2 x pp 2) = 4; DP = 2 x 4 = 8
    assert cfg.degrees == {"pp": 2, "dp_replicate": 2, "dp_shard": 4, "cp": 1, "tp": 2}
    assert cfg.dp == 8
    assert cfg.tokens_per_step() == 2 * 8192 * 8 == 131072
    assert cfg.sequences_per_step() == 16
    assert cfg.model_name == "llama3 8B" and cfg.model.hidden == 4096 and cfg.model.ffn_hidden == 14336
    assert cfg.dtype == "bfloat16"
    old = from_torchtitan_toml(_write(tmp_path, OLD_LAYOUT, "old.toml")).resolve(64)
    assert old.degrees == {"pp": 2, "dp_replicate": 1, "dp_shard": 4, "cp": 1, "tp": 8}
    assert old.tokens_per_step() == 1 * 4096 * 4
    assert old.model.ffn_hidden == 28672 and old.model.layers == 80     # Llama 3 70B (Meta's params.json)
    assert train_config_from_json(json.loads(json.dumps(old.to_json()))).tokens_per_step() == 16384


def test_global_batch_size_means_gradient_accumulation(tmp_path):
    text = LLAMA3_8B.replace("seq_len = 8192", "seq_len = 8192\nglobal_batch_size = 64")
    cfg = from_torchtitan_toml(_write(tmp_path, text)).resolve(32)
    assert cfg.tokens_per_step() == 64 * 8192


def _mesh_groups(shape: dict, dims) -> list:
    """Groups along ``dims`` of ``arange(world)`` reshaped row-major in TorchTitan's order."""
    names = list(shape)
    a = np.arange(int(np.prod(list(shape.values())))).reshape([shape[n] for n in names])
    keep = [names.index(d) for d in dims]
    moved = np.moveaxis(a, keep, list(range(len(names) - len(keep), len(names))))
    flat = moved.reshape(-1, int(np.prod([shape[d] for d in dims])))
    return sorted(sorted(map(int, g)) for g in flat)


@pytest.mark.parametrize("pp,rep,shard,cp,tp", [(2, 2, 2, 1, 2), (1, 1, 4, 2, 2), (2, 1, 2, 2, 1), (1, 2, 2, 1, 4)])
def test_mesh_order_matches_a_row_major_torchtitan_mesh(tmp_path, pp, rep, shard, cp, tp):
    text = (f"[parallelism]\ndata_parallel_replicate_degree = {rep}\ndata_parallel_shard_degree = {shard}\n"
            f"tensor_parallel_degree = {tp}\npipeline_parallel_degree = {pp}\ncontext_parallel_degree = {cp}\n")
    world = pp * rep * shard * cp * tp
    topo = config_topology(from_torchtitan_toml(_write(tmp_path, text)), world)
    shape = {"pp": pp, "dp_replicate": rep, "dp_shard": shard, "cp": cp, "tp": tp}
    assert topo.groups["tp"] == _mesh_groups(shape, ["tp"])
    assert topo.groups["cp"] == _mesh_groups(shape, ["cp"])
    assert topo.groups["pp"] == _mesh_groups(shape, ["pp"])
    assert topo.groups["dp"] == _mesh_groups(shape, ["dp_replicate", "dp_shard"])   # TorchTitan's "dp" mesh


def test_expert_parallel_borrows_cp_and_dp_shard(tmp_path):
    # ETP = TP: EP takes cp and the innermost part of dp_shard (ParallelDims: dp_shard_in_ep = ep / cp)
    text = ("[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n"
            "context_parallel_degree = 2\nexpert_parallel_degree = 4\n")
    topo = config_topology(from_torchtitan_toml(_write(tmp_path, text)), 16)
    # mesh (dp_shard_mod_ep 2, dp_shard_in_ep 2, cp 2, tp 2), row-major: EP varies dp_shard_in_ep and cp
    shape = {"mod": 2, "in_ep": 2, "cp": 2, "tp": 2}
    assert topo.groups["ep"] == _mesh_groups(shape, ["in_ep", "cp"])


def test_mesh_of_the_real_cpu_3d_run(tmp_path):
    need_shared()
    real = json.loads((REAL.parent / "cpu-3d" / "parallel_topology.json").read_text())
    text = "[parallelism]\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 2\npipeline_parallel_degree = 2\n"
    topo = config_topology(from_torchtitan_toml(_write(tmp_path, text)), 8)
    for d in ("tp", "dp", "pp"):
        assert topo.groups[d] == sorted(sorted(g) for g in real[f"{d}_groups"]), d


@pytest.mark.parametrize("text,msg", [("[parallelism]\ntensor_parallel_degree = 0\n", "tensor_parallel_degree = 0"),
                                      ("[training\nseq_len = 3", "not a TOML file"),
                                      ("[training]\nseq_len = \"long\"\n", "training.seq_len")])
def test_bad_config_is_one_line(tmp_path, text, msg):
    p = _write(tmp_path, text)
    with pytest.raises(StreamtraceError, match=msg) as e:
        from_torchtitan_toml(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_degrees_that_do_not_fit_the_world(tmp_path):
    cfg = from_torchtitan_toml(_write(tmp_path, "[parallelism]\ndata_parallel_shard_degree = 3\n"))
    with pytest.raises(StreamtraceError, match="do not multiply to the world size 8"):
        cfg.resolve(8)


def test_cli_bad_config_exit_1(tmp_path):
    r = run_cli("aggregate", tmp_path, "-o", tmp_path / "agg", "--torchtitan-config", tmp_path / "missing.toml")
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_megatron_arguments_travel_through_the_topology_file(tmp_path):
    args = {"global_batch_size": 512, "micro_batch_size": 2, "seq_length": 4096, "num_layers": 32,
            "hidden_size": 4096, "ffn_hidden_size": 14336, "num_attention_heads": 32, "group_query_attention": True,
            "num_query_groups": 8, "padded_vocab_size": 128256, "swiglu": True, "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 2, "bf16": True}
    groups = {"tp": [[0, 1], [2, 3], [4, 5], [6, 7]], "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
              "dp": [[0, 2], [1, 3], [4, 6], [5, 7]]}
    capture.dump_topology(tmp_path, groups=groups, world_size=8, training=args)
    on_disk = json.loads((tmp_path / "streamtrace_topology.json").read_text())
    assert on_disk["training"] == args
    topo = load_topology(tmp_path / "streamtrace_topology.json")
    assert topo.to_json()["training"] == args
    cfg = from_megatron_args(topo.training).resolve(8)
    assert cfg.tokens_per_step() == 512 * 4096
    m = cfg.model
    assert (m.layers, m.hidden, m.ffn_hidden, m.heads, m.kv_heads, m.vocab, m.swiglu) == \
        (32, 4096, 14336, 32, 8, 128256, True)
    assert cfg.degrees["dp_shard"] == 8 // (2 * 2) and cfg.dtype == "bfloat16"


def test_megatron_gqa_flag_off_means_no_query_groups():
    cfg = from_megatron_args({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_query_groups": 2,
                              "padded_vocab_size": 100})
    assert cfg.model.kv_heads == 4          # Megatron ignores num_query_groups without --group-query-attention
