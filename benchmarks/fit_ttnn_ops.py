"""Refit ``costmodel/ttnn_ops.py EXTRA_OPS_PER_CLASS`` from checked runs.

Each case is one ``shard-opt INPUT --mesh MESH --plan-json TMP`` with the tt-mlir check on.
From its plan JSON's ``checks.tt_mlir``: the priced ops by class and the priced collectives
(``priced_op_classes``), and the TTNN device ops per step beyond the priced compute ops and
TTNN's collectives (``ttnn_ops_per_step - ttnn_ops_breakdown.per_step.ccl -
priced_device_ops``: what ``checked_cost`` charges). The table is the non-negative least
squares fit of the second on the first over the ``--fit`` cases; the ``--hold`` cases are
kept out of the fit and printed with the error of the fitted estimate.

    python benchmarks/fit_ttnn_ops.py                       # the default cases (~3 min)
    python benchmarks/fit_ttnn_ops.py --data runs.json      # also keep the per-case counts
    python benchmarks/fit_ttnn_ops.py --from-data runs.json # refit from kept counts, no compile

Paste the printed table into costmodel/ttnn_ops.py (EXTRA_OPS_PER_CLASS, FIT_CASES,
HELD_OUT, FIT_SOURCE) and docs/costmodel.md 2.6. Re-run after the frontends change what
they emit (tt-xla's composites change tt-mlir's op counts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_ttmlir import parse_case  # noqa: E402

from shard_opt.costmodel.ttnn_ops import CLASSES, EXTRA_OPS_PER_CLASS, estimated_from_counts  # noqa: E402

# 2-layer copies next to the 1-layer ones: what one more decoder layer adds, apart from what
# the embedding, the LM head and the position/mask arithmetic add once per model.
FIT = ["mlp@1x8", "mlp@2x4", "transformer-block@2x4", "llama-3-8b:1@1x8", "llama-3-8b:1@2x4",
       "llama-3-8b:2@1x8", "llama-3-8b:2@2x4", "llama-3-8b:1@2x4:decode", "llama-3-8b:2@2x4:decode",
       "gpt2-xl:1@2x4", "llama-3.2-1b:1@2x4"]
HOLD = ["llama-3.2-1b:1@1x8", "qwen2.5-7b:1@2x4", "llama-3-8b@1x8", "llama-3-8b@2x4"]


def run_case(case: str, timeout: float) -> dict:
    label, argv = parse_case(case)
    with tempfile.TemporaryDirectory() as d:
        plan_path = os.path.join(d, "plan.json")
        env = {**os.environ, "SHARD_OPT_CHECK": "1"}
        p = subprocess.run([sys.executable, "-m", "shard_opt.cli", *argv, "--plan-json", plan_path, "-o", os.devnull,
                            "--quiet"], env=env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0 or not os.path.exists(plan_path):
            return {"case": label, "error": (p.stderr.strip().splitlines() or ["no output"])[-1]}
        with open(plan_path) as f:
            plan = json.load(f)
    chk = (plan.get("checks") or {}).get("tt_mlir") or {}
    if not chk.get("compiled") or "priced_op_classes" not in chk:
        return {"case": label, "error": chk.get("error") or "not checked"}
    per_step = chk["ttnn_ops_breakdown"]["per_step"]
    return {"case": label, "classes": chk["priced_op_classes"], "priced": chk["priced_device_ops"],
            "ttnn_per_step": chk["ttnn_ops_per_step"], "ttnn_ccl": per_step["ccl"],
            "extra": chk["ttnn_ops_per_step"] - per_step["ccl"] - chk["priced_device_ops"]}


def fit(rows: list[dict]) -> dict[str, float]:
    """Least squares, every per-op class non-negative; the per-module term may be negative
    (a module of one layer runs fewer extra ops than its layer's marginal count: tt-mlir
    hoists more of it into const-eval and CSE merges its boundary ops)."""
    import numpy as np
    from scipy.optimize import lsq_linear

    a = np.array([[r["classes"].get(k, 1 if k == "module" else 0) for k in CLASSES] for r in rows], dtype=float)
    b = np.array([r["extra"] for r in rows], dtype=float)
    lo = [-np.inf if k == "module" else 0.0 for k in CLASSES]
    x = lsq_linear(a, b, bounds=(lo, [np.inf] * len(CLASSES))).x
    return {k: round(float(v), 3) for k, v in zip(CLASSES, x)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fit", default=",".join(FIT), help="calibration cases (bench_ttmlir's NAME[:LAYERS]@MESH[:PHASE])")
    p.add_argument("--hold", default=",".join(HOLD), help="held-out cases (validation only)")
    p.add_argument("--data", help="write the per-case counts here (JSON)")
    p.add_argument("--from-data", help="read the per-case counts from here instead of compiling")
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args(argv)
    fit_cases = [c for c in args.fit.split(",") if c]
    hold_cases = [c for c in args.hold.split(",") if c]
    if args.from_data:
        try:
            with open(args.from_data) as f:
                rows = json.load(f)["rows"]
        except (OSError, ValueError, KeyError) as e:
            print(f"fit_ttnn_ops: cannot read {args.from_data}: {e}; pass a file written by --data", file=sys.stderr)
            return 2
    else:
        rows = []
        for case in fit_cases + hold_cases:
            r = run_case(case, args.timeout)
            print(f"  {case}: {r.get('error') or r['extra']} extra ops ({r.get('priced')} priced)", file=sys.stderr)
            rows.append(r)
    if args.data:
        with open(args.data, "w") as f:
            json.dump({"fit": fit_cases, "hold": hold_cases, "rows": rows}, f, indent=1)
            f.write("\n")
    ok = [r for r in rows if "error" not in r]
    cal = [r for r in ok if r["case"] in fit_cases]
    if len(cal) < len(CLASSES):
        print(f"fit_ttnn_ops: {len(cal)} calibration cases compiled, need at least {len(CLASSES)}", file=sys.stderr)
        return 1
    table = fit(cal)
    print("| case | use | priced ops (matmul/fused/other/collectives) | TTNN extra ops | fitted estimate | "
          "ratio | current table |")
    print("|---|---|---|---|---|---|---|")
    for r in ok:
        use = "calibration" if r["case"] in fit_cases else "held out"
        est, cur = estimated_from_counts(r["classes"], table), estimated_from_counts(r["classes"])
        cl = "/".join(str(r["classes"].get(k, 0)) for k in CLASSES if k != "module")
        print(f"| {r['case']} | {use} | {cl} | {r['extra']} | {est:.0f} | "
              f"{est / r['extra'] if r['extra'] else float('nan'):.2f} | {cur:.0f} |")
    for r in rows:
        if "error" in r:
            print(f"- {r['case']}: not used ({r['error']})")
    print(f"\nEXTRA_OPS_PER_CLASS = {json.dumps(table)}")
    print(f"FIT_CASES = {tuple(r['case'] for r in cal)}")
    print(f"HELD_OUT = {tuple(r['case'] for r in ok if r['case'] not in fit_cases)}")
    print(f"(current table: {json.dumps(EXTRA_OPS_PER_CLASS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
