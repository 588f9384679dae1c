"""shard-opt's plan against the shard specs Tenstorrent engineers wrote by hand.

Each row is one load script under ``benchmarks/experts/`` (a tt-forge-models-style
``ModelLoader`` whose ``load_shard_spec(model)`` carries an expert's spec, quoted from
tt-forge-models or tt-xla), on the mesh its ``get_mesh_config(N)`` names for N = 8 and
32 devices, in prefill and, for causal LMs, decode. The row runs

    python -m shard_opt.cli SCRIPT --mesh M [--phase decode] --plan-json TMP --quiet -o /dev/null

in its own process and reads two prices from the plan JSON, both from the same cost
model: the expert spec's (``baselines["loader-spec"]``: its weight spec and, where the
loader has ``load_activation_shard_spec``, its activation constraints -- the Wan DiT's
sequence parallelism, since 2026-12-02) and shard-opt's own plan's
(``cost``). Columns: modeled microseconds of each, plan / expert (< 1: shard-opt's plan
is modeled faster), and the collectives of one repeated layer of each
(``loader-spec.ccl_per_layer``, ``cost.ccl_per_layer``).

Two rows get the per-block CCL bill in the terms of the seed's pages:

* Wan DiT: a layer collective is "big" when its ``bytes_per_device`` is at least 1/8 of
  the largest layer collective's of the same plan, else "small" (the seed page bills a
  block at "5 big + 4 small" on 8x4 and "3 big + 4 small" on 1x4), listed by kind and
  axis; ``all_slice`` (no communication) is not counted.
* Wan VAE (no repeated layers in the seed's sense): the ``all_reduce`` collectives whose
  component lies in a residual block (``...resnets.N``), counted per block and
  classified big/small the same way, beside the seed page's "1 big + 1 small all_reduce
  per residual block".

Without the loader-spec feature a row says "no loader-spec baseline" in the expert
columns and still shows the plan; a failing row shows its error's first line. Where the
plan JSON has no ``cost.ccl_per_layer`` / ``layer_collectives`` yet, the plan's figures
are counted from its ``collectives`` of the first layer and marked ``*``.

    python benchmarks/bench_experts.py                              # every row, full size (slow)
    python benchmarks/bench_experts.py --rows 'llama31_8b*' --layers 2
    python benchmarks/bench_experts.py --rows 'wan_*/8/*,clip_text' --markdown

``--rows`` takes comma-separated patterns (shell wildcards) over row ids
``SCRIPT/DEVICES/PHASE`` (``llama31_8b/8/decode``); a pattern without ``/`` matches the
script name. ``--layers N`` keeps N repeated layers (quick runs; not passed to the VAE,
whose "repeated blocks" would be one up-block's resnets). ``--system NAME`` is passed to
every row (the default is the Wormhole system of the mesh's size; no preset has a 1x32
mesh, so the loaders' ``(1, 32)`` rows fail with shard-opt's error: a Galaxy 1x32 hangs its
all_reduce, tt-metal issue 43749). ``--weight-dtype bfp8`` prices every row, the
expert's spec too, in block-float weights (in bf16 Llama-70B and Mixtral fit on no
8-chip plan).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
EXPERTS = os.path.join(HERE, "experts")
NO_BASELINE = "no loader-spec baseline"
SEED_DIT = "seed page: 5 big + 4 small on 8x4, 3 big + 4 small on 1x4"
SEED_VAE = "seed page: 1 big + 1 small all_reduce per residual block"
BIG_FRACTION = 1 / 8


@dataclass(frozen=True)
class Script:
    """One expert load script and how to run it.

    Attributes:
      name: the file's stem under benchmarks/experts/.
      causal_lm: also run ``--phase decode``.
      seq_len: ``--seq-len`` for Hugging Face causal LMs (shard-opt resizes their token
        inputs to it), the loader's ``max_length``; None for the others.
      bill: "dit", "vae" or None: which per-block CCL bill to print.
      repeated: whether ``--layers`` applies.
    """

    name: str
    causal_lm: bool = False
    seq_len: int | None = None
    bill: str | None = None
    repeated: bool = True


SCRIPTS = [
    Script("llama31_8b", causal_lm=True, seq_len=128),
    Script("llama31_8b_megatron", causal_lm=True, seq_len=128),
    Script("llama31_70b", causal_lm=True, seq_len=128),
    Script("llama31_70b_megatron", causal_lm=True, seq_len=128),
    Script("qwen25_7b", causal_lm=True, seq_len=128),
    Script("mixtral_8x7b", causal_lm=True, seq_len=256),
    Script("wan_dit_14b", bill="dit"),
    Script("wan_vae", bill="vae", repeated=False),
    Script("umt5_xxl"),
    Script("clip_text"),
]
DEVICE_COUNTS = (8, 32)


@dataclass
class Row:
    script: Script
    devices: int
    phase: str
    mesh: str = ""

    @property
    def id(self) -> str:
        return f"{self.script.name}/{self.devices}/{self.phase}"


# --- step 1: the rows and their meshes ---------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", help="comma-separated patterns over SCRIPT/DEVICES/PHASE (default: all rows)")
    ap.add_argument("--layers", type=int, help="keep N repeated layers (passed to shard-opt)")
    ap.add_argument("--system", help="hardware preset passed to every row (e.g. bh-galaxy with --rows '*/32/*')")
    ap.add_argument("--weight-dtype", help="weight storage passed to every row (bfp8: what fits Llama-70B and "
                                           "Mixtral on 8 Wormhole chips; the expert spec is priced in it too)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per row (default 3600)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    return ap.parse_args(argv)


def selected_rows(patterns: str | None) -> list[Row]:
    rows = [Row(s, n, phase) for s in SCRIPTS for n in DEVICE_COUNTS
            for phase in (("prefill", "decode") if s.causal_lm else ("prefill",))]
    if not patterns:
        return rows
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    return [r for r in rows
            if any(fnmatch.fnmatch(r.id if "/" in p else r.script.name, p) for p in pats)]


def script_path(script: Script) -> str:
    return os.path.join(EXPERTS, script.name + ".py")


def mesh_of(script: Script, devices: int) -> str:
    """``RxC`` from the script's ``ModelLoader().get_mesh_config(devices)``.

    tt-forge-models loaders return ``(mesh_shape, mesh_names)``; a bare shape is
    accepted too.
    """
    if EXPERTS not in sys.path:
        sys.path.insert(0, EXPERTS)  # the scripts import their shared _configs
    spec = importlib.util.spec_from_file_location(f"expert_{script.name}", script_path(script))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    got = mod.ModelLoader().get_mesh_config(devices)
    shape = got[0] if isinstance(got[0], (tuple, list)) else got
    return "x".join(str(int(d)) for d in shape)


# --- step 2: run shard-opt on one row ----------------------------------------------------

def command(row: Row, plan_path: str, layers: int | None, system: str | None,
            weight_dtype: str | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "shard_opt.cli", script_path(row.script), "--mesh", row.mesh,
           "--plan-json", plan_path, "--quiet", "-o", os.devnull]
    if row.phase == "decode":
        cmd += ["--phase", "decode"]
    if row.script.seq_len:
        cmd += ["--seq-len", str(row.script.seq_len)]
    if layers is not None and row.script.repeated:
        cmd += ["--layers", str(layers)]
    if system:
        cmd += ["--system", system]
    if weight_dtype:
        cmd += ["--weight-dtype", weight_dtype]
    return cmd


def first_error_line(stderr: str, code: int) -> str:
    """shard-opt's one-line error (``shard-opt: error: ...`` or ``shard-opt: internal
    error: ...``), else a traceback's last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("shard-opt: error:"):
            return ln.removeprefix("shard-opt: error:").strip()
        if ln.startswith("shard-opt: internal error:"):
            return ln.removeprefix("shard-opt: ")
    if any(ln.startswith("Traceback") for ln in lines):
        return lines[-1]
    return lines[0] if lines else f"exit status {code}, nothing on stderr"


