"""The plan (DESIGN.md "Plan JSON", docs/plan.md): one typed value, every figure computed.

``Plan`` is what the driver builds (``build_plan``, once per model) and what every
emitter reads (the report, the torch script, the lit test, verify-ir, the JAX code);
``Plan.to_json()`` is the plan JSON ``--plan-json`` writes, ``Plan.from_json()`` reads it
back (and refuses a plan of another ``SCHEMA_VERSION`` with one line). Its fields are the
plan JSON's top-level keys; the records under them (an argument, a collective, the cost,
a baseline, a safety row ...) stay JSON-shaped (``Argument``, ``Collective``, ``Cost``
say their keys), as the plan JSON writes them; ``from_json`` checks the ones the emitters
read (``RECORDS``) key by key. A pipeline's plan is a ``PipelinePlan``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, TypedDict

from shard_opt.evaluate import Evaluation, Score
from shard_opt.lowered import LoweredModel
from shard_opt.sharding import Mesh, TensorSharding


SCHEMA_VERSION = 1  # the plan JSON's layout; a reader refuses any other (Plan.from_json)


class MeshRecord(TypedDict):
    shape: list[int]
    axes: list[str]


class Argument(TypedDict, total=False):
    index: int
    name: str
    kind: str  # param, buffer, input, cache
    shape: list[int]
    dtype: str
    sharding: list[list[str]]  # per dim, the mesh axes it is split on ([] = replicated)
    storage: str  # stored on device as a block float


class Collective(TypedDict, total=False):
    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute, all_slice
    axes: list[str]
    shape: list[int]
    dtype: str
    bytes_per_device: int
    group_size: int
    component: str
    layer: int | None
    time_us: float | None
    op_index: int
    loc: str | None
    producer: str | None
    reason: str | None
    cause: str


class Cost(TypedDict, total=False):
    total_us: float | None
    compute_us: float | None
    ccl_us: float | None
    ccl_count: int
    ccl_bytes: int
    memory_per_device_bytes: int
    fits: bool
    ccl_per_layer: int  # a model scored from short copies: one repeated layer's collectives
    checked_us: float  # the tt-mlir check's figure for what tt-mlir emits
    layout_us: float  # the part of compute_us for the estimated unpriced TTNN ops (costmodel/ttnn_ops.py)


# The records under a top-level key that the emitters read, with the keys every plan JSON
# holds in them (build_plan / collectives_of / cost_dict write them always); from_json
# checks each record's keys and their JSON types (``_check_records``).
RECORDS: dict[str, tuple[type, tuple[str, ...], bool]] = {  # key -> (record, required keys, a list of them)
    "mesh": (MeshRecord, ("shape", "axes"), False),
    "arguments": (Argument, ("index", "name", "kind", "shape", "dtype", "sharding"), True),
    # DESIGN.md's minimum plan JSON: a collective without group_size or layer is still a plan
    "collectives": (Collective, ("kind", "axes", "shape", "dtype", "bytes_per_device", "component"), True),
    "cost": (Cost, ("total_us", "compute_us", "ccl_us", "ccl_count", "ccl_bytes", "memory_per_device_bytes",
                    "fits"), False),
}


class PlanSchemaError(ValueError):
    """A plan JSON this version cannot read (another schema version, a missing or unknown key)."""


def _json_type(tp: str) -> tuple[type, ...]:
    """The JSON values a field annotated ``tp`` may hold (None aside)."""
    if tp.startswith("list") or tp.startswith("List"):
        return (list,)
    if tp.startswith(("dict", "MeshRecord", "Cost")):
        return (dict,)
    return {"str": (str,), "bool": (bool,), "int": (int,)}.get(tp.split(" ")[0].split("|")[0].strip(), (object,))


@dataclass
class Plan:
    """One model's plan; the fields are the plan JSON's keys, in the order it writes them.

    A field is written when it is set (not None), a field of ``REQUIRED`` always, and
    ``memory_fallback_reason`` whenever ``memory_fallback`` is (null when there is no
    fallback). ``note()`` appends to ``notes``.
    ``plan[key]`` / ``plan.get(key)`` / ``key in plan`` read a field by its JSON key, as
    a dict of the plan JSON would (for code written against the JSON: scripts, tests)."""

    model: str
    source: str | None = None
    mesh: MeshRecord | None = None
    system: str | None = None
    cost_model: str | None = None
    parallelism: list[str] | None = None
    strategy: str | None = None
    arguments: list[Argument] | None = None
    inputs: list[str] | None = None
    groups: list[dict] | None = None
    collectives: list[Collective] | None = None
    cost: Cost | None = None
    baselines: dict | None = None
    search: dict | None = None
    memory_fallback: bool | None = None
    memory_fallback_reason: str | None = None
    meshes: list[MeshRecord] | None = None
    phase: str | None = None
    batch: int | None = None
    seq_len: int | None = None
    dtype: str | None = None
    num_layers: int | None = None
    architecture: dict | None = None
    notes: list[str] | None = None
    inputs_resized: dict | None = None
    propagation: str | None = None
    weight_dtype: str | None = None
    weight_formats: dict | None = None
    layer_collectives: list[dict] | None = None
    loader_comparison: list[dict] | None = None
    safety: list[dict] | None = None
    robustness: dict | None = None
    guards: list[dict] | None = None
    constraints: list[dict] | None = None
    routed_experts: dict | None = None
    kv_layout: dict | None = None
    checks: dict | None = None
    mesh_choice: dict | None = None
    numerics: dict | None = None
    xla_crosscheck: dict | None = None

    # what a plan JSON must hold to be read (DESIGN.md's minimum fields); the driver writes
    # every key above ``meshes`` always (memory_fallback_reason null when there is none)
    REQUIRED = ("model", "mesh", "system", "arguments", "collectives", "cost", "baselines", "search")

    def note(self, text: str) -> None:
        """Add a line to the plan's ``notes``."""
        if self.notes is None:
            self.notes = []
        self.notes.append(text)

    def to_json(self) -> dict:
        """The plan JSON: ``schema_version``, then every required field and every optional
        field that is set (a copy: changing it leaves the plan alone)."""
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        for f in dataclasses.fields(self):
            if self._written(f.name):
                out[f.name] = _copy(getattr(self, f.name))
        return out

    def _written(self, name: str) -> bool:
        """Whether the plan JSON holds ``name`` (``to_json``, and ``plan[name]``)."""
        if name not in _FIELD_NAMES[type(self)]:
            return False
        return (getattr(self, name) is not None or name in self.REQUIRED
                or (name == "memory_fallback_reason" and getattr(self, "memory_fallback", None) is not None))

    @classmethod
    def from_json(cls, data: dict, *, where: str = "plan") -> "Plan":
        """The plan a plan JSON holds. Another ``schema_version`` (or none), a missing
        required key, an unknown key or a value of the wrong JSON type raises
        ``PlanSchemaError`` with one line naming it (``where``: the file, for the message)."""
        if not isinstance(data, dict):
            raise PlanSchemaError(f"{where}: not a shard-opt plan (a JSON object is expected)")
        _check_version(data, where)
        if "pipeline" in data:
            raise PlanSchemaError(f"{where}: a pipeline plan, not one model's (PipelinePlan.from_json reads it)")
        return cls(**_fields_of(cls, data, where))

    def __getitem__(self, key: str):
        if not self._written(key):
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: str) -> bool:
        return self._written(key)


