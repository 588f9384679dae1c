"""Plan quality and search speed, measured side by side in one run.

For each model, mesh and phase: search seconds, candidates evaluated, peak RSS, and the
plan's modeled time as a ratio to each baseline (replicated, megatron,
one-axis-heuristic, called autoshard-heuristic before 2026-12-02), to the ideal bound (single-chip time / devices, no collectives)
and, where the space is small, to the exhaustive optimum.

    python benchmarks/bench_search.py                      # the default matrix (slow: full-size models)
    python benchmarks/bench_search.py --models mlp,transformer-block --meshes 2x4
    python benchmarks/bench_search.py --models llama-3-8b --meshes 2x4 --phases decode
    python benchmarks/bench_search.py --models examples/llama_load.py --meshes 1x8

A model is a zoo name or a load-script / .mlir path. Each configuration runs in its own
process (``shard-opt ... --plan-json``) so its peak RSS is its own. Ratios < 1 mean the
plan is modeled faster than the baseline. Lowered zoo models are kept in
``SHARD_OPT_CACHE`` (default: a ``shard-opt-cache`` folder in the temp directory), so a
model is lowered once for all its meshes. Decode rows exist for causal LMs only.

The exhaustive optimum is computed for the models in ``--exhaustive-models`` (the small
ones: it enumerates every candidate) when their space has at most ``--exhaustive-limit``
candidates; for larger spaces of those models the /opt column shows, marked ``r``, the
ratio to the best of ``--restarts`` local searches from random plans instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

DEFAULT_MODELS = ["mlp", "transformer-block", "examples/llama_load.py", "llama-3.2-1b", "llama-3-8b",
                  "qwen2.5-7b", "gpt2-xl", "bert-large", "vit-large", "mixtral-8x7b", "wan-dit", "wan-vae",
                  "llama-3-70b", "wan-dit-14b"]
DEFAULT_MESHES = ["1x2", "2x4", "1x8", "8x4"]
SMALL_MODELS = ["mlp", "transformer-block", "examples/llama_load.py"]
HERE = os.path.dirname(os.path.abspath(__file__))


def spec_of(model: str) -> str:
    """A zoo name becomes ``zoo:NAME``; a path is taken relative to the repository."""
    if model.endswith((".py", ".mlir")):
        return model if os.path.isabs(model) else os.path.join(HERE, "..", model)
    return f"zoo:{model}"


def causal(model: str) -> bool:
    if model.endswith(".mlir"):
        return False
    if model.endswith(".py"):
        return True
    from shard_opt.frontends import zoo

    return zoo.get(model).causal_lm


def run_one(model: str, mesh: str, phase: str, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        plan_path = os.path.join(d, "plan.json")
        cmd = [sys.executable, "-m", "shard_opt.cli", spec_of(model), "--mesh", mesh, "--phase", phase,
               "--plan-json", plan_path, "--quiet", "-o", os.devnull, *extra]
        t0 = time.monotonic()
        rss_kb, code, err = run_measured(cmd)
        wall = time.monotonic() - t0
        if code != 0:
            return {"model": model, "mesh": mesh, "phase": phase, "error": err.strip().splitlines()[-1:]}
        with open(plan_path) as f:
            plan = json.load(f)
    return {"model": model, "mesh": mesh, "phase": phase, "plan": plan, "wall_s": wall,
            "peak_rss_mb": rss_kb / 1024}


def run_measured(cmd: list[str]) -> tuple[int, int, str]:
    """Run ``cmd``; return (its own peak RSS in KiB, exit code, stderr).

    The peak is the child's ``VmHWM`` read from /proc while it runs, not ``wait4``'s
    ``ru_maxrss``: Linux carries a parent's peak into a forked child's maxrss, so after
    this script has enumerated a space in-process every child would report the
    script's own peak. Worker processes the child starts are not included.
    """
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.1)
        err.seek(0)
        return peak, proc.returncode, err.read()


def exhaustive_optimum(model: str, mesh: str, phase: str, limit: int) -> float | None:
    """The brute-force optimum over the same space, when it has at most ``limit`` candidates."""
    from shard_opt import costmodel, frontends
    from shard_opt.candidates import PARALLELISM, make_groups
    from shard_opt.search import make_scorer, search
    from shard_opt.sharding import Mesh

    lowered = frontends.load(spec_of(model), phase=phase)
    m = Mesh.parse(mesh)
    groups = make_groups(lowered.arguments, [m], set(PARALLELISM))
    size = 1
    for g in groups:
        size *= len(g.options)
    if size > limit:
        return None
    system = costmodel.get_system(costmodel.default_system_for_mesh(m.shape))
    cm = costmodel.get_cost_model("tenstorrent")
    res = search(lowered, [m], system, cm, parallelism=set(PARALLELISM), groups=groups,
                 scorer=make_scorer(lowered, m, system, cm), exhaustive_limit=limit, exhaustive_ops=None)
    return res.score.total_us


def ratio(t: float, base) -> float:
    """plan / baseline; 0.0 when the baseline is unpriceable (the plan JSON writes an
    infinite time, a baseline that needs a collective_permute, as null)."""
    return 0.0 if base is None else t / base


def markdown(rows: list[dict]) -> str:
    out = ["| model | mesh | phase | search s | cands | RSS MB | plan us | /repl | /mega | /auto | /ideal | /opt | strategy |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['mesh']} | {r['phase']} | error: {' '.join(r['error'])} |" + " |" * 9)
            continue
        opt = (f"{r['vs_optimum']:.3f}" if r["vs_optimum"] else
               f"{r['vs_restarts']:.3f} (restarts)" if r.get("vs_restarts") else "-")
        out.append(f"| {r['model']} | {r['mesh']} | {r['phase']} | {r['search_s']:.2f} | {r['candidates']} | "
                   f"{r['peak_rss_mb']:.0f} | {r['plan_us']:.1f} | {r['vs_replicated']:.3f} | {r['vs_megatron']:.3f} | "
                   f"{r['vs_autoshard']:.3f} | {r['vs_ideal']:.2f} | {opt} | {r['strategy']} |")
    return "\n".join(out) + "\n"


def restarts_best(model: str, mesh: str, phase: str, n: int) -> float:
    """The best plan local search reaches from ``n`` random starting plans (seeded, so
    reproducible): evidence for spaces too large to enumerate. Argument groups only,
    like the exhaustive optimum."""
    import random

    from shard_opt import costmodel, frontends
    from shard_opt.candidates import PARALLELISM, make_groups
    from shard_opt.search import local_search_from, make_scorer
    from shard_opt.sharding import Mesh

    lowered = frontends.load(spec_of(model), phase=phase)
    m = Mesh.parse(mesh)
    groups = make_groups(lowered.arguments, [m], set(PARALLELISM))
    system = costmodel.get_system(costmodel.default_system_for_mesh(m.shape))
    scorer = make_scorer(lowered, m, system, costmodel.get_cost_model("tenstorrent"))
    rng = random.Random(f"{model}/{mesh}/{phase}")
    best = None
    for _ in range(n):
        start = tuple(rng.randrange(len(g.options)) for g in groups)
        _, s = local_search_from(start, groups, scorer)
        best = s.total_us if best is None else min(best, s.total_us)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--meshes", default=",".join(DEFAULT_MESHES))
    p.add_argument("--phases", default="prefill,decode")
    p.add_argument("--exhaustive-limit", type=int, default=20000,
                   help="compute the exhaustive optimum for spaces up to this many candidates")
    p.add_argument("--exhaustive-models", default=",".join(SMALL_MODELS),
                   help="models whose exhaustive optimum is computed (when the space is under the limit)")
    p.add_argument("--restarts", type=int, default=8,
                   help="for the --exhaustive-models whose space is too large to enumerate: the best of "
                        "local searches from this many random plans (column /rst)")
    p.add_argument("--json", help="also write the rows as JSON here")
    p.add_argument("--markdown", help="also write the table as Markdown here")
    ns = p.parse_args(argv)
    os.environ.setdefault("SHARD_OPT_CACHE", os.path.join(tempfile.gettempdir(), "shard-opt-cache"))
    exhaustive_models = set(ns.exhaustive_models.split(","))
    rows = []
    header = (f"{'model':22s} {'mesh':5s} {'phase':7s} {'search s':>8s} {'cands':>6s} {'RSS MB':>7s} "
              f"{'plan us':>10s} {'/repl':>6s} {'/mega':>6s} {'/auto':>6s} {'/ideal':>7s} {'/opt':>6s}  strategy")
    print(header)
    print("-" * len(header))
    for model in ns.models.split(","):
        for mesh in ns.meshes.split(","):
            for phase in ns.phases.split(","):
                if phase == "decode" and not causal(model):
                    continue
                r = run_one(model, mesh, phase, [])
                if "error" in r:
                    print(f"{model:22s} {mesh:5s} {phase:7s} ERROR {r['error']}")
                    rows.append(r)
                    continue
                plan = r["plan"]
                t = plan["cost"]["total_us"]
                b = plan["baselines"]
                n = 1
                for s in plan["mesh"]["shape"]:
                    n *= s
                ideal = b["replicated"]["compute_us"] / n
                opt = rst = None
                if model in exhaustive_models and plan["search"].get("space_size", 0) <= ns.exhaustive_limit:
                    opt = exhaustive_optimum(model, mesh, phase, ns.exhaustive_limit)
                elif model in exhaustive_models and ns.restarts:
                    rst = restarts_best(model, mesh, phase, ns.restarts)
                rr = {
                    "model": model, "mesh": mesh, "phase": phase, "search_s": plan["search"]["seconds"],
                    "candidates": plan["search"]["candidates_evaluated"], "peak_rss_mb": r["peak_rss_mb"],
                    "plan_us": t, "vs_replicated": ratio(t, b["replicated"]["total_us"]),
                    "vs_megatron": ratio(t, b["megatron"]["total_us"]),
                    "vs_autoshard": ratio(t, (b.get("one-axis-heuristic") or b["autoshard-heuristic"])["total_us"]),
                    "vs_ideal": t / ideal if ideal else None, "vs_optimum": (t / opt) if opt else None,
                    "vs_restarts": (t / rst) if rst else None,
                    "strategy": plan["strategy"], "wall_s": r["wall_s"],
                    "constraints": len(plan.get("constraints") or []),
                }
                rows.append(rr)
                rss = f"{rr['peak_rss_mb']:7.0f}" if rr["peak_rss_mb"] else "      ?"
                o = (f"{rr['vs_optimum']:6.3f}" if rr["vs_optimum"] else
                     f"{rr['vs_restarts']:5.3f}r" if rr["vs_restarts"] else "     -")
                print(f"{model:22s} {mesh:5s} {phase:7s} {rr['search_s']:8.2f} {rr['candidates']:6d} {rss} "
                      f"{t:10.1f} {rr['vs_replicated']:6.3f} {rr['vs_megatron']:6.3f} {rr['vs_autoshard']:6.3f} "
                      f"{rr['vs_ideal']:7.2f} {o}  {plan['strategy']}", flush=True)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(rows, f, indent=2)
    if ns.markdown:
        with open(ns.markdown, "w") as f:
            f.write(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