def run_row(row: Row, layers: int | None, system: str | None, timeout: float,
            weight_dtype: str | None = None) -> dict:
    """The plan JSON of one row, or ``{"error": first line}``.

    The row runs in its own process group, so a timeout also stops the worker
    processes shard-opt started (``SHARD_OPT_JOBS``).
    """
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryFile("w+") as err:
        plan_path = os.path.join(d, "plan.json")
        t0 = time.monotonic()
        proc = subprocess.Popen(command(row, plan_path, layers, system, weight_dtype), stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"error": f"timed out after {timeout:.0f} s", "wall_s": timeout}
        wall = time.monotonic() - t0
        if code != 0:
            err.seek(0)
            return {"error": first_error_line(err.read(), code), "wall_s": wall}
        with open(plan_path) as f:
            return {"plan": json.load(f), "wall_s": wall}


# --- step 3: read the numbers --------------------------------------------------------------

def summarize(row: Row, result: dict) -> dict:
    out = {"id": row.id, "model": row.script.name, "mesh": row.mesh, "phase": row.phase,
           "wall_s": result.get("wall_s")}
    if "error" in result:
        out["error"] = result["error"]
        return out
    plan = result["plan"]
    cost = plan["cost"]
    out["plan_us"] = cost.get("total_us")
    out["plan_ccl_per_layer"] = cost.get("ccl_per_layer")
    if out["plan_ccl_per_layer"] is None and plan.get("num_layers") and row.script.repeated:
        out["plan_ccl_per_layer"] = f"{len(plan_layer_collectives(plan)[0])}*"
    expert = plan.get("baselines", {}).get("loader-spec")
    if expert is None:
        out["expert_missing"] = True
    else:
        out["expert_us"] = expert.get("total_us")
        if out["expert_us"] is None and (expert.get("as_written") or {}).get("total_us") is not None:
            # no figure within the compiler-safety rules: the spec as written, said in the note
            out["expert_us"] = expert["as_written"]["total_us"]
            out["expert_breaks"] = expert.get("still_breaks") or expert.get("breaks") or []
        out["expert_ccl_per_layer"] = expert.get("ccl_per_layer")
        out["expert_unmatched"] = len(expert.get("unmatched") or [])
        out["expert_not_dividing"] = len(expert.get("not_dividing") or [])
        out["expert_activations"] = len(expert.get("activations") or {})
    if row.script.bill == "dit":
        out["bill"] = dit_bill(plan, expert)
    elif row.script.bill == "vae":
        out["bill"] = vae_bill(plan, expert)
    return out


