"""``wrap-composites``: wrap decomposed attention, norms and GELUs in the composites tt-xla emits.

tt-xla's torch path (``python_package/tt_torch/composite_ops.py``, applied by
``torch.compile(backend="tt")``) wraps ``F.scaled_dot_product_attention``, ``F.rms_norm``,
``F.layer_norm`` and ``F.gelu`` in ``stablehlo.composite`` ops named
``tenstorrent.scaled_dot_product_attention`` / ``tenstorrent.rms_norm`` /
``tenstorrent.layer_norm`` / ``tenstorrent.gelu`` / ``tenstorrent.gelu_tanh``; tt-mlir's
``LegalizeStableHLOCompositeToTTIR``
(``lib/Conversion/StableHLOToTTIR/StableHLOLegalizeCompositePass.cpp``) turns them into
``ttir.scaled_dot_product_attention`` / ``ttir.rms_norm`` / ``ttir.layer_norm`` /
``ttir.gelu``. torch-mlir decomposes the same ops, and tt-mlir then runs the pieces one by
one. This pass finds the decomposed groups (``mark_fusions``' attention, ``_norm`` and
``_activation``: the patterns shard-opt already prices as one kernel) and outlines each
into a private function ``@tenstorrent.<name>.impl[_k]`` called by the composite, with
tt-xla's attributes (tt-mlir's own tests,
``test/ttmlir/Conversion/StableHLOToTTIR/composite/``: ``epsilon`` f32,
``normalized_shape = dense<N> : tensor<1xi64>``, ``approximate = "tanh"``; attention's
``is_causal`` and ``scale``) and operands (input, weight[, bias]; attention's query, key,
value[, mask], K and V with their own KV heads: the GQA expansion stays in the body).

It runs on the module handed to tt-mlir (the ``-o`` module: ``annotate.annotate_many``).
shard-opt's own propagation and pricing stay on the flat module, as tt-mlir's
``FlattenOrConvertCompositesPass`` flattens gelu / layer_norm composites before Shardy
(rms_norm and scaled_dot_product_attention become custom_calls with tt-mlir's rules: batch
dims -- and attention's heads -- pass through, the normalized dims -- attention's sequence
and head_dim -- need replication). Every attention is wrapped, as tt-xla wraps every one
whatever the plan: a plan whose shardings that rule does not take (a split sequence, K and
V sharded apart: ``_sdpa_misfits``, which ``probe`` consults to leave those flat instead)
is refused by tt-mlir in that form, and the check then holds it to its composites-off form.

At tt-xla's default ``optimization_level`` 0 tt-mlir's TTNN decomposition turns every
``ttnn.scaled_dot_product_attention`` back into matmul + softmax + matmul (no op-model
validation: ``SDPADecompositionPattern.h``); the composite still changes what TTNN runs
(torch-mlir's f32 casts and its fully-masked-row guard go: Llama-3-8B 1 layer 1x8, 97 -> 89
TTNN ops per step, measured 2026-12-02).

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
    summary = "Wrap decomposed attention / RMSNorm / LayerNorm / GELU in tt-xla's tenstorrent.* composites"

    rms_norm: bool = False
    sdpa: bool = True

    def apply(self, ctx: PassContext, module) -> None:
        # the frontend's arguments, as a run gives them (the SDPA rule's propagation reads
        # them); the attentions left flat, and why, into ctx.left_flat when it is a list
        wrap_composites(module, rms_norm=self.rms_norm, sdpa=self.sdpa, arguments=ctx.arguments or None,
                        left_flat=ctx.left_flat)


def wrap_composites(module, *, rms_norm: bool = False, sdpa: bool = True, probe: bool = False, arguments=None,
                    left_flat: list | None = None) -> dict[str, int]:
    """Wrap the module's attentions, norms and GELUs in place; how many of each composite
    name. ``rms_norm``: wrap RMSNorms too (off by default: see the module docstring);
    ``sdpa``: wrap attentions (on by default), every one, as tt-xla's ``torch.compile``
    wraps every ``F.scaled_dot_product_attention`` whatever the plan (the default form the
    tt-mlir check compiles); with ``probe``, only those whose propagated shardings
    tt-mlir's SDPA rule takes (``_sdpa_misfits``; ``arguments``: the frontend's, for the
    propagation), the others left flat and, when ``left_flat`` is a list, described in it."""
    from shard_opt.passes.mark_fusions import _activation, _norm

    g = Graph.of(module)
    found = []
    taken: set[int] = set()
    if sdpa:
        if _unshare_masks(module, g):
            g = Graph.of(module)
        for node in g.nodes:
            got = _sdpa_composite(g, node)
            if got and not (got[1] & taken):
                taken |= got[1]
                found.append(got)
        misfits = _sdpa_misfits(module, g, found, arguments) if probe else {}
        if misfits and left_flat is not None:
            left_flat.extend(misfits.values())
        found = [f for i, f in enumerate(found) if i not in misfits]
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


# ---- attention ----------------------------------------------------------------------

_BF16 = "bf16"


def _attention_ends(g: Graph, d2):
    """(scores dot_general, softmax input) of the attention ending at ``d2``, or None."""
    from shard_opt.passes.mark_fusions import _scores, _softmax_input, _softmax_output

    if d2.name != "stablehlo.dot_general" or len(d2.operands) != 2:
        return None
    probs = _softmax_output(g, d2.operands[0])
    if probs is None:
        return None
    exp = g.producer(g.source(g.producer(probs).operands[0]))
    if exp is None or exp.name != "stablehlo.exponential":
        return None
    x = _softmax_input(g, exp)
    d1 = _scores(g, x)
    return (d1, x) if d1 is not None else None


def _unshare_masks(module, g: Graph) -> int:
    """Give each attention its own copy of the cast and broadcast of a mask several read
    (torch-mlir computes the causal mask's f32 broadcast once for every layer), so the
    composite's body can own them; tt-mlir's CSE merges the copies again. How many
    masks were copied."""
    irm = ir.ir()
    done = 0
    for d2 in g.nodes:
        ends = _attention_ends(g, d2)
        if ends is None:
            continue
        path = _score_path(g, ends[1], ends[0])
        if path is None or path[1] is None:
            continue
        node, i = path[1]
        _, chain = _mask_chain(g, node.operands[i])
        if not chain or all(len(g.values[c.results[0]].users) == 1 for c in chain):
            continue
        with module.context, irm.Location.unknown():
            prev = None
            for c in reversed(chain):  # from the mask's own tensor to the add
                copy = c.op.clone(ip=irm.InsertionPoint(node.op))
                if prev is not None:
                    copy.operands[0] = prev
                prev = copy.results[0]
            node.op.operands[i] = prev
        done += 1
    return done


_MASK_CHAIN = ("stablehlo.convert", "stablehlo.broadcast_in_dim")


def _sdpa_composite(g: Graph, d2):
    """``tenstorrent.scaled_dot_product_attention`` over one decomposed attention ending at
    ``d2`` (probabilities x values), as tt-xla's ``composite_scaled_dot_product_attention``
    writes it: operands (query, key, value[, attn_mask]) in bf16, ``[B, H, Sq, D]`` /
    ``[B, Hkv, Sk, D]`` / ``[1|B, 1|H, Sq, Sk]``, attributes ``is_causal`` and ``scale``
    (tt-mlir reads a missing ``is_causal`` as true: it is always written). The body is
    the flat group: the Q/K/V casts, scale multiplies, K's transpose and the GQA head
    expansion (reshape, broadcast, reshape) back to the operands, and the output's cast.
    None when the group is not that (another dtype: tt-xla keeps those flat too)."""
    ends = _attention_ends(g, d2)
    if ends is None:
        return None
    d1, x = ends
    path = _score_path(g, x, d1)
    if path is None:
        return None
    post, add = path
    mask = _mask_chain(g, add[0].operands[add[1]])[0] if add is not None else None
    q, q_scale, q_t, q_rep = _operand_chain(g, d1.operands[0])
    k, k_scale, k_t, k_rep = _operand_chain(g, d1.operands[1])
    v, v_scale, v_t, v_rep = _operand_chain(g, d2.operands[1])
    if q_t or v_t or q_rep != 1 or k_rep != v_rep or v_scale != 1.0:
        return None
    # scores = Q . K^T over D, per (B, H); out = P . V over Sk
    lb, rb, lc, rc = g.dot_dims(d1)
    if (lb, rb, lc, rc) != ([0, 1], [0, 1], [3], [2] if k_t else [3]):
        return None
    if g.dot_dims(d2) != ([0, 1], [0, 1], [3], [2]):
        return None
    out = d2.results[0]
    users = g.values[out].users
    if len(users) == 1 and g.nodes[users[0]].name == "stablehlo.convert":
        out = g.nodes[users[0]].results[0]
    qs, ks, vs, os_ = (g.values[x].shape for x in (q, k, v, out))
    if not (len(qs) == 4 and ks == vs and len(ks) == 4 and os_ == qs and ks[0] == qs[0] and ks[3] == qs[3]
            and ks[1] * k_rep == qs[1]):
        return None
    if any(g.values[x].dtype != _BF16 for x in (q, k, v, out)):
        return None
    inputs = [q, k, v]
    if mask is not None:
        ms = g.values[mask].shape
        if (g.values[mask].dtype != _BF16 or len(ms) != 4 or ms[0] not in (1, qs[0]) or ms[1] not in (1, qs[1])
                or tuple(ms[2:]) != (qs[2], ks[2])):
            return None
        inputs.append(mask)
    members = _between(g, out, inputs)
    if members is None or not _usable(g, members) or _output(g, members) != out:
        return None
    scale = post * q_scale * k_scale
    attrs = f"{{is_causal = false, scale = {_f32(scale)} : f32}}"
    return ("tenstorrent.scaled_dot_product_attention", members, inputs, out, attrs)


_PROBE = "shard_opt.sdpa_probe"


def _sdpa_misfits(module, g: Graph, found: list, arguments=None) -> dict[int, str]:
    """{index in ``found``: why}: the attentions whose shardings, as shard-opt's propagation
    gives them, tt-mlir's SDPA composite does not take. tt-mlir turns the composite into a
    custom_call with its own sharding rule (``RegisterCustomShardingRule.cpp``
    ``getSDPAShardingRule``: batch and heads pass through, the sequence and head_dim need
    replication, the mask is in no factor); with jax-tt-plugin 0.1.3 a split sequence fails
    its verifier ("Attention mask dim 2 must be 1 (broadcast) or match query sequence
    length"), and so do K and V sharded apart ("Key and value must have the same type") and
    an output sharded apart from the query ("Query and result must have the same type"). Such an attention is left as torch-mlir wrote it, which tt-mlir compiles to the
    collectives shard-opt priced. Read off a propagated copy of the module (its operands'
    producers tagged so the copy's ops can be found)."""
    from shard_opt.analysis import _per_value_of, arg_shardings, meshes_of

    meshes = meshes_of(module)
    if not found or not meshes:
        return {}
    from shard_opt.pass_manager import PassContext
    from shard_opt.passes.shardy_propagate import ShardyPropagate

    irm = ir.ir()
    tags = {}
    with module.context:
        for i, (_, _, inputs, out, _) in enumerate(found):
            for role, x in zip("qkvmo", [*inputs, out] if len(inputs) == 4 else [*inputs, None, out]):
                if x is None:
                    continue
                p = g.producer(x)
                if p is None:
                    tags[(i, role)] = ("arg", g.values[x].arg)
                    continue
                k = p.results.index(x)
                p.op.attributes[_PROBE] = irm.StringAttr.get(f"{p.index}")
                tags[(i, role)] = ("op", p.index, k)
        copy = module.operation.clone()
        for p in {t[1] for t in tags.values() if t[0] == "op"}:
            del g.nodes[p].op.attributes[_PROBE]
    ShardyPropagate(explicit_collectives=False, verify=False).apply(PassContext(arguments=arguments), copy)
    func = ir.main_func(copy)
    by_tag = {}
    for op in func.regions[0].blocks[0].operations:
        if _PROBE in op.attributes:
            by_tag[int(irm.StringAttr(op.attributes[_PROBE]).value)] = _per_value_of(op.attributes)
    args = arg_shardings(func)
    mesh = next(iter(meshes.values()))

    def split(s, dims) -> bool:
        return s is not None and any(d < s.rank and s.split_factor(d, mesh) > 1 for d in dims)

    out = {}
    for i in range(len(found)):
        sh = {}
        for role in "qkvmo":
            t = tags.get((i, role))
            if t is None:
                continue
            if t[0] == "arg":
                sh[role] = args[t[1]] if t[1] is not None and t[1] < len(args) else None
            else:
                got = by_tag.get(t[1])
                sh[role] = got[t[2]] if got and t[2] < len(got) else None
        if any(split(sh.get(r), (2, 3)) for r in "qkvm"):
            out[i] = "the plan splits its sequence (or head_dim), which tt-mlir's SDPA composite needs whole"
        elif getattr(sh.get("k"), "dims", None) != getattr(sh.get("v"), "dims", None):
            out[i] = "the plan shards its K and V apart, which tt-mlir's SDPA composite refuses"
        elif getattr(sh.get("q"), "dims", None) != getattr(sh.get("o"), "dims", None):
            out[i] = "the plan shards its output apart from its query, which tt-mlir's SDPA composite refuses"
    return out


def _scaling(g: Graph, node) -> tuple[int, float] | None:
    """(the other operand, the factor) of a multiply by a splat constant, or of a divide by
    one (the factor is then its inverse); None for any other op."""
    if node.name not in ("stablehlo.multiply", "stablehlo.divide") or len(node.operands) != 2:
        return None
    for i in (0, 1):
        c, other = node.operands[i], node.operands[1 - i]
        if g.is_constant(c) and not g.is_constant(other):
            s = _splat(g, c)
            if s is not None and node.name == "stablehlo.multiply":
                return other, s
            if s is not None and i == 1:
                return other, 1.0 / s
    return None


def _score_path(g: Graph, x: int, d1):
    """(scale, (the add, its mask operand's index) or None) between the scores ``d1`` and
    the softmax input ``x``: the constant factors on the way and the one additive mask;
    None when anything else stands between them."""
    from shard_opt.passes.mark_fusions import _leads_to_dot

    scale, add = 1.0, None
    for _ in range(16):
        if x == d1.results[0]:
            return scale, add
        p = g.producer(x)
        if p is None:
            return None
        scaled = _scaling(g, p)
        if p.name == "stablehlo.convert":
            x = p.operands[0]
        elif scaled:
            x, f = scaled
            scale *= f
        elif p.name == "stablehlo.add" and add is None and len(p.operands) == 2:
            i = 1 if _leads_to_dot(g, p.operands[0]) else 0
            add, x = (p, i), p.operands[1 - i]
        else:
            return None
    return None


def _mask_chain(g: Graph, m: int) -> tuple[int, list]:
    """(the mask's own tensor, the casts and broadcasts from it to ``m``, nearest first)."""
    chain = []
    for _ in range(8):
        p = g.producer(m)
        if p is None or p.name not in _MASK_CHAIN or len(g.values[p.operands[0]].shape) != len(g.values[m].shape):
            break
        chain.append(p)
        m = p.operands[0]
    return m, chain


def _operand_chain(g: Graph, v: int) -> tuple[int, float, bool, int]:
    """(operand, scale, transposed, head repeat) behind a matmul operand of attention: the
    single-use casts, constant scale factors, last-two-dims transposes and GQA head
    expansions (reshape [B,Hkv,S,D] -> [B,Hkv,1,S,D], broadcast to n, reshape to
    [B,Hkv*n,S,D]) peeled off, up to a value that has other readers or another producer."""
    scale, transposed, rep = 1.0, False, 1
    for _ in range(32):
        p = g.producer(v)
        if p is None or len(g.values[v].users) != 1:
            break
        if p.name == "stablehlo.convert":
            nxt = p.operands[0]
        elif scaled := _scaling(g, p):
            nxt, f = scaled
            scale *= f
        elif p.name == "stablehlo.transpose" and g.ints(p, "permutation") == [0, 1, 3, 2]:
            nxt, transposed = p.operands[0], not transposed
        elif p.name == "stablehlo.broadcast_in_dim" and g.values[p.operands[0]].shape == g.values[v].shape:
            nxt = p.operands[0]
        elif p.name == "stablehlo.reshape":
            got = _head_expansion(g, p)
            if got is None:
                break
            nxt, n = got
            rep *= n
        else:
            break
        v = nxt
    return v, scale, transposed, rep


def _head_expansion(g: Graph, r2) -> tuple[int, int] | None:
    """(the Hkv-head tensor, n) of repeat_kv's reshape -> broadcast -> reshape ending at ``r2``."""
    b = g.producer(r2.operands[0])
    if b is None or b.name != "stablehlo.broadcast_in_dim" or len(g.values[r2.operands[0]].users) != 1:
        return None
    r1 = g.producer(b.operands[0])
    if r1 is None or r1.name != "stablehlo.reshape" or len(g.values[b.operands[0]].users) != 1:
        return None
    src, one, big, out = (g.values[x].shape for x in (r1.operands[0], r1.results[0], b.results[0], r2.results[0]))
    if len(src) != 4 or len(out) != 4 or len(big) != 5 or g.ints(b, "broadcast_dimensions") != [0, 1, 2, 3, 4]:
        return None
    B, H, S, D = src
    n = big[2]
    if one != (B, H, 1, S, D) or big != (B, H, n, S, D) or out != (B, H * n, S, D):
        return None
    return r1.operands[0], n


def _between(g: Graph, out: int, inputs: list[int]) -> set[int] | None:
    """The ops ``out`` is computed by from ``inputs`` and constants, or None when it reads
    another value (an argument, or an op outside)."""
    members: set[int] = set()
    stack = [out]
    while stack:
        v = stack.pop()
        if v in inputs or g.is_constant(v):
            continue
        p = g.values[v].producer
        if p is None:
            return None
        if p in members:
            continue
        members.add(p)
        stack.extend(g.nodes[p].operands)
    return members


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
