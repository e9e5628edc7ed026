#!/usr/bin/env python3
"""Benchmark baseline: the whole-file ``json.load`` merge of Megatron-LM's
``tools/merge_profiler_traces.py``, re-implemented here (own code, same behaviour)
so that ``bench_merge.py`` can time it against ``streamtrace merge``.

What it does, as the original:
  * takes every ``*.json`` directly inside ``-i/--input_dir`` (no recursion, no
    ``.json.gz``, in ``glob`` order);
  * loads each file completely with ``json.load``;
  * reads the rank from ``distributedInfo.rank`` (files without it, with a negative
    rank, or repeating a rank already seen are skipped with a warning; so are files
    without events and files that fail to parse);
  * overwrites ``pid`` of *every* event with ``rank + 1`` (CPU and GPU processes of a
    rank collapse into one process) and adds one ``process_name`` metadata event
    ``"Rank N"`` per rank; nothing else is changed (no time alignment, ids untouched);
  * collects all events of all ranks in one list in memory and writes
    ``{"traceEvents": [...], "displayTimeUnit": ..., "baseTimeInSeconds": ...}`` with a
    single ``json.dump(..., indent=2)`` (``displayTimeUnit`` of the last file read,
    default ``"ms"``; ``baseTimeInSeconds`` of the first file that has one);
  * output path: ``-o NAME`` without a folder goes into the parent of the input
    folder; no ``-o`` gives ``<parent>/<input folder name>_merged.json``.
So its memory holds every rank's events as Python objects at once.
"""
import argparse
import glob
import json
import os
import sys
from pathlib import Path


def _rank_of(doc, path):
    """The rank of a loaded trace, or None (with the warning printed) to skip it."""
    info = doc.get("distributedInfo")
    if not info or "rank" not in info:
        print(f"Warning: File {path} lacks 'distributedInfo' or 'rank' field. Skipping this file.")
        return None
    rank = info.get("rank")
    if rank is None or rank < 0:
        print(f"Warning: Invalid rank_id ({rank}) in file {path}. Skipping this file.")
        return None
    return rank


def merge_traces(input_dir, output_file):
    paths = glob.glob(os.path.join(input_dir, "*.json"))
    print(f"Found {len(paths)} JSON files. Starting processing...")
    merged = []                 # every event of every rank, held until the final dump
    seen = set()
    display_unit = "ms"
    base_time = None
    for path in paths:
        print(f"--- Reading file: {os.path.basename(path)} ---")
        try:
            with open(path, "r") as fh:
                doc = json.load(fh)
            rank = _rank_of(doc, path)
            if rank is None:
                continue
            if rank in seen:
                print(f"Warning: Rank {rank} seems duplicated. Skipping this file.")
                continue
            seen.add(rank)
            pid = rank + 1
            print(f"  Identified Rank {rank}. Allocated PID: {pid}")
            events = doc.get("traceEvents", [])
            if not events:
                print(f"  Warning: Rank {rank} file contains no 'traceEvents'. Skipping this file.")
                continue
            print(f"  Processing {len(events)} events...")
            for ev in events:
                ev["pid"] = pid
                merged.append(ev)
            merged.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": f"Rank {rank}"}})
            display_unit = doc.get("displayTimeUnit", display_unit)
            if base_time is None:
                base_time = doc.get("baseTimeInSeconds")
        except json.JSONDecodeError:
            print(f"Error: File {path} is not a valid JSON. Skipping.")
        except Exception as e:  # the original reports and goes on
            print(f"Error processing file {path}: {e}")

    if not merged:
        print("Error: No events were merged. Output file not generated.")
        return
    out = {"traceEvents": merged, "displayTimeUnit": display_unit}
    if base_time is not None:
        out["baseTimeInSeconds"] = base_time
    try:
        with open(output_file, "w") as fh:
            json.dump(out, fh, indent=2)
        print("\n" + "=" * 30)
        print(f" Merge successful! Processed {len(seen)} Ranks.")
        print(f" Output file saved to: {output_file}")
        print(" You can now upload this file to https://ui.perfetto.dev/ for visualization.")
        print("=" * 30)
    except IOError as e:
        print(f"Error: Could not write to output file {output_file}. Error: {e}")


def output_path(input_dir, output_file):
    src = Path(input_dir)
    if output_file:
        p = Path(output_file)
        return src.parent / p if p.parent == Path(".") else p
    return src.parent / f"{src.name}_merged.json"


def main(argv=None):
    ap = argparse.ArgumentParser(description="Merges Profiler JSON trace files.")
    ap.add_argument("-i", "--input_dir", type=str, required=True,
                    help="Directory containing profiler .json files.")
    ap.add_argument("-o", "--output_file", type=str,
                    help="Merged JSON output filename. If only a filename is specified, "
                         "it is saved to the parent directory of the input path.")
    a = ap.parse_args(argv)
    if not Path(a.input_dir).is_dir():
        print(f"Error: Input directory '{a.input_dir}' does not exist.")
        print("Please use the -i argument to specify the correct directory.")
        return 1
    out = output_path(a.input_dir, a.output_file)
    print(f"Input Directory: {a.input_dir}")
    print(f"Output File: {out}")
    merge_traces(a.input_dir, str(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
