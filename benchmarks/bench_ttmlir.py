"""shard-opt's plans held against tt-mlir itself: the collectives per stage, the TTNN ops.

    python benchmarks/bench_ttmlir.py                    # the zoo x {1x8, 2x4} and the examples (~15 min)
    python benchmarks/bench_ttmlir.py --quick            # examples and 1-layer zoo models only
    python benchmarks/bench_ttmlir.py --cases llama-3-8b@2x4,mlp@1x8 --markdown
    python benchmarks/bench_ttmlir.py --cases benchmarks/families/falcon_7b.py:2@1x8 --cold

Each case is one ``shard-opt INPUT --mesh MESH --plan-json TMP --check`` process with
``SHARD_OPT_TIMINGS`` (the ``check`` phase is its wall seconds). The table shows, per
plan: the collectives the plan prices (by kind; a multi-axis all_gather counts once per
axis, as TTIR writes it), what tt-mlir's TTIR and TTNN run per step (TTNN: collectives,
``p2p`` = point_to_point ops of an all_to_all, ``+N@load`` = collectives hoisted into
const-eval functions), whether they match (``checks.tt_mlir.matches``: TTIR and TTNN held
against the plan by ``verify_ir``), TTNN device ops per step against the compute ops the
plan prices, the modeled and the checked cost, whether the check changed the
recommendation, the check's verdict (``checks.tt_mlir.verdict``: compiled in which form,
tt-mlir numerics passed / FAILED / not run, and on what), the plan recommended, and the
check's own seconds. A run that finds nothing deliverable (exit 4) is a row like the others.
``--cold`` gives each case a fresh cache directory (no lowering, compile or numerics kept
from an earlier run: the check's cost as a first run pays it). A case is a zoo name or a
load script path (``PATH.py[:LAYERS]@MESH``). Every difference the check found is listed
under the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = {"mlp": os.path.join(ROOT, "examples", "mlp.mlir"),
            "transformer-block": os.path.join(ROOT, "examples", "transformer_block.mlir"),
            "llama-load": os.path.join(ROOT, "examples", "llama_load.py")}
QUICK = ["mlp@1x8", "mlp@2x4", "transformer-block@2x4", "llama-3-8b:1@1x8", "llama-3-8b:1@2x4",
         "llama-3-8b:1@2x4:decode", "gpt2-xl:1@2x4", "llama-3.2-1b:1@1x8", "llama-3.2-1b:1@2x4"]
FULL = QUICK + ["llama-load@2x4", "llama-3-8b@1x8", "llama-3-8b@2x4", "qwen2.5-7b:1@2x4", "bert-large:1@1x8",
                "vit-large:1@2x4", "mixtral-8x7b:1@2x4", "llama-3-70b:1@8x4"]


def parse_case(case: str):
    """``NAME[:LAYERS]@MESH[:PHASE]`` -> (label, argv)."""
    name, _, rest = case.partition("@")
    mesh, _, phase = rest.partition(":")
    name, _, layers = name.partition(":")
    src = EXAMPLES.get(name, os.path.abspath(name) if name.endswith(".py") else f"zoo:{name}")
    argv = [src, "--mesh", mesh]
    if layers:
        argv += ["--layers", layers]
    if phase:
        argv += ["--phase", phase]
    return case, argv


def priced_counts(plan: dict) -> dict:
    out: dict[str, int] = {}
    for c in plan["collectives"]:
        if c["kind"] == "all_slice":
            continue
        n = len(c["axes"]) if c["kind"] == "all_gather" else 1
        out[c["kind"]] = out.get(c["kind"], 0) + n
    return out


def short(counts: dict, load: dict | None = None) -> str:
    abbrev = {"all_gather": "AG", "all_reduce": "AR", "reduce_scatter": "RS", "all_to_all": "A2A",
              "point_to_point": "p2p", "all_slice": "slice", "collective_permute": "CP"}
    parts = [f"{n} {abbrev.get(k, k)}" for k, n in sorted(counts.items()) if k != "all_slice"]
    if load:
        parts.append("+" + "/".join(f"{n} {abbrev.get(k, k)}" for k, n in sorted(load.items())) + "@load")
    return " + ".join(parts) or "-"


def run(case: str, timeout: float, cold: bool = False) -> dict:
    label, argv = parse_case(case)
    with tempfile.TemporaryDirectory() as d:
        plan_path, times_path = os.path.join(d, "plan.json"), os.path.join(d, "t.json")
        env = {**os.environ, "SHARD_OPT_TIMINGS": times_path, "SHARD_OPT_CHECK": "1"}
        if cold:
            env["SHARD_OPT_CACHE"] = os.path.join(d, "cache")
            env.setdefault("SHARD_OPT_TT_DIR", os.path.join(tempfile.gettempdir(), "shard-opt-tt-mlir"))  # assets kept
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "shard_opt.cli", *argv, "--plan-json", plan_path, "-o", os.devnull,
                            "--quiet"], env=env, capture_output=True, text=True, timeout=timeout)
        wall = time.monotonic() - t0
        if p.returncode not in (0, 4):  # 4: nothing deliverable, every output written and marked
            return {"case": label, "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
        with open(plan_path) as f:
            plan = json.load(f)
        with open(times_path) as f:
            times = json.load(f)
    chk = plan["checks"]["tt_mlir"]
    return {"case": label, "plan": plan, "check": chk, "wall": wall, "check_s": times.get("check"),
            "exit": p.returncode}


def verdict(chk: dict) -> str:
    """The verdict in a cell: the form, then the numerics (and where they ran)."""
    v = chk.get("verdict") or {}
    if not v.get("checked", True):
        return "not checked"
    if not v.get("compiled"):
        return "**not compiled**"
    form = {"on": "composites", "off": "**composites off**", "none": "compiled"}.get(v.get("composites"), "compiled")
    n = v.get("numerics", "?")
    n = {"failed": "**numerics FAILED**", "passed": "numerics passed", "not run": "numerics not run"}.get(n, n)
    on = v.get("numerics_on", "the whole model")
    return f"{form}; {n}" + (f" ({on})" if on != "the whole model" else "")


def table(rows: list[dict]) -> str:
    head = ("| case | plan prices | TTIR per step | TTNN per step | match | TTNN ops / priced | modeled us | "
            "checked us | moved | verdict | recommended | check s |")
    out = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | error: {r['error']} | | | | | | | | | | |")
            continue
        plan, chk = r["plan"], r["check"]
        if not chk["compiled"]:
            out.append(f"| {r['case']} | {short(priced_counts(plan))} | not compiled | | no | | "
                       f"{plan['cost']['total_us']:.1f} | | | {verdict(chk)} | - | {r['check_s'] or 0:.1f} |")
            notes.append(f"- {r['case']}: {chk['error']}")
            continue
        st = chk["stages"]
        moved = "yes" if any("tt-mlir check:" in n for n in plan.get("notes", [])) else "no"
        out.append(f"| {r['case']} | {short(priced_counts(plan))} | {short(st.get('ttir', {}))} | "
                   f"{short(st.get('ttnn', {}), chk['collectives_at_load'].get('ttnn'))} | "
                   f"{'yes' if chk['matches'] else '**no**'} | {chk['ttnn_ops_per_step']} / "
                   f"{chk.get('priced_device_ops')} | {plan['cost']['total_us']:.1f} | {chk.get('checked_us', 0):.1f} | "
                   f"{moved} | {verdict(chk)} | {chk.get('recommended') or '**none (exit 4)**'} | "
                   f"{r['check_s'] or 0:.1f} |")
        for d in chk["differences"]:
            notes.append(f"- {r['case']}: {d}")
    return "\n".join(out + ([""] + ["Differences:"] + notes if notes else []))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cases", help="comma list of NAME[:LAYERS]@MESH[:PHASE]")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--cold", action="store_true", help="a fresh cache per case (the check's first-run cost)")
    args = ap.parse_args(argv)
    cases = args.cases.split(",") if args.cases else QUICK if args.quick else FULL
    rows = []
    for case in cases:
        sys.stderr.write(f"bench_ttmlir: {case} ...\n")
        try:
            rows.append(run(case, args.timeout, args.cold))
        except subprocess.TimeoutExpired:
            rows.append({"case": case, "error": f"timed out after {args.timeout:.0f} s"})
        sys.stderr.write(table(rows[-1:]).splitlines()[2] + "\n")  # the row, as soon as it is known
    print(table(rows))
    ok = [r for r in rows if "check" in r]
    print(f"\n{sum(1 for r in ok if r['check']['matches'])} of {len(rows)} plans match tt-mlir "
          f"({sum(1 for r in ok if r['check']['compiled'])} compiled); "
          f"{sum(1 for r in ok if (r['check'].get('verdict') or {}).get('deliverable'))} deliverable, "
          f"{sum(1 for r in ok if (r['check'].get('verdict') or {}).get('numerics') == 'passed')} with numerics "
          f"passed, {sum(1 for r in ok if r.get('exit') == 4)} with nothing deliverable (exit 4)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "plan"} for r in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
