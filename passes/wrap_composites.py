"""``wrap-composites``: wrap decomposed norms and GELUs in the composites tt-xla emits.

tt-xla's torch path (``python_package/tt_torch/composite_ops.py``) wraps
``F.rms_norm``, ``F.layer_norm`` and ``F.gelu`` in ``stablehlo.composite`` ops named
``tenstorrent.rms_norm`` / ``tenstorrent.layer_norm`` / ``tenstorrent.gelu`` /
``tenstorrent.gelu_tanh``; tt-mlir's ``LegalizeStableHLOCompositeToTTIR``
(``lib/Conversion/StableHLOToTTIR/StableHLOLegalizeCompositePass.cpp``) turns them into
``ttir.rms_norm`` / ``ttir.layer_norm`` / ``ttir.gelu``. torch-mlir decomposes the same
ops, and tt-mlir then runs the pieces one by one. This pass finds the decomposed groups
(``mark_fusions._norm`` and ``_activation``, the patterns shard-opt already prices as one
kernel) and outlines each into a private function ``@tenstorrent.<name>.impl[_k]`` called
by the composite, with tt-xla's attributes (tt-mlir's own tests,
``test/ttmlir/Conversion/StableHLOToTTIR/composite/``: ``epsilon`` f32,
``normalized_shape = dense<N> : tensor<1xi64>``, ``approximate = "tanh"``) and operands
(input, weight[, bias]).

It runs on the module handed to tt-mlir (the ``-o`` module: ``driver.annotate_many``).
shard-opt's own propagation and pricing stay on the flat module, as tt-mlir's
``FlattenOrConvertCompositesPass`` flattens gelu / layer_norm composites before Shardy
(rms_norm becomes a custom_call with tt-mlir's rule: batch dims pass through, the
normalized dims need replication; the flat ops propagate the same unless the norm's
hidden dim is split).

RMSNorm is left flat by default (option ``rms-norm=true`` wraps it): with jax-tt-plugin
0.1.3, a Llama-3-8B 1-layer 2x4 plan's module with ``tenstorrent.rms_norm`` composites
fails in tt-mlir ("'ttir.rms_norm' op normalized_shape dimensions must match trailing
dimensions of input tensor"), and the flat form gains nothing from it: tt-mlir's TTIR
``RMSNormFusionPattern`` already makes every one a ``ttnn.rms_norm`` (65 of 65 in the full
Llama-3-8B on 1x8, measured 2026-12-02). A group holding a sharding constraint, or whose operands' element
types differ from its result's, is left as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shard_opt import ir
from shard_opt.dataflow import Graph
from shard_opt.pass_manager import ModulePass, PassContext

_FLOAT = re.compile(r"dense<\[?\s*([-+0-9.eE]+|true|false)")


@dataclass(frozen=True)
class WrapComposites(ModulePass):
    name = "wrap-composites"
    summary = "Wrap decomposed RMSNorm / LayerNorm / GELU in tt-xla's tenstorrent.* composites"

    rms_norm: bool = False

    def apply(self, ctx: PassContext, module) -> None:
        wrap_composites(module, rms_norm=self.rms_norm)


def wrap_composites(module, *, rms_norm: bool = False) -> dict[str, int]:
    """Wrap the module's norms and GELUs in place; how many of each composite name.
    ``rms_norm``: wrap RMSNorms too (off by default: see the module docstring)."""
    from shard_opt.passes.mark_fusions import _activation, _norm

    g = Graph.of(module)
    found = []
    taken: set[int] = set()
    for node in g.nodes:
        got = None
        if node.name == "stablehlo.rsqrt":
            members = _norm(g, node)
            got = _norm_composite(g, node, members) if members else None
        elif node.name in ("stablehlo.tanh", "chlo.erf"):
            # the GELU's input: the nearest elementwise ancestor of the core that the whole
            # formula is computed from (the first candidate that reads as a GELU)
            for x in _ancestors(g, node):
                act = _activation(g, node, {}, {x})
                got = _gelu_composite(g, node, *act) if act else None
                if got:
                    break
        if got and got[0] == "tenstorrent.rms_norm" and not rms_norm:
            taken |= got[1]
            continue
        if got and not (got[1] & taken):
            taken |= got[1]
            found.append(got)
    counts: dict[str, int] = {}
    with module.context:
        for name, members, inputs, out, attrs in found:
            k = counts.get(name, 0)
            counts[name] = k + 1
            _outline(module, g, name, f"{name}.impl" + (f"_{k - 1}" if k else ""), members, inputs, out, attrs)
    return counts


# ---- what a group is ----------------------------------------------------------------

def _splat(g: Graph, v: int) -> float | None:
    """The scalar a constant value holds (through layout ops), or None."""
    for _ in range(8):
        p = g.producer(v)
        if p is None:
            return None
        if p.name == "stablehlo.constant":
            m = _FLOAT.search(str(p.op.attributes["value"]))
            try:
                return float(m.group(1)) if m else None
            except ValueError:
                return None
        if len(p.operands) != 1:
            return None
        v = p.operands[0]
    return None


def _constants(g: Graph, members: set[int]) -> list[float]:
    out = []
    for n in members:
        for o in g.nodes[n].operands:
            if g.values[o].producer not in members and g.is_constant(o):
                s = _splat(g, o)
                if s is not None:
                    out.append(s)
    return out


def _near(values, target, tol=0.02) -> bool:
    return any(abs(v - target) <= tol * abs(target) for v in values)


def _external(g: Graph, members: set[int]) -> list[int]:
    """Non-constant values the members read and do not compute, in first-use order."""
    seen = []
    for n in sorted(members):
        for o in g.nodes[n].operands:
            if g.values[o].producer not in members and not g.is_constant(o) and o not in seen:
                seen.append(o)
    return seen


def _trim(g: Graph, members: set[int], out: int, x: int) -> int | None:
    """Drop trailing reshapes / converts until the output has the input's type."""
    while g.values[out].shape != g.values[x].shape or g.values[out].dtype != g.values[x].dtype:
        p = g.producer(out)
        if p is None or p.index not in members or p.name not in ("stablehlo.reshape", "stablehlo.convert"):
            return None
        members.discard(p.index)
        out = p.operands[0]
    return out


