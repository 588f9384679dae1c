"""Read a propagated module: every collective and every op's per-device work.

Input: a module after ``shardy-propagate`` (Shardy has written ``sdy.sharding`` on
ops and inserted explicit collectives). Output: ``ModuleFacts``. Nothing here guesses a
collective from a pattern: it only reads the ops Shardy put in the IR.

What an op costs is what it reads and writes on one device (docs/design.md, "Principles"):

- an operand is read where it is stored: through the free layout ops before it
  (reshape, transpose, convert, broadcast_in_dim), so a broadcast bias is read once at
  its own size and a bf16 weight converted to f32 for the matmul is read as bf16;
- a ``gather`` reads the rows it returns, not its table (an embedding lookup of one
  token reads one row: tt-mlir lowers it to ``ttir.embedding``); ``dynamic_slice`` and
  ``slice`` read what they return; ``dynamic_update_slice`` and ``scatter`` read their
  update and write it in place (TTIR ``update_cache`` / ``fill_cache`` are in-place
  ops); a ``concatenate`` that appends to a KV cache argument writes the new rows only
  (the decode cache write, tt-metal's ``PagedUpdateCache``);
- splat constants (scalars broadcast) cost nothing to read;
- the ops of a group ``mark-fusions`` tagged ``shard_opt.fused`` are one device op:
  it reads the group's inputs once and writes its outputs once, and nothing in
  between reaches DRAM (an attention's score matrix, a norm's statistics);
- a weight stored in a block-float format (``storage``: bfp8, bfp4) is read at that
  format's bytes per element.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

from shard_opt import ir, kernels, rules
from shard_opt.dataflow import CONSTANT_OPS, LAYOUT_OPS, MOVING_OPS
from shard_opt.facts import DTYPE_BYTES, Collective, ModuleFacts, OpWork, dtype_bytes
from shard_opt.sharding import AxisRef, Mesh, TensorSharding, parse_axis_refs

SDY_COLLECTIVES = {
    "sdy.all_reduce": "all_reduce",
    "sdy.all_gather": "all_gather",
    "sdy.all_slice": "all_slice",
    "sdy.reduce_scatter": "reduce_scatter",
    "sdy.all_to_all": "all_to_all",
    "sdy.collective_permute": "collective_permute",
}

FUSED_ATTR = kernels.FUSED_ATTR  # written by passes/mark_fusions.py
SDPA_TARGETS = kernels.SDPA.custom_calls
MATMUL_OPS = ("stablehlo.dot_general", "stablehlo.convolution")
# ops whose bytes are not simply every operand read and every result written (_traffic)
_CACHE_WRITES = ("stablehlo.concatenate", "stablehlo.dynamic_update_slice", "stablehlo.scatter")
_TRAFFIC_SPECIAL = frozenset({"stablehlo.gather", "stablehlo.dynamic_slice", "stablehlo.slice",
                              "stablehlo.dynamic_update_slice", "stablehlo.scatter", "stablehlo.concatenate"})

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


def _per_value_of(attrs) -> list[TensorSharding] | None:
    """The shardings an op's attributes give its results, or None."""
    if "sdy.sharding" in attrs:
        return _per_value_attr(attrs["sdy.sharding"])
    if "out_sharding" in attrs:
        return [TensorSharding.parse(str(attrs["out_sharding"]))]
    return None


@functools.lru_cache(maxsize=65536)
def _per_value_attr(attr) -> list[TensorSharding]:
    """``_per_value_text`` keyed by the attribute itself (MLIR uniques attributes: equal ones
    are one object to compare, and a hash is cheaper than printing it)."""
    return _per_value_text(str(attr))


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
        out.append(_sharding_attr(d["sdy.sharding"]) if "sdy.sharding" in d else None)
    return out + [None] * (n - len(out))


