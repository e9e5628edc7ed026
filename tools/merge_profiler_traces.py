#!/usr/bin/env python3
"""Drop-in replacement for Megatron-LM's ``tools/merge_profiler_traces.py``, built on
streamtrace: same ``-i/--input_dir`` and ``-o/--output_file`` options and output
naming (default ``<input folder>_merged.json`` beside the folder; a bare file name
also goes to the input's parent folder), but streaming in flat memory, with each
rank's CPU process and GPU devices kept apart and ids made unique across ranks.

    python tools/merge_profiler_traces.py -i outputs/.../torch_profiler [-o merged.json]
"""
import argparse
import os
import sys

from streamtrace import MergeOptions, StreamtraceError, merge


def main(argv=None):
    ap = argparse.ArgumentParser(description="Merges Profiler JSON trace files.")
    ap.add_argument("-i", "--input_dir", required=True, help="Directory containing profiler .json files.")
    ap.add_argument("-o", "--output_file", help="Merged JSON output filename. If only a filename is specified, "
                                                "it is saved to the parent directory of the input path.")
    args = ap.parse_args(argv)
    in_dir = os.path.abspath(args.input_dir).rstrip("/")
    parent = os.path.dirname(in_dir)
    out = args.output_file or os.path.basename(in_dir) + "_merged.json"
    if not os.path.dirname(out):
        out = os.path.join(parent, out)
    print(f"Input Directory: {args.input_dir}\nOutput File: {out}")
    try:
        results = merge([in_dir], out, MergeOptions())
    except StreamtraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for r in results:
        print(f"Merged {len(r['ranks'])} ranks ({r['events_out']:,} events) -> {r['output']}")
    print("You can now upload it to https://ui.perfetto.dev/ for visualization.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
