"""Which plans a change moved: the same cases planned by two checkouts, side by side.

    python benchmarks/compare_plans.py --before /path/to/old/.venv/bin/python
    python benchmarks/compare_plans.py --before OLD_PY --after NEW_PY --cases mlp@2x4,llama-3-8b:1@2x4

Each case (``NAME[:LAYERS]@MESH[:PHASE]``, as ``bench_ttmlir.py`` takes them) runs as
``python -m shard_opt.cli INPUT ... --plan-json`` under each interpreter (each imports its
own checkout's shard_opt), with the tt-mlir check off (``SHARD_OPT_CHECK=0``: the
search's own plan is compared). Printed per case: total_us before and after, the
collectives by kind, and whether the argument shardings and constraints are the same.
``--check`` leaves the tt-mlir check on (its default): the plan compared is then the one
each checkout recommends after its check, and the after-side's verdict is printed (a run
that finds nothing deliverable, exit 4, still writes its plan and is compared).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ttmlir import QUICK, parse_case, verdict as verdict_cell  # noqa: E402


def plan_of(python: str, argv: list[str], timeout: float, check: bool = False) -> dict | str:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "p.json")
        env = dict(os.environ) if check else {**os.environ, "SHARD_OPT_CHECK": "0"}
        p = subprocess.run([python, "-m", "shard_opt.cli", *argv, "--plan-json", out, "-o", os.devnull, "--quiet"],
                           env=env, capture_output=True, text=True, timeout=timeout, cwd=d)
        if p.returncode != 0 and not (check and p.returncode == 4 and os.path.exists(out)):
            return "exit %d: %s" % (p.returncode, (p.stderr.strip().splitlines() or ["?"])[-1])
        with open(out) as f:
            return json.load(f)


def kinds(plan: dict) -> str:
    out: dict[str, int] = {}
    for c in plan["collectives"]:
        out[c["kind"]] = out.get(c["kind"], 0) + 1
    return " ".join(f"{k}x{n}" for k, n in sorted(out.items())) or "-"


def verdict(plan: dict) -> str:
    """The after-side's verdict cell (bench_ttmlir's words), why a plan went unchecked, and
    which plan the check recommended."""
    chk = (plan.get("checks") or {}).get("tt_mlir") or {}
    v = chk.get("verdict")
    if not isinstance(v, dict):
        return "-"
    why = f" ({v.get('why')})" if not v.get("checked") else ""
    chosen = chk.get("recommended")
    return verdict_cell(chk) + why + (f"; recommended: {chosen}" if chosen else "")


def shape_of(plan: dict) -> tuple:
    return (tuple((a["name"], json.dumps(a["sharding"])) for a in plan["arguments"]),
            json.dumps(plan.get("constraints") or []))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="python of the checkout before the change")
    ap.add_argument("--after", default=sys.executable, help="python of the checkout after (default: this one)")
    ap.add_argument("--cases", help="comma list (default: bench_ttmlir's quick list)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--check", action="store_true", help="keep the tt-mlir check on: compare the recommended plans")
    args = ap.parse_args(argv)
    cases = args.cases.split(",") if args.cases else QUICK
    print("| case | before us | after us | before CCLs | after CCLs | same shardings |"
          + (" after verdict |" if args.check else ""))
    print("|---|---|---|---|---|---|" + ("---|" if args.check else ""))
    moved = failed = 0
    for case in cases:
        _, cli = parse_case(case)
        a, b = (plan_of(py, cli, args.timeout, args.check) for py in (args.before, args.after))
        if isinstance(a, str) or isinstance(b, str):
            print(f"| {case} | {a if isinstance(a, str) else a['cost']['total_us']} | "
                  f"{b if isinstance(b, str) else b['cost']['total_us']} | | | error |")
            failed += 1
            continue
        same = shape_of(a) == shape_of(b)
        moved += (not same) or a["cost"]["total_us"] != b["cost"]["total_us"]
        print(f"| {case} | {a['cost']['total_us']} | {b['cost']['total_us']} | {kinds(a)} | {kinds(b)} | "
              f"{'yes' if same else '**no**'} |" + (f" {verdict(b)} |" if args.check else ""), flush=True)
    print(f"\n{moved} of {len(cases)} plans moved" + (f"; {failed} case(s) failed to run" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
