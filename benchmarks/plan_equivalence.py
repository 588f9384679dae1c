"""Is a refactor's plan JSON the same? The same cases planned by two checkouts, diffed field by field.

    python benchmarks/plan_equivalence.py --before /work/main/.venv/bin/python
    python benchmarks/plan_equivalence.py --before OLD_PY --after NEW_PY --cases mlp@1x8,tied_llama@2x4

Each case runs ``python -m shard_opt.cli ... --plan-json`` under each interpreter (each
imports its own checkout's shard_opt) with the tt-mlir check off (``SHARD_OPT_CHECK=0``).
The two plan JSONs are compared as values, key by key, ignoring what is allowed to differ:
wall-clock timings (``search.seconds``, ``check_seconds``) and the keys in ``--added``
(default ``schema_version``, which the typed plan adds). Every other difference is printed
as a path with both values; the exit status is 1 when any case differs or fails.
``--keep DIR`` writes both JSONs of each case there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tests", "fixtures", "scripts")
MLP = os.path.join(ROOT, "examples", "mlp.mlir")
BLOCK = os.path.join(ROOT, "examples", "transformer_block.mlir")

# label -> argv (before --plan-json); small and fast, with the code paths that build the plan
# differently: an .mlir, load scripts (a guard, fused weights, GQA heads), a zoo model scored
# from short copies, a pipeline, --devices (the mesh choice), --evaluate, and a --serve
# deployment (replicas of one chip: 1x1 meshes).
CASES = {
    "mlp@1x8": [MLP, "--mesh", "1x8"],
    "mlp@2x4": [MLP, "--mesh", "2x4"],
    "block@2x4": [BLOCK, "--mesh", "2x4"],
    "tied_llama@1x8": [os.path.join(SCRIPTS, "tied_llama.py"), "--mesh", "1x8"],
    "phi3_fused@1x8": [os.path.join(SCRIPTS, "phi3_fused.py"), "--mesh", "1x8"],
    "qwen35_attention@1x8": [os.path.join(SCRIPTS, "qwen35_attention.py"), "--mesh", "1x8"],
    "llama-3-8b:1@2x4": ["zoo:llama-3-8b", "--layers", "1", "--mesh", "2x4"],
    "mlp@devices8": [MLP, "--devices", "8"],
    "pipeline@2x4": [MLP, BLOCK, "--mesh", "2x4"],
    "serve@n300": [os.path.join(ROOT, "examples", "llama_load.py"), "--devices", "2", "--system", "n300",
                   "--serve", "isl=32,osl=16,users=2"],
}
TIMING = {"seconds", "check_seconds"}

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_plans import plan_of  # noqa: E402  (one checkout's plan JSON of one case)


def diff(a, b, path: str = "", added: frozenset = frozenset()) -> list[str]:
    """The paths where ``a`` and ``b`` differ (timings and ``added`` top-level keys ignored)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            if k in TIMING or (k in added and (path == "" or path.endswith("]"))):
                continue
            if k not in a:
                out.append(f"{path}.{k}: only after ({json.dumps(b[k])[:120]})")
            elif k not in b:
                out.append(f"{path}.{k}: only before ({json.dumps(a[k])[:120]})")
            else:
                out += diff(a[k], b[k], f"{path}.{k}", added)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items before, {len(b)} after"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]", added)]
    return [] if a == b else [f"{path}: {json.dumps(a)[:120]} -> {json.dumps(b)[:120]}"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="python of the checkout before the change")
    ap.add_argument("--after", default=sys.executable, help="python of the checkout after (default: this one)")
    ap.add_argument("--cases", help=f"comma list of {', '.join(CASES)} (default: all)")
    ap.add_argument("--added", default="schema_version", help="comma list of top-level keys only after may have")
    ap.add_argument("--keep", metavar="DIR", help="write each case's before/after plan JSON here")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args(argv)
    cases = args.cases.split(",") if args.cases else list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    added = frozenset(k for k in args.added.split(",") if k)
    bad = 0
    for case in cases:
        a, b = plan_of(args.before, CASES[case], args.timeout), plan_of(args.after, CASES[case], args.timeout)
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for tag, p in (("before", a), ("after", b)):
                with open(os.path.join(args.keep, f"{case}.{tag}.json"), "w") as f:
                    json.dump(p, f, indent=1)
        if isinstance(a, str) or isinstance(b, str):
            bad += 1
            print(f"{case}: FAILED (before: {a if isinstance(a, str) else 'ok'}; after: {b if isinstance(b, str) else 'ok'})")
            continue
        missing = [k for k in added if k not in b and "pipeline" not in b]
        d = diff(a, b, added=added) + [f".{k}: missing after" for k in missing]
        bad += bool(d)
        print(f"{case}: {'same' if not d else f'{len(d)} difference(s)'}", flush=True)
        for line in d[:40]:
            print(f"    {line}")
    print(f"\n{len(cases) - bad} of {len(cases)} plans the same (timings and {', '.join(sorted(added)) or 'nothing'} aside)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