def _output(g: Graph, members: set[int]) -> int | None:
    outs = {r for n in members for r in g.nodes[n].results
            if any(u not in members for u in g.values[r].users) or not g.values[r].users}
    return next(iter(outs)) if len(outs) == 1 else None


def _usable(g: Graph, members: set[int]) -> bool:
    return not any(g.nodes[n].name.startswith("sdy.") for n in members)


def _norm_composite(g: Graph, rsqrt, members: set[int]):
    members = set(members)
    if not _usable(g, members):
        return None
    for v in _external(g, members):  # a parameter's broadcast read by the group joins it
        if len(g.values[v].shape) >= 2 and v != g.source(v) and len(g.values[g.source(v)].shape) <= 1 \
                and g.values[g.source(v)].arg is not None:
            chain, w = set(), v
            while w != g.source(v):
                p = g.producer(w)
                chain.add(p.index)
                w = p.operands[0]
            if all(set(g.values[r].users) <= members | chain for c in chain for r in g.nodes[c].results):
                members |= chain
    ext = _external(g, members)
    big = [v for v in ext if len(g.values[v].shape) >= 2]
    params = [v for v in ext if len(g.values[v].shape) <= 1]
    if len(big) != 1 or len(params) > 2:
        return None
    x = big[0]
    out = _output(g, members)
    out = _trim(g, members, out, x) if out is not None else None
    if out is None or any(g.values[p].dtype != g.values[x].dtype for p in params):
        return None
    reduces = [g.nodes[n] for n in members if g.nodes[n].name == "stablehlo.reduce"]
    dims = sorted(set(g.ints(reduces[0], "dimensions")))
    rin = g.values[reduces[0].operands[0]].shape
    if dims != list(range(len(rin) - len(dims), len(rin))):
        return None
    norm_shape = [rin[d] for d in dims]
    if list(g.values[x].shape[-len(norm_shape):]) != norm_shape:
        return None
    layer = any(g.nodes[n].name == "stablehlo.subtract" for n in members)
    weight = bias = None
    for p in params:
        kind = _param_use(g, p, members)
        if kind == "multiply" and weight is None:
            weight = p
        elif kind == "add" and bias is None:
            bias = p
        else:
            return None
    if bias is not None and (weight is None or not layer):
        return None  # tt-mlir reads operand 1 as the weight
    eps_add = g.producer(g.source(rsqrt.operands[0]))
    eps = [_splat(g, o) for o in eps_add.operands if g.is_constant(o)]
    eps = [e for e in eps if e is not None]
    if len(eps) != 1:
        return None
    shape = ", ".join(map(str, norm_shape))
    attrs = (f"{{epsilon = {_f32(eps[0])} : f32, normalized_shape = dense<{shape if len(norm_shape) == 1 else '[' + shape + ']'}>"
             f" : tensor<{len(norm_shape)}xi64>}}")
    inputs = [x] + [p for p in (weight, bias) if p is not None]
    return ("tenstorrent.layer_norm" if layer else "tenstorrent.rms_norm", members, inputs, out, attrs)


