"""Long fuzz run: random StableHLO programs and shardings through Shardy and XLA.

For each generated program (``tests/strategies.py``): add-mesh, apply-shardings,
shardy-propagate, collect-collectives; then ``verify_numerics`` (sharded on the mesh's
devices vs unsharded) and ``compare_collectives`` (Shardy's collectives vs the ones in
XLA's optimized HLO for the same plan). With ``--search`` each program also goes
through the whole search and the winning plan is verified.

    python benchmarks/fuzz_long.py --examples 500
    python benchmarks/fuzz_long.py --examples 200 --seed 7 --search --big --save-dir /tmp/fuzz

Prints a table: programs run, crashes (by stage), numerics mismatches, and how often
Shardy's and XLA's collectives agree; failing cases are written to ``--save-dir``.
Exit status 1 if any crash or mismatch.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import traceback
from pathlib import Path

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import strategies  # noqa: E402
from shard_opt import ir  # noqa: E402
from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline  # noqa: E402
from shard_opt.verify import compare_collectives, verify_numerics, xla_collectives  # noqa: E402


class Tally:
    def __init__(self):
        self.programs = 0
        self.crashes = collections.Counter()  # stage -> count
        self.mismatches = 0
        self.agree = 0
        self.disagree = 0
        self.search_run = 0
        self.search_crashes = 0
        self.search_mismatches = 0
        self.search_sharded = 0  # winners that split at least one tensor
        self.worst_rel = 0.0
        self.reasons = collections.Counter()
        self.seconds = 0.0
        self.failures: list[tuple[str, str]] = []  # (title, details)


def run_case(case, tally: Tally, *, collectives: bool, search: bool) -> None:
    tally.programs += 1
    stage = "parse"
    try:
        module = ir.parse(case.program.text)
        ctx = PassContext(mesh=case.mesh, shardings=dict(case.shardings),
                          result_shardings=dict(case.result_shardings))
        stage = "annotate"
        PassManager(parse_pipeline("builtin.module(add-mesh, apply-shardings)"), ctx).run(module)
        annotated = ir.print_module(module)
        stage = "shardy"
        PassManager(parse_pipeline("builtin.module(shardy-propagate, collect-collectives)"), ctx).run(module)
        stage = "numerics"
        result = verify_numerics(annotated, num_devices=case.mesh.num_devices)
        tally.worst_rel = max(tally.worst_rel, result.max_rel_err)
        if not result.passed:
            tally.mismatches += 1
            tally.failures.append(("mismatch", f"{case.describe()}\n{result.summary()}\n{annotated}"))
        if collectives:
            stage = "xla-collectives"
            cmp = compare_collectives(ctx.facts.collectives, xla_collectives(annotated, case.mesh.num_devices))
            if cmp.agrees:
                tally.agree += 1
            else:
                tally.disagree += 1
            for d in cmp.differences:
                tally.reasons[("explained: " if d.explained else "UNEXPLAINED: ") + _short(d.reason)] += 1
    except Exception as e:  # a crash in any stage is a finding
        tally.crashes[stage] += 1
        tally.failures.append((f"crash in {stage}", f"{case.describe()}\n{traceback.format_exc()}\n{case.program.text}"))
        return
    if search:
        tally.search_run += 1
        try:
            mesh, plan_text = strategies.search_plan(case.program, case.mesh.spec)
            tally.search_sharded += '{"' in plan_text
            r = verify_numerics(plan_text, num_devices=mesh.num_devices)
            if not r.passed:
                tally.search_mismatches += 1
                tally.failures.append(("search mismatch", f"{r.summary()}\n{plan_text}"))
        except Exception as e:
            tally.search_crashes += 1
            tally.failures.append(("search crash", f"{type(e).__name__}: {e}\n{traceback.format_exc()}\n{case.program.text}"))


def _short(reason: str) -> str:
    """A reason without its sizes, so equal causes count together."""
    import re

    return re.sub(r"\d+", "N", reason)[:110]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=300, help="programs to generate (default 300)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: derandomized, reproducible)")
    ap.add_argument("--max-ops", type=int, default=8)
    ap.add_argument("--no-collectives", action="store_true", help="skip the XLA collective comparison")
    ap.add_argument("--search", action="store_true", help="also run the whole search on each program")
    ap.add_argument("--big", action="store_true",
                    help="model-like sizes (dims 64-512, 2-D) where splitting can win the search")
    ap.add_argument("--save-dir", type=Path, default=None, help="write failing cases here")
    args = ap.parse_args(argv)

    tally = Tally()
    t0 = time.monotonic()
    conf = settings(max_examples=args.examples, deadline=None, derandomize=args.seed is None, database=None,
                    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))

    size = (dict(dims=strategies.BIG_DIMS, max_elements=strategies.BIG_MAX_ELEMENTS, max_rank=2)
            if args.big else {})

    @conf
    @given(strategies.sharded_programs(max_ops=args.max_ops, **size))
    def fuzz(case):
        run_case(case, tally, collectives=not args.no_collectives, search=args.search)
        if tally.programs % 50 == 0:
            sys.stderr.write(f"fuzz_long: {tally.programs} programs, {time.monotonic() - t0:.0f} s\n")

    if args.seed is not None:
        fuzz = seed(args.seed)(fuzz)
    fuzz()
    tally.seconds = time.monotonic() - t0

    rows = [
        ("programs run", tally.programs),
        ("crashes", sum(tally.crashes.values())),
        *[(f"  in {k}", v) for k, v in sorted(tally.crashes.items())],
        ("numerics mismatches", tally.mismatches),
        ("worst max rel err (passing or not)", f"{tally.worst_rel:.3g}"),
    ]
    if not args.no_collectives:
        rows += [("Shardy/XLA collectives agree", tally.agree), ("Shardy/XLA collectives disagree", tally.disagree)]
    if args.search:
        rows += [("search runs", tally.search_run), ("  winners that split a tensor", tally.search_sharded),
                 ("search crashes", tally.search_crashes),
                 ("search plan mismatches", tally.search_mismatches)]
    rows.append(("seconds", f"{tally.seconds:.1f}"))
    width = max(len(k) for k, _ in rows)
    print(f"{'fuzz_long':<{width}}  result")
    print(f"{'-' * width}  ------")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if tally.reasons:
        print("\ncollective differences by reason:")
        for reason, n in tally.reasons.most_common():
            print(f"  {n:5d}  {reason}")
    if tally.failures:
        print(f"\nfirst failures ({len(tally.failures)} in all):")
        for title, details in tally.failures[:3]:
            print(f"--- {title}\n{details[:1500]}")
    if args.save_dir and tally.failures:
        args.save_dir.mkdir(parents=True, exist_ok=True)
        for i, (title, details) in enumerate(tally.failures):
            (args.save_dir / f"case-{i:04d}-{title.replace(' ', '-')}.txt").write_text(details)
        print(f"\nwrote {len(tally.failures)} cases to {args.save_dir}")
    return 1 if (sum(tally.crashes.values()) or tally.mismatches or tally.search_crashes
                 or tally.search_mismatches) else 0


if __name__ == "__main__":
    sys.exit(main())
