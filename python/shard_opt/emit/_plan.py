"""Small readers of the plan shared by the emitters.

The plan is a ``shard_opt.plan.Plan``; its mesh, arguments, collectives and cost are
records read as attributes (``plan.MeshRecord``, ``ArgumentRecord``, ``CollectiveRecord``, ``CostRecord``),
the rest (baselines, groups, the architecture ...) JSON objects. These helpers read it
defensively: optional fields may be missing (None).
"""

from __future__ import annotations

import math
from collections import OrderedDict

from shard_opt.facts import dtype_bytes  # noqa: F401  (one table: bfp8 is 1088/1024 bytes)
from shard_opt.lowered import layer_of, role_of as role  # noqa: F401  (the emitters' names for them)
from shard_opt.sharding import TensorSharding

INPUTS_COMPONENT = "(model inputs)"


def as_plan(plan):
    """The typed plan an emitter reads: a ``Plan`` (or ``PipelinePlan``) as it is, a plan
    JSON dict read as one (``plan.plan_from_json``: it must carry this version's
    ``schema_version``)."""
    from shard_opt.plan import PipelinePlan, Plan, plan_from_json

    return plan if isinstance(plan, (Plan, PipelinePlan)) else plan_from_json(plan)


def mesh_of(plan) -> tuple[list[int], list[str]]:
    mesh = plan.mesh
    shape = list((mesh and mesh.shape) or [1])
    axes = list((mesh and mesh.axes) or ["batch", "model"][: len(shape)])
    return shape, axes


def axis_sizes(plan) -> dict[str, int]:
    shape, axes = mesh_of(plan)
    return dict(zip(axes, shape))


def as_sharding(sharding) -> TensorSharding | None:
    """A sharding as the emitters read it: a ``TensorSharding`` (an argument's), or per-dim
    axis names as a plan JSON object holds them (a baseline's, a group's) read as one."""
    if sharding is None or isinstance(sharding, TensorSharding):
        return sharding
    return TensorSharding.of(sharding)


def is_sharded(sharding) -> bool:
    s = as_sharding(sharding)
    return s is not None and not s.is_replicated


def partition_spec(sharding) -> tuple:
    """A plan sharding -> PyTorch/JAX partition spec values (``TensorSharding.partition_spec``)."""
    s = as_sharding(sharding)
    return s.partition_spec() if s is not None else ()


def spec_text(sharding) -> str:
    """The partition spec as Python source: ``("model", None)`` (``TensorSharding.spec_text``)."""
    s = as_sharding(sharding)
    return s.spec_text() if s is not None and s.rank else "()"


def sdy_text(sharding) -> str:
    """``[{"model"}, {}]`` (the Shardy dims list)."""
    s = as_sharding(sharding)
    return s.dims_text() if s is not None else "[]"


def axis_names(sharding) -> list[list[str]]:
    """Per dim, the axes a sharding splits it on (``[]`` whole)."""
    s = as_sharding(sharding)
    return s.axis_names() if s is not None else []


def collectives(plan) -> list:
    """The plan's collectives (``plan.CollectiveRecord``) in program order."""
    cs = list(plan.collectives or [])
    if all(c.op_index is not None for c in cs):
        cs.sort(key=lambda c: c.op_index)
    return cs


def multiplicity(c) -> int:
    """How many times a listed collective runs (a representative block may stand for N)."""
    return int(c.count or 1)


def ccl_totals(plan) -> tuple[int, int]:
    """(count, bytes) summed over the listed collectives."""
    cs = collectives(plan)
    return (sum(multiplicity(c) for c in cs),
            sum(int(c.bytes_per_device or 0) * multiplicity(c) for c in cs))


