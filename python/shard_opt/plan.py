"""The plan (docs/design.md, "The plan value and its JSON"; docs/plan.md): one frozen value.

Only value types live here. ``Plan`` is one model's plan, ``PipelinePlan`` several models'
on one mesh; the records under them (``MeshRecord``, ``ArgumentRecord``,
``CollectiveRecord``, ``CostRecord``, ``PairRecord``: ``RECORDS``) are dataclasses whose
fields are their JSON keys, named apart from the engine's ``lowered.Argument``,
``facts.Collective`` and ``facts.Cost`` they are written from. Every one is frozen, and
so is what it holds: a list is a ``FrozenList``, a JSON object a ``FrozenDict``, an argument's
sharding a ``sharding.TensorSharding``. A plan is built once, from the search's result,
the explanation and the checks (``shard_opt.build``), and read by every emitter (the
report, the torch script, the lit test, verify-ir); to vary one (a test), build another
with ``dataclasses.replace``.

``Plan.to_json()`` is the plan JSON ``--plan-json`` writes; ``Plan.from_json()`` reads it
back, checking every key and its JSON type, and refuses a plan of another
``SCHEMA_VERSION`` with one line.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from shard_opt.sharding import TensorSharding

SCHEMA_VERSION = 1  # the plan JSON's layout; a reader refuses any other (Plan.from_json)


class _Frozen:
    """What a plan's frozen JSON containers share: a change raises, a copy is the value
    itself, a pickle rebuilds it from its plain form (``_PLAIN``)."""

    _PLAIN: ClassVar[type]

    def _frozen(self, *args, **kwargs):
        raise TypeError("a plan is frozen: build another (dataclasses.replace)")

    def __reduce__(self):
        return type(self), (self._PLAIN(self),)

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


class FrozenDict(_Frozen, dict):
    """A JSON object that cannot change (a plan's field, or a value inside one)."""

    _PLAIN = dict
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _Frozen._frozen  # type: ignore

    def __hash__(self):  # noqa: D105
        return hash(tuple(self.items()))


class FrozenList(_Frozen, list):
    """A JSON list that cannot change (equal to the list it was made from)."""

    _PLAIN = list
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _Frozen._frozen  # type: ignore
    append = extend = insert = remove = pop = clear = sort = reverse = _Frozen._frozen  # type: ignore

    def __hash__(self):  # noqa: D105
        return hash(tuple(self))


def freeze(v):
    """A JSON value (or a record, a sharding) as the plan holds it: every dict a
    ``FrozenDict``, every list a ``FrozenList``, all the way down."""
    if isinstance(v, (FrozenDict, FrozenList, Record, TensorSharding)):
        return v
    if isinstance(v, dict):
        return FrozenDict({k: freeze(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return FrozenList(freeze(x) for x in v)
    return v


def thaw(v):
    """A plan's value as plain JSON (a copy: lists and dicts; a record as its JSON; a
    sharding as its per-dim axis names)."""
    if isinstance(v, Record):
        return v.to_json()
    if isinstance(v, TensorSharding):
        return v.axis_names()
    if isinstance(v, dict):
        return {k: thaw(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [thaw(x) for x in v]
    return v


class _ByKey:
    """``x[key]`` / ``x.get(key)`` / ``key in x``: a field by its JSON key, when the plan
    JSON holds it, as a dict of the JSON would (read-only: for scripts and tests written
    against the plan JSON; shard-opt's own code reads the attributes)."""

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


@dataclass(frozen=True, kw_only=True)
class Record(_ByKey):
    """A record under the plan: its fields are its JSON keys, in the order the plan JSON
    writes them. ``to_json`` writes a field without a default always, one of ``WRITTEN``
    always (null when None), any other only when it is set. ``CODECS``: a field held as
    another type than its JSON (``field -> (JSON type, from JSON, to JSON)``)."""

    WRITTEN: ClassVar[tuple[str, ...]] = ()  # optional fields every run writes, null or not
    TITLE: ClassVar[str] = ""  # what a message of the plan JSON reader calls it (default: the class name)
    CODECS: ClassVar[dict] = {}

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            codec = self.CODECS.get(f.name)
            if codec is not None and v is not None:
                # held as its JSON says it: a value given in the held type goes through its JSON
                # (a sharding's sub-axes and open dims are not in the plan JSON)
                v = codec[1](thaw(v) if isinstance(v, (list, tuple)) else codec[2](v))
            object.__setattr__(self, f.name, freeze(v))

    def to_json(self) -> dict:
        """The record as the plan JSON writes it (a copy)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if self._written(f):
                v = getattr(self, f.name)
                out[f.name] = self.CODECS[f.name][2](v) if f.name in self.CODECS and v is not None else thaw(v)
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

    def __getitem__(self, key: str):
        v = super().__getitem__(key)
        codec = self.CODECS.get(key)
        return codec[2](v) if codec is not None and v is not None else v  # its JSON, as the key reads

    def get(self, key: str, default=None):
        return self[key] if self._holds(key) else default


@dataclass(frozen=True, kw_only=True)
class MeshRecord(Record):
    shape: list[int]
    axes: list[str]


@dataclass(frozen=True, kw_only=True)
class ArgumentRecord(Record):
    TITLE = "Argument"
    # the plan JSON writes a sharding as its per-dim axis names ([] = replicated)
    CODECS = {"sharding": (list[list[str]], TensorSharding.of, TensorSharding.axis_names)}

    index: int
    name: str
    kind: str  # param, buffer, input, cache
    shape: list[int]
    dtype: str
    sharding: TensorSharding  # per dim, the mesh axes it is split on
    storage: str | None = None  # stored on device as a block float


@dataclass(frozen=True, kw_only=True)
class CollectiveRecord(Record):
    TITLE = "Collective"
    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute, all_slice
    axes: list[str]
    shape: list[int]
    dtype: str
    bytes_per_device: int
    # docs/design.md's minimum plan JSON: a collective without group_size or layer is still a plan
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


@dataclass(frozen=True, kw_only=True)
class CostRecord(Record):
    TITLE = "Cost"
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


@dataclass(frozen=True, kw_only=True)
class PairRecord(Record):
    """A column -> row pair the model's dataflow holds (``shard_opt.structure``), by role:
    the column weights, whose output features (``column_dims``) feed the row weights' input
    features (``row_dims``) through elementwise ops, views and attention; an output head has
    no row. ``kind``: ``attention``, ``mlp``, ``conv``, ``experts`` or ``head``."""

    TITLE = "Pair"
    kind: str
    column: list[str]
    row: list[str]
    column_dims: list[int] | None = None
    row_dims: list[int] | None = None


# The records under a top-level key (the emitters read them as attributes): key -> (the
# record, a list of them). ``from_json`` builds them, checking each one's keys and their
# JSON types (``_records_of``).
RECORDS: dict[str, tuple[type[Record], bool]] = {
    "mesh": (MeshRecord, False),
    "meshes": (MeshRecord, True),
    "arguments": (ArgumentRecord, True),
    "collectives": (CollectiveRecord, True),
    "cost": (CostRecord, False),
    "pairs": (PairRecord, True),
}
_RECORD_FIELDS = {cls: {f.name: f for f in dataclasses.fields(cls)}
                  for cls in (MeshRecord, ArgumentRecord, CollectiveRecord, CostRecord, PairRecord)}


class PlanSchemaError(ValueError):
    """A plan JSON this version cannot read (another schema version, a missing or unknown key)."""


@dataclass(frozen=True)
class Plan(_ByKey):
    """One model's plan; the fields are the plan JSON's keys, in the order it writes them.

    A field is written when it is set (not None), a field of ``REQUIRED`` always, and
    ``memory_fallback_reason`` whenever ``memory_fallback`` is (null when there is no
    fallback). Frozen, with everything it holds (module docstring)."""

    model: str
    source: str | None = None
    mesh: MeshRecord | None = None
    system: str | None = None
    cost_model: str | None = None
    parallelism: list[str] | None = None
    strategy: str | None = None
    arguments: list[ArgumentRecord] | None = None
    inputs: list[str] | None = None
    groups: list[dict] | None = None
    collectives: list[CollectiveRecord] | None = None
    cost: CostRecord | None = None
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
    pairs: list[PairRecord] | None = None
    checks: dict | None = None
    mesh_choice: dict | None = None
    numerics: dict | None = None
    xla_crosscheck: dict | None = None

    # what a plan JSON must hold to be read (docs/design.md's minimum fields); the driver writes
    # every key above ``meshes`` always (memory_fallback_reason null when there is none)
    REQUIRED: ClassVar[tuple[str, ...]] = ("model", "mesh", "system", "arguments", "collectives", "cost",
                                           "baselines", "search")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, freeze(getattr(self, f.name)))

    def to_json(self) -> dict:
        """The plan JSON: ``schema_version``, then every required field and every optional
        field that is set (a copy: changing it leaves the plan alone)."""
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        for f in dataclasses.fields(self):
            if self._written(f.name):
                out[f.name] = thaw(getattr(self, f.name))
        return out

    def _written(self, name: str) -> bool:
        """Whether the plan JSON holds ``name``."""
        if name not in _FIELD_NAMES[type(self)]:
            return False
        return (getattr(self, name) is not None or name in self.REQUIRED
                or (name == "memory_fallback_reason" and getattr(self, "memory_fallback", None) is not None))

    _holds = _written

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


@dataclass(frozen=True)
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

    REQUIRED: ClassVar[tuple[str, ...]] = ("pipeline", "mesh", "slowest")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, freeze(getattr(self, f.name)))

    def to_json(self) -> dict:
        """The pipeline's plan JSON: one ``schema_version`` for all, each model's plan under ``pipeline``."""
        subs = [{k: v for k, v in p.to_json().items() if k != "schema_version"} for p in self.pipeline]
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "pipeline": subs,
                               "mesh": thaw(self.mesh), "slowest": self.slowest}
        for k in ("notes", "mesh_choice", "numerics", "serving"):
            if getattr(self, k) is not None:
                out[k] = thaw(getattr(self, k))
        return out

    @classmethod
    def from_json(cls, data: dict, *, where: str = "plan") -> "PipelinePlan":
        if not isinstance(data, dict):
            raise PlanSchemaError(f"{where}: not a shard-opt plan (a JSON object is expected)")
        _check_version(data, where)
        if "pipeline" not in data:
            raise PlanSchemaError(f"{where}: one model's plan, not a pipeline's (Plan.from_json reads it)")
        fields = _fields_of(cls, data, where)
        fields["pipeline"] = [Plan.from_json({"schema_version": SCHEMA_VERSION, **p}, where=f"{where}: pipeline[{i}]")
                              for i, p in enumerate(fields["pipeline"])]
        return cls(**fields)

    _holds = _written = Plan._written


def plan_from_json(data: dict, *, where: str = "plan") -> Plan | PipelinePlan:
    """A plan JSON as its value: a ``PipelinePlan`` when it holds a pipeline, else a ``Plan``."""
    if isinstance(data, dict) and "pipeline" in data:
        return PipelinePlan.from_json(data, where=where)
    return Plan.from_json(data, where=where)


def dumps(plan: Plan | PipelinePlan) -> str:
    """The plan JSON's text (``--plan-json``)."""
    return json.dumps(plan.to_json(), indent=2, sort_keys=False) + "\n"


def _check_version(data: dict, where: str) -> None:
    v = data.get("schema_version")
    if v != SCHEMA_VERSION:
        got = "no schema_version" if v is None else f"schema_version {v!r}"
        raise PlanSchemaError(f"{where}: plan JSON has {got}; this shard-opt reads schema_version {SCHEMA_VERSION} "
                              f"(re-run shard-opt --plan-json to write it)")


_FIELD_NAMES = {cls: {f.name for f in dataclasses.fields(cls)} for cls in (Plan, PipelinePlan)}


def _fields_of(cls, data: dict, where: str) -> dict:
    names = _FIELD_NAMES[cls]
    unknown = [k for k in data if k != "schema_version" and k not in names]
    if unknown:
        raise PlanSchemaError(f"{where}: unknown plan JSON key(s) {', '.join(map(repr, unknown))} "
                              f"for schema_version {SCHEMA_VERSION}")
    missing = [k for k in cls.REQUIRED if k not in data]
    if missing:
        raise PlanSchemaError(f"{where}: plan JSON lacks {', '.join(map(repr, missing))}")
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        v = data[f.name]
        # a record key's items are checked by _records_of, with the record's own message
        tp = (list if RECORDS[f.name][1] else dict) if f.name in RECORDS else hints[f.name]
        if (v is not None and not _json_ok(v, tp)) or (v is None and f.name in cls.REQUIRED):
            raise PlanSchemaError(f"{where}: plan JSON key {f.name!r} is {type(v).__name__}, "
                                  f"not {_json_kind(hints[f.name])}")
        out[f.name] = _records_of(f.name, v, where) if v is not None and f.name in RECORDS else v
    return out


def _json_ok(v, tp) -> bool:
    """Whether JSON value ``v`` is of the annotated type ``tp`` (``int`` is a ``float``; a
    record or a plan is a JSON object): the one type check of every plan JSON key."""
    import types

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_json_ok(v, t) for t in typing.get_args(tp))
    if tp is type(None):
        return v is None
    if origin is list:
        (item,) = typing.get_args(tp) or (typing.Any,)
        return isinstance(v, list) and all(_json_ok(x, item) for x in v)
    if origin is dict or (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
        return isinstance(v, dict)
    if tp is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if tp is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if tp in (str, bool, dict, list):
        return isinstance(v, tp)
    return True


def _json_kind(tp) -> str:
    """The JSON kind a top-level key of annotated type ``tp`` holds (``dict``, ``list``,
    ``str`` ...), for the message of a key of the wrong kind."""
    import types

    args = [t for t in typing.get_args(tp) if t is not type(None)] \
        if typing.get_origin(tp) in (typing.Union, types.UnionType) else [tp]
    kinds = []
    for t in args:
        origin = typing.get_origin(t) or t
        kind = "list" if origin is list else "dict" if origin is dict or dataclasses.is_dataclass(origin) else \
            getattr(origin, "__name__", str(origin))
        kinds.append(kind)
    return "/".join(dict.fromkeys(kinds))


def _type_text(tp) -> str:
    text = tp.__name__ if isinstance(tp, type) and not getattr(tp, "__args__", None) else str(tp)
    return text.replace("typing.", "").replace("NoneType", "null")


def _records_of(key: str, value, where: str):
    """The record(s) under ``key`` (``RECORDS``); refused in one line when one is not an
    object, lacks a key every plan JSON writes, holds a key the record does not have, or
    holds a key of the wrong JSON type."""
    record, many = RECORDS[key]
    if many and not isinstance(value, list):
        raise PlanSchemaError(f"{where}: plan JSON key {key!r} is {type(value).__name__}, not list")
    hints = typing.get_type_hints(record)
    fields = _RECORD_FIELDS[record]
    name = record.TITLE or record.__name__
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
        values = {}
        for k, v in r.items():
            codec = record.CODECS.get(k)
            tp = codec[0] if codec else hints[k]
            if not _json_ok(v, tp):
                raise PlanSchemaError(f"{where}: plan JSON {at}.{k} is {json.dumps(v)[:40]}, not "
                                      f"{_type_text(tp)} ({name})")
            values[k] = codec[1](v) if codec and v is not None else v
        out.append(record(**values))
    return out if many else out[0]
