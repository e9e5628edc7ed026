"""Compile the numba kernels a command uses before their first call, in parallel processes.

numba compiles a kernel on its first call and keeps the machine code in its on-disk cache
(the per-user folder of ``streamtrace.kernels.cachedir``, ``~/.cache/streamtrace/<version>/...``,
which a reinstall of the same version finds again; else numba's default), so only the first run
on a machine pays for it (bench/bench_first_run.py; bench/RESULTS.md has the numbers).
``prepare`` cuts that on a machine with more than one core: it lists the kernels a command
calls (``COMMANDS``) with the one signature each is called with (``UNITS``), keeps those
already in the cache, and has ``jobs`` forked processes compile the others into the cache,
callees before their callers (a caller cannot be typed before its callees), the longest chain
first, never two signatures of one kernel at once (numba's index update is a read-modify-write).
The command then loads every kernel from the cache on its first call, as a warm run does.
``streamtrace warmup`` runs it for every unit (container images, shared installs).
``load`` brings units into this process before it forks workers that call them (``TASKS``).

``prepare`` never fails the command: a unit that does not compile here is left to the
command's own first call, which reports the error.  It does nothing when numba's caching is off,
the JIT is disabled or the cache folder cannot be written (then every process compiles for
itself, as without it).  It calls ``notice`` once when it has something to compile.

This module names private kernel functions (callees compiled on their own so that their callers
load them from the cache); it imports none.  A signature here that no longer matches what a caller
passes costs a second compile on the first call, never a wrong result: tests/unit/runtime checks
that a command compiles nothing after ``prepare``.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

from numba.core import types

from .tuning import release_library_pages

__all__ = ["UNITS", "COMMANDS", "TASKS", "REPLAY_UNITS", "CRITICAL_JOB_UNITS", "prepare", "load", "pending",
           "cache_folder", "cache_writable"]

# -- signatures ------------------------------------------------------------------------

_RO = types.Array(types.uint8, 1, "C", readonly=True)    # trace bytes (np.frombuffer of bytes)
_U8 = types.Array(types.uint8, 1, "C")
_I8 = types.Array(types.int8, 1, "C")
_I16 = types.Array(types.int16, 1, "C")
_I32 = types.Array(types.int32, 1, "C")
_I64 = types.Array(types.int64, 1, "C")
_I64_2D = types.Array(types.int64, 2, "C")
_RO_I64 = types.Array(types.int64, 1, "C", readonly=True)      # (critical_cpu.chain passes read-only views)
_RO_I32 = types.Array(types.int32, 1, "C", readonly=True)
_RO_B = types.Array(types.boolean, 1, "C", readonly=True)
_U8_2D = types.Array(types.uint8, 2, "C")
_B2D = types.Array(types.boolean, 2, "C")
_B1 = types.Array(types.boolean, 1, "C")
_i = types.int64
_b = types.boolean


def _feed_sig(names):
    return ((_I64, _I64, _I64, _I64, _I32, _I32, _I32, _U8, _i, _i, _b, _I32, _I64, _I64, _I64)
            + (names,) * 5 + (_I32, _I64_2D, _I64, _I64, _I64, _I64_2D) + (_I64,) * 5 + (_I64_2D,))


#: unit name -> (module, function, signature, callees compiled first, rough CPU seconds
#: to compile it once its callees are cached).  Only kernels with a cached callee need
#: their callees listed; a callee missing here is compiled with its caller.
UNITS = {
    "scan._is_ws": ("scan", "_is_ws", (types.uint8,), (), 0.15),
    "scan.skip_ws": ("scan", "skip_ws", (_RO, _i, _i), ("scan._is_ws",), 0.3),
    "scan.skip_string": ("scan", "skip_string", (_RO, _i, _i), (), 0.15),
    "scan.skip_value": ("scan", "skip_value", (_RO, _i, _i), ("scan.skip_string", "scan._is_ws"), 0.4),
    "scan.parse_ns": ("scan", "parse_ns", (_RO, _i, _i), (), 0.8),
    "scan._ts_or_dur": ("scan", "_ts_or_dur", (_RO, _i, _i), (), 0.15),
    "scan.scan_events": ("scan", "scan_events", (_RO, _i, _i, _I64, _I64, _I64, _I64, _U8, _I64),
                         ("scan.skip_ws", "scan.skip_string", "scan.parse_ns", "scan._ts_or_dur"), 0.9),
    "scan.scan_bounds": ("scan", "scan_bounds", (_RO, _i, _i, _I64, _I64, _I64), ("scan.skip_ws",), 0.9),
    "scan.split_points": ("scan", "split_points", (_RO, _i, _i, _i, _I64, _I64), (), 1.0),
    "jsoncheck._string": ("jsoncheck", "_string", (_RO, _i, _i), (), 0.6),
    "jsoncheck._number": ("jsoncheck", "_number", (_RO, _i, _i), (), 0.4),
    "jsoncheck._literal": ("jsoncheck", "_literal", (_RO, _i, _i, _RO), (), 0.15),
    "jsoncheck._key_end": ("jsoncheck", "_key_end", (_RO, _i, _i), ("jsoncheck._string",), 0.3),
    "jsoncheck.bytes_equal": ("jsoncheck", "bytes_equal", (_RO, _i, _i, _RO), (), 0.15),
    "jsoncheck.value_end": ("jsoncheck", "value_end", (_RO, _i, _i, _U8),
                            ("jsoncheck._string", "jsoncheck._number", "jsoncheck._literal"), 0.6),
    "jsoncheck.valid_json_with": ("jsoncheck", "valid_json_with", (_RO, _i, _i, _U8), ("jsoncheck.value_end",), 0.3),
    "jsoncheck.object_members": ("jsoncheck", "object_members", (_RO, _i, _i, _U8, _I64_2D, _I64_2D, _RO, _b),
                                 ("jsoncheck.valid_json_with", "jsoncheck._key_end"), 2.1),
    "jsoncheck.event_members": ("jsoncheck", "event_members", (_RO, _i, _i, _U8, _I64_2D, _I64_2D, _RO),
                                ("jsoncheck.object_members",), 0.2),
    "rewrite._startswith": ("rewrite", "_startswith", (_RO, _i, _i, _RO), (), 0.15),
    "rewrite._read_uint": ("rewrite", "_read_uint", (_RO, _i, _i), (), 0.2),
    "numtext.put_int": ("numtext", "put_int", (_U8, _i, _i), (), 0.2),
    "numtext.put_us": ("numtext", "put_us", (_U8, _i, _i), (), 0.25),
    "rewrite._flow_cat": ("rewrite", "_flow_cat", (_RO, _i, _i, _i, _i, _RO, _I64, _i),
                          ("rewrite._read_uint",), 0.3),
    "rewrite._flow_kept": ("rewrite", "_flow_kept", (_RO, _i, _i, _i, _i, _RO, _I64, _i, _I64),
                           ("rewrite._flow_cat",), 0.3),
    "survey._plain": ("survey", "_plain", (_RO, _i, _i), (), 0.15),
    "survey.scan_survey": ("survey", "scan_survey", (_RO, _i, _i, _I64, _I64, _I64, _I64, _U8, _I64, _i, _U8, _I64,
                                                     _I64, _RO, _I64, _i, _I64),
                           ("scan.skip_ws", "scan.skip_string", "scan.parse_ns", "jsoncheck.bytes_equal",
                            "survey._plain"), 1.5),
    "texthash.text_hash": ("texthash", "text_hash", (_RO, _i, _i), (), 0.2),
    "texthash.find_text": ("texthash", "find_text", (_RO, _i, _i, _RO, _I64, _I64), ("texthash.text_hash",), 0.3),
    "texthash.insert_text": ("texthash", "insert_text", (_RO, _I64, _i, _I64), ("texthash.text_hash",), 0.2),
    "texthash.index_texts": ("texthash", "index_texts", (_RO, _I64, _i, _I64), ("texthash.insert_text",), 0.2),
    "rewrite.scan_rewrite": ("rewrite", "scan_rewrite",
                             (_RO, _I64, _I64, _I64, _I64, _U8, _I64, _RO, _I64, _I64, _I64, _U8, _i, _I64,
                              _RO, _I64, _i, _i, _i, _b, _b, _i, _i, _RO, _I64, _i, _I64, _I64, _U8, _I64_2D,
                              _b, _I64_2D, _U8),
                             ("jsoncheck.object_members", "scan.parse_ns", "rewrite._flow_kept", "rewrite._flow_cat",
                              "texthash.find_text",
                              "scan.skip_value", "scan.skip_ws", "rewrite._read_uint", "numtext.put_us",
                              "jsoncheck.bytes_equal", "rewrite._startswith", "validate.member_fields",
                              "validate.span_fields"), 4.5),
    "keep.keep_rows": ("keep", "keep_rows", (_I64_2D, _i, _i, _I64, _i, _U8, _I64_2D, _I64, _I64), (), 0.5),
    "extract._int": ("extract", "_int", (_RO, _i, _i), (), 0.2),
    "validate.member_fields": ("validate", "member_fields", (_RO, _i, _i, _i, _I64_2D, _I64_2D, _I64_2D, _i),
                         ("extract._int", "scan.parse_ns"), 1.0),
    "validate.span_fields": ("validate", "span_fields", (_RO, _I64_2D) + (_i,) * 14,
                             ("extract._int", "scan.parse_ns"), 0.6),
    "validate.event_fields": ("validate", "event_fields", (_RO, _I64, _I64, _I64_2D),
                              ("jsoncheck.event_members", "validate.member_fields"), 1.0),
    "validate.nesting_chunk": ("validate", "nesting_chunk", (_I64,) * 7 + (_I64_2D,), (), 0.5),
    "validate.flow_chunk": ("validate", "flow_chunk", (_I64,) * 8 + (_I64_2D,), (), 0.5),
    "validate.flow_close": ("validate", "flow_close", (_I64, _I64_2D), (), 0.2),
    "validate.batch_records": ("validate", "batch_records", (_I64_2D, _I64, _b, _i, _I64_2D, _I64_2D, _I64_2D), (), 0.4),
    "extract.scan_columns": ("extract", "scan_columns", (_RO, _i, _i, _I64, _I64, _I64, _U8, _I64_2D, _U8, _U8),
                             ("jsoncheck.object_members", "scan.scan_events", "scan.parse_ns", "extract._int",
                              "jsoncheck.bytes_equal"), 2.0),
    "nesting.count_bad_nesting": ("nesting", "count_bad_nesting", (_I64, _I64), (), 0.3),
    "runs.union_into": ("runs", "union_into", (_I64, _I64, _i, _i, _I64, _I64, _i), (), 0.3),
    "runs.merge_runs": ("runs", "merge_runs", (_I64,) * 5 + (_i,), (), 0.6),
    "runs.sort_group": ("runs", "sort_group", (_I64, _I64, _i, _i), ("runs.merge_runs",), 0.5),
    "treestream._pop": ("treestream", "_pop", (_I64_2D, _I64, _I64, _I64, _I64_2D) + (_I64,) * 5 + (_I64_2D,),
                        ("runs.union_into", "runs.merge_runs"), 1.0),
    "treestream._feed": ("treestream", "_feed", _feed_sig(_I16),
                         ("treestream._pop", "runs.sort_group", "runs.union_into"), 1.5),
    # name ids as int32: a trace with more than 2**15 distinct names; after the int16 one, never at
    # the same time (two processes updating one kernel's cache index at once can lose an entry)
    "treestream._feed/int32": ("treestream", "_feed", _feed_sig(_I32),
                               ("treestream._feed", "treestream._pop", "runs.sort_group", "runs.union_into"), 1.5),
    "treestream._gather_strings": ("treestream", "_gather_strings", (_RO, _I64, _I64, _I64, _U8), (), 0.2),
    "windows._in_key_order": ("windows", "_in_key_order", (_I64, _I64), (), 0.2),
    "windows._is_sorted": ("windows", "_is_sorted", (_I64,), (), 0.15),
    "windows._sweep": ("windows", "_sweep", (_I64,) * 5, (), 0.5),
    "windows._find": ("windows", "_find", (_I64, _i), (), 0.2),
    "windows._paint": ("windows", "_paint", (_I64,) * 7, ("windows._find",), 0.5),
    "gaps.running_end_before": ("gaps", "running_end_before", (types.Array(types.boolean, 1, "C"), _I64), (), 0.4),
    "ancestry.same_name_ancestor": ("ancestry", "same_name_ancestor", (_I64, _I64), (), 0.3),
    "critical._stable_order": ("critical", "_stable_order", (_I64, _i, _b), (), 0.2),
    "critical.longest_path": ("critical", "longest_path", (_i, _I64, _I64, _I64, _I64), ("critical._stable_order",),
                              0.6),
    "critical._windows": ("critical", "_windows", (_I64, _i), (), 0.1),
    "critical.longest_path_masked": ("critical", "longest_path_masked",
                                     (_i, _I32, _I32, _I32, _I64, _B1, _I64, _I64, _I64, _B1, _I64, _i),
                                     ("critical._windows",), 0.6),
    # the job graphs' weights as int32 when every one fits (the critical path's, the what-if replay's);
    # after the int64 one
    "critical.longest_path_masked/int32": ("critical", "longest_path_masked",
                                           (_i, _I32, _I32, _I32, _I32, _B1, _I64, _I64, _I64, _B1, _I64, _i),
                                           ("critical.longest_path_masked",), 0.6),
    "critical.longest_path_sorted": ("critical", "longest_path_sorted",
                                     (_I64, _I64, _I64, _I32, _I32, _I32, _I64, _B1, _I32, _I32, _I32, _I64, _b,
                                      _I32, _I32, _I32),
                                     (), 0.5),
    "critical.latest_times_sorted": ("critical", "latest_times_sorted", (_I64, _I32, _I32, _I64), (), 0.3),
    "critical.time_positions": ("critical", "time_positions", (_I64, _I8, _i), (), 0.3),
    "critical.latest_times_masked": ("critical", "latest_times_masked", (_i, _I32, _I32, _I32, _I64, _B1, _I64), (),
                                     0.4),
    # the job graphs' weights as int32 when every one fits; after the int64 one
    "critical.latest_times_masked/int32": ("critical", "latest_times_masked", (_i, _I32, _I32, _I32, _I32, _B1, _I64),
                                           ("critical.latest_times_masked",), 0.4),
    "critical.latest_times": ("critical", "latest_times", (_i, _I64, _I64, _I64, _I64),
                              ("critical.latest_times_masked",), 0.4),
    "critical.trace_back": ("critical", "trace_back", (_I64, _I64, _i), (), 0.2),
    "critical._positions": ("critical", "_positions", (_I64,), (), 0.1),
    "critical.back_within_instant": ("critical", "back_within_instant", (_I64,) * 4, ("critical._positions",), 0.2),
    "critical.reduce_local": ("critical", "reduce_local", (_I64,) * 7, ("critical._positions",), 0.6),
    "chains._before": ("chains", "_before", (_i, _i, _I64, _I64, _I64), (), 0.1),
    "chains._sort3": ("chains", "_sort3", (_I64, _I64, _I64, _I64), ("chains._before",), 0.3),
    "chains._post_order": ("chains", "_post_order", (_I64, _I64, _I64), (), 0.1),
    "chains._subtree_last": ("chains", "_subtree_last", (_I64, _I64, _I64), ("chains._sort3",), 0.3),
    "chains._in": ("chains", "_in", (_RO_I64, _i), (), 0.1),
    "chains.thread_chain": ("chains", "thread_chain", (_RO_I64,) * 4 + (_RO_I32, _RO_I64, _RO_B, _i, _RO_I64, _i, _i),
                            ("chains._sort3", "chains._post_order", "chains._subtree_last", "chains._in"), 0.8),
    "chains._first_at_or_after": ("chains", "_first_at_or_after", (_I64, _i, _i, _i, _b), (), 0.1),
    "chains.thread_waits": ("chains", "thread_waits", (_I64, _I64, _B1, _I64, _I64, _I8, _B1, _i, _i),
                            ("chains._first_at_or_after",), 0.5),
    "stepgpu._count_at_most": ("stepgpu", "_count_at_most", (_I64, _i, _i, _i, _I64), (), 0.1),
    "stepgpu._count_below": ("stepgpu", "_count_below", (_I64, _i), (), 0.1),
    "stepgpu.inferred_waits": ("stepgpu", "inferred_waits", (_I64,) * 4 + (_I64, _I64, _I64, _i, _I64, _b),
                               ("stepgpu._count_at_most", "stepgpu._count_below"), 0.6),
    "stepgpu.prev_on_stream": ("stepgpu", "prev_on_stream", (_I64, _I64), (), 0.1),
    "stepgpu.gpu_edges": ("stepgpu", "gpu_edges", (_I64, _I64, _B1, _B1) + (_I64,) * 7 + (_i, _i, _I8), (), 0.6),
    "stepgpu.gpu_step": ("stepgpu", "gpu_step", (_I64,) * 4 + (_B1, _B1) + (_I64,) * 5 + (_b, _I64, _b, _I64, _i, _i,
                                                                                    _I8),
                         ("stepgpu.prev_on_stream", "stepgpu.inferred_waits", "stepgpu.gpu_edges"), 0.8),
    "replay._record": ("replay", "_record", (_I64_2D, _I64_2D, _i, _i, _I64, _I64, _I64, _I64, _I64, _I8), (), 0.3),
    "replay.anchor_pairs": ("replay", "anchor_pairs", (_i, _I64, _I64, _I64, _I8, _I8, _I8, _I64, _i),
                            ("replay._record",), 0.8),
    "intervals._union_sorted": ("intervals", "_union_sorted", (_I64, _I64), (), 0.3),
    "intervals._union_length_sorted": ("intervals", "_union_length_sorted", (_I64, _I64), (), 0.2),
    "intervals._union_lengths_sorted": ("intervals", "_union_lengths_sorted", (_I64, _I64, _I8, _I64, _B2D), (),
                                        0.3),
    "intervals._intersect_length_sorted": ("intervals", "_intersect_length_sorted", (_I64,) * 4, (), 0.2),
    "intervals.disjoint_length": ("intervals", "disjoint_length", (_I64, _I64), (), 0.15),
    "intervals._intersect_sorted": ("intervals", "_intersect_sorted", (_I64,) * 4, (), 0.4),
    "intervals._subtract_sorted": ("intervals", "_subtract_sorted", (_I64,) * 4, (), 0.4),
    "sqlite_pages.varint": ("sqlite_pages", "varint", (_U8, _i, _i), (), 0.2),
    "sqlite_pages.local_size": ("sqlite_pages", "local_size", (_i, _i), (), 0.1),
    "sqlite_pages._be": ("sqlite_pages", "_be", (_U8, _i, _i), (), 0.1),
    "sqlite_pages._int_body": ("sqlite_pages", "_int_body", (_U8, _i, _i), (), 0.1),
    "sqlite_pages.decode_record": ("sqlite_pages", "decode_record", (_U8, _i, _i, _I64, _i, _I64_2D, _U8_2D, _i),
                                   ("sqlite_pages.varint", "sqlite_pages._int_body"), 0.5),
    "sqlite_pages.decode_leaves": ("sqlite_pages", "decode_leaves", (_U8, _I64, _i, _i, _I64, _i),
                                   ("sqlite_pages.decode_record", "sqlite_pages.varint", "sqlite_pages.local_size",
                                    "sqlite_pages._be"), 0.8),
    "sqlite_pages.interior_children": ("sqlite_pages", "interior_children", (_U8, _i, _i),
                                       ("sqlite_pages._be",), 0.2),
    "nsys_text.nsys_event_text": ("nsys_text", "nsys_event_text", (_I64,) * 11 + (_b, _RO, _I64, _U8, _U8),
                                  ("numtext.put_int", "numtext.put_us"), 1.5),
}

_WINDOWS = ("windows._in_key_order", "windows._is_sorted", "windows._sweep", "windows._paint")
REPLAY_UNITS = ("replay.anchor_pairs", "critical.longest_path_sorted", "critical.time_positions")
"""The what-if replay's units (aggregate's ranks reduce each change's graphs with them; the job level's
forward pass reads its graph's edges from disk with ``longest_path_sorted``, its nodes' time order is
``time_positions``)."""
CRITICAL_JOB_UNITS = ("critical.longest_path_sorted", "critical.latest_times_sorted", "critical.trace_back",
                      "critical.time_positions")
"""The job-level critical path's units (aggregate runs it in a process forked before the ranks are read; it calls
no other: its nodes' time order is ``time_positions``, both passes read its graph's edges from an
``aggregate.job_edges.EdgeFile``)."""
_STATS = ("gaps.running_end_before", "ancestry.same_name_ancestor",    # aggregate's statistics
          "intervals._union_lengths_sorted",                              # (the ranks' interval metrics)
          "critical.latest_times_sorted", "critical.trace_back",          # critical path
          "critical.reduce_local", "critical.back_within_instant",
          "chains.thread_chain", "chains.thread_waits", "stepgpu.gpu_step") + REPLAY_UNITS                                        # and its replay
_READ = ("scan.scan_events", "scan.skip_value", "scan.skip_string", "scan.skip_ws")
_PIPELINE = ("intervals._intersect_sorted", "intervals.disjoint_length")   # aggregate's pipeline waits per rank
_INTERVALS = ("intervals._union_sorted", "intervals._union_length_sorted", "intervals._intersect_length_sorted")
_CHECKS = ("validate.nesting_chunk", "validate.flow_chunk", "validate.flow_close", "validate.batch_records")
_VALIDATE = ("validate.event_fields",) + _CHECKS          # (merge reads the fields in its rewrite kernel)
_NSYS = ("sqlite_pages.decode_leaves", "sqlite_pages.decode_record", "sqlite_pages.interior_children",
         "sqlite_pages.local_size")     # the page reader of Nsight Systems exports
_KINETO_MERGE = _READ + ("texthash.insert_text", "texthash.index_texts", "rewrite.scan_rewrite") + _CHECKS  # validated
_FILTERS = ("survey.scan_survey", "keep.keep_rows")              # merge --steps / --window / --align
_MERGE = _KINETO_MERGE + _FILTERS + _VALIDATE + _NSYS + ("nsys_text.nsys_event_text",)   # an export's events as text
_KINETO_ANALYZE = _READ + ("extract.scan_columns", "treestream._feed", "treestream._gather_strings",
                           "intervals._union_lengths_sorted") + _INTERVALS + _WINDOWS
_ANALYZE = _KINETO_ANALYZE + ("intervals.disjoint_length",) + _NSYS
#: what the epilogue of Kineto traces calls (the demo's job): what a cold run of it compiled, measured
#: (bench/bench_first_run.py --count-compiles); the units an Nsight Systems export or merge's time filters
#: need are left out (``NSYS_UNITS``)
_KINETO_EPILOGUE = tuple(dict.fromkeys(_KINETO_MERGE + _KINETO_ANALYZE + _INTERVALS + _STATS + _PIPELINE))

#: the units only an Nsight Systems export needs (its page reader, merge's text kernel)
NSYS_UNITS = _NSYS + ("nsys_text.nsys_event_text",)

#: command -> the units it calls (what a cold run of it compiled, measured)
COMMANDS = {
    "merge": _MERGE,                       # merge validates its output
    "validate": _READ + ("scan.scan_bounds",) + _VALIDATE,
    "demo": _KINETO_EPILOGUE,              # the epilogue on the demo job (Kineto traces, no time filter)
    "analyze": _ANALYZE,
    "aggregate": _READ + _INTERVALS + _STATS + _PIPELINE,
    "report": _READ + _INTERVALS + _STATS + _PIPELINE,
    "epilogue": _KINETO_EPILOGUE,          # + NSYS_UNITS when the run folder holds an export (cli/epilogue.py)
    "nsys": NSYS_UNITS,
    "all": tuple(UNITS),                   # `streamtrace warmup`: every unit
}

#: command -> the units its forked per-task workers call (``load`` brings them into the parent
#: before the fork, so that the workers share them)
TASKS = {
    "aggregate": _INTERVALS + _STATS + _PIPELINE,      # aggregate.run's per-rank task
    "analyze": _KINETO_ANALYZE + ("intervals.disjoint_length",),    # analyze.run's per-file task (a Kineto trace)
}


# -- cache state -----------------------------------------------------------------------

def _dispatcher(name):
    import importlib
    mod, fn = UNITS[name][:2]
    return getattr(importlib.import_module(f"..kernels.{mod}", __package__), fn)


def _closure(names):
    """``names`` and every unit they depend on, callees first."""
    out = {}

    def visit(n):
        if n not in out:
            for d in UNITS[n][3]:
                visit(d)
            out[n] = None
    for n in names:
        visit(n)
    return list(out)


def _cached(disp, sig):
    """True when numba's on-disk cache holds ``disp`` compiled for ``sig`` (or it is
    already loaded here).  Reads the cache index only."""
    if tuple(sig) in disp.overloads:
        return True
    cache = disp._cache
    index = cache._cache_file._load_index()
    return cache._index_key(tuple(sig), disp.targetctx.codegen()) in index


def _caching_on(disp):
    return hasattr(disp, "_cache") and hasattr(disp._cache, "_cache_file")


def cache_folder():
    """The folder numba keeps the kernels' cache in (str), or None when it caches nothing here
    (JIT disabled, caching off)."""
    try:
        disp = _dispatcher("scan._is_ws")
        return disp._cache._cache_path if _caching_on(disp) else None
    except Exception:              # numba's internals changed
        return None


def cache_writable() -> bool:
    """True when numba caches the kernels (JIT on, ``cache=True``) in a folder this process can
    write: else compiling in other processes would be lost, and ``prepare`` does nothing."""
    folder = cache_folder()
    if folder is None:
        return False
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return True
    except Exception:              # read-only install, numba's internals changed, ...
        return False


def pending(*commands):
    """The units of ``commands`` (keys of ``COMMANDS``, or unit names) not in
    numba's cache yet, callees first.  Empty when caching is off or the JIT disabled."""
    names = []
    for c in commands:
        names.extend(COMMANDS.get(c, (c,)))
    out = []
    for n in _closure(names):
        disp = _dispatcher(n)
        if not _caching_on(disp):
            return []
        try:
            if _cached(disp, UNITS[n][2]):
                continue
        except Exception:          # numba's cache internals changed: treat as not cached
            pass
        out.append(n)
    return out