def big_small(collectives: list[dict]) -> tuple[int, int]:
    """(big, small): big when bytes_per_device >= BIG_FRACTION of the largest in the list."""
    if not collectives:
        return 0, 0
    top = max(c["bytes_per_device"] for c in collectives)
    big = sum(1 for c in collectives if c["bytes_per_device"] >= BIG_FRACTION * top)
    return big, len(collectives) - big


def dit_bill(plan: dict, expert: dict | None) -> str:
    """Per-block CCLs of the expert spec and of the plan, in the seed page's big/small terms,
    each with its collectives by kind and axis (the page's are 2 SP all_gathers + 3 TP
    all_reduces big, 4 norm-stats all_reduces small on 8x4)."""
    if expert is None:
        exp = NO_BASELINE
    elif "layer_collectives" in expert:
        exp = bill_text(expert["layer_collectives"])
    else:  # priced whole (--layers 2): its collectives of the first block, marked as the plan's are
        exp = bill_text(plan_layer_collectives(expert)[0]) + "*"
    layer, derived = plan_layer_collectives(plan)
    mine = bill_text(layer) + ("*" if derived else "")
    return f"per block: expert {exp} / plan {mine} ({SEED_DIT})"


def bill_text(collectives: list[dict]) -> str:
    """``5 big + 4 small (big: all_gather@batch x2, all_reduce@model x3; small: ...)``; an
    ``all_slice`` is not counted (each device keeps its part: no communication, not a CCL
    once lowered), as the seed page counts none."""
    collectives = [c for c in collectives if c["kind"] != "all_slice"]
    big, small = big_small(collectives)
    if not collectives:
        return "0 big + 0 small"
    top = max(c["bytes_per_device"] for c in collectives)

    def kinds(want_big: bool) -> str:
        n = Counter(f"{c['kind']}@{'+'.join(c.get('axes') or [])}" for c in collectives
                    if (c["bytes_per_device"] >= BIG_FRACTION * top) == want_big)
        return ", ".join(f"{k} x{v}" for k, v in sorted(n.items())) or "none"

    return f"{big} big + {small} small (big: {kinds(True)}; small: {kinds(False)})"


def plan_layer_collectives(plan: dict) -> tuple[list[dict], bool]:
    """The plan's ``layer_collectives``, or (marked derived) its ``collectives`` of the
    first repeated layer when the plan JSON has no such field yet."""
    if "layer_collectives" in plan:
        return plan["layer_collectives"], False
    layers = [c["layer"] for c in plan.get("collectives") or [] if c.get("layer") is not None]
    if not layers:
        return [], True
    first = min(layers)
    return [c for c in plan["collectives"] if c.get("layer") == first], True


def residual_block(component: str) -> str | None:
    m = re.match(r"^(.*\.resnets\.\d+)(\.|$)", component or "")
    return m.group(1) if m else None


def per_block_all_reduces(collectives: list[dict]) -> str:
    """"N blocks: 1 big + 1 small x13, ..." over the all_reduces of residual blocks."""
    by_block: dict[str, list[dict]] = {}
    for c in collectives:
        block = residual_block(c.get("component", ""))
        if c["kind"] == "all_reduce" and block:
            by_block.setdefault(block, []).append(c)
    if not by_block:
        return "no residual-block all_reduce"
    top = max(c["bytes_per_device"] for cs in by_block.values() for c in cs)
    shapes = Counter()
    for cs in by_block.values():
        big = sum(1 for c in cs if c["bytes_per_device"] >= BIG_FRACTION * top)
        shapes[(big, len(cs) - big)] += 1
    parts = [f"{b} big + {s} small x{n}" for (b, s), n in sorted(shapes.items(), key=lambda kv: -kv[1])]
    n = len(by_block)
    return f"{n} block{'s' if n != 1 else ''}: " + ", ".join(parts)


