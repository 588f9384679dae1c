"""Lowering with and without ``torch_trace.lean_tracing``, side by side in one process.

    python benchmarks/lean_tracing.py                 # every fixture script and example load script
    python benchmarks/lean_tracing.py --reps 5 --scripts tests/fixtures/scripts/gqa_llama.py

Each load script is lowered once to warm up, then ``--reps`` times each way, alternating
(lean, then plain with ``lean_tracing`` replaced by a no-op), in this one process. Printed per
script: the median CPU seconds of a lowering each way, their ratio, and whether the
StableHLO text is byte-identical (what the search reads; the equivalence this harness
exists to show). Exit 1 if any text differs.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scripts", help="comma list of load scripts (default: tests/fixtures/scripts/*.py "
                                      "and examples/*_load.py)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    scripts = (args.scripts.split(",") if args.scripts else
               sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "scripts", "*.py")))
               + sorted(glob.glob(os.path.join(ROOT, "examples", "*_load.py"))))

    from shard_opt.frontends import torch_frontend as tf

    lean = tf.lean_tracing

    def lower(path: str, use_lean: bool) -> tuple[float, str]:
        tf.lean_tracing = lean if use_lean else contextlib.nullcontext
        try:
            t0 = time.process_time()
            text = tf.load_script(path).text
            return time.process_time() - t0, text
        finally:
            tf.lean_tracing = lean

    print("| script | plain CPU s | lean CPU s | lean / plain | text |")
    print("|---|---|---|---|---|")
    differ = 0
    totals = [0.0, 0.0]
    for path in scripts:
        name = os.path.relpath(path, ROOT)
        try:
            lower(path, True)  # warm: imports, torch's caches
        except Exception as e:  # a script this torch cannot lower is not this harness's subject
            print(f"| {name} | - | - | - | not lowered: {type(e).__name__} |")
            continue
        times = {True: [], False: []}
        texts = {}
        for _ in range(args.reps):
            for use_lean in (True, False):
                t, texts[use_lean] = lower(path, use_lean)
                times[use_lean].append(t)
        plain, fast = statistics.median(times[False]), statistics.median(times[True])
        totals[0] += plain
        totals[1] += fast
        same = texts[True] == texts[False]
        differ += not same
        print(f"| {name} | {plain:.3f} | {fast:.3f} | {fast / plain:.2f} | {'same' if same else '**DIFFERS**'} |")
    print(f"| **total** | {totals[0]:.2f} | {totals[1]:.2f} | {totals[1] / totals[0]:.2f} | "
          f"{'all the same' if not differ else f'{differ} differ'} |")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
