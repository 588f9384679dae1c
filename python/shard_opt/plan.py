"""The plan JSON (DESIGN.md "Plan JSON"): every figure computed, none typed in."""

from __future__ import annotations

import json
import math

from shard_opt.evaluate import Evaluation, Score
from shard_opt.lowered import LoweredModel
from shard_opt.sharding import Mesh, TensorSharding


def _r(x: float) -> float:
    if x is None or (isinstance(x, float) and math.isinf(x)):
        return None
    return round(float(x), 3)


def cost_dict(ev: Evaluation) -> dict:
    s = ev.score
    return {
        "total_us": _r(s.total_us), "compute_us": _r(s.compute_us), "ccl_us": _r(s.ccl_us),
        "ccl_count": s.ccl_count, "ccl_bytes": s.ccl_bytes,
        "memory_per_device_bytes": int(s.memory_bytes), "fits": bool(s.fits),
    }


def score_dict(s: Score) -> dict:
    return {"total_us": _r(s.total_us), "compute_us": _r(s.compute_us), "ccl_us": _r(s.ccl_us),
            "ccl_count": s.ccl_count, "ccl_bytes": s.ccl_bytes,
            "memory_per_device_bytes": int(s.memory_bytes), "fits": bool(s.fits)}


def component_of(name: str) -> str:
    """``model.layers.0.mlp.up_proj.weight`` -> ``model.layers.0.mlp.up_proj``."""
    parts = name.split(".")
    return ".".join(parts[:-1]) if len(parts) > 1 else name


def strategy_text(model: LoweredModel, shardings: dict[int, TensorSharding]) -> str:
    """Name the parallelism families a plan uses, from which arguments it splits."""
    fams: dict[str, set[str]] = {}
    for a in model.arguments:
        s = shardings.get(a.index)
        if s is None or s.is_replicated:
            continue
        for d, axes in enumerate(s.dims):
            for ax in axes:
                if a.kind in ("param", "buffer"):
                    fams.setdefault("tensor", set()).add(ax.name)
                elif d == 0:
                    fams.setdefault("data", set()).add(ax.name)
                elif a.kind == "input" and d == 1:
                    fams.setdefault("sequence", set()).add(ax.name)
                else:
                    fams.setdefault("tensor", set()).add(ax.name)
    if not fams:
        return "replicated (no split pays for its collectives)"
    return "; ".join(f"{f} parallel on {'+'.join(sorted(ax))}" for f, ax in sorted(fams.items()))


def collective_entry(c, args: dict) -> dict:
    """A collective as plan JSON lists it: what it moves, and the component it belongs to
    (``args``: argument index -> ``Argument``)."""
    origin = args.get(c.origin_arg)
    return {"kind": c.kind, "axes": list(c.axes), "shape": list(c.global_shape), "dtype": c.dtype,
            "bytes_per_device": c.bytes_per_device, "group_size": c.group_size,
            "component": component_of(origin.name) if origin else "(model inputs)",
            "layer": origin.layer if origin else None}


def collectives_of(ev: Evaluation, args: dict) -> list[dict]:
    """An evaluation's collectives as the plan JSON lists them, each with its modeled time."""
    out = []
    times = ev.cost.collective_us or [None] * len(ev.facts.collectives)
    for c, t in zip(ev.facts.collectives, times):
        out.append({
            **collective_entry(c, args),
            "time_us": _r(t), "op_index": c.op_index, "loc": c.loc, "producer": c.producer,
            "reason": c.reason, **({"cause": c.cause} if c.cause else {}),
        })
    return out


def checkable(model: LoweredModel, mesh: Mesh, ev: Evaluation) -> dict:
    """The part of a plan the tt-mlir check reads (``shard_opt.ttmlir.check``): its mesh,
    its priced collectives and its cost, for a plan that is not (yet) the plan JSON."""
    return {"model": model.name, "mesh": {"shape": list(mesh.shape), "axes": list(mesh.axes)},
            "collectives": collectives_of(ev, {a.index: a for a in model.arguments}), "cost": cost_dict(ev)}


def build_plan(model: LoweredModel, mesh: Mesh, meshes: list[Mesh], system_name: str,
               cost_model_name: str, parallelism: list[str], final: Evaluation, *,
               groups: list[dict] | None = None, baselines: dict | None = None,
               search: dict | None = None, memory_fallback: str | None = None,
               scored: Score | None = None, notes: list[str] | None = None) -> dict:
    args = {a.index: a for a in model.arguments}
    arguments = []
    for a in model.arguments:
        s = final.shardings.get(a.index) or TensorSharding.replicated(len(a.shape))
        entry = {"index": a.index, "name": a.name, "kind": a.kind, "shape": list(a.shape),
                 "dtype": a.dtype, "sharding": s.axis_names()}
        if a.index in final.storage:
            entry["storage"] = final.storage[a.index]  # stored on device as a block float
        arguments.append(entry)
    collectives = collectives_of(final, args)
    plan = {
        "model": model.name,
        "source": model.source,
        "mesh": {"shape": list(mesh.shape), "axes": list(mesh.axes)},
        "system": system_name,
        "cost_model": cost_model_name,
        "parallelism": list(parallelism),
        "strategy": strategy_text(model, final.shardings),
        "arguments": arguments,
        "inputs": [a.name for a in model.arguments if a.kind in ("input", "cache")],
        "groups": groups or [],
        "collectives": collectives,
        "cost": cost_dict(final),
        "baselines": baselines or {},
        "search": search or {"candidates_evaluated": 1, "seconds": 0.0, "exhaustive": True},
        "memory_fallback": memory_fallback is not None,
        "memory_fallback_reason": memory_fallback,
    }
    if len(meshes) > 1:
        plan["meshes"] = [{"shape": list(m.shape), "axes": list(m.axes)} for m in meshes]
    for key in ("phase", "batch", "seq_len", "dtype"):
        if key in model.meta:
            plan[key] = model.meta[key]
    if model.num_layers:
        plan["num_layers"] = model.num_layers
    if model.architecture:
        plan["architecture"] = model.architecture
    if scored is not None:
        plan["search"]["scored_cost"] = score_dict(scored)
    if notes:
        plan["notes"] = list(notes)
    resized = model.meta.get("inputs_resized")  # --batch/--seq-len changed a script's token inputs
    if resized:
        from shard_opt.frontends import resized_text

        plan["inputs_resized"] = dict(resized)
        plan.setdefault("notes", []).append(resized_text(resized, model.name))
    if model.meta.get("inputs_not_resized"):
        plan.setdefault("notes", []).append(f"{model.name}: {model.meta['inputs_not_resized']}")
    return plan


def dumps(plan: dict) -> str:
    return json.dumps(plan, indent=2, sort_keys=False) + "\n"