@dataclass
class PipelinePlan:
    """The plan of several models on one mesh (``shard-opt A B C``): each model's ``Plan``,
    the shared mesh, the slowest model (which chose the mesh) and why it was chosen."""

    pipeline: list[Plan]
    mesh: MeshRecord
    slowest: str
    notes: list[str] | None = None
    mesh_choice: dict | None = None
    numerics: dict | None = None  # --verify-numerics: passed, and the models that failed

    REQUIRED = ("pipeline", "mesh", "slowest")

    def to_json(self) -> dict:
        """The pipeline's plan JSON: one ``schema_version`` for all, each model's plan under ``pipeline``."""
        subs = [{k: v for k, v in p.to_json().items() if k != "schema_version"} for p in self.pipeline]
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "pipeline": subs,
                               "mesh": _copy(self.mesh), "slowest": self.slowest}
        for k in ("notes", "mesh_choice", "numerics"):
            if getattr(self, k) is not None:
                out[k] = _copy(getattr(self, k))
        return out

    @classmethod
    def from_json(cls, data: dict, *, where: str = "plan") -> "PipelinePlan":
        if not isinstance(data, dict):
            raise PlanSchemaError(f"{where}: not a shard-opt plan (a JSON object is expected)")
        _check_version(data, where)
        if "pipeline" not in data:
            raise PlanSchemaError(f"{where}: one model's plan, not a pipeline's (Plan.from_json reads it)")
        fields = _fields_of(cls, data, where)
        subs = fields["pipeline"]
        fields["pipeline"] = [Plan.from_json({"schema_version": SCHEMA_VERSION, **p}, where=f"{where}: pipeline[{i}]")
                              for i, p in enumerate(subs)]
        return cls(**fields)

    __getitem__, get, __contains__, _written = Plan.__getitem__, Plan.get, Plan.__contains__, Plan._written


def plan_from_json(data: dict, *, where: str = "plan") -> Plan | PipelinePlan:
    """A plan JSON as its value: a ``PipelinePlan`` when it holds a pipeline, else a ``Plan``."""
    if isinstance(data, dict) and "pipeline" in data:
        return PipelinePlan.from_json(data, where=where)
    return Plan.from_json(data, where=where)


def _check_version(data: dict, where: str) -> None:
    v = data.get("schema_version")
    if v != SCHEMA_VERSION:
        got = "no schema_version" if v is None else f"schema_version {v!r}"
        raise PlanSchemaError(f"{where}: plan JSON has {got}; this shard-opt reads schema_version {SCHEMA_VERSION} "
                              f"(re-run shard-opt --plan-json to write it)")


