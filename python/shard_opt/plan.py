"""The plan (DESIGN.md "Plan JSON", docs/plan.md): one typed value, every figure computed.

``Plan`` is what the driver builds (``build_plan``, once per model) and what every
emitter reads (the report, the torch script, the lit test, verify-ir, the JAX code);
``Plan.to_json()`` is the plan JSON ``--plan-json`` writes, ``Plan.from_json()`` reads it
back (and refuses a plan of another ``SCHEMA_VERSION`` with one line). Its fields are the
plan JSON's top-level keys. The records the emitters read under them are dataclasses too
(``Record``: ``MeshRecord`` for ``mesh`` and ``meshes``, ``Argument``, ``Collective``,
``Cost``; ``RECORDS``), their fields the JSON's keys: ``from_json`` builds them, checking
each one's keys and types, and ``to_json`` writes them back as they were written. The
other records (a baseline, a group, a safety row ...) stay JSON objects. A pipeline's plan
is a ``PipelinePlan``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from shard_opt.evaluate import Evaluation, Score
from shard_opt.lowered import LoweredModel
from shard_opt.sharding import Mesh, TensorSharding


SCHEMA_VERSION = 1  # the plan JSON's layout; a reader refuses any other (Plan.from_json)


class _ByKey:
    """``x[key]`` / ``x.get(key)`` / ``key in x``: a field by its JSON key, when the plan
    JSON holds it (``_holds``), as a dict of the JSON would (for scripts and tests written
    against the JSON; shard-opt's own code reads the attributes)."""

    def _holds(self, key: str) -> bool:
        raise NotImplementedError

    def __getitem__(self, key: str):
        if not self._holds(key):
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        return getattr(self, key) if self._holds(key) else default

    def __contains__(self, key: str) -> bool:
        return self._holds(key)


@dataclass(kw_only=True)
class Record(_ByKey):
    """A record under the plan (``MeshRecord``, ``Argument``, ``Collective``, ``Cost``): its
    fields are its JSON keys, in the order the plan JSON writes them. ``to_json`` writes a
    field without a default always, one of ``WRITTEN`` always (null when None), any other
    only when it is set. ``record[key]`` / ``record.get(key)`` / ``key in record`` read a
    field by its JSON key, as a dict of the JSON would (for scripts and tests written
    against the JSON; shard-opt's own code reads the attributes)."""

    WRITTEN: ClassVar[tuple[str, ...]] = ()  # optional fields every run writes, null or not

    def to_json(self) -> dict:
        """The record as the plan JSON writes it (a copy)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if self._written(f):
                out[f.name] = _copy(getattr(self, f.name))
        return out

    def _written(self, f: dataclasses.Field) -> bool:
        return (getattr(self, f.name) is not None or f.name in self.WRITTEN
                or f.default is dataclasses.MISSING)

    @classmethod
    def required(cls) -> tuple[str, ...]:
        """The keys every plan JSON writes in this record (the fields without a default)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING)

    def _holds(self, key: str) -> bool:
        f = _RECORD_FIELDS[type(self)].get(key)
        return f is not None and self._written(f)


@dataclass(kw_only=True)
class MeshRecord(Record):
    shape: list[int]
    axes: list[str]


@dataclass(kw_only=True)
class Argument(Record):
    index: int
    name: str
    kind: str  # param, buffer, input, cache
    shape: list[int]
    dtype: str
    sharding: list[list[str]]  # per dim, the mesh axes it is split on ([] = replicated)
    storage: str | None = None  # stored on device as a block float


@dataclass(kw_only=True)
class Collective(Record):
    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute, all_slice
    axes: list[str]
    shape: list[int]
    dtype: str
    bytes_per_device: int
    # DESIGN.md's minimum plan JSON: a collective without group_size or layer is still a plan
    group_size: int | None = None
    component: str
    layer: int | None = None
    time_us: float | None = None
    op_index: int | None = None
    loc: str | None = None
    producer: str | None = None
    reason: str | None = None
    cause: str | None = None
    count: int | None = None  # listed once for N runs (shard-opt lists each run; the emitters multiply)

    WRITTEN = ("group_size", "layer", "time_us", "op_index", "loc", "producer", "reason")