def vae_bill(plan: dict, expert: dict | None) -> str:
    """all_reduces per residual block, the expert's and the plan's, beside the seed page's."""
    if expert is None:
        exp = NO_BASELINE
    elif "collectives" in expert:
        exp = per_block_all_reduces(expert["collectives"])
    else:  # only the repeated layer's collectives: one residual block of shard-opt's repeated list
        ars = [c for c in expert.get("layer_collectives") or [] if c["kind"] == "all_reduce"]
        exp = "one block (layer_collectives): %d big + %d small" % big_small(ars)
    mine = per_block_all_reduces(plan.get("collectives") or [])
    return f"all_reduce per residual block: expert {exp} / plan {mine} ({SEED_VAE})"


# --- step 4: print the table ---------------------------------------------------------------

HEADER = ["model", "mesh", "phase", "expert us", "plan us", "plan/expert", "expert CCL/layer",
          "plan CCL/layer", "s", "note"]


def cells(s: dict) -> list[str]:
    def num(x, fmt="{:.1f}"):
        return "-" if x is None else fmt.format(x)

    wall = num(s.get("wall_s"), "{:.0f}")
    if "error" in s:
        return [s["model"], s["mesh"], s["phase"], "-", "-", "-", "-", "-", wall, "error: " + s["error"]]
    notes = []
    if s.get("expert_missing"):
        expert_us, ratio, expert_ccl = NO_BASELINE, "-", "-"
    else:
        expert_us = num(s.get("expert_us"))
        ratio = ("-" if not s.get("expert_us") or s.get("plan_us") is None
                 else f"{s['plan_us'] / s['expert_us']:.3f}")
        expert_ccl = num(s.get("expert_ccl_per_layer"), "{}")
        if s.get("expert_unmatched"):
            notes.append(f"{s['expert_unmatched']} spec entries unmatched")
        if s.get("expert_not_dividing"):
            notes.append(f"{s['expert_not_dividing']} not dividing")
        if s.get("expert_breaks"):
            notes.append(f"expert us as written: it breaks {', '.join(s['expert_breaks'])} with every split "
                         f"kept (no figure within the rules)")
        if s.get("expert_activations"):
            notes.append(f"{s['expert_activations']} activation-spec entries priced")
    return [s["model"], s["mesh"], s["phase"], expert_us, num(s.get("plan_us")), ratio, expert_ccl,
            num(s.get("plan_ccl_per_layer"), "{}"), wall, "; ".join(notes)]


def render(summaries: list[dict], markdown: bool) -> str:
    table = [cells(s) for s in summaries]
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in table]
    else:
        widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(HEADER)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths)).rstrip()]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    bills = [f"{s['model']} {s['mesh']} {s['phase']}: {s['bill']}" for s in summaries if s.get("bill")]
    if bills:
        lines += [""] + [("- " if markdown else "") + b for b in bills]
    if any("*" in str(s.get("plan_ccl_per_layer")) or "*" in s.get("bill", "") for s in summaries):
        lines += ["", "* counted from the plan's collectives of its first layer (the plan JSON has no "
                      "cost.ccl_per_layer / layer_collectives yet)"]
    missing = sum(1 for s in summaries if s.get("expert_missing"))
    if missing:
        lines += ["", f"{missing} row(s) have {NO_BASELINE}: this shard-opt does not price a loader's "
                      f"load_shard_spec yet (plan['baselines'] has no 'loader-spec'); only the plan is shown."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = selected_rows(args.rows)
    if not rows:
        print(f"--rows {args.rows!r} matches no row; row ids look like llama31_8b/8/decode", file=sys.stderr)
        return 1
    summaries = []
    for row in rows:
        try:
            row.mesh = mesh_of(row.script, row.devices)
        except Exception as e:  # a loader that rejects the device count
            summaries.append({"id": row.id, "model": row.script.name, "mesh": f"{row.devices} chips",
                              "phase": row.phase, "error": f"get_mesh_config({row.devices}): {e}"})
            continue
        print(f"[{row.id}] {row.mesh} ...", file=sys.stderr, flush=True)
        summaries.append(summarize(row, run_row(row, args.layers, args.system, args.timeout, args.weight_dtype)))
    sys.stdout.write(render(summaries, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