def _fields_of(cls, data: dict, where: str) -> dict:
    names = _FIELD_NAMES[cls]
    unknown = [k for k in data if k != "schema_version" and k not in names]
    if unknown:
        raise PlanSchemaError(f"{where}: unknown plan JSON key(s) {', '.join(map(repr, unknown))} "
                              f"for schema_version {SCHEMA_VERSION}")
    missing = [k for k in cls.REQUIRED if k not in data]
    if missing:
        raise PlanSchemaError(f"{where}: plan JSON lacks {', '.join(map(repr, missing))}")
    out = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        v = data[f.name]
        ok = _json_type(str(f.type))
        if v is not None and not isinstance(v, ok) or (v is None and f.name in cls.REQUIRED):
            raise PlanSchemaError(f"{where}: plan JSON key {f.name!r} is {type(v).__name__}, "
                                  f"not {'/'.join(t.__name__ for t in ok)}")
        if v is not None and f.name in RECORDS:
            _check_records(f.name, v, where)
        out[f.name] = _copy(v)
    return out


def _json_ok(v, tp) -> bool:
    """Whether JSON value ``v`` is of the annotated type ``tp`` (``int`` is a ``float``)."""
    import types
    import typing

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_json_ok(v, t) for t in typing.get_args(tp))
    if tp is type(None):
        return v is None
    if origin is list:
        (item,) = typing.get_args(tp) or (typing.Any,)
        return isinstance(v, list) and all(_json_ok(x, item) for x in v)
    if tp is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if tp is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if tp in (str, bool, dict):
        return isinstance(v, tp)
    return True


def _type_text(tp) -> str:
    text = tp.__name__ if isinstance(tp, type) and not getattr(tp, "__args__", None) else str(tp)
    return text.replace("typing.", "").replace("NoneType", "null")


def _check_records(key: str, value, where: str) -> None:
    """Refuse, in one line, a record under ``key`` (``RECORDS``) that is not an object, lacks
    a key every plan JSON writes, or holds a known key of the wrong JSON type."""
    import typing

    record, required, many = RECORDS[key]
    hints = typing.get_type_hints(record)
    items = list(enumerate(value)) if many else [(None, value)]
    if many and not isinstance(value, list):
        raise PlanSchemaError(f"{where}: plan JSON key {key!r} is {type(value).__name__}, not list")
    for i, r in items:
        at = f"{key}[{i}]" if many else key
        if not isinstance(r, dict):
            raise PlanSchemaError(f"{where}: plan JSON {at} is {type(r).__name__}, not an object ({record.__name__})")
        missing = [k for k in required if k not in r]
        if missing:
            raise PlanSchemaError(f"{where}: plan JSON {at} lacks {', '.join(map(repr, missing))} "
                                  f"({record.__name__}; re-run shard-opt --plan-json to write it)")
        for k, tp in hints.items():
            if k in r and not _json_ok(r[k], tp):
                raise PlanSchemaError(f"{where}: plan JSON {at}.{k} is {json.dumps(r[k])[:40]}, not "
                                      f"{_type_text(tp)} ({record.__name__})")


def _copy(v):
    """A deep copy of a JSON value (lists and dicts rebuilt, scalars shared)."""
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


_FIELD_NAMES = {cls: {f.name for f in dataclasses.fields(cls)} for cls in (Plan, PipelinePlan)}


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
        "layout_us": _r(ev.cost.layout_us),
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
               scored: Score | None = None, notes: list[str] | None = None) -> Plan:
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
    search = search or {"candidates_evaluated": 1, "seconds": 0.0, "exhaustive": True}
    if scored is not None:
        search["scored_cost"] = score_dict(scored)
    meta = {key: model.meta[key] for key in ("phase", "batch", "seq_len", "dtype") if key in model.meta}
    plan = Plan(
        model=model.name, source=model.source, mesh={"shape": list(mesh.shape), "axes": list(mesh.axes)},
        system=system_name, cost_model=cost_model_name, parallelism=list(parallelism),
        strategy=strategy_text(model, final.shardings), arguments=arguments,
        inputs=[a.name for a in model.arguments if a.kind in ("input", "cache")], groups=groups or [],
        collectives=collectives, cost=cost_dict(final), baselines=baselines or {}, search=search,
        memory_fallback=memory_fallback is not None, memory_fallback_reason=memory_fallback,
        meshes=[{"shape": list(m.shape), "axes": list(m.axes)} for m in meshes] if len(meshes) > 1 else None,
        num_layers=model.num_layers or None, architecture=model.architecture or None,
        notes=list(notes) if notes else None, **meta,
    )
    resized = model.meta.get("inputs_resized")  # --batch/--seq-len changed a script's token inputs
    if resized:
        from shard_opt.frontends import resized_text

        plan.inputs_resized = dict(resized)
        plan.note(resized_text(resized, model.name))
    if model.meta.get("inputs_not_resized"):
        plan.note(f"{model.name}: {model.meta['inputs_not_resized']}")
    return plan


def dumps(plan: Plan | PipelinePlan) -> str:
    """The plan JSON's text (``--plan-json``)."""
    return json.dumps(plan.to_json(), indent=2, sort_keys=False) + "\n"
