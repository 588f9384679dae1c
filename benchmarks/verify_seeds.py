"""``--verify-numerics`` in bf16 over many seeds: a correct plan passes whatever the seed, a
plan with a wrong collective fails whatever the seed.

The seed sweep that ``tests/test_verify_bf16.py`` keeps small (two seeds for the correct
plan, one for the wrong one): the same three models and plans (the T5 encoder and the
ResnetBlock2D with their textbook specs, the search's plan for a 2-layer Falcon, 1x8, bf16),
the same wrong plan (one weight declared a partial sum, so XLA all-reduces its 8 copies),
every seed of ``--seeds``. Prints one row per model: the range of the correct plan's
error over the output's scale and how many seeds passed, the same for the wrong plan.
Exit status 1 if a correct plan fails or a wrong one passes on any seed.

    python benchmarks/verify_seeds.py               # seeds 0-9
    python benchmarks/verify_seeds.py --seeds 20
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from shard_opt.cli import main as cli  # noqa: E402
from shard_opt.verify import verify_numerics  # noqa: E402
from test_verify_bf16 import CASES, LAYERS, SCRIPTS, SPECS, wrong_plan  # noqa: E402


def plan_text(name: str, flags, out: Path) -> str:
    how = ["--evaluate", "--spec", os.path.join(SPECS, name + ".json"), *flags] if flags is not None else []
    layers = ["--layers", str(LAYERS[name])] if name in LAYERS else []
    code = cli([os.path.join(SCRIPTS, name + ".py"), "--mesh", "1x8", "--dtype", "bf16", "--quiet", "--no-check", "-o", str(out),
                *layers, *how])
    if code != 0:
        raise SystemExit(f"{name}: shard-opt exited {code}")
    return out.read_text()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    ap.add_argument("--cases", default=",".join(sorted(CASES)), help="comma-separated: " + ", ".join(sorted(CASES)))
    args = ap.parse_args()
    seeds = range(args.seeds)
    bad = 0
    print(f"| model | correct plan: max rel err | passed | wrong plan: max rel err | failed | seconds |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for name in args.cases.split(","):
            t0 = time.monotonic()
            flags, weight = CASES[name]
            text = plan_text(name, flags, Path(d) / f"{name}.mlir")
            wrong = wrong_plan(text, weight)
            right = [verify_numerics(text, num_devices=8, seed=s) for s in seeds]
            off = [verify_numerics(wrong, num_devices=8, seed=s) for s in seeds]
            ok = sum(r.passed for r in right)
            caught = sum(not r.passed for r in off)
            bad += (len(right) - ok) + (len(off) - caught)
            lo, hi = min(r.max_rel_err for r in right), max(r.max_rel_err for r in right)
            wlo, whi = min(r.max_rel_err for r in off), max(r.max_rel_err for r in off)
            print(f"| {name} | {lo:.2g} - {hi:.2g} | {ok}/{len(right)} | {wlo:.3g} - {whi:.3g} | {caught}/{len(off)} "
                  f"| {time.monotonic() - t0:.0f} |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
