"""Wall time of whole shard-opt runs, cold and warm, split into phases.

    python benchmarks/bench_wall.py                           # the three target runs (a few minutes)
    python benchmarks/bench_wall.py --models llama-3-8b@2x4 --runs 3
    python benchmarks/bench_wall.py --models mlp@1x8,transformer-block@2x4 --timeout 120

Each run is ``python -m shard_opt.cli zoo:MODEL --mesh MESH --plan-json TMP -o /dev/null
--quiet`` in its own process: *cold* with a fresh, empty cache (``SHARD_OPT_CACHE`` = a
new temporary directory), then *warm* with the same directory again (the lowered modules
and the evaluated candidates' facts, ``shard_opt.factcache``, both reused: the same
command run again), then *lowered* with the facts removed (the lowering cache alone: what
a first run on another mesh, phase-independent, or after a change to the analysis pays). ``wall s`` is measured here, from spawning the process to its exit. The phases come
from the run's own ``SHARD_OPT_TIMINGS`` file (``shard_opt.timing``), each phase's own
seconds without the phases inside it: ``lower`` is every lowering (the 1- and 2-layer
copies the search lowers too), ``baselines`` / ``search`` / ``final`` / ``analysis`` are
the driver's (``analysis``: the plan JSON around the winner, its alternatives and
robustness), ``opt rest`` is the rest of ``optimize`` (the scorer, the structure), and ``other`` is the wall time in no phase
(argument checks, ``verify``, process exit: the worker processes' shutdown). Phases
not recorded by the version under test show ``-``.

``RSS MB`` is the run's own peak (VmHWM, written by the run itself; polled from /proc
when the run wrote none). It is not ``wait4``'s ``ru_maxrss``: Linux carries a forking
parent's RSS into the child's maxrss (see ``bench_search.run_measured``). Worker processes
the run starts are not included.

``same plan`` compares the warm and lowered runs' plan JSON with the cold run's, with
``search.seconds`` removed (the one field that may differ): a cache hit must not change
the plan. With ``--runs N`` every figure is the median of N cold/warm pairs, and the
wall column shows the range.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = ["llama-3-8b@2x4", "llama-3-70b@8x4", "wan-vae@2x4"]
# (model, mesh, cold or warm) -> the target wall seconds ("The whole run in seconds")
TARGETS = {("llama-3-8b", "2x4", "cold"): 20.0, ("llama-3-8b", "2x4", "warm"): 8.0,
           ("llama-3-70b", "8x4", "cold"): 40.0, ("wan-vae", "2x4", "cold"): 30.0}
PHASES = ["import", "lower", "baselines", "search", "final", "analysis", "persist", "opt rest", "emit", "other"]
FINER = ("baselines", "search", "final", "analysis")


def spec_of(model: str) -> str:
    if model.endswith((".py", ".mlir")):
        return model if os.path.isabs(model) else os.path.join(HERE, "..", model)
    return model if model.startswith("zoo:") else f"zoo:{model}"


def run_measured(cmd: list[str], env: dict, timeout: float) -> dict:
    """Run ``cmd``; its wall seconds, exit code, last stderr line and polled VmHWM (MB)."""
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        peak_kb, code = 0, None
        while True:
            code = proc.poll()
            if code is not None:
                break
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                proc.wait()
                code = "timeout"
                break
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak_kb = max(peak_kb, int(line.split()[1]))
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        err.seek(0)
        lines = err.read().strip().splitlines()
    return {"wall": wall, "code": code, "stderr": lines[-1] if lines else "", "polled_mb": peak_kb / 1024}


def one_run(model: str, mesh: str, cache_dir: str, timeout: float) -> dict:
    """One process: wall, phases (own seconds), RSS, and the plan it wrote."""
    with tempfile.TemporaryDirectory() as d:
        plan_path, timings_path = os.path.join(d, "plan.json"), os.path.join(d, "timings.json")
        cmd = [sys.executable, "-m", "shard_opt.cli", spec_of(model), "--mesh", mesh, "--plan-json", plan_path,
               "-o", os.devnull, "--quiet"]
        env = dict(os.environ, SHARD_OPT_CACHE=cache_dir, SHARD_OPT_TIMINGS=timings_path)
        res = run_measured(cmd, env, timeout)
        if res["code"] != 0:
            what = f"timed out after {timeout:.0f} s" if res["code"] == "timeout" else \
                f"exit {res['code']}: {res['stderr']}"
            return {"error": what, "wall": res["wall"]}
        with open(plan_path) as f:
            plan = json.load(f)
        try:
            with open(timings_path) as f:
                timings = json.load(f)
        except (OSError, json.JSONDecodeError):
            timings = {}
    own = dict(timings.get("self") or {})
    phases = {k: own.get(k) for k in ("import", "lower", "baselines", "search", "final", "analysis", "persist",
                                      "emit")}
    phases["opt rest"] = own.get("optimize")
    phases["other"] = res["wall"] - sum(v for v in own.values() if v)
    rss = timings.get("vm_hwm_mb") or res["polled_mb"] or timings.get("peak_rss_mb")
    return {"wall": res["wall"], "phases": phases, "rss": rss, "plan": plan}


def without_seconds(plan):
    """The plan with every ``search.seconds`` removed (pipelines hold one per model)."""
    if isinstance(plan, dict):
        out = {k: without_seconds(v) for k, v in plan.items()}
        if isinstance(out.get("search"), dict):
            out["search"] = {k: v for k, v in out["search"].items() if k != "seconds"}
        return out
    if isinstance(plan, list):
        return [without_seconds(v) for v in plan]
    return plan


def plan_difference(a: dict, b: dict) -> str:
    a, b = without_seconds(a), without_seconds(b)
    if a == b:
        return "yes"
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return "NO: " + ", ".join(keys)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def bench(model: str, mesh: str, runs: int, timeout: float) -> list[dict]:
    """[cold, warm, lowered rows] for one model and mesh, each the median of ``runs`` runs."""
    samples = {"cold": [], "warm": [], "lowered": []}
    same = []
    for _ in range(runs):
        d = tempfile.mkdtemp(prefix="shard-opt-bench-cache-")
        try:
            cold = one_run(model, mesh, d, timeout)
            failed = {"error": "cold run failed"}
            warm = one_run(model, mesh, d, timeout) if "error" not in cold else failed
            shutil.rmtree(os.path.join(d, "facts"), ignore_errors=True)  # the lowering cache alone
            lowered = one_run(model, mesh, d, timeout) if "error" not in cold else failed
        finally:
            shutil.rmtree(d, ignore_errors=True)
        samples["cold"].append(cold)
        samples["warm"].append(warm)
        samples["lowered"].append(lowered)
        for other in (warm, lowered):
            if "error" not in cold and "error" not in other:
                same.append(plan_difference(cold["plan"], other["plan"]))
    rows = []
    for kind, got in samples.items():
        ok = [r for r in got if "error" not in r]
        row = {"model": model, "mesh": mesh, "kind": kind, "runs": len(got)}
        if not ok:
            row["error"] = got[0]["error"]
            rows.append(row)
            continue
        walls = [r["wall"] for r in ok]
        row.update(wall=median(walls), wall_min=min(walls), wall_max=max(walls), rss=median(r["rss"] for r in ok),
                   phases={p: median(r["phases"].get(p) for r in ok) for p in PHASES})
        row["same_plan"] = (same[0] if len(set(same)) == 1 else "; ".join(sorted(set(same)))) if same else "-"
        if len(ok) < len(got):
            row["error"] = f"{len(got) - len(ok)} of {len(got)} runs failed"
        rows.append(row)
    return rows


def fmt(v, digits=1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def markdown(rows: list[dict]) -> str:
    out = ["| model | mesh | run | wall s | " + " | ".join(PHASES) + " | RSS MB | same plan |",
           "|---|---|---|---|" + "---|" * len(PHASES) + "---|---|"]
    for r in rows:
        head = f"| {r['model']} | {r['mesh']} | {r['kind']} |"
        if "wall" not in r:
            out.append(f"{head} error: {r['error']} |" + " |" * (len(PHASES) + 2))
            continue
        wall = fmt(r["wall"])
        if r["runs"] > 1:
            wall += f" ({r['wall_min']:.1f}-{r['wall_max']:.1f})"
        cells = [fmt(r["phases"][p]) for p in PHASES]
        note = f" ({r['error']})" if r.get("error") else ""
        out.append(f"{head} {wall}{note} | " + " | ".join(cells) + f" | {fmt(r['rss'], 0)} | {r['same_plan']} |")
    return "\n".join(out) + "\n"


def targets(rows: list[dict]) -> str:
    lines = ["Targets (issue \"The whole run in seconds\"):"]
    by = {(r["model"], r["mesh"], r["kind"]): r for r in rows}
    for (model, mesh, kind), limit in TARGETS.items():
        r = by.get((model, mesh, kind))
        if r is None:
            continue
        got = r.get("wall")
        verdict = "not run (error)" if got is None else ("met" if got <= limit else "missed")
        lines.append(f"- {model} {mesh} {kind} <= {limit:.0f} s: {fmt(got)} s, {verdict}")
    return "\n".join(lines) + "\n" if len(lines) > 1 else ""


def parse_cases(text: str) -> list[tuple[str, str]]:
    cases = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        model, _, mesh = item.partition("@")
        if not mesh:
            mesh = next((d.partition("@")[2] for d in DEFAULT if d.partition("@")[0] == model), "2x4")
        cases.append((model, mesh))
    return cases


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT),
                   help="comma list of MODEL@MESH (zoo name or script path; mesh default 2x4), "
                        f"default {','.join(DEFAULT)}")
    p.add_argument("--runs", type=int, default=1, help="cold/warm pairs per model (medians are shown)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per shard-opt process")
    p.add_argument("--json", help="also write the rows as JSON here")
    ns = p.parse_args(argv)
    rows = []
    for model, mesh in parse_cases(ns.models):
        print(f"bench_wall: {model} {mesh} ...", file=sys.stderr, flush=True)
        rows += bench(model, mesh, max(1, ns.runs), ns.timeout)
    print(f"shard-opt wall time, {os.cpu_count()} cores, SHARD_OPT_JOBS={os.environ.get('SHARD_OPT_JOBS', 'default')}, "
          f"seconds (phases: own time, without the phases inside them)\n")
    print(markdown(rows))
    print(targets(rows), end="")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
