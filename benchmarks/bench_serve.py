"""``--serve`` on full-size models: what it chooses, what it beat, how long it takes, and
its TTFT / TPOT against what Tenstorrent published.

    python benchmarks/bench_serve.py                 # every case, each run twice (cold, then warm)
    python benchmarks/bench_serve.py --cases 70b-32-short --check   # one case, with the tt-mlir check
    python benchmarks/bench_serve.py --json out.json

Each case runs ``shard-opt MODEL --devices N --serve PROFILE --plan-json ...`` in a child
process and reads its ``serving`` record. A case runs twice: the first run may lower the
models and evaluate candidates for the first time (the lowering cache and ``facts/`` in
``~/.cache/shard-opt``), the second starts from them; both wall times are reported, with
the machine's load average. Every TTFT / TPOT is modeled device time (no host or
scheduler time); the published rows are end-to-end tt-metal (hand-tuned kernels,
bfp4 MLP / bfp8 attention weights) or tt-xla measurements, so they are validation rows:
none of them was used to set a constant of ``--serve``. The only constants ``--serve``
adds, the ``ttnn.topk`` fits (``costmodel/serving.py``), are calibration rows of their own,
checked at the end (``topk_rows``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHORT = "isl=128,osl=128,users=32"  # short context, many users (the published batch-32 rows' ISL)
LONG = "isl=7936,osl=256,users=1"  # long context, one user: 8192 tokens, Llama-3's max_position_embeddings
ONE = "isl=128,osl=128,users=1"  # one user at the published batch-1 rows' ISL
TUNED = ["--cost-model", "tenstorrent-tuned", "--weight-dtype", "bfp8,mlp=bfp4,cache=bfp8"]

# name -> (model, devices, profile, extra flags). 70B on 8 chips in tt-metal's performance
# mode (bfp8 weights, bfp4 MLP: PERF.md, the format its published T3K rows ran): in bf16 it
# does not fit 8 Wormhole chips at all (tt-xla PR 5073: bfp_bf8 "required to fit"), and in
# bfp8 alone 32 users of 256 tokens do not fit beside the weights (11.3 GiB per chip on 2x4).
CASES = {
    "8b-8-short": ("zoo:llama-3-8b", 8, SHORT, []),
    "8b-8-long": ("zoo:llama-3-8b", 8, LONG, []),
    "8b-32-short": ("zoo:llama-3-8b", 32, SHORT, []),
    "8b-32-long": ("zoo:llama-3-8b", 32, LONG, []),
    "70b-8-short": ("zoo:llama-3-70b", 8, SHORT, ["--weight-dtype", "bfp8,mlp=bfp4"]),
    "70b-8-long": ("zoo:llama-3-70b", 8, LONG, ["--weight-dtype", "bfp8,mlp=bfp4"]),
    "70b-32-short": ("zoo:llama-3-70b", 32, SHORT, []),
    "70b-32-long": ("zoo:llama-3-70b", 32, LONG, []),
    "mixtral-32-short": ("zoo:mixtral-8x7b", 32, SHORT, []),
    "mixtral-32-long": ("zoo:mixtral-8x7b", 32, LONG, []),
    # tt-metal's path (the tuned profile, bfp8 weights with bfp4 MLP and a bfp8 KV cache, as
    # PERF.md's rows ran): the same deployments priced as the published rows were measured
    "8b-8-one-tuned": ("zoo:llama-3-8b", 8, ONE, TUNED),
    "8b-8-short-tuned": ("zoo:llama-3-8b", 8, SHORT, TUNED),
    "8b-32-one-tuned": ("zoo:llama-3-8b", 32, ONE, TUNED),
    "70b-8-one-tuned": ("zoo:llama-3-70b", 8, ONE, TUNED),
    "70b-8-short-tuned": ("zoo:llama-3-70b", 8, SHORT, TUNED),
    "70b-32-one-tuned": ("zoo:llama-3-70b", 32, ONE, TUNED),
    "70b-32-short-tuned": ("zoo:llama-3-70b", 32, SHORT, TUNED),
}

# Published figures (references/measurements.md), validation only. t/s/u and TTFT ms,
# end-to-end, input 128 tokens: (model, devices, profile) -> rows; the batch-32 rows beside
# the SHORT profile (32 users, ISL 128), the batch-1 rows beside ONE (1 user, ISL 128).
PUBLISHED = {
    ("zoo:llama-3-8b", 8, SHORT): [("tt-metal PERF.md T3K, Llama3.1-8B, batch 32 (bfp4 FF1+FF3)", 45.6, 64)],
    ("zoo:llama-3-8b", 8, ONE): [("tt-metal PERF.md T3K, Llama3.1-8B, batch 1", 64.3, 53),
                                 ("tt-xla PR 5073, Llama-3.1-8B vLLM TP on 8 WH chips", 16.0, 111.5)],
    ("zoo:llama-3-8b", 32, ONE): [("tt-metal PERF.md TG, Llama3.1-8B, batch 1", 29.5, None)],
    ("zoo:llama-3-70b", 8, SHORT): [("tt-metal PERF.md T3K, Llama3.1-70B, batch 32", 14.8, 192)],
    ("zoo:llama-3-70b", 8, ONE): [("tt-metal PERF.md T3K, Llama3.1-70B, batch 1", 16.6, 164)],
    ("zoo:llama-3-70b", 32, ONE): [("tt-metal PERF.md TG, Llama3.1-70B, batch 1 (generic tt_transformers)", 12.7, None)],
    ("zoo:llama-3-70b", 32, SHORT): [("tt-metal llama3_70b_galaxy PERF.md, Llama-3.3-70B, batch 32 (Galaxy demo)",
                                      71.38, None)],
}


CPU: list[float] = []  # CPU seconds of each run's process and its workers (the machine is shared: wall varies)


def run(model: str, devices: int, profile: str, extra: list, check: bool) -> tuple[float, dict, str]:
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, "-m", "shard_opt.cli", model, "--devices", str(devices), "--serve", profile,
           "--plan-json", path, "-o", os.devnull, "--quiet"] + extra + (["--check"] if check else ["--no-check"])
    t0, ru0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 1))
    try:
        if proc.returncode:
            return wall, {}, (proc.stderr.strip().splitlines() or ["?"])[-1]
        with open(path) as f:
            return wall, json.load(f), ""
    finally:
        os.unlink(path)


def summary(name: str, model: str, devices: int, profile: str, plan: dict, walls: list, check: bool) -> dict:
    r = plan["serving"]
    key = r["objective"]
    tried = [c for c in r["configurations"] if not c.get("refused") and not c.get("chosen")]
    tried.sort(key=lambda c: -(c.get(key) or 0))
    phases = {p["phase"]: p for p in plan["pipeline"]}
    return {
        "case": name, "model": model, "devices": devices, "profile": profile, "check": check,
        "walls_s": [round(w, 1) for w in walls], "cpu_s": CPU[-len(walls):], "load": round(os.getloadavg()[0], 1),
        "mode": r["mode"], "replicas": r["replicas"], "replica_mesh": r["replica_mesh"],
        "prefill_mesh": r["prefill"]["mesh"], "decode_mesh": r["decode"]["mesh"],
        "users": r["users"], "max_users": r["max_users"], "ttft_ms": r["ttft_ms"], "tpot_ms": r["tpot_ms"],
        "tpot_interleave_ms": r["decode"]["prefill_interleave_ms"],
        # each phase alone, as tt-metal's PERF.md reports them: one prompt's TTFT, 1 / decode step
        "ttft_one_ms": r["prefill"]["ttft_ms"], "decode_tpot_ms": r["decode"]["tpot_ms"],
        "decode_tokens_per_s_per_user": round(1000 / r["decode"]["tpot_ms"], 2),
        "tokens_per_s_per_user": r["tokens_per_s_per_user"], "tokens_per_s": r["tokens_per_s"],
        "tail": r["decode"]["tail"]["chosen"],
        "tt_mlir": {k: (r[k].get("tt_mlir") or {}).get("words") for k in ("prefill", "decode")},
        "priced": {k: p["cost"].get("checked_us") is not None and "checked" or "whole model" for k, p in phases.items()},
        "strategies": {k: p["strategy"] for k, p in phases.items()},
        "beat": [{"config": f"{c['mode']} {c['replicas']}x {c['replica_mesh']}"
                  + (f" ({c['prefill_mesh']}|{c['decode_mesh']})" if c["mode"] == "disaggregated" else ""),
                  "value": c.get(key), "chosen_over_it": round(1 / c["vs_chosen"], 3) if c.get("vs_chosen") else None}
                 for c in tried[:4]],
        "refused": sum(1 for c in r["configurations"] if c.get("refused")),
        "refused_why": [f"{c['mode']} {c['replicas']}x {c['replica_mesh']}: {c['refused']}"
                        for c in r["configurations"] if c.get("refused")],
        "configurations": len(r["configurations"]), "seconds": r.get("seconds"),
        "published": PUBLISHED.get((model, devices, profile), []),
    }


def topk_rows() -> list[tuple[str, str, float, float]]:
    """The ttnn.topk fits against the points they were fitted to (calibration) and one they
    were not (validation): (use, row, modeled us, measured us)."""
    from shard_opt.costmodel.serving import topk_us

    return [
        ("calibration", "tt-metal issue 53108: 8 x 16384 multi-core, BH, batch 32",
         8 * topk_us("blackhole", 16384, 32, chunked=False), 1135.0),
        ("calibration", "tt-metal issue 53108: 4 x 32768 multi-core, BH, batch 32",
         4 * topk_us("blackhole", 32768, 32, chunked=False), 766.0),
        ("calibration", "tt-metal issue 53108: 2 x 64128 single-core, BH, batch 32",
         2 * topk_us("blackhole", 64128, 32, chunked=False), 20385.0),
        ("calibration", "tt-metal PR 38509: 25152 single-core, WH Galaxy, batch 32",
         topk_us("wormhole", 25152, 32, chunked=False), 14000.0),
        ("calibration", "tt-metal PR 38509: 32768 multi-core sampling step, WH Galaxy, batch 32",
         topk_us("wormhole", 32768, 32, chunked=False), 400.0),
        ("validation", "tt-metal issue 44953: 65536 (single-core), BH 1x4, batch 32",
         topk_us("blackhole", 65536, 32, chunked=False), 10100.0),
        ("validation", "tt-metal issue 53108: 2 x 75968 single-core (Qwen3 vocab), BH, batch 32",
         2 * topk_us("blackhole", 75968, 32, chunked=False), 25216.0),
        ("validation", "tt-metal issue 53108: 4 x 32064 unpadded (single-core), BH, batch 32",
         4 * topk_us("blackhole", 32064, 32, chunked=False), 20392.0),
    ]


def _f(x, nd=2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def markdown(rows: list[dict], topk: list, head: str = "") -> str:
    """The results.md section: what each case chose and what it beat, each phase alone against
    the published rows (validation only), and the ttnn.topk fits (calibration and
    validation apart)."""
    ok = [r for r in rows if not r.get("error")]
    out = [head, "", "### What `--serve` chose, and what it beat", "",
           "TTFT / TPOT / t/s/u / t/s under load (the steady state of the profile's users, "
           "docs/costmodel.md 5a); modeled device time. `beat`: the best configurations it was chosen over, "
           "screened, with the chosen one's objective over theirs. `wall`: the whole run, measured.", "",
           "| case | profile | weights / cost model | chosen | users (fit) | TTFT ms | TPOT ms | t/s/u | t/s | "
           "beat (chosen / it) | refused | wall s (load) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            out.append(f"| {r['case']} | | | error: {r['error']} | | | | | | | | {r['walls_s']} |")
            continue
        model, devices, profile, extra = CASES[r["case"]]
        where = (f"{r['mode']} {r['replicas']}x {r['replica_mesh']}" + (
            f" ({r['prefill_mesh']} \\| {r['decode_mesh']})" if r["mode"] == "disaggregated" else ""))
        beat = "; ".join(f"{b['config'].replace('|', ' / ')} {_f(b['chosen_over_it'], 3)}x" for b in r["beat"][:3])
        flags = " ".join(extra) or "bf16, tenstorrent"
        out.append(f"| {r['case']} | {profile} | {flags} | {where} | {r['users']} ({r['max_users']}) | "
                   f"{_f(r['ttft_ms'], 1)} | {_f(r['tpot_ms'])} | {_f(r['tokens_per_s_per_user'])} | "
                   f"{_f(r['tokens_per_s'], 1)} | {beat or '-'} | {r['refused']} of {r['configurations']} | "
                   f"{'/'.join(str(w) for w in r['walls_s'])} ({r['load']}) |")
    timed = [r for r in ok if r["devices"] == 32]
    if timed:
        out += ["", "### The whole `--serve` run on 32 chips: wall and CPU seconds", "",
                "Each run is the command line's whole process (lowering from the cache, screening every "
                "configuration, planning the chosen one, writing the plan JSON); runs after the first start from "
                "the lowering and facts caches. The machine (2 cores) is shared: `load` is its 1-minute load "
                "average, and the CPU seconds (the process and its workers) are what the run itself took.", "",
                "| case | check | wall s per run | CPU s per run | load | screened configurations | screening s | "
                "chosen s |", "|---|---|---|---|---|---|---|---|"]
        for r in timed:
            sec = r.get("seconds") or {}
            out.append(f"| {r['case']} | {'tt-mlir' if r['check'] else 'off'} | "
                       f"{' / '.join(str(w) for w in r['walls_s'])} | "
                       f"{' / '.join(str(c) for c in r.get('cpu_s') or []) or '-'} | {r['load']} | "
                       f"{r['configurations'] - r['refused']} ({sec.get('screens', '-')} phase screens) | "
                       f"{sec.get('screening', '-')} | {sec.get('chosen', '-')} |")
        checked = [r for r in timed if r["check"]]
        for r in checked:
            out.append("")
            out += [f"- {r['case']}, tt-mlir verdict: {k}: {w}" for k, w in (r.get("tt_mlir") or {}).items()]
    out += ["", "### Each phase alone against the published figures (validation rows)", "",
            "tt-metal's PERF.md reports one prompt's TTFT and 1 / decode step as t/s/u; the record's "
            "`prefill.ttft_ms` and `decode.tpot_ms` are those (the phases alone, not under load). The published "
            "rows are end-to-end (host included) and hand-tuned kernels (bfp4 MLP, bfp8 attention); none of them "
            "set a constant of `--serve` (validation only). `ratio` = modeled / published.", "",
            "| case | modeled TTFT ms (one prompt) | modeled t/s/u (decode step) | published | published t/s/u | "
            "t/s/u ratio | published TTFT ms | TTFT ratio |", "|---|---|---|---|---|---|---|---|"]
    for r in ok:
        for title, tsu, ttft in r["published"]:
            out.append(f"| {r['case']} | {_f(r['ttft_one_ms'], 1)} | {_f(r['decode_tokens_per_s_per_user'])} | "
                       f"{title} | {tsu} | {_f(r['decode_tokens_per_s_per_user'] / tsu)} | {ttft if ttft else '-'} | "
                       f"{_f(r['ttft_one_ms'] / ttft) if ttft else '-'} |")
    out += ["", "### ttnn.topk fits (`costmodel/serving.py`), calibration and validation apart", "",
            "| use | row | modeled us | measured us | ratio |", "|---|---|---|---|---|"]
    for use in ("calibration", "validation"):
        out += [f"| {u} | {what} | {m:.0f} | {meas:.0f} | {m / meas:.2f} |" for u, what, m, meas in topk if u == use]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma list of " + ", ".join(CASES))
    ap.add_argument("--check", action="store_true", help="with the tt-mlir check of the chosen phases")
    ap.add_argument("--runs", type=int, default=2, help="runs per case (the first may be cold)")
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--keep", metavar="DIR", help="keep each case's plan JSON there (DIR/CASE.json)")
    ap.add_argument("--markdown", metavar="FILE", help="write the results.md section there")
    ap.add_argument("--rows", metavar="JSON", help="render --markdown from a --json of an earlier run (no runs)")
    ns = ap.parse_args(argv)
    if ns.rows:
        with open(ns.rows) as f:
            saved = json.load(f)
        with open(ns.markdown or "/dev/stdout", "w") as f:
            f.write(markdown(saved["rows"], saved["topk"]))
        return 0
    rows = []
    for name in ns.cases.split(","):
        model, devices, profile, extra = CASES[name]
        walls, plan, err = [], {}, ""
        for _ in range(ns.runs):
            wall, plan, err = run(model, devices, profile, extra, ns.check)
            walls.append(wall)
            if err:
                break
        if err:
            rows.append({"case": name, "error": err, "walls_s": [round(w, 1) for w in walls]})
            print(f"{name}: error: {err}", flush=True)
            continue
        if ns.keep:
            os.makedirs(ns.keep, exist_ok=True)
            with open(os.path.join(ns.keep, f"{name}.json"), "w") as f:
                json.dump(plan, f, indent=1)
        row = summary(name, model, devices, profile, plan, walls, ns.check)
        rows.append(row)
        print(f"{name}: {row['mode']} {row['replicas']}x {row['replica_mesh']} "
              f"(prefill {row['prefill_mesh']}, decode {row['decode_mesh']}); TTFT {row['ttft_ms']:.1f} ms, "
              f"TPOT {row['tpot_ms']:.2f} ms, {row['tokens_per_s_per_user']:.2f} t/s/u, {row['tokens_per_s']:.1f} t/s; "
              f"walls {row['walls_s']} s (load {row['load']})", flush=True)
        for b in row["beat"]:
            print(f"    beat {b['config']}: {b['value']} ({b['chosen_over_it']}x)", flush=True)
        print(f"    phases alone: TTFT {row['ttft_one_ms']:.1f} ms (one prompt), decode step {row['decode_tpot_ms']:.2f} ms "
              f"({row['decode_tokens_per_s_per_user']} t/s/u); tail {row['tail']}", flush=True)
        for title, tsu, ttft in row["published"]:
            print(f"    published (validation) {title}: {tsu} t/s/u, TTFT {ttft} ms", flush=True)
    print("\nttnn.topk fits (costmodel/serving.py):")
    for use, what, modeled, measured in topk_rows():
        print(f"  {use:11s} {what}: modeled {modeled:.0f} us, measured {measured:.0f} us ({modeled / measured:.2f}x)")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump({"rows": rows, "topk": topk_rows()}, f, indent=1)
    if ns.markdown:
        with open(ns.markdown, "w") as f:
            f.write(markdown(rows, topk_rows()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