# -- compiling -------------------------------------------------------------------------

def _compile(name):
    """Worker: compile one unit (its callees load from the cache) into the cache."""
    t = time.process_time()
    try:
        _dispatcher(name).compile(UNITS[name][2])
        return name, time.process_time() - t, None
    except Exception as exc:       # left to the command's own first call
        return name, time.process_time() - t, f"{type(exc).__name__}: {exc}"


def _critical(todo):
    """Each unit's longest chain of dependent compile costs (itself included), for
    starting the units on the longest path first."""
    users = {n: [m for m in todo if n in UNITS[m][3]] for n in todo}
    memo = {}

    def chain(n):
        if n not in memo:
            memo[n] = UNITS[n][4] + max((chain(m) for m in users[n]), default=0.0)
        return memo[n]
    return {n: chain(n) for n in todo}


def _stderr(msg):
    print(f"streamtrace: {msg}", file=sys.stderr, flush=True)


def _jobs(jobs, n):
    if jobs is None or jobs <= 0:
        try:
            jobs = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            jobs = os.cpu_count() or 1
        jobs = min(jobs, 4)
    return max(1, min(jobs, n))


def prepare(*commands, jobs=None, notice=_stderr) -> dict:
    """Compile the units ``commands`` (keys of ``COMMANDS``, or unit names) call that
    numba's cache lacks, in ``jobs`` processes (None or 0: the usable cores, at most 4), so
    that the commands only load them.  ``notice(text)`` is called once, before compiling, when
    there is anything to compile (default: one line on stderr; None: silent); the text starts
    with "compiling kernels, first run only".  Returns ``{"compiled": [units], "failed": {unit:
    error}, "seconds": wall s, "cpu": {unit: CPU s of its compile}, "skipped": reason or
    None}``; never raises."""
    t0 = time.perf_counter()
    res = {"compiled": [], "failed": {}, "seconds": 0.0, "cpu": {}, "skipped": None}
    try:
        todo = pending(*commands)
        if todo and not cache_writable():
            res["skipped"] = "numba's cache folder is not writable: each command compiles what it uses"
            todo = []
    except Exception as exc:       # an unknown unit name, numba's internals changed, ...
        res["failed"]["pending"] = f"{type(exc).__name__}: {exc}"
        return res
    if not todo:
        return res
    jobs = _jobs(jobs, len(todo))
    if notice:
        cpu = sum(UNITS[n][4] for n in todo)
        notice(f"compiling kernels, first run only ({len(todo)} kernels, ~{cpu:.0f} CPU-s: ~{cpu / jobs + 1:.0f} s on "
               f"{jobs} idle core{'s' if jobs > 1 else ''}, longer on a busy machine)")
    try:
        if jobs == 1 or not hasattr(os, "fork"):
            for n in todo:
                _record(res, *_compile(n))
        else:
            _parallel(todo, jobs, res)
    except Exception as exc:       # the pool broke: whatever is left compiles on first call
        res["failed"]["pool"] = f"{type(exc).__name__}: {exc}"
    res["seconds"] = time.perf_counter() - t0
    return res


