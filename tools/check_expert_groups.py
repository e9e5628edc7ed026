"""Compare streamtrace's parallel groups with the ones Megatron-LM really builds.

Megatron-core's ``initialize_model_parallel`` (``megatron/core/parallel_state.py``) is run for
real, once per configuration, in this one process: ``torch.distributed`` is stood in for by a
recorder (world size W, rank 0, ``new_group`` notes the ranks and ``group_desc`` of every
group and returns a token), so every group of every rank is seen, with Megatron's own
assertions and errors.  Each configuration's groups are then compared with
``streamtrace.topology.from_sizes(W, tp, pp, cp, ep, order, etp)``:

    TENSOR_MODEL_PARALLEL_GROUP        tp        EXPERT_MODEL_PARALLEL_GROUP                 ep
    CONTEXT_PARALLEL_GROUP             cp        EXPERT_TENSOR_PARALLEL_GROUP                etp
    DATA_PARALLEL_GROUP                dp        EXPERT_DATA_PARALLEL_GROUP                  edp
    DATA_PARALLEL_GROUP_WITH_CP        dp_cp     EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP      etp_ep
    PIPELINE_MODEL_PARALLEL_GROUP      pp        EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP etp_ep_pp

(``dp_cp`` and the expert keys are read from ``Topology.extra``; a key streamtrace does not
build is reported as missing.)  Megatron refusing a configuration (any exception) must match
streamtrace raising ``StreamtraceError``, and the other way round.

    python tools/check_expert_groups.py                     # the streamtrace of this checkout
    python tools/check_expert_groups.py --module OTHER/streamtrace/topology/model.py
    python tools/check_expert_groups.py --full              # every order for every size (slower)

Exit status 1 when anything differs.  Needs megatron-core and torch (CPU is enough).
``tests/unit/topology/test_expert_groups.py`` runs ``compare`` on the dense tests' sizes and orders.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import io
import itertools
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DESC_KEY = {
    "TENSOR_MODEL_PARALLEL_GROUP": "tp", "CONTEXT_PARALLEL_GROUP": "cp", "DATA_PARALLEL_GROUP": "dp",
    "DATA_PARALLEL_GROUP_WITH_CP": "dp_cp", "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "EXPERT_MODEL_PARALLEL_GROUP": "ep", "EXPERT_TENSOR_PARALLEL_GROUP": "etp",
    "EXPERT_DATA_PARALLEL_GROUP": "edp", "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": "etp_ep",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": "etp_ep_pp",
}
DENSE = ("tp", "cp", "ep", "dp", "pp")


def load_topology_module(path):
    """This checkout's ``streamtrace.topology``, or the ``model.py`` at ``path`` (another
    checkout's), whose relative imports resolve to this checkout's package."""
    if path is None:
        from streamtrace import topology
        return topology
    spec = importlib.util.spec_from_file_location("streamtrace.topology._model_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "streamtrace.topology"
    spec.loader.exec_module(mod)
    return mod


class FakeDist:
    """The few ``torch.distributed`` calls ``initialize_model_parallel`` makes, recorded."""

    def __init__(self, ps, torch):
        self.ps, self.torch = ps, torch
        self.world = 1
        self.groups = collections.defaultdict(list)

    def new_group(self, ranks=None, backend=None, group_desc=None, **_):
        if backend is None:                    # NCCL groups only (gloo twins are off anyway)
            self.groups[group_desc].append(sorted(int(r) for r in ranks))
        return object()

    @contextlib.contextmanager
    def installed(self):
        d = self.torch.distributed
        saved = {k: getattr(d, k) for k in ("is_initialized", "get_world_size", "get_rank", "new_group")}
        d.is_initialized = lambda: True
        d.get_world_size = lambda *a, **k: self.world
        d.get_rank = lambda *a, **k: 0
        d.new_group = self.new_group
        try:
            yield self
        finally:
            for k, v in saved.items():
                setattr(d, k, v)

    def run(self, world, tp, pp, cp, ep, etp, order):
        """Megatron's groups ``{key: sorted list of groups}``, or the exception it raised."""
        self.world = world
        self.groups.clear()
        self.ps.destroy_model_parallel()
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.ps.initialize_model_parallel(
                    tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp,
                    expert_model_parallel_size=ep, expert_tensor_parallel_size=etp, order=order,
                    create_gloo_process_groups=False)
        except Exception as e:             # noqa: BLE001  (any refusal: RuntimeError, AssertionError, KeyError)
            return e
        finally:
            self.ps.destroy_model_parallel()
        return {DESC_KEY[d]: sorted(g) for d, g in self.groups.items() if d in DESC_KEY}


