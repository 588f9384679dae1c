"""Read a propagated module: every collective and every op's per-device work.

Input: a module after ``shardy-propagate`` (Shardy has written ``sdy.sharding`` on
ops and inserted explicit collectives). Output: ``ModuleFacts``. Nothing here guesses a
collective from a pattern: it only reads the ops Shardy put in the IR.
"""

from __future__ import annotations

import functools
import math
import re

from shard_opt import ir
from shard_opt.facts import Collective, ModuleFacts, OpWork, dtype_bytes
from shard_opt.sharding import AxisRef, Mesh, TensorSharding, parse_axis_refs

SDY_COLLECTIVES = {
    "sdy.all_reduce": "all_reduce",
    "sdy.all_gather": "all_gather",
    "sdy.all_slice": "all_slice",
    "sdy.reduce_scatter": "reduce_scatter",
    "sdy.all_to_all": "all_to_all",
    "sdy.collective_permute": "collective_permute",
}

# Ops that only relabel or move data layout; a compiler fuses them into their users.
LAYOUT_OPS = {
    "stablehlo.reshape", "stablehlo.transpose", "stablehlo.convert", "stablehlo.broadcast_in_dim",
    "stablehlo.constant", "sdy.constant", "func.return", "stablehlo.return", "stablehlo.slice",
    "stablehlo.get_tuple_element", "stablehlo.tuple", "stablehlo.iota", "stablehlo.bitcast_convert",
    "sdy.sharding_constraint", "sdy.reshard", "sdy.return",
}

_REASONS = {
    "all_reduce": "{producer} leaves partial sums over {axes} (its contracted dim is split there); "
                  "the consumer needs the full sum",
    "all_gather": "{consumer} needs dims split on {axes} whole",
    "reduce_scatter": "partial sums over {axes} are summed and left split",
    "all_slice": "a replicated value is split on {axes} for {consumer} (local slice, no traffic)",
    "all_to_all": "the split on {axes} moves to another dim for {consumer}",
    "collective_permute": "devices along {axes} swap shards to match {consumer}'s layout",
}


def meshes_of(module) -> dict[str, Mesh]:
    """The module's ``sdy.mesh`` declarations by name."""
    out = {}
    for op in module.body.operations:
        if op.operation.name != "sdy.mesh":
            continue
        name = op.attributes["sym_name"].value
        text = str(op.attributes["mesh"])
        axes = re.findall(r'"([^"]+)"\s*=\s*(\d+)', text)
        if axes:
            out[name] = Mesh(tuple(int(s) for _, s in axes), tuple(a for a, _ in axes), name)
        else:  # a maximal / empty mesh
            out[name] = Mesh((1,), ("_",), name)
    return out


def _per_value(op) -> list[TensorSharding] | None:
    attrs = op.attributes
    if "sdy.sharding" in attrs:
        return _per_value_text(str(attrs["sdy.sharding"]))
    if "out_sharding" in attrs:
        return [TensorSharding.parse(str(attrs["out_sharding"]))]
    return None


@functools.lru_cache(maxsize=65536)
def _per_value_text(text: str) -> list[TensorSharding]:
    return [TensorSharding.parse(b) for b in re.findall(r"<@[^<>]*?\[.*?\][^<>]*?>", text)]


def arg_shardings(func) -> list[TensorSharding | None]:
    """``sdy.sharding`` of each ``@main`` argument (None where there is none)."""
    irm = ir.ir()
    n = len(func.regions[0].blocks[0].arguments)
    if "arg_attrs" not in func.attributes:
        return [None] * n
    out = []
    for a in func.attributes["arg_attrs"]:
        d = irm.DictAttr(a)
        out.append(TensorSharding.parse(str(d["sdy.sharding"])) if "sdy.sharding" in d else None)
    return out + [None] * (n - len(out))