def _param_use(g: Graph, p: int, members: set[int]) -> str | None:
    """How a 1-D parameter enters the norm: the first non-layout member op it reaches."""
    v = p
    for _ in range(8):
        users = [u for u in g.values[v].users if u in members]
        if len(users) != 1:
            return None
        u = g.nodes[users[0]]
        if u.name in ("stablehlo.multiply", "stablehlo.add"):
            return u.name.split(".")[1]
        if u.name not in ("stablehlo.convert", "stablehlo.reshape", "stablehlo.broadcast_in_dim"):
            return None
        v = u.results[0]
    return None


def _ancestors(g: Graph, core, depth: int = 8) -> list[int]:
    """Non-constant values the core is computed from through elementwise ops, nearest first."""
    from shard_opt.dataflow import ELEMENTWISE_OPS

    out, frontier = [], list(core.operands)
    for _ in range(depth):
        nxt = []
        for v in frontier:
            if v in out or g.is_constant(v):
                continue
            out.append(v)
            p = g.producer(v)
            if p is not None and p.name in ELEMENTWISE_OPS:
                nxt.extend(p.operands)
        frontier = nxt
    return out


def _gelu_composite(g: Graph, core, members: set[int], x: int):
    members = set(members)
    if not _usable(g, members) or _external(g, members) != [x]:
        return None
    out = _output(g, members)
    out = _trim(g, members, out, x) if out is not None else None  # a convert after it is its reader's
    if out is None or _output(g, members) != out:
        return None
    c = _constants(g, members)
    if core.name == "stablehlo.tanh" and _near(c, 0.5) and _near(c, 0.044715):
        return ("tenstorrent.gelu_tanh", members, [x], out, '{approximate = "tanh"}')
    if core.name == "chlo.erf" and _near(c, 0.5) and (_near(c, 0.70710678) or _near(c, 1.41421356)):
        return ("tenstorrent.gelu", members, [x], out, None)
    return None


def _f32(v: float) -> str:
    import struct

    return repr(struct.unpack("f", struct.pack("f", v))[0])


# ---- outlining ----------------------------------------------------------------------