def load(*names) -> list:
    """Load the units ``names`` (keys of ``UNITS``) into this process from numba's cache (a unit the
    cache lacks is compiled here, its callees with it).  A cached unit holds its callees' code: their own
    units are not loaded (the aggregate's 13 units 65 -> 46 ms).  For a parent about to fork workers
    that call them: numba sets up its CPU target (~70 modules) and links each kernel on the first
    call in every process; done once in the parent, the forked workers share that memory
    copy-on-write instead of each building its own.  Measured (``aggregate -j 2``, 256 ranks of
    20,339 GPU events, the units of ``TASKS["aggregate"]``): +3 MB private in the parent, -19 MB
    private in each worker, ~0.2 CPU-s once instead of per worker.  Returns the units now loaded;
    never raises (a unit that fails is left to its first call, which reports the error).

    The pages of LLVM's library that numba's import and set-up touch are dropped from this process's
    resident set before and after (``runtime.tuning.release_library_pages``: ~36 MB touched by the import,
    ~50 more by the set-up, ~12 MB of them touched again by the links; this process's peak 151 -> 137 MB
    and its RSS after 152 -> 87 MB for ``set_up`` alone, measured; ~8 ms the first time in a process tree,
    ~1-2 ms after: before only in a process that has loaded none yet, after only when a unit was loaded here)."""
    global _LOADED
    out, fresh = [], False
    if not _LOADED:
        release_library_pages()
    try:
        _closure(names)
    except KeyError:               # an unknown unit name
        return out
    for n in dict.fromkeys(names):
        try:
            disp = _dispatcher(n)
            sig = tuple(UNITS[n][2])
            if sig not in disp.overloads:
                disp.compile(sig)
                fresh = _LOADED = True
            out.append(n)
        except Exception:          # numba's internals changed, the JIT disabled, a compile error, ...
            pass
    if out:
        _type_an_array()
    if fresh:
        release_library_pages()    # (LLVM's code the set-up and the links touched: ~56 MB of RSS)
    return out


