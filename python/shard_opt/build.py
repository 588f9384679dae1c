"""The plan, built once: from the search's result, the explanation and the checks.

``build_plan`` is the one place a ``shard_opt.plan.Plan`` is made (``build_pipeline_plan``
the one place a ``PipelinePlan`` is, from the models' plans). It reads what the run
decided, as values: the model and the setting, the whole-model evaluation of the plan
(``evaluation.Evaluation``), the explanation (``explain.Explanation``), the tt-mlir check
(``deliverable.Checked``, None without one) and what the command line adds after the run
(``Extras``: the mesh ``--devices`` chose, ``--verify-numerics``' verdicts). The records it
writes are the plan JSON's (``cost_of``, ``collectives_of``, ``collective_entry``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shard_opt.dataflow import CONSTANT_OPS
from shard_opt.evaluation import Evaluation
from shard_opt.explain import Explanation, score_dict
from shard_opt.lowered import LoweredModel
from shard_opt.plan import (
    ArgumentRecord, CollectiveRecord, CostRecord, MeshRecord, PairRecord, PipelinePlan, Plan, thaw,
)
from shard_opt.sharding import Mesh, TensorSharding


@dataclass(frozen=True)
class PlanParts:
    """Everything a plan is built from (``build_plan``): where it was searched (the model,
    its mesh and meshes, the system, the cost model, ``--parallelism``), its whole-model
    evaluation, the explanation and the tt-mlir check (None: not checked)."""

    model: LoweredModel
    mesh: Mesh
    meshes: tuple
    system_name: str
    cost_model: str
    parallelism: tuple
    final: Evaluation
    explanation: Explanation
    checked: object = None


@dataclass(frozen=True)
class Extras:
    """What the command line adds to a plan after the run: the mesh ``--devices`` chose
    (and the note saying why), ``--verify-numerics``' verdicts, and notes."""

    notes: tuple = ()
    mesh_choice: dict | None = None
    numerics: dict | None = None
    xla_crosscheck: dict | None = None


def build_plan(parts: PlanParts, extras: Extras = Extras()) -> Plan:
    """The plan of ``parts`` (with the command line's ``extras``)."""
    model, final, ex, chk = parts.model, parts.final, parts.explanation, parts.checked
    args = {a.index: a for a in model.arguments}
    notes = []
    resized = model.meta.get("inputs_resized")  # --batch/--seq-len changed a script's token inputs
    if resized:
        from shard_opt.frontends import resized_text

        notes.append(resized_text(resized, model.name))
    if model.meta.get("inputs_not_resized"):
        notes.append(f"{model.name}: {model.meta['inputs_not_resized']}")
    notes += ex.notes
    check = tt_mlir_check(chk) if chk is not None else None
    baselines = thaw(ex.baselines)
    for name, b in (getattr(chk, "baselines", None) or {}).items():  # what tt-mlir made of each baseline
        if name in baselines:
            baselines[name]["tt_mlir"] = b
            if "checked_us" in b:
                baselines[name]["checked_us"] = b["checked_us"]
    if chk is not None and chk.note:
        notes.append(chk.note)
    notes += ex.late_notes
    if ex.nothing_to_split:
        notes.append(ex.nothing_to_split)
    notes += extras.notes
    search = thaw(ex.search) if ex.search is not None else {"candidates_evaluated": 1, "seconds": 0.0,
                                                             "exhaustive": True}
    if ex.scored is not None:
        search["scored_cost"] = score_dict(ex.scored)
    meta = {key: model.meta[key] for key in ("phase", "batch", "seq_len", "dtype") if key in model.meta}
    cost = cost_of(final, ccl_per_layer=ex.ccl_per_layer,
                   checked_us=check.get("checked_us") if check is not None else None)
    return Plan(
        model=model.name, source=model.source, mesh=mesh_record(parts.mesh),
        system=parts.system_name, cost_model=parts.cost_model, parallelism=list(parts.parallelism),
        strategy=ex.strategy or strategy_text(model, final.shardings),
        arguments=[ArgumentRecord(index=a.index, name=a.name, kind=a.kind, shape=list(a.shape), dtype=a.dtype,
                                  sharding=final.shardings.get(a.index) or TensorSharding.replicated(len(a.shape)),
                                  storage=final.storage.get(a.index)) for a in model.arguments],
        inputs=[a.name for a in model.arguments if a.kind in ("input", "cache")], groups=list(ex.groups),
        collectives=collectives_of(final, args), cost=cost, baselines=baselines, search=search,
        memory_fallback=ex.memory_fallback is not None, memory_fallback_reason=ex.memory_fallback,
        meshes=[mesh_record(m) for m in parts.meshes] if len(parts.meshes) > 1 else None,
        num_layers=model.num_layers or None, architecture=model.architecture or None,
        notes=notes or None, inputs_resized=dict(resized) if resized else None,
        propagation=ex.propagation, weight_dtype=ex.weight_dtype, weight_formats=ex.weight_formats,
        layer_collectives=ex.layer_collectives, loader_comparison=ex.loader_comparison, safety=ex.safety,
        robustness=ex.robustness, guards=ex.guards, constraints=ex.constraints, routed_experts=ex.routed_experts,
        kv_layout=ex.kv_layout, pairs=[PairRecord(**p) for p in ex.pairs] if ex.pairs is not None else None,
        checks={"tt_mlir": check} if check is not None else None, mesh_choice=extras.mesh_choice,
        numerics=extras.numerics, xla_crosscheck=extras.xla_crosscheck, **meta,
    )