@functools.lru_cache(maxsize=16384)
def _sharding_attr(attr) -> TensorSharding:
    """``TensorSharding.parse`` of an ``sdy.sharding`` attribute, keyed by the (uniqued) attribute."""
    return TensorSharding.parse(str(attr))


class _Group:
    """A fused group being read: its work, and the values it reads and produces."""

    def __init__(self, label: str, first: int):
        self.kind = label.split(":")[0]
        self.first = first
        self.flops = 0
        self.reads: dict = {}  # source value -> bytes
        self.weight_bytes = 0
        self.produced: set = set()
        self.exits: dict = {}  # value -> bytes
        self.dtype = "f32"
        self.fidelity = None
        self.weights: list[int] = []  # parameter arguments it reads, in order (who it belongs to)
        self.scores: tuple = ()  # local shape of its first dot_general's result (an attention's scores)


def extract_facts(module, arg_kinds=None, *, storage: dict | None = None, return_ops: bool = False):
    """``ModuleFacts`` of a propagated module (and the collective ops, if asked).

    ``storage``: argument index -> the element type it is stored in on device when that
    differs from its type in the module (``bfp8`` / ``bfp4`` weights).
    """
    meshes = meshes_of(module)
    mesh = meshes.get("mesh") or next(iter(meshes.values()), Mesh((1, 1)))
    func = ir.main_func(module)
    block = func.regions[0].blocks[0]
    args = list(block.arguments)
    kinds = list(arg_kinds) if arg_kinds else ["input"] * len(args)
    storage = storage or {}

    shard: dict = {}  # Value -> TensorSharding
    weight_values: set = set()  # values that are parameters or layout views of them
    cache_values: set = set()  # KV cache arguments and layout views of them
    free_values: set = set()  # splat constants and layout views of them: free to read
    stored: dict = {}  # Value -> storage element type (block-float weights and their views)
    src: dict = {}  # Value -> the value it is a layout view of (where it is read from)
    origin: dict = {}  # Value -> index of the nearest upstream parameter argument
    facts = ModuleFacts(mesh.shape, mesh.axes)
    for a, s, kind in zip(args, arg_shardings(func), kinds):
        t = a.type
        shape = _local_type(t, None, None)[0]
        if s is not None:
            shard[a] = s
        local, dtype = _local_type(t, s, _mesh_for(s, meshes, mesh) if s else None)
        dtype = storage.get(a.arg_number, dtype)
        if a.arg_number in storage:
            stored[a] = dtype
        facts.arg_local_bytes.append(_nbytes(local, dtype))
        facts.arg_kinds.append(kind)
        facts.arg_global_elements.append(math.prod(shape))
        facts.arg_local_elements.append(math.prod(local))
        if kind in ("param", "buffer"):
            weight_values.add(a)
            origin[a] = a.arg_number
        elif kind == "cache":
            cache_values.add(a)

    locals_: dict = {}  # (type, sharding) -> (local shape, dtype): the same few pairs recur
    # per value: its (local shape, dtype) and its bytes, read many times; ``forget`` drops
    # them when the value's sharding or storage is set (a callee's values, called again)
    value_local: dict = {}
    value_bytes: dict = {}

    def forget(value) -> None:
        value_local.pop(value, None)
        value_bytes.pop(value, None)

    def local_of(value):
        got = value_local.get(value)
        if got is not None:
            return got
        t = value.type
        s = shard.get(value)
        key = (t, s)
        got = locals_.get(key)
        if got is None:
            got = locals_[key] = _local_type(t, s, _mesh_for(s, meshes, mesh) if s else None)
        value_local[value] = got
        return got

    def nbytes(value) -> int:
        got = value_bytes.get(value)
        if got is None:
            shape, dtype = local_of(value)
            got = value_bytes[value] = _nbytes(shape, stored.get(value, dtype))
        return got

    def read_bytes(value) -> int:
        """Bytes an op reads for ``value``: where it is stored, 0 for a splat constant."""
        value = src.get(value, value)
        return 0 if value in free_values else nbytes(value)

    functions = {f.attributes["sym_name"].value: f for f in module.body.operations
                 if f.operation.name == "func.func"}

    def program(body, depth=0):
        """Every op in program order, with each call site expanded into its callee (so a
        function called twice counts twice); callee arguments inherit the caller's
        operand shardings, origins and weight-ness."""
        for op in _walk(body):
            yield op
            if op.name != "func.call" or depth > 16:
                continue
            callee = functions.get(op.attributes["callee"].value)
            if callee is None or not callee.regions[0].blocks:
                continue
            own = arg_shardings(callee)
            for operand, barg, s in zip(op.operands, callee.regions[0].blocks[0].arguments, own):
                forget(barg)
                if s is not None or operand in shard:
                    shard[barg] = s if s is not None else shard[operand]
                if operand in origin:
                    origin[barg] = origin[operand]
                for tracked in (weight_values, cache_values, free_values):
                    if operand in tracked:
                        tracked.add(barg)
                if operand in stored:
                    stored[barg] = stored[operand]
                src[barg] = src.get(operand, operand)
            yield from program(callee, depth + 1)

    groups: dict[str, _Group] = {}
    group_of: dict = {}  # Value -> the group that computed it
    owner_of: dict = {}  # Operation -> (its fused group, or the parameter it reads): whom it belongs to
    pending = []  # (collective fields, op): made Collectives once the ops that read them are known
    routers = []  # sort / top_k ops: a mixture of experts' router is among them
    op_weight = []  # per facts.ops entry of the walk: the parameter it reads, or None
    walk = rules.Walk()  # what the safety rules read (shard_opt.rules)
    adds, moving = walk.adds, walk.moving  # the residual connections are among the adds
    tracked_sets = (weight_values, cache_values, free_values)

    def reads_group_value(operand, reader_group) -> None:
        """A value computed inside a group and read outside it leaves the group (DRAM)."""
        g = group_of.get(operand)
        if g is not None and g is not reader_group and operand not in g.exits:
            g.exits[operand] = nbytes(operand)

    # a module of one function has no call to expand: walk it directly
    ops = _walk(func) if len(functions) <= 1 else program(func)
    for index, op in enumerate(ops):
        name = op.name  # an Operation (_walk): no OpView to build
        operands, results = list(op.operands), list(op.results)  # each access is a binding call
        attrs = op.attributes
        shardings = _per_value_of(attrs)
        if shardings:
            for r, s in zip(results, shardings):
                shard[r] = s
                forget(r)
        if name == "stablehlo.add":
            adds.append(op)
        elif name in MOVING_OPS:
            moving.append(op)
        elif name in _ROUTERS:
            routers.append(op)
        elif name == "stablehlo.reshape":
            walk.reshapes.append(op)
        elif name == "stablehlo.dot_general":
            walk.dots.append(op)
        _propagate_origin(operands, results, origin, weight_values)
        if name in _CACHE_WRITES and results and operands and operands[0] in cache_values and operands[0] in stored:
            # the KV cache with its new rows keeps the cache's storage (``cache=bfp8``):
            # what attention reads next is bfp8 too (shard_opt.weights)
            stored[results[0]] = stored[operands[0]]
            forget(results[0])
        if name in LAYOUT_OPS:
            if name in CONSTANT_OPS:
                if name != "stablehlo.iota" and _is_splat(op):
                    free_values.update(results)
            elif operands and name not in ("func.return", "stablehlo.return", "sdy.return"):
                if len(operands) == 1:
                    o0 = operands[0]
                    for tracked in tracked_sets:
                        if o0 in tracked:
                            tracked.update(results)
                    if results:
                        base = src.get(o0, o0)
                        src[results[0]] = base
                        if base in stored:
                            stored[results[0]] = stored[base]
                            forget(results[0])
                        g = group_of.get(o0)
                        if g is not None and name != "sdy.sharding_constraint":
                            group_of[results[0]] = g  # a view of a group's value is still inside it
                else:
                    for tracked in tracked_sets:
                        if all(o in tracked for o in operands):
                            tracked.update(results)
            elif name == "func.return":
                for o in operands:
                    reads_group_value(o, None)
            continue
        if name in SDY_COLLECTIVES:
            o0 = operands[0]
            reads_group_value(o0, None)
            for tracked in (weight_values, cache_values):  # a gathered / sliced weight is still one
                if o0 in tracked:
                    tracked.update(results)
            walk.collectives.add(name)
            if name == "sdy.all_slice" and o0 not in weight_values:  # an activation sliced on device
                walk.slices.append((tuple(local_of(o0)[0]), tuple(local_of(results[0])[0])))
            elif name == "sdy.all_gather" and o0 not in weight_values:  # an activation gathered
                walk.gathers.append((tuple(local_of(o0)[0]), tuple(local_of(results[0])[0])))
            pending.append((_collective(op, name, o0, results[0], index, local_of, shard, mesh, meshes,
                                        origin.get(o0, -1)), op))
            continue
        if name == "sdy.mesh" or not results:
            continue
        outs = [local_of(r) for r in results]
        flops = _flops(op, operands, outs, name, local_of)
        label = attrs[FUSED_ATTR].value if FUSED_ATTR in attrs else None
        if label is not None:
            g = groups.get(label)
            if g is None:
                g = groups[label] = _Group(label, index)
            g.flops += flops
            if name == "stablehlo.dot_general" and not g.scores and outs:
                g.scores = tuple(outs[0][0])
            for o in operands:
                reads_group_value(o, g)
                base = src.get(o, o)
                if group_of.get(o) is not g and base not in g.reads:
                    b = read_bytes(o)
                    g.reads[base] = b
                    if o in weight_values:
                        g.weight_bytes += b
                        g.fidelity = g.fidelity or stored.get(base)
                        if o in origin:
                            g.weights.append(origin[o])
            owner_of[op] = (g, None)
            for r in results:
                group_of[r] = g
            if outs:
                g.dtype = outs[0][1]
            continue
        weight = None
        if group_of:
            for o in operands:
                g = group_of.get(o)
                if g is not None and o not in g.exits:
                    g.exits[o] = nbytes(o)
        for o in operands:
            if o in weight_values and o in origin:
                weight = origin[o]
                break
        owner_of[op] = (None, weight)
        if name in _TRAFFIC_SPECIAL:
            bytes_in, bytes_out, wbytes = _traffic(name, operands, results, read_bytes, nbytes, weight_values,
                                                   cache_values)
        else:  # every operand read where it is stored, every result written
            bytes_out = sum(nbytes(r) for r in results)
            bytes_in = wbytes = 0
            for o in operands:
                b = read_bytes(o)
                bytes_in += b
                if o in weight_values:
                    wbytes += b
        fidelity = None
        if stored:
            for o in operands:
                base = src.get(o, o)
                if base in stored:
                    fidelity = stored[base]
                    break
        kind = (kernels.CACHE_UPDATE.kind if name in _CACHE_WRITES and operands and operands[0] in cache_values
                else _kind(op, name))  # the KV append of a decode step (costmodel kernel class)
        facts.ops.append(OpWork(name, flops, bytes_in, bytes_out, wbytes, outs[0][1] if outs else "f32", index,
                                kind, fidelity, _kv_len(op, operands, name, kind, local_of)))
        op_weight.append(weight)
        peak = bytes_in - wbytes + bytes_out
        if peak > facts.peak_activation_bytes:
            facts.peak_activation_bytes = peak
    facts.collectives = [Collective(**{**fields, **_attributed(fields, op, owner_of)}) for fields, op in pending]
    collective_ops = [op for _, op in pending]
    # after the walk, when every value's sharding and weight-ness is known
    walk.weight_values, walk.shard, walk.mesh = weight_values, shard, mesh
    facts.violations = rules.violations(walk)
    facts.unpriced = tuple(v for v in facts.violations if v in rules.REPORTED)
    if routers:
        _route_experts(facts, routers, op_weight, args, local_of)
    for label, g in groups.items():
        bytes_in = sum(g.reads.values())
        bytes_out = sum(g.exits.values())
        kv_len = g.scores[-1] if g.kind == "sdpa" and g.scores else 0  # scores [.., Sq, Sk]
        facts.ops.append(OpWork(f"fused.{g.kind}", g.flops, bytes_in, bytes_out, g.weight_bytes, g.dtype, g.first,
                                kind=g.kind, fidelity=g.fidelity, kv_len=kv_len))
        facts.peak_activation_bytes = max(facts.peak_activation_bytes, bytes_in - g.weight_bytes + bytes_out)
    if groups:
        facts.ops.sort(key=lambda o: o.op_index)
    return (facts, collective_ops) if return_ops else facts