_LOADED = False
"""Whether ``load`` loaded a unit in this process (or in the one it was forked from): numba is set up."""


def _type_an_array():
    """Type one numpy array as a kernel call does.  numba's first ``typeof`` of an array in a process
    imports ``numpy.ma`` (to refuse masked arrays): 0.021 CPU-s, paid again by every process forked before
    it (aggregate's job-level processes, the epilogue's stages) at its first kernel call."""
    try:
        import numba
        import numpy as np
        numba.typeof(np.zeros(0, np.int64))
    except Exception:              # (numba's internals changed: the first call does it)
        pass


SET_UP_UNIT = "scan._is_ws"
"""The unit ``set_up`` loads (the smallest: its own code is a few instructions)."""


def set_up() -> bool:
    """Import numba and set its CPU target up in this process (the typing and target contexts,
    LLVM, the registries every kernel needs: measured ~0.9 CPU-s and ~145 MB on this project's
    2-core VM), by loading ``SET_UP_UNIT``.  For a process that forks children that each call
    kernels (the epilogue's stages): they inherit it copy-on-write instead of each building it.
    Returns whether it is set up; never raises."""
    return bool(load(SET_UP_UNIT))


def _record(res, name, cpu, err):
    res["cpu"][name] = round(cpu, 2)
    if err is None:
        res["compiled"].append(name)
    else:
        res["failed"][name] = err