@dataclass(kw_only=True)
class Cost(Record):
    total_us: float | None
    compute_us: float | None
    ccl_us: float | None
    ccl_count: int
    ccl_bytes: int
    memory_per_device_bytes: int
    fits: bool
    layout_us: float | None = None  # the part of compute_us for the estimated unpriced TTNN ops (costmodel/ttnn_ops.py)
    ccl_per_layer: int | None = None  # a model scored from short copies: one repeated layer's collectives
    checked_us: float | None = None  # the tt-mlir check's figure for what tt-mlir emits

    WRITTEN = ("layout_us",)


# The records under a top-level key (the emitters read them as attributes): key -> (the
# record, a list of them). ``from_json`` builds them, checking each one's keys and their
# JSON types (``_records_of``).
RECORDS: dict[str, tuple[type[Record], bool]] = {
    "mesh": (MeshRecord, False),
    "meshes": (MeshRecord, True),
    "arguments": (Argument, True),
    "collectives": (Collective, True),
    "cost": (Cost, False),
}
_RECORD_FIELDS = {cls: {f.name: f for f in dataclasses.fields(cls)} for cls in (MeshRecord, Argument, Collective, Cost)}


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
class Plan(_ByKey):
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

    def _holds(self, key: str) -> bool:
        return self._written(key)


@dataclass
class PipelinePlan(_ByKey):
    """The plan of several models on one mesh (``shard-opt A B C``): each model's ``Plan``,
    the shared mesh, the slowest model (which chose the mesh) and why it was chosen. A
    ``--serve`` run's plan is one too: its two phases' plans (prefill, decode), the decode
    mesh, and the deployment in ``serving``."""

    pipeline: list[Plan]
    mesh: MeshRecord
    slowest: str
    notes: list[str] | None = None
    mesh_choice: dict | None = None
    numerics: dict | None = None  # --verify-numerics: passed, and the models that failed
    serving: dict | None = None  # --serve: the deployment (pipeline = [prefill plan, decode plan]; docs/plan.md)

    REQUIRED = ("pipeline", "mesh", "slowest")

    def to_json(self) -> dict:
        """The pipeline's plan JSON: one ``schema_version`` for all, each model's plan under ``pipeline``."""
        subs = [{k: v for k, v in p.to_json().items() if k != "schema_version"} for p in self.pipeline]
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "pipeline": subs,
                               "mesh": _copy(self.mesh), "slowest": self.slowest}
        for k in ("notes", "mesh_choice", "numerics", "serving"):
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

    _holds, _written = Plan._holds, Plan._written


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
        out[f.name] = _records_of(f.name, v, where) if v is not None and f.name in RECORDS else _copy(v)
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


def _records_of(key: str, value, where: str):
    """The record(s) under ``key`` (``RECORDS``); refused in one line when one is not an
    object, lacks a key every plan JSON writes, holds a key the record does not have, or
    holds a key of the wrong JSON type."""
    import typing

    record, many = RECORDS[key]
    if many and not isinstance(value, list):
        raise PlanSchemaError(f"{where}: plan JSON key {key!r} is {type(value).__name__}, not list")
    hints = typing.get_type_hints(record)
    fields = _RECORD_FIELDS[record]
    name = record.__name__
    out = []
    for i, r in enumerate(value) if many else [(None, value)]:
        at = f"{key}[{i}]" if many else key
        if not isinstance(r, dict):
            raise PlanSchemaError(f"{where}: plan JSON {at} is {type(r).__name__}, not an object ({name})")
        missing = [k for k in record.required() if k not in r]
        if missing:
            raise PlanSchemaError(f"{where}: plan JSON {at} lacks {', '.join(map(repr, missing))} "
                                  f"({name}; re-run shard-opt --plan-json to write it)")
        unknown = [k for k in r if k not in fields]
        if unknown:
            raise PlanSchemaError(f"{where}: plan JSON {at} has unknown key(s) {', '.join(map(repr, unknown))} "
                                  f"({name}, schema_version {SCHEMA_VERSION})")
        for k, v in r.items():
            if not _json_ok(v, hints[k]):
                raise PlanSchemaError(f"{where}: plan JSON {at}.{k} is {json.dumps(v)[:40]}, not "
                                      f"{_type_text(hints[k])} ({name})")
        out.append(record(**{k: _copy(v) for k, v in r.items()}))
    return out if many else out[0]


