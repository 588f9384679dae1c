"""The plan as JAX code: a mesh, a ``PartitionSpec`` per argument, ``NamedSharding``s.

For JAX inputs (``--emit-torch`` on a JAX plan writes this instead)::

    mesh = jax.make_mesh((2, 4), ("batch", "model"), axis_types=(AxisType.Auto,) * 2)
    SPECS = {"params.w1": P("model", None), ...}
    IN_SHARDINGS = [NamedSharding(mesh, SPECS[name]) for name in ARG_NAMES]

``AxisType.Auto`` leaves propagation to the compiler (Shardy), as shard-opt assumed
when it priced the plan; ``jax.jit(f, in_shardings=..., out_shardings=...)`` takes the
lists in the order of the flattened arguments.
"""

from __future__ import annotations

import json

from shard_opt.emit import _plan


def _p_text(sharding) -> str:
    spec = _plan.partition_spec(sharding)
    items = []
    for x in spec:
        if x is None:
            items.append("None")
        elif isinstance(x, tuple):
            items.append("(" + ", ".join(f'"{a}"' for a in x) + ")")
        else:
            items.append(f'"{x}"')
    return "P(" + ", ".join(items) + ")"


def emit_jax(plan) -> str:
    """Python source setting up the plan's mesh and shardings with ``jax.sharding`` (the
    results are left replicated: the plan records no result shardings). ``plan``: the ``Plan``
    (a plan JSON dict is read as one, ``_plan.as_plan``)."""
    plan = _plan.as_plan(plan)
    shape, axes = _plan.mesh_of(plan)
    cost = plan.cost
    lines = [
        f'"""Sharding plan for {plan.get("model", "the model")}, written by shard-opt.',
        "",
        f"Mesh {'x'.join(map(str, shape))} ({', '.join(f'{a}={s}' for a, s in zip(axes, shape))})"
        + (f" on {plan['system']}" if plan.get("system") else "") + ".",
    ]
    if plan.get("strategy"):
        lines.append(f"Strategy: {plan['strategy']}.")
    if cost:
        lines.append(f"Modeled step {_plan.fmt_us(cost.total_us)}, {cost.ccl_count} collectives.")
    if plan.get("memory_fallback"):
        lines.append("MEMORY FALLBACK: the fastest plan does not fit in DRAM: "
                     + str(plan.get("memory_fallback_reason") or ""))
    lines += [
        "Use: jax.jit(f, in_shardings=IN_SHARDINGS, out_shardings=OUT_SHARDINGS) with f's",
        "arguments flattened in ARG_NAMES order.",
        '"""',
        "",
        "import jax",
        "from jax.sharding import AxisType, NamedSharding, PartitionSpec as P",
        "",
        f"mesh = jax.make_mesh(({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), "
        f"({', '.join(chr(34) + a + chr(34) for a in axes)}{',' if len(axes) == 1 else ''}), "
        f"axis_types=(AxisType.Auto,) * {len(shape)})",
        "",
        "# Partition spec of every argument, by name (None: that dim is replicated).",
        "SPECS = {",
    ]
    names = []
    for a in plan.arguments or []:
        names.append(a.name)
        shape_txt = "x".join(str(d) for d in a.shape or []) or "scalar"
        lines.append(f'    {json.dumps(a.name)}: {_p_text(a.sharding)},  # {a.kind or ""} '
                     f'{shape_txt}x{a.dtype or ""}'.rstrip())
    lines += ["}", "ARG_NAMES = ["]
    lines += [f"    {json.dumps(n)}," for n in names]
    lines += [
        "]",
        "IN_SHARDINGS = [NamedSharding(mesh, SPECS[name]) for name in ARG_NAMES]",
        "OUT_SHARDINGS = None  # results are returned replicated",
    ]
    return "\n".join(lines) + "\n"