def extract_facts(module, arg_kinds=None, *, return_ops: bool = False):
    """``ModuleFacts`` of a propagated module (and the collective ops, if asked)."""
    meshes = meshes_of(module)
    mesh = meshes.get("mesh") or next(iter(meshes.values()), Mesh((1, 1)))
    func = ir.main_func(module)
    block = func.regions[0].blocks[0]
    args = list(block.arguments)
    kinds = list(arg_kinds) if arg_kinds else ["input"] * len(args)

    shard: dict = {}  # Value -> TensorSharding
    weight_values: set = set()  # values that are parameters or layout views of them
    origin: dict = {}  # Value -> index of the nearest upstream parameter argument
    facts = ModuleFacts(mesh.shape, mesh.axes)
    for a, s, kind in zip(args, arg_shardings(func), kinds):
        shape, dtype = ir.tensor_type(a.type) or ((), "f32")
        if s is not None:
            shard[a] = s
        local = s.local_shape(shape, _mesh_for(s, meshes, mesh)) if s else shape
        facts.arg_local_bytes.append(math.prod(local) * dtype_bytes(dtype))
        facts.arg_kinds.append(kind)
        facts.arg_global_elements.append(math.prod(shape))
        facts.arg_local_elements.append(math.prod(local))
        if kind in ("param", "buffer"):
            weight_values.add(a)
            origin[a] = a.arg_number

    types: dict = {}
    locals_: dict = {}  # (type, sharding) -> (local shape, dtype): the same few pairs recur

    def local_of(value):
        t = value.type
        key = (t, shard.get(value))
        if key not in locals_:
            if t not in types:
                types[t] = ir.tensor_type(t)
            tt = types[t]
            if tt is None:
                locals_[key] = ((), "f32")
            else:
                shape, dtype = tt
                s = key[1]
                locals_[key] = ((s.local_shape(shape, _mesh_for(s, meshes, mesh)) if s else shape), dtype)
        return locals_[key]

    functions = {f.attributes["sym_name"].value: f for f in module.body.operations
                 if f.operation.name == "func.func"}

    def program(body, depth=0):
        """Every op in program order, with each call site expanded into its callee (so a
        function called twice counts twice); callee arguments inherit the caller's
        operand shardings, origins and weight-ness."""
        for op in ir.walk_ops(body):
            yield op
            if op.operation.name != "func.call" or depth > 16:
                continue
            callee = functions.get(op.attributes["callee"].value)
            if callee is None or not callee.regions[0].blocks:
                continue
            own = arg_shardings(callee)
            for operand, barg, s in zip(op.operands, callee.regions[0].blocks[0].arguments, own):
                if s is not None or operand in shard:
                    shard[barg] = s if s is not None else shard[operand]
                if operand in origin:
                    origin[barg] = origin[operand]
                if operand in weight_values:
                    weight_values.add(barg)
            yield from program(callee, depth + 1)

    collective_ops = []
    for index, op in enumerate(program(func)):
        name = op.operation.name
        operands, results = list(op.operands), list(op.results)  # each access is a binding call
        shardings = _per_value(op)
        if shardings:
            for r, s in zip(results, shardings):
                shard[r] = s
        _propagate_origin(operands, results, origin, weight_values)
        if name in LAYOUT_OPS:
            if operands and name != "func.return" and any(o in weight_values for o in operands):
                weight_values.update(results)
            continue
        if name in SDY_COLLECTIVES:
            facts.collectives.append(
                _collective(op, index, local_of, shard, mesh, meshes, origin.get(operands[0], -1))
            )
            collective_ops.append(op)
            continue
        if name == "sdy.mesh" or not results:
            continue
        ins = [local_of(o) for o in operands]
        outs = [local_of(r) for r in results]
        bytes_in = sum(math.prod(s) * dtype_bytes(d) for s, d in ins)
        bytes_out = sum(math.prod(s) * dtype_bytes(d) for s, d in outs)
        wbytes = sum(math.prod(s) * dtype_bytes(d) for (s, d), o in zip(ins, operands) if o in weight_values)
        flops = _flops(op, ins, outs)
        facts.ops.append(OpWork(name, flops, bytes_in, bytes_out, wbytes, outs[0][1] if outs else "f32", index))
        facts.peak_activation_bytes = max(facts.peak_activation_bytes, bytes_in - wbytes + bytes_out)
    return (facts, collective_ops) if return_ops else facts