_ROUTERS = ("stablehlo.sort", "chlo.top_k")


def router_of(op, local_of) -> tuple[int, int, int] | None:
    """(experts E, chosen k, tokens on one device) if ``op`` is a mixture of experts' router:
    a ``chlo.top_k`` of k over a last dim of E, or a ``stablehlo.sort`` along a dim of E
    whose every result is read only by slices keeping its first k < E (``torch.topk`` as
    torch-mlir lowers it), through sharding constraints."""
    if not op.operands:
        return None
    shape, _ = local_of(op.operands[0])
    if not shape:
        return None
    if op.name == "chlo.top_k":
        e, k = shape[-1], int(op.attributes["k"].value)
        return (e, k, math.prod(shape) // e) if 0 < k < e else None
    d = int(op.attributes["dimension"].value)
    if d >= len(shape):
        return None
    e, ks = shape[d], set()
    for r in op.results:
        for use in r.uses:
            reader = use.owner
            while reader.name == "sdy.sharding_constraint":
                users = [u.owner for u in reader.results[0].uses]
                if len(users) != 1:
                    return None
                reader = users[0]
            if reader.name != "stablehlo.slice":
                return None
            start, limit = list(reader.attributes["start_indices"]), list(reader.attributes["limit_indices"])
            if start[d] != 0 or not 0 < limit[d] < e:
                return None
            ks.add(limit[d])
    if len(ks) != 1:
        return None
    return e, ks.pop(), math.prod(shape) // e


def _route_experts(facts: ModuleFacts, routers: list, op_weight: list, args, local_of) -> None:
    """Price a mixture of experts as routed, not dense: the ops that read a parameter
    stacked on the router's E experts (a parameter of rank 3 or more whose leading dim is
    E) do k/E of their FLOPs, and read the weights of the experts some token chose: on
    average 1 - (1 - k/E)^T of them for T tokens a device routes (uniform routing; all of
    them in a long prefill, k of E for one decoded token). The frontends lower experts
    densely (``frontends/rewrites.py``: every expert on every token, weighted 0 where not
    chosen) so the expert dim stays shardable; this restores the work top-k routing does."""
    found = [r for r in (router_of(op, local_of) for op in routers) if r is not None]
    if not found:
        return
    e, k, tokens = found[0]
    shapes = {a.arg_number: ir.tensor_type(a.type)[0] for a in args if facts.arg_kinds[a.arg_number] == "param"}
    experts = {i for i, shape in shapes.items() if len(shape) >= 3 and shape[0] == e}
    if not experts:
        return
    share = k / e
    touched = 1.0 - (1.0 - share) ** max(tokens, 1)
    for i, w in enumerate(op_weight):
        if w in experts:
            o = facts.ops[i]
            wb = int(round(o.weight_bytes * touched))
            facts.ops[i] = dataclasses.replace(o, flops=o.flops * share, bytes_in=o.bytes_in - o.weight_bytes + wb,
                                               weight_bytes=wb)
    facts.routed_experts = {"experts": e, "top_k": k, "tokens": tokens, "weights_read": round(touched, 4)}


# ops whose regions hold the function they apply (a reduce's add), not code of their own
_APPLICATORS = frozenset({
    "stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.scatter", "stablehlo.select_and_scatter",
    "stablehlo.sort", "stablehlo.all_reduce", "stablehlo.reduce_scatter", "sdy.all_reduce",
})


def _walk(op) -> list:
    """Every operation nested in ``op`` in pre-order, without the bodies of reductions
    (MLIR's own walk; ``Operation`` objects)."""
    irm = ir.ir()
    out = []
    advance, skip = irm.WalkResult.ADVANCE, irm.WalkResult.SKIP

    def visit(o):
        out.append(o)
        return skip if o.name in _APPLICATORS else advance

    op.operation.walk(visit, irm.WalkOrder.PRE_ORDER)
    return out[1:]  # not ``op`` itself


def _attributed(c: dict, op, owner_of: dict) -> dict:
    """The ``origin_arg`` and ``cause`` of collective ``c`` (its fields), attributed to the op
    that needs it: for a reduction, the op whose partial sums it completes (a norm's
    statistics belong to the norm); for a gather, a slice or a move, the first op that
    reads its result. The owner is that op's fused group (its first parameter: a norm's
    scale) or the parameter it reads; else the value's origin."""
    kind = c["kind"]
    reduce = kind in ("all_reduce", "reduce_scatter")
    ops = [op.operands[0].owner] if reduce else [u.owner for u in op.results[0].uses]
    for _ in range(4):  # past layout ops and other collectives
        nxt = []
        for o in ops:
            name = getattr(o, "name", "")
            if name in SDY_COLLECTIVES or name in ("stablehlo.reshape", "stablehlo.convert", "stablehlo.transpose",
                                                   "stablehlo.broadcast_in_dim", "sdy.sharding_constraint"):
                nxt += [o.operands[0].owner] if reduce else [u.owner for u in o.results[0].uses]
                continue
            owner = owner_of.get(getattr(o, "operation", None))
            if owner is None:
                continue
            group, weight = owner
            # what it is for, by the kernel that needs it (shard_opt.kernels)
            k = kernels.of(group.kind) if group is not None else None
            cause = ""
            if reduce and k is not None and k.reduction_cause and not k.is_matmul:
                cause = k.reduction_cause  # a norm's or a softmax's statistics
            elif reduce and (name == "stablehlo.dot_general" or k is not None and k.is_matmul and k.reduction_cause):
                cause = kernels.MATMUL.reduction_cause
            elif k is not None and k.gather_cause and kind == "all_gather":
                cause = k.gather_cause
            if group is not None and group.weights:
                return {"origin_arg": group.weights[0], "cause": cause}
            if weight is not None:
                return {"origin_arg": weight, "cause": cause}
            if group is not None:
                return {"cause": cause}
        ops = nxt
        if not ops:
            break
    return {}


@functools.lru_cache(maxsize=65536)
def _local_type(t, s: TensorSharding | None, mesh: Mesh | None) -> tuple[tuple[int, ...], str]:
    """(per-device shape, element type) of a value of type ``t`` sharded ``s`` on ``mesh``;
    ((), "f32") for a type that is not a ranked tensor. Cached across modules: MLIR uniques
    types, and a search meets the same few hundred (type, sharding) pairs in every candidate."""
    tt = ir.tensor_type(t)
    if tt is None:
        return (), "f32"
    shape, dtype = tt
    return (s.local_shape(shape, mesh) if s else shape), dtype


def _nbytes(shape, dtype: str) -> int:
    return int(math.prod(shape) * DTYPE_BYTES.get(dtype, 4))  # facts.dtype_bytes, inline


def _is_splat(op) -> bool:
    attrs = op.operation.attributes
    if "value" not in attrs:
        return False
    value = attrs["value"]
    return bool(getattr(value, "is_splat", False)) or "dense<" in str(value) and "," not in str(value)


def _kind(op, name: str) -> str:
    """The ``kernels`` kind of an op no fused group holds."""
    if name in MATMUL_OPS:
        return kernels.MATMUL.kind
    if name == "stablehlo.custom_call" and _target(op) in SDPA_TARGETS:
        return kernels.SDPA.kind
    return kernels.GATHER.kind if name == "stablehlo.gather" else ""


def _kv_len(op, operands, name: str, kind: str, local_of) -> int:
    """The keys per (user, head) on one device of tt-xla's SDPA composite (``k [B, Hkv, Sk,
    D]``: the cache positions a decode step walks), else 0."""
    if kind != "sdpa" or name != "stablehlo.custom_call" or len(operands) < 2:
        return 0
    k = local_of(operands[1])[0]
    return k[-2] if len(k) >= 2 else 0


def _target(op) -> str:
    attrs = op.operation.attributes
    return str(attrs["call_target_name"]).strip('"') if "call_target_name" in attrs else ""


def _traffic(name, operands, results, read_bytes, nbytes, weight_values, cache_values) -> tuple[int, int, int]:
    """(bytes read, bytes written, bytes of parameters read) by one op on one device."""
    out = sum(nbytes(r) for r in results)
    if name == "stablehlo.gather":  # the rows it returns, and the indices
        read = out + read_bytes(operands[1])
        return read, out, out if operands[0] in weight_values else 0
    if name in ("stablehlo.dynamic_slice", "stablehlo.slice"):
        return out + sum(read_bytes(o) for o in operands[1:]), out, out if operands[0] in weight_values else 0
    if name == "stablehlo.dynamic_update_slice":  # operand, update, indices...: in place
        update = read_bytes(operands[1])
        return update + sum(read_bytes(o) for o in operands[2:]), update, 0
    if name == "stablehlo.scatter":  # inputs..., indices, updates...: in place
        n = (len(operands) - 1) // 2
        updates = sum(read_bytes(o) for o in operands[n + 1:])
        return updates + read_bytes(operands[n]), updates, 0
    if name == "stablehlo.concatenate" and any(o in cache_values for o in operands):
        new = sum(read_bytes(o) for o in operands if o not in cache_values)  # appended in place
        return new, new, 0
    reads = [read_bytes(o) for o in operands]
    wbytes = sum(b for b, o in zip(reads, operands) if o in weight_values)
    return sum(reads), out, wbytes


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


def _collective(op, name: str, operand, result, index, local_of, shard, mesh, meshes, origin_arg: int = -1) -> dict:
    """The fields of the ``Collective`` that op ``name`` (``operand`` -> ``result``) is."""
    kind = SDY_COLLECTIVES[name]
    in_local, dtype = local_of(operand)
    out_local, _ = local_of(result)
    gshape = _shape_of(result.type)
    in_s = shard.get(operand)
    out_s = shard.get(result)
    if kind == "collective_permute":
        ins = in_s.axis_names() if in_s else []
        outs = out_s.axis_names() if out_s else []
        axes = sorted({a for d in ins + outs for a in d if (d in ins) != (d in outs)} or
                      {a for d in ins for a in d})
        refs = [AxisRef(a) for a in axes]
    m = meshes.get(out_s.mesh_name, mesh) if out_s else mesh
    if kind == "collective_permute":
        group = math.prod(r.length(m) for r in refs if r.name in m.axes)
    else:  # the axes the op's own attributes name (sub-axes keep their size)
        attrs = op.attributes
        axes, group = _named_axes(tuple((na.name, na.attr) for na in (attrs[i] for i in range(len(attrs)))), m)
    owner = operand.owner
    producer = owner.name if hasattr(owner, "name") and not _is_block(owner) else "argument"
    consumers = sorted({u.owner.name for u in result.uses})
    consumer = consumers[0] if consumers else "the consumer"
    loc = str(owner.location) if producer != "argument" else ""
    reason = _REASONS[kind].format(producer=producer, consumer=consumer, axes="/".join(axes) or "?")
    return dict(
        kind=kind, axes=tuple(axes), global_shape=gshape, dtype=dtype,
        in_local_shape=tuple(in_local), out_local_shape=tuple(out_local),
        bytes_per_device=math.prod(in_local) * dtype_bytes(dtype), group_size=group,
        op_index=index, loc=loc, producer=producer, reason=reason, origin_arg=origin_arg,
    )


@functools.lru_cache(maxsize=8192)
def _named_axes(named: tuple, mesh: Mesh) -> tuple[list[str], int]:
    """(axis names, group size) of a collective with attributes ``named`` ((name, attribute)
    pairs): the axes and sub-axes its attributes name besides ``out_sharding``, once per
    (uniqued) attribute set."""
    refs = list(dict.fromkeys(r for name, attr in named
                              if name != "out_sharding" and not name.startswith("shard_opt.")
                              for r in _axis_refs(attr)))
    return list(dict.fromkeys(r.name for r in refs)), math.prod(r.length(mesh) for r in refs if r.name in mesh.axes)


@functools.lru_cache(maxsize=4096)
def _shape_of(t) -> tuple[int, ...]:
    """A tensor type's global shape (types are uniqued: cached by the type itself)."""
    return tuple(ir.tensor_type(t)[0])


@functools.lru_cache(maxsize=8192)
def _axis_refs(attr) -> tuple[AxisRef, ...]:
    """``parse_axis_refs`` of an attribute's text, once per (uniqued) attribute."""
    return tuple(parse_axis_refs(str(attr)))


def _is_block(owner) -> bool:
    return type(owner).__name__ == "Block"


@functools.lru_cache(maxsize=4096)
def _dims_of(text: str, key: str) -> tuple[int, ...]:
    return tuple(_dims_uncached(text, key))


def _dims(text: str, key: str) -> list[int]:
    """The integers of ``key = [...]`` in ``text`` (an attribute's text), [] if absent."""
    return list(_dims_of(text, key))


def _dims_uncached(text: str, key: str) -> list[int]:
    m = re.search(key + r"\s*=\s*\[([\d,\s]*)\]", text)
    return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []


def _flops(op, operands, outs, name: str, local_of) -> int:
    """FLOPs of one op on one device; ``local_of`` gives an operand's (local shape, dtype),
    asked only of the ops whose work depends on their operands."""
    out_elems = math.prod(outs[0][0]) if outs else 0
    if name == "stablehlo.dot_general":
        text = str(op.attributes["dot_dimension_numbers"])
        contracting = _dims(text, "lhs_contracting_dimensions")
        lhs = local_of(operands[0])[0]
        k = math.prod(lhs[d] for d in contracting if d < len(lhs))
        return 2 * out_elems * k
    if name == "stablehlo.convolution":
        kernel = local_of(operands[1])[0]
        text = str(op.attributes["dimension_numbers"]) if "dimension_numbers" in op.attributes else ""
        m = re.search(r"x\[([^\]]*)\]", text)
        if m:
            labels = [p.strip() for p in m.group(1).split(",")]
            o = labels.index("o") if "o" in labels else 0
        else:
            o = 0
        per_out = math.prod(kernel) // max(1, kernel[o]) if kernel else 1
        return 2 * out_elems * per_out
    if name == "stablehlo.custom_call" and len(operands) >= 3 and _target(op) in SDPA_TARGETS:
        # q [B, Hq, Sq, D] . k [B, Hkv, Sk, D]: scores then probabilities x values
        (b, hq, sq, d), (_, _, sk, _) = local_of(operands[0])[0][-4:], local_of(operands[1])[0][-4:]
        return 4 * b * hq * sq * sk * d
    return out_elems