def _outline(module, g: Graph, name: str, fname: str, members: set[int], inputs: list[int], out: int,
             attrs: str | None) -> None:
    irm = ir.ir()
    ops = [g.nodes[n].op for n in sorted(members)]
    mlir_value = {}
    for n in sorted(members):
        node = g.nodes[n]
        for i, o in enumerate(node.operands):
            mlir_value[o] = node.op.operands[i]
        for i, r in enumerate(node.results):
            mlir_value[r] = node.op.results[i]
    in_vals = [mlir_value[v] for v in inputs]
    out_val = mlir_value[out]
    # the decomposition: a private function at the module's end
    ftype = irm.FunctionType.get([v.type for v in in_vals], [out_val.type])
    with irm.InsertionPoint(module.body), irm.Location.unknown():
        func = irm.Operation.create("func.func", attributes={
            "sym_name": irm.StringAttr.get(fname), "function_type": irm.TypeAttr.get(ftype),
            "sym_visibility": irm.StringAttr.get("private")}, regions=1)
    with irm.Location.unknown():
        block = func.regions[0].blocks.append(*[v.type for v in in_vals])
    # the composite, after the group's last op
    attributes = {"name": irm.StringAttr.get(name), "decomposition": irm.FlatSymbolRefAttr.get(fname)}
    if attrs:
        attributes["composite_attributes"] = irm.Attribute.parse(attrs)
    with irm.InsertionPoint(ops[-1]), ops[-1].location:
        comp = irm.Operation.create("stablehlo.composite", results=[out_val.type], operands=in_vals,
                                    attributes=attributes)
    comp.move_after(ops[-1])
    out_val.replace_all_uses_with(comp.results[0])
    with irm.InsertionPoint(block), irm.Location.unknown():
        ret = irm.Operation.create("func.return", operands=[out_val])
    # the constants the group reads: copies of their producers in the function
    const_ops = _constant_producers(g, members)
    copies = {}
    for n in const_ops:
        src = g.nodes[n].op
        c = src.clone(ip=irm.InsertionPoint(ret)).operation
        for i, o in enumerate(g.nodes[n].operands):
            if o in copies:
                c.replace_uses_of_with(src.operands[i], copies[o])
        for i, r in enumerate(g.nodes[n].results):
            copies[r] = c.results[i]
    for op in ops:
        op.move_before(ret)
    for n in sorted(members):
        node = g.nodes[n]
        for i, o in enumerate(node.operands):
            if o in inputs:
                node.op.replace_uses_of_with(mlir_value[o], block.arguments[inputs.index(o)])
            elif o in copies:
                node.op.replace_uses_of_with(node.op.operands[i], copies[o])


def _constant_producers(g: Graph, members: set[int]) -> list[int]:
    """The nodes computing the constant values the members read, in program order."""
    need: set[int] = set()
    stack = [o for n in members for o in g.nodes[n].operands
             if g.values[o].producer not in members and g.is_constant(o)]
    while stack:
        v = stack.pop()
        p = g.values[v].producer
        if p is None or p in need:
            continue
        need.add(p)
        stack.extend(g.nodes[p].operands)
    return sorted(need)


def flatten_composites(module) -> int:
    """The inverse, for a module read back (``--evaluate`` of a plan's ``-o``): each
    ``tenstorrent.*`` composite is replaced by its decomposition's body, as tt-mlir's
    ``FlattenOrConvertCompositesPass`` does before propagating, so shard-opt prices the flat
    groups it priced when it wrote them. Returns how many were flattened."""
    from shard_opt.passes.inline_calls import _inline

    done = 0
    with module.context:
        funcs = {f.attributes["sym_name"].value: f for f in module.body.operations
                 if f.operation.name == "func.func"}
        for op in ir.ops_in(module.operation, ("stablehlo.composite",)):
            name = ir.ir().StringAttr(op.attributes["name"]).value
            callee = funcs.get(ir.ir().FlatSymbolRefAttr(op.attributes["decomposition"]).value)
            if not name.startswith("tenstorrent.") or callee is None or len(callee.regions[0].blocks) != 1:
                continue
            _inline(op, callee)
            done += 1
        if done:
            ir.run_pipeline(module, "builtin.module(symbol-dce)", name="flatten-composites")
    return done
