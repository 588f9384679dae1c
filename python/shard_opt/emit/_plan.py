"""Small readers of the plan JSON shared by the emitters.

The plan is a plain dict (DESIGN.md "Plan JSON" plus the fields the search adds).
These helpers read it defensively: optional fields may be missing.
"""

from __future__ import annotations

import math
import re

_LAYER_INDEX = re.compile(r"\.(\d+)\.")

DTYPE_BYTES = {
    "f64": 8, "f32": 4, "bf16": 2, "f16": 2, "f8E4M3FN": 1, "f8E5M2": 1,
    "i64": 8, "i32": 4, "i16": 2, "i8": 1, "ui8": 1, "i1": 1, "ui32": 4, "ui64": 8,
    "si32": 4, "si64": 8, "ui16": 2, "si16": 2, "si8": 1,
}


def dtype_bytes(dtype: str | None) -> int:
    return DTYPE_BYTES.get(dtype or "", 4)


def role(name: str) -> str:
    """Layer indices replaced by ``*`` (the same rule as ``lowered.Argument.role``)."""
    return _LAYER_INDEX.sub(".*.", "." + name + ".").strip(".")


def layer_of(name: str) -> int | None:
    m = _LAYER_INDEX.search("." + name + ".")
    return int(m.group(1)) if m else None


def mesh_of(plan: dict) -> tuple[list[int], list[str]]:
    mesh = plan.get("mesh") or {}
    shape = list(mesh.get("shape") or [1])
    axes = list(mesh.get("axes") or ["batch", "model"][: len(shape)])
    return shape, axes


def axis_sizes(plan: dict) -> dict[str, int]:
    shape, axes = mesh_of(plan)
    return dict(zip(axes, shape))


def is_sharded(sharding) -> bool:
    return any(d for d in (sharding or []))


def partition_spec(sharding) -> tuple:
    """Plan sharding -> PyTorch/JAX partition spec values.

    >>> partition_spec([["model"], []])
    ('model', None)
    >>> partition_spec([["batch", "model"], []])
    (('batch', 'model'), None)
    """
    out = []
    for dim in sharding or []:
        if not dim:
            out.append(None)
        elif len(dim) == 1:
            out.append(dim[0])
        else:
            out.append(tuple(dim))
    return tuple(out)


def spec_text(sharding) -> str:
    """The partition spec as Python source: ``("model", None)``."""
    spec = partition_spec(sharding)
    parts = [_spec_item(x) for x in spec]
    if len(parts) == 1:
        return "(" + parts[0] + ",)"
    return "(" + ", ".join(parts) + ")"


def _spec_item(x) -> str:
    if x is None:
        return "None"
    if isinstance(x, tuple):
        return "(" + ", ".join(f'"{a}"' for a in x) + ")"
    return f'"{x}"'


def sdy_text(sharding) -> str:
    """``[{"model"}, {}]`` (the Shardy dims list)."""
    return "[" + ", ".join("{" + ", ".join(f'"{a}"' for a in d) + "}" for d in (sharding or [])) + "]"


def collectives(plan: dict) -> list[dict]:
    """The plan's collectives in program order."""
    cs = list(plan.get("collectives") or [])
    if all("op_index" in c for c in cs):
        cs.sort(key=lambda c: c["op_index"])
    return cs


def multiplicity(c: dict) -> int:
    """How many times a listed collective runs (a representative block may stand for N)."""
    return int(c.get("count", 1) or 1)


def ccl_totals(plan: dict) -> tuple[int, int]:
    """(count, bytes) summed over the listed collectives."""
    cs = collectives(plan)
    return (sum(multiplicity(c) for c in cs),
            sum(int(c.get("bytes_per_device") or 0) * multiplicity(c) for c in cs))


def local_elements(c: dict) -> int:
    """Per-device operand elements of a collective."""
    if c.get("in_local_shape"):
        return math.prod(c["in_local_shape"])
    b = c.get("bytes_per_device")
    if b:
        return int(b) // dtype_bytes(c.get("dtype"))
    return math.prod(c.get("shape") or [1])


def component_role(component: str | None) -> str:
    """``model.layers.3.mlp`` -> ``model.layers.*.mlp``; None -> ``(model)``."""
    if not component:
        return "(model)"
    return role(component)


def fmt_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_us(x) -> str:
    if x is None:
        return "n/a"
    x = float(x)
    if x >= 1000:
        return f"{x / 1000:.2f} ms"
    return f"{x:.1f} us"


def shape_text(shape, dtype: str | None = None) -> str:
    dims = "x".join(str(s) for s in (shape or []))
    if dtype:
        return f"{dims}x{dtype}" if dims else dtype
    return dims or "scalar"
