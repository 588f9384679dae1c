"""Frontend benchmark: lower each zoo model at full size (no weights); time and peak RSS.

    python benchmarks/bench_frontends.py                      # every zoo model
    python benchmarks/bench_frontends.py llama-3-8b llama-3-70b
    python benchmarks/bench_frontends.py --phase decode --seq-len 2048 llama-3-8b

Each model runs in its own process so its peak RSS (``ru_maxrss``) is its own; the
``imports`` row is a process that only imports torch, torch-mlir, jax and transformers,
the floor under every other row. Columns: seconds in torch.export (``export``), in
torch-mlir (``lower``), wall time of ``shard_opt.frontends.load`` end to end
(``total``: model build, export, lowering, argument annotation, architecture map), peak
RSS, ``@main`` argument count, module text size, parameters and FLOPs per forward.
Target: peak RSS under 3 GB for every model (references/toolchain.md measured
Llama-3-70B at 656 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def run_one(name: str, phase: str, seq_len: int, batch: int, layers: int | None) -> dict:
    if name == "imports":
        import jax  # noqa: F401
        import torch  # noqa: F401
        import torch_mlir.fx  # noqa: F401
        import transformers  # noqa: F401

        return {"model": "imports", "rss_mb": _rss_mb()}
    from shard_opt.frontends import load

    t0 = time.perf_counter()
    lm = load(f"zoo:{name}", phase=phase, seq_len=seq_len, batch=batch, layers=layers)
    total = time.perf_counter() - t0
    return {
        "model": name, "phase": phase, "export_s": lm.meta["export_seconds"], "lower_s": lm.meta["lower_seconds"],
        "total_s": round(total, 2), "rss_mb": round(_rss_mb()), "args": len(lm.arguments),
        "text_mb": round(len(lm.text) / 1e6, 2), "params": lm.meta["param_count"], "flops": lm.meta.get("flops"),
        "layers": lm.num_layers,
    }


def _fmt(n) -> str:
    if n is None:
        return "-"
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def main(argv=None) -> int:
    from shard_opt.frontends.zoo import list_models

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="zoo names (default: all)")
    ap.add_argument("--phase", default="prefill", choices=("prefill", "decode"))
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print("BENCH " + json.dumps(run_one(args.one, args.phase, args.seq_len, args.batch, args.layers)))
        return 0
    names = ["imports"] + (args.models or list_models())
    rows = []
    for name in names:
        cmd = [sys.executable, os.path.abspath(__file__), "--one", name, "--phase", args.phase,
               "--seq-len", str(args.seq_len), "--batch", str(args.batch)]
        if args.layers:
            cmd += ["--layers", str(args.layers)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        line = next((ln for ln in res.stdout.splitlines() if ln.startswith("BENCH ")), None)
        if res.returncode != 0 or line is None:
            err = (res.stderr.strip().splitlines() or ["?"])[-1]
            rows.append({"model": name, "error": err})
            print(f"{name}: FAILED: {err}", file=sys.stderr)
            continue
        rows.append(json.loads(line[6:]))
        print(f"{name}: done", file=sys.stderr)
    hdr = f"{'model':<18}{'phase':<9}{'export s':>9}{'lower s':>9}{'total s':>9}{'peak RSS MB':>13}" \
          f"{'args':>7}{'text MB':>9}{'params':>10}{'FLOPs':>10}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<18}FAILED: {r['error']}")
        elif r["model"] == "imports":
            print(f"{'(imports only)':<18}{'':<9}{'':>9}{'':>9}{'':>9}{r['rss_mb']:>13.0f}")
        else:
            print(f"{r['model']:<18}{r['phase']:<9}{r['export_s']:>9.1f}{r['lower_s']:>9.1f}{r['total_s']:>9.1f}"
                  f"{r['rss_mb']:>13}{r['args']:>7}{r['text_mb']:>9.2f}{_fmt(r['params']):>10}{_fmt(r['flops']):>10}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    over = [r["model"] for r in rows if r.get("rss_mb", 0) > 3072]
    if over:
        print(f"over the 3 GB RSS target: {', '.join(over)}", file=sys.stderr)
    return 1 if over or any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