def streamtrace_groups(topo_mod, world, tp, pp, cp, ep, etp, order):
    from streamtrace.runtime.errors import StreamtraceError
    try:
        t = topo_mod.from_sizes(world, tp=tp, pp=pp, cp=cp, ep=ep, order=order, etp=etp)
    except StreamtraceError as e:
        return e
    out = {d: sorted(t.groups[d]) for d in DENSE}
    out.update({k: sorted(v) for k, v in t.extra.items()})
    if "dp_cp" not in out:                 # streamtrace stores dp_cp only when cp > 1 (then it equals dp)
        out["dp_cp"] = out["dp"]
    return out


def configs(full):
    orders = ["-".join(p) for p in itertools.permutations(DENSE)] + ["tp-pp-dp", "tp-dp-pp", "pp-dp-tp", "tp-cp-dp-pp",
                                                                     "tp-cp-ep-pp-dp", "tp-ep-dp-pp",
                                                                     "tp-cp-ep-pp", "cp-ep-dp-pp", "TP-CP-EP-DP-PP"]
    sizes = [(w, tp, pp, cp, ep, etp) for w in (1, 2, 4, 8, 12, 16, 24, 32, 64)
             for tp, pp, cp, ep, etp in itertools.product((1, 2, 4), (1, 2, 4), (1, 2), (1, 2, 4), (1, 2, 4))
             if w % (tp * pp * cp) == 0 and w % (etp * ep * pp) == 0]
    for k, (sz, order) in enumerate(itertools.product(sizes, orders)):
        if full or k % 7 == 0 or order in ("tp-cp-ep-dp-pp", "tp-cp-ep-pp", "cp-ep-dp-pp", "TP-CP-EP-DP-PP"):
            yield (*sz, order)


def compare(configs, topo_mod=None, show=12):
    """Run every configuration ``(world, tp, pp, cp, ep, etp, order)`` (``etp`` None: Megatron's
    default, tp) through Megatron and streamtrace.  Returns ``(n, built, refused, kinds, examples)``:
    configurations, built identically, refused by both, ``Counter`` of mismatch kinds and up to
    ``show`` example lines per kind."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
        from megatron.core import parallel_state as ps
    topo_mod = topo_mod or load_topology_module(None)
    kinds = collections.Counter()
    examples = collections.defaultdict(list)
    n = agree_refused = agree_built = 0
    with FakeDist(ps, torch).installed() as fake:
        for w, tp, pp, cp, ep, etp, order in configs:
            n += 1
            cfg = f"world={w} tp={tp} pp={pp} cp={cp} ep={ep} etp={etp} order={order}"
            meg = fake.run(w, tp, pp, cp, ep, etp, order)
            st = streamtrace_groups(topo_mod, w, tp, pp, cp, ep, etp, order)
            bad = []
            if isinstance(meg, Exception) or isinstance(st, Exception):
                if isinstance(meg, Exception) and isinstance(st, Exception):
                    agree_refused += 1
                    continue
                bad.append(("megatron refuses, streamtrace builds" if isinstance(meg, Exception)
                            else "streamtrace refuses, megatron builds",
                            f"{type(meg).__name__}: {str(meg)[:90]}" if isinstance(meg, Exception) else str(st)[:120]))
            else:
                for key in DESC_KEY.values():
                    if key not in meg:
                        continue
                    if key not in st:
                        bad.append((f"{key}: missing in streamtrace", ""))
                    elif st[key] != meg[key]:
                        bad.append((f"{key}: different groups", f"megatron {meg[key][:3]}... streamtrace {st[key][:3]}..."))
            if not bad:
                agree_built += 1
            for kind, detail in bad:
                kinds[kind] += 1
                if len(examples[kind]) < show:
                    examples[kind].append(f"{cfg}  {detail}")
    return n, agree_built, agree_refused, kinds, examples


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", help="a topology/model.py to check instead of this checkout's")
    ap.add_argument("--full", action="store_true", help="every order for every size")
    ap.add_argument("--show", type=int, default=12, help="mismatching configurations to print per kind")
    a = ap.parse_args(argv)
    n, built, refused, kinds, examples = compare(configs(a.full), load_topology_module(a.module), a.show)
    print(f"{n} configurations: {built} built identically, {refused} refused by both, {n - built - refused} differ")
    for kind, c in kinds.most_common():
        print(f"\n{kind}: {c} configurations")
        for e in examples[kind]:
            print(f"  {e}")
    return 1 if kinds else 0


if __name__ == "__main__":
    sys.exit(main())