def _parallel(todo, jobs, res):
    import concurrent.futures as cf
    import multiprocessing as mp
    # compile something trivial here first: the forked workers inherit numba's target
    # and LLVM set-up instead of each paying for it
    _dispatcher(SET_UP_UNIT).compile(UNITS[SET_UP_UNIT][2])
    prio = _critical(todo)
    waiting = {n: {d for d in UNITS[n][3] if d in todo} for n in todo if n != SET_UP_UNIT}
    if SET_UP_UNIT in todo:
        res["compiled"].append(SET_UP_UNIT)
    done = {SET_UP_UNIT}
    for deps in waiting.values():
        deps -= done
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("fork")) as pool:
        running = {}
        while waiting or running:
            ready = sorted((n for n, d in waiting.items() if not d), key=lambda n: -prio[n])
            for n in ready[:max(0, jobs - len(running))]:
                del waiting[n]
                running[pool.submit(_compile, n)] = n
            if not running:            # a dependency failed: compile the rest here, in order
                for n in _closure(list(waiting)):
                    if n in waiting:
                        _record(res, *_compile(n))
                return
            finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                n = running.pop(fut)
                name, cpu, err = fut.result()
                _record(res, name, cpu, err)
                if err is None:
                    for deps in waiting.values():
                        deps.discard(n)