def local_elements(c) -> int:
    """Per-device operand elements of a collective."""
    if c.bytes_per_device:
        return int(int(c.bytes_per_device) // dtype_bytes(c.dtype))
    return math.prod(c.shape or [1])


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


# ---------------------------------------------------------------------------------
# Components (parameters and collectives grouped by module) and Megatron pairs
# ---------------------------------------------------------------------------------

def module_of(name: str) -> str:
    """``model.layers.3.mlp.up_proj.weight`` -> ``model.layers.*.mlp.up_proj``."""
    r = role(name)
    return r.rsplit(".", 1)[0] if "." in r else r


def _strip_index(module: str) -> str:
    """A Sequential's numbered child is part of it: ``attn.to_out.*`` -> ``attn.to_out``."""
    while module.endswith(".*"):
        module = module[:-2]
    return module


def is_weight(a) -> bool:
    return (a.kind or "param") in ("param", "buffer")


def _param_modules(plan) -> dict[str, str]:
    """Modules holding the plan's parameters: raw module role -> its normalised form."""
    out: dict[str, str] = {}
    for a in plan.arguments or []:
        if is_weight(a):
            m = module_of(a.name)
            out.setdefault(m, _strip_index(m))
    return out


def _block(module: str, modules) -> str:
    """The report's component for a module: its parent when the parent is a block of leaf
    modules (q/k/v/o inside ``self_attn``, gate/up/down inside ``mlp``), else itself. A
    norm sitting directly in a decoder layer is its own component."""
    if "." not in module:
        return module
    parent = module.rsplit(".", 1)[0]
    under = [m for m in modules if m.startswith(parent + ".")]
    if under and all("." not in m[len(parent) + 1:] for m in under):
        return parent
    return module


def component_key(name_or_module: str | None, plan, *, is_param_name: bool = False) -> str:
    """The report component of a parameter name or a module path (layer indices as ``*``)."""
    if not name_or_module or name_or_module.startswith("("):
        return name_or_module or INPUTS_COMPONENT
    raw = _param_modules(plan)
    modules = set(raw.values())
    m = module_of(name_or_module) if is_param_name else role(name_or_module)
    m = raw.get(m, m)
    return _block(m, modules)


def arg_component(a, plan) -> str:
    if not is_weight(a):
        return INPUTS_COMPONENT
    return component_key(a.name, plan, is_param_name=True)


def coll_component(c, plan) -> str:
    """The component a collective is filed under: the module the plan says it belongs to
    (``collectives[i].component``), grouped like the parameters; never re-attributed."""
    return component_key(c.component, plan)


def coll_module(c) -> str:
    """The collective's module with layer indices as ``*`` (the budget's rows)."""
    return component_role(c.component) if c.component else INPUTS_COMPONENT


def components(plan) -> "OrderedDict[str, dict]":
    comps: OrderedDict[str, dict] = OrderedDict()

    def get(key):
        return comps.setdefault(key, {"args": [], "collectives": [], "layers": set(), "groups": []})

    by_index = {a.index: a for a in plan.arguments or []}
    for a in plan.arguments or []:
        entry = get(arg_component(a, plan))
        entry["args"].append(a)
        layer = layer_of(a.name)
        if layer is not None:
            entry["layers"].add(layer)
    for g in plan.groups or []:
        if g.get("kind") == "intermediate":
            continue
        members = [by_index[i] for i in g.get("members") or [] if i in by_index]
        key = arg_component(members[0], plan) if members else component_key(g.get("role"), plan, is_param_name=True)
        get(key)["groups"].append(g)
    for c in collectives(plan):
        entry = get(coll_component(c, plan))
        entry["collectives"].append(c)
        if c.layer is not None:
            entry["layers"].add(c.layer)
    return comps


def flatten_architecture(arch) -> dict[str, dict]:
    """path -> {"class", "flops"} from a module tree (nested ``children``) or a flat list."""
    out: dict[str, dict] = {}

    def visit(node, prefix):
        if not isinstance(node, dict):
            return
        name = node.get("name", "")
        path = node.get("path")
        if path is None:
            path = f"{prefix}.{name}" if prefix and name else (name or prefix)
        out[path] = {"class": node.get("class") or node.get("type"), "flops": node.get("flops")}
        for child in node.get("children") or []:
            visit(child, path)

    if isinstance(arch, (list, tuple)):
        for node in arch:
            visit(node, "")
    elif isinstance(arch, dict):
        if isinstance(arch.get("modules"), (list, tuple)):
            for node in arch["modules"]:
                visit(node, "")
        else:
            visit(arch, "")
    return out


def module_classes(plan) -> dict[str, tuple[str | None, int | None]]:
    """module role -> (class, FLOPs of one instance), from the plan's architecture map."""
    out: dict[str, tuple] = {}
    for path, info in flatten_architecture(plan.architecture).items():
        out.setdefault(role(path), (info.get("class"), info.get("flops")))
    return out


def io_dims(plan, a, classes: dict | None = None) -> tuple[int, int] | None:
    """(output dim, input dim) of a matmul or conv weight; None for anything else.

    In order: the Megatron baseline's own split of this tensor (column-parallel splits the
    output dim, row-parallel the input dim), the module's class (``Conv1D`` is ``[in,
    out]``), the source (JAX kernels are ``[in, out]``, PyTorch ``Linear`` ``[out, in]``).
    """
    shape = a.shape or []
    if len(shape) < 2:
        return None
    if len(shape) > 2:
        return 0, 1  # conv [C_out, C_in, ...], stacked experts [E, ...]
    base = (((plan.baselines or {}).get("megatron") or {}).get("arguments") or {}).get(a.name)
    mega_pairs = plan.pairs or []
    if base and sum(1 for d in base if d) == 1:
        split = 0 if base[0] else 1
        this = role(a.name)
        if any(this in p.row for p in mega_pairs):
            return 1 - split, split
        return split, 1 - split
    cls = (classes if classes is not None else module_classes(plan)).get(module_of(a.name), (None, None))[0]
    if cls == "Conv1D" or plan.source == "jax":
        return 1, 0
    return 0, 1


def first_arg(plan, name: str):
    """The first argument (``plan.ArgumentRecord``) with this role (or name); None when there is none."""
    for a in plan.arguments or []:
        if role(a.name) == name or a.name == name:
            return a
    return None


def _common_prefix(paths: list[str]) -> str:
    parts = [p.split(".") for p in paths]
    out = []
    for seg in zip(*parts):
        if len(set(seg)) != 1:
            break
        out.append(seg[0])
    return ".".join(out)


def structural_pairs(plan) -> list[dict]:
    """The column -> row pairs found in the model's dataflow (the plan's ``pairs``,
    ``shard_opt.structure``), each with the mesh axis this plan splits it on (None: the
    plan does not use it)."""
    raw = plan.pairs or []
    classes = module_classes(plan)
    _shape, axes = mesh_of(plan)
    out = []
    for p in raw:
        cols, rows = list(p.column), list(p.row)
        if not cols or not rows:
            continue  # an output head (lm_head): column-parallel on its own, no pair
        mods = [_strip_index(module_of(r)) for r in cols + rows]
        # the block holding both sides; weights of one module (a conv's weight feeding the
        # next conv) or of modules with nothing in common keep their module's name
        block = _common_prefix(mods)
        if block in mods and len(set(mods)) > 1:
            block = block.rpartition(".")[0]

        def leaf(r):
            m = _strip_index(module_of(r))
            return (m[len(block) + 1:] if block and m.startswith(block + ".") else m) or r.rsplit(".", 1)[-1]

        entry = {"block": block, "kind": p.kind or "", "axis": None,
                 "column": list(dict.fromkeys(leaf(r) for r in cols)), "row": list(dict.fromkeys(leaf(r) for r in rows)),
                 "column_used": [], "roles": cols + rows, "column_roles": cols}

        dims = {}  # role -> the dim the dataflow pairs (its output features, or its input features)
        for roles, ds in ((cols, p.column_dims), (rows, p.row_dims)):
            dims.update(zip(roles, ds or ()))

        def split_on(r, axis, side):
            """Whether role ``r`` is split on ``axis`` on the dim the pair pairs (its outputs,
            side 0, or inputs, side 1); None when its dims are unknown. A plan JSON written
            before the pairs carried their dims: the dim from the weight's orientation."""
            a = first_arg(plan, r)
            if a is None:
                return None
            if r in dims:
                dim = dims[r]
            else:
                io = io_dims(plan, a, classes)
                if not io:
                    return None
                dim = 0 if entry["kind"] == "experts" else io[side]
            s = axis_names(a.sharding)
            return axis in (s[dim] if dim < len(s) else [])

        for axis in axes:
            ok = all(split_on(r, axis, 1) is not False for r in rows)
            used_cols = [leaf(r) for r in cols if split_on(r, axis, 0)]
            if ok and used_cols:
                entry["axis"] = axis
                entry["column_used"] = list(dict.fromkeys(used_cols))
                break
        out.append(entry)
    return out


def megatron_pairs(plan) -> list[dict]:
    """The Megatron column->row pairs this plan uses: ``[{"block", "axis", "column", "row"}]``.

    From the pairs found in the dataflow (the plan's ``pairs``, the one finder:
    ``baselines.megatron_pairs``): a pair is used when its row-parallel weights are split
    along their input dim on an axis and its column-parallel weights (those the plan
    splits) along their output dim on the same axis.
    """
    return [{"block": p["block"], "axis": p["axis"], "column": p["column_used"], "row": p["row"], "kind": p["kind"],
             "row_roles": [r for r in p["roles"] if r not in p["column_roles"]]}
            for p in structural_pairs(plan) if p["axis"]]


def pair_kind_of(plan, pair: dict) -> str:
    """What a pair is (``attention``, ``mlp``, ``conv``, ``experts``), as the dataflow found it."""
    return pair.get("kind") or ""


def pairs_under(pairs: list[dict], key: str) -> list[dict]:
    return [p for p in pairs if p["block"] == key or p["block"].startswith(key + ".") or key.startswith(p["block"] + ".")]


def layer_scope(plan) -> tuple[str, int]:
    """(the repeated layer's role, e.g. ``model.layers.*``, and how many layers); ``("", 1)``
    for a model without repeated layers (the whole model is one layer)."""
    rep = plan.architecture.get("repeated") if isinstance(plan.architecture, dict) else None
    if rep and rep.get("path"):
        return rep["path"] + ".*", int(rep.get("count") or plan.num_layers or 1)
    layers = set()
    prefix = ""
    for a in plan.arguments or []:
        r = role(a.name)
        if ".*." in r:
            prefix = prefix or r[: r.index(".*.") + 2]
            layers.add(layer_of(a.name))
    if prefix:
        return prefix, int(plan.num_layers or len(layers) or 1)
    return "", 1


def per_layer(cs: list, n_layers: int, kind: str = "all_reduce") -> float:
    return sum(multiplicity(c) for c in cs if c.kind == kind) / max(1, n_layers)


def in_scope(path: str, prefix: str) -> bool:
    return not prefix or path.startswith(prefix + ".")