def tt_mlir_check(chk) -> dict:
    """The plan's ``checks.tt_mlir`` from the check's value (``deliverable.Checked``): what
    it found of the plan shown, its verdict, and every plan it tried."""
    check = {**chk.plan_check, "verdict": chk.verdict.to_json()}
    if chk.trials:
        check["finalists"] = list(chk.trials)
    return check


def build_pipeline_plan(plans: list[Plan], slowest: str, *, why: str | None = None, choice: dict | None = None,
                        failed: list[str] | None = None, serving: dict | None = None) -> PipelinePlan:
    """The plan of several models on one mesh: each model's (``build_plan``), the mesh,
    the slowest model and why the mesh was chosen (``--devices``); ``failed``: the models
    whose numerics failed (``--verify-numerics``; None: not checked). ``serving``: a
    ``--serve`` run's deployment (``serve.Deployment.record``); its plans are
    [prefill, decode] and its mesh is the decode plan's."""
    numerics = {"passed": not failed, "failed": list(failed)} if failed is not None else None
    mesh = plans[-1].mesh if serving is not None else plans[0].mesh
    return PipelinePlan(pipeline=plans, mesh=mesh, slowest=slowest, notes=[why] if why else None,
                        mesh_choice=choice, numerics=numerics, serving=serving)


def checkable(model: LoweredModel, mesh: Mesh, ev: Evaluation) -> Plan:
    """The part of a plan the tt-mlir check reads (``shard_opt.ttmlir.check``): its mesh,
    its priced collectives and its cost, for a plan that is not (yet) built."""
    return build_plan(PlanParts(model, mesh, (mesh,), "", "", (), ev, Explanation()))


def _r(x: float) -> float | None:
    if x is None or (isinstance(x, float) and math.isinf(x)):
        return None
    return round(float(x), 3)


def cost_of(ev: Evaluation, *, ccl_per_layer: int | None = None, checked_us: float | None = None) -> CostRecord:
    """An evaluation's cost as the plan records it (with one repeated layer's collective
    count and the tt-mlir check's figure, when there are)."""
    s = ev.score
    return CostRecord(total_us=_r(s.total_us), compute_us=_r(s.compute_us), ccl_us=_r(s.ccl_us),
                      ccl_count=s.ccl_count, ccl_bytes=s.ccl_bytes, memory_per_device_bytes=int(s.memory_bytes),
                      fits=bool(s.fits), layout_us=_r(ev.cost.layout_us), ccl_per_layer=ccl_per_layer,
                      checked_us=checked_us)


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
                elif a.kind == "input" and d == 1 and _channels_first(a):
                    fams.setdefault("channel", set()).add(ax.name)  # an image's or a latent's channels
                elif a.kind == "input" and d == 1:
                    fams.setdefault("sequence", set()).add(ax.name)
                else:
                    fams.setdefault("tensor", set()).add(ax.name)
    if not fams:
        return "replicated (no split pays for its collectives)"
    return "; ".join(f"{f} parallel on {'+'.join(sorted(ax))}" for f, ax in sorted(fams.items()))


def _channels_first(a) -> bool:
    """An image or latent input (``[N, C, H, W]``, float): its dim 1 is channels, not tokens."""
    return len(a.shape) >= 4 and not a.dtype.lstrip("su").startswith("i")


def collective_entry(c, args: dict) -> dict:
    """A collective as a baseline's JSON lists it (``baselines.loader-spec.collectives``):
    what it moves, and the component it belongs to (``args``: argument index ->
    ``lowered.Argument``); the plan's own add their time and origin (``collectives_of``)."""
    origin = args.get(c.origin_arg)
    # no parameter upstream: a constant of the module's (an index table), else the model's inputs
    none = "(constants)" if c.producer in CONSTANT_OPS else "(model inputs)"
    return {"kind": c.kind, "axes": list(c.axes), "shape": list(c.global_shape), "dtype": c.dtype,
            "bytes_per_device": c.bytes_per_device, "group_size": c.group_size,
            "component": component_of(origin.name) if origin else none,
            "layer": origin.layer if origin else None}


def collectives_of(ev: Evaluation, args: dict) -> list[CollectiveRecord]:
    """An evaluation's collectives as the plan lists them, each with its modeled time."""
    out = []
    times = ev.cost.collective_us or [None] * len(ev.facts.collectives)
    for c, t in zip(ev.facts.collectives, times):
        out.append(CollectiveRecord(**collective_entry(c, args), time_us=_r(t), op_index=c.op_index, loc=c.loc,
                                    producer=c.producer, reason=c.reason, cause=c.cause or None))
    return out


def mesh_record(mesh: Mesh) -> MeshRecord:
    return MeshRecord(shape=list(mesh.shape), axes=list(mesh.axes))