# -- the wheel's prebuilt kernels (setup.py) ----------------------------------------------

def prebuild(package_dir, *commands, jobs=None) -> dict:
    """Compile the units of ``commands`` (default: every unit, ``"all"``) and copy numba's cache of them
    into ``<package_dir>/kernels/prebuilt/<cache folder name>/``, which an install of that package seeds
    its per-user cache from (``streamtrace.kernels.cachedir.seed``).  Run by ``setup.py``'s ``build_py``
    in a process whose ``STREAMTRACE_CACHE_DIR`` is a new empty folder and whose ``streamtrace`` is the
    built package (``package_dir``), so that the files hold exactly these units.  An earlier build's
    ``prebuilt`` folder of the same name (same kernel sources and numba: an in-tree rebuild) seeds that
    empty cache as it would a user's, so only what it lacks compiles; it is then replaced, and any other
    folder there removed.  Returns ``prepare``'s dict with ``"files"`` (how many were copied) and
    ``"folder"`` (where, None when nothing was); never raises: a build without prebuilt kernels still
    installs, and compiles them on first use."""
    import shutil
    from ..kernels import cachedir
    dest = os.path.join(os.fspath(package_dir), "kernels", os.path.basename(cachedir.PREBUILT))
    res = prepare(*(commands or ("all",)), jobs=jobs, notice=None)
    res.update(files=0, folder=None)
    try:
        src = cache_folder()
        shutil.rmtree(dest, ignore_errors=True)
        if not cachedir.installed() or src is None or res["skipped"]:
            return res
        target = os.path.join(dest, os.path.basename(os.path.normpath(src)))
        os.makedirs(target, exist_ok=True)
        files = cachedir.copy_kernels(src, target)
        if not files:
            shutil.rmtree(dest, ignore_errors=True)
            return res
        res.update(files=files, folder=target)
    except Exception as exc:       # (the build goes on without them)
        res["failed"]["prebuild"] = f"{type(exc).__name__}: {exc}"
    return res