def _mesh_for(s: TensorSharding, meshes: dict, default: Mesh) -> Mesh:
    return meshes.get(s.mesh_name, default)


def _propagate_origin(operands: list, results: list, origin: dict, weight_values: set) -> None:
    """A result belongs to the weight it was computed from, else to its first operand's."""
    src = first = None
    for o in operands:
        if o in origin:
            if o in weight_values:
                src = origin[o]
                break
            if first is None:
                first = origin[o]
    src = first if src is None else src
    if src is not None:
        for r in results:
            origin[r] = src


def _collective(op, index, local_of, shard, mesh, meshes, origin_arg: int = -1) -> Collective:
    kind = SDY_COLLECTIVES[op.operation.name]
    operand = op.operands[0]
    in_local, dtype = local_of(operand)
    out_local, _ = local_of(op.results[0])
    gshape, _ = ir.tensor_type(op.results[0].type)
    in_s = shard.get(operand)
    out_s = shard.get(op.results[0])
    if kind == "collective_permute":
        ins = in_s.axis_names() if in_s else []
        outs = out_s.axis_names() if out_s else []
        axes = sorted({a for d in ins + outs for a in d if (d in ins) != (d in outs)} or
                      {a for d in ins for a in d})
        refs = [AxisRef(a) for a in axes]
    else:  # the axes the op's own attributes name (sub-axes keep their size)
        refs = list(dict.fromkeys(
            r for k in _attr_names(op) if k != "out_sharding" and not k.startswith("shard_opt.")
            for r in parse_axis_refs(str(op.attributes[k]))
        ))
        axes = list(dict.fromkeys(r.name for r in refs))
    m = meshes.get(out_s.mesh_name, mesh) if out_s else mesh
    group = math.prod(r.length(m) for r in refs if r.name in m.axes)
    producer = operand.owner.name if hasattr(operand.owner, "name") and not _is_block(operand.owner) else "argument"
    consumers = sorted({u.owner.name for u in op.results[0].uses}) if hasattr(op.results[0], "uses") else []
    consumer = consumers[0] if consumers else "the consumer"
    loc = str(operand.owner.location) if producer != "argument" else ""
    reason = _REASONS[kind].format(producer=producer, consumer=consumer, axes="/".join(axes) or "?")
    return Collective(
        kind=kind, axes=tuple(axes), global_shape=tuple(gshape), dtype=dtype,
        in_local_shape=tuple(in_local), out_local_shape=tuple(out_local),
        bytes_per_device=math.prod(in_local) * dtype_bytes(dtype), group_size=group,
        op_index=index, loc=loc, producer=producer, reason=reason, origin_arg=origin_arg,
    )


def _is_block(owner) -> bool:
    return type(owner).__name__ == "Block"


def _attr_names(op) -> list[str]:
    attrs = op.operation.attributes
    return [attrs[i].name for i in range(len(attrs))]


def _dims(text: str, key: str) -> list[int]:
    m = re.search(key + r"\s*=\s*\[([\d,\s]*)\]", text)
    return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []


def _flops(op, ins, outs) -> int:
    name = op.operation.name
    out_elems = math.prod(outs[0][0]) if outs else 0
    if name == "stablehlo.dot_general":
        text = str(op.attributes["dot_dimension_numbers"])
        contracting = _dims(text, "lhs_contracting_dimensions")
        lhs = ins[0][0]
        k = math.prod(lhs[d] for d in contracting if d < len(lhs))
        return 2 * out_elems * k
    if name == "stablehlo.convolution":
        kernel = ins[1][0]
        text = str(op.attributes["dimension_numbers"]) if "dimension_numbers" in op.attributes else ""
        m = re.search(r"x\[([^\]]*)\]", text)
        if m:
            labels = [p.strip() for p in m.group(1).split(",")]
            o = labels.index("o") if "o" in labels else 0
        else:
            o = 0
        per_out = math.prod(kernel) // max(1, kernel[o]) if kernel else 1
        return 2 * out_elems * per_out
    return out_elems