def _copy(v):
    """A deep copy of a JSON value (lists and dicts rebuilt, scalars shared; a record as its JSON)."""
    if isinstance(v, Record):
        return v.to_json()
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


def cost_of(ev: Evaluation) -> Cost:
    """An evaluation's cost as the plan records it."""
    s = ev.score
    return Cost(total_us=_r(s.total_us), compute_us=_r(s.compute_us), ccl_us=_r(s.ccl_us),
                ccl_count=s.ccl_count, ccl_bytes=s.ccl_bytes, memory_per_device_bytes=int(s.memory_bytes),
                fits=bool(s.fits), layout_us=_r(ev.cost.layout_us))


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
    """A collective as a baseline's JSON lists it (``baselines.loader-spec.collectives``):
    what it moves, and the component it belongs to (``args``: argument index ->
    ``lowered.Argument``); the plan's own add their time and origin (``collectives_of``)."""
    origin = args.get(c.origin_arg)
    return {"kind": c.kind, "axes": list(c.axes), "shape": list(c.global_shape), "dtype": c.dtype,
            "bytes_per_device": c.bytes_per_device, "group_size": c.group_size,
            "component": component_of(origin.name) if origin else "(model inputs)",
            "layer": origin.layer if origin else None}


def collectives_of(ev: Evaluation, args: dict) -> list[Collective]:
    """An evaluation's collectives as the plan lists them, each with its modeled time."""
    out = []
    times = ev.cost.collective_us or [None] * len(ev.facts.collectives)
    for c, t in zip(ev.facts.collectives, times):
        out.append(Collective(**collective_entry(c, args), time_us=_r(t), op_index=c.op_index, loc=c.loc,
                              producer=c.producer, reason=c.reason, cause=c.cause or None))
    return out


def mesh_record(mesh: Mesh) -> MeshRecord:
    return MeshRecord(shape=list(mesh.shape), axes=list(mesh.axes))


def checkable(model: LoweredModel, mesh: Mesh, ev: Evaluation) -> Plan:
    """The part of a plan the tt-mlir check reads (``shard_opt.ttmlir.check``): its mesh,
    its priced collectives and its cost, for a plan that is not (yet) built."""
    return Plan(model=model.name, mesh=mesh_record(mesh),
                collectives=collectives_of(ev, {a.index: a for a in model.arguments}), cost=cost_of(ev))


def build_plan(model: LoweredModel, mesh: Mesh, meshes: list[Mesh], system_name: str,
               cost_model_name: str, parallelism: list[str], final: Evaluation, *,
               groups: list[dict] | None = None, baselines: dict | None = None,
               search: dict | None = None, memory_fallback: str | None = None,
               scored: Score | None = None, notes: list[str] | None = None) -> Plan:
    args = {a.index: a for a in model.arguments}
    arguments = []
    for a in model.arguments:
        s = final.shardings.get(a.index) or TensorSharding.replicated(len(a.shape))
        arguments.append(Argument(index=a.index, name=a.name, kind=a.kind, shape=list(a.shape), dtype=a.dtype,
                                  sharding=s.axis_names(), storage=final.storage.get(a.index)))
    collectives = collectives_of(final, args)
    search = search or {"candidates_evaluated": 1, "seconds": 0.0, "exhaustive": True}
    if scored is not None:
        search["scored_cost"] = score_dict(scored)
    meta = {key: model.meta[key] for key in ("phase", "batch", "seq_len", "dtype") if key in model.meta}
    plan = Plan(
        model=model.name, source=model.source, mesh=mesh_record(mesh),
        system=system_name, cost_model=cost_model_name, parallelism=list(parallelism),
        strategy=strategy_text(model, final.shardings), arguments=arguments,
        inputs=[a.name for a in model.arguments if a.kind in ("input", "cache")], groups=groups or [],
        collectives=collectives, cost=cost_of(final), baselines=baselines or {}, search=search,
        memory_fallback=memory_fallback is not None, memory_fallback_reason=memory_fallback,
        meshes=[mesh_record(m) for m in meshes] if len(meshes) > 1 else None,
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
