"""Does screening the one-axis baseline on the 1-layer copy keep its plan?

``driver._baselines`` ranks the one-axis space by the heuristic on a deep model's 1-layer
copy and scores only the best ``driver.ONE_AXIS_SCREEN_TOP`` in full (the extrapolated
heuristic of both short copies). This runs shard-opt on load scripts and meshes and, at
the baseline's search, also enumerates the whole space in full (what it did before): it
prints, per case, the space, where the full enumeration's choice ranks in the screen
(0 = first), whether the screened search chose the same plan, and the seconds of each.

    python benchmarks/one_axis_screen.py                      # every fixture script and example, 2x4 and 1x8
    python benchmarks/one_axis_screen.py tests/fixtures/scripts/gqa_llama.py@2x4 ...

Exit status 1 when any case chose another plan. Runs with the tt-mlir check off and one
process (``SHARD_OPT_CHECK=0 SHARD_OPT_JOBS=1``), in a temporary cache.
"""

from __future__ import annotations

import glob
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cases(argv: list[str]) -> list[tuple[str, str]]:
    if argv:
        return [tuple(a.rsplit("@", 1)) for a in argv]
    scripts = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "scripts", "*.py")))
    scripts += [os.path.join(ROOT, "examples", n) for n in ("llama_load.py", "llama_spec_load.py")]
    return [(s, m) for s in scripts for m in ("2x4", "1x8")]


def main(argv: list[str]) -> int:
    os.environ["SHARD_OPT_CHECK"] = "0"
    os.environ["SHARD_OPT_JOBS"] = "1"
    os.environ.setdefault("SHARD_OPT_CACHE", tempfile.mkdtemp(prefix="one-axis-screen-"))
    from shard_opt import driver
    from shard_opt.cli import main as cli

    real = driver.search
    rows: list[dict] = []

    def search(model, meshes, system, cost_model, **kw):
        if kw.get("screen_top") is None:  # not the one-axis baseline
            return real(model, meshes, system, cost_model, **kw)
        t0 = time.process_time()
        screened = real(model, meshes, system, cost_model, **kw)
        t1 = time.process_time()
        full = real(model, meshes, system, cost_model, **{**kw, "screen_top": None})
        t2 = time.process_time()
        row = {"model": model.name, "space": len(full.scored), "same": full.assignment == screened.assignment,
               "screen_s": t1 - t0, "full_s": t2 - t1, "rank": None}
        scorer = kw["scorer"]
        if hasattr(scorer, "e1"):  # a deep model: where the full choice ranks on the 1-layer copy
            every = sorted(full.scored)
            proxy = dict(zip(every, scorer.screen_many(full.groups, every)))
            order = sorted(every, key=lambda a: (proxy[a].key(), a))
            row["rank"] = order.index(full.assignment)
        rows.append(row)
        return screened

    driver.search = search
    moved = 0
    print("| script | mesh | space | full choice's rank in the screen | same plan | CPU-s screened | CPU-s full enumeration after it (its 1-layer runs reused) |")
    print("|---|---|---|---|---|---|---|")
    for script, mesh in cases(argv):
        n = len(rows)
        code = cli([script, "--mesh", mesh, "--quiet", "-o", os.devnull])
        for r in rows[n:]:
            moved += not r["same"]
            rank = "-" if r["rank"] is None else r["rank"]
            print(f"| {os.path.basename(script)} | {mesh} | {r['space']} | {rank} | {'yes' if r['same'] else 'NO'} "
                  f"| {r['screen_s']:.1f} | {r['full_s']:.1f} |", flush=True)
        if len(rows) == n:
            print(f"| {os.path.basename(script)} | {mesh} | no one-axis search (exit {code}) | | | | |", flush=True)
    print(f"\n{len(rows)} one-axis searches; {moved} chose another plan than the full enumeration")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
