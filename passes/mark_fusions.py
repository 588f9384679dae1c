"""``mark-fusions``: find the op groups tt-mlir runs as one kernel and tag them.

tt-mlir does not run a StableHLO program op by op. Its TTIR fusing pass
(tt-mlir ``lib/Dialect/TTIR/Transforms/TTIRFusing.cpp``) and TTNN fusing pass
(``lib/Dialect/TTNN/Transforms/TTNNFusing.cpp``), and tt-xla's composite ops
(``python_package/tt_torch/composite_ops.py``: gelu, rms_norm, layer_norm), turn
whole groups into one TTNN op, which reads its inputs from DRAM once and writes its
output once. This pass finds those groups in the module and writes
``shard_opt.fused = "<kind>:<n>"`` on every op of a group, so the cost model prices
each group as the one op the device runs (``shard_opt.analysis``). Propagation keeps
the attribute (it is a discardable attribute; Shardy copies ops as they are).

Kinds (``shard_opt.kernels``: each kind's entry, which every reader asks), each with the
pattern that finds it in the graph (not a list of names):

- ``sdpa``: ``dot_general`` (scores) -> scale / mask / softmax -> ``dot_general``
  (probabilities x values), as torch-mlir and JAX lower attention, with the Q/K/V
  converts, transposes, GQA broadcasts and scalar scales that feed it; and tt-xla's
  ``custom_call @tt.scaled_dot_product_attention``. TTIR ``SDPAFusingPattern``
  (``lib/Dialect/TTIR/Transforms/Fusing/SDPAFusingPattern.cpp``) makes them
  ``ttnn.scaled_dot_product_attention`` (``_decode`` for one query): a flash kernel
  whose scores stay in L1 (tt-metal ``tech_reports/FlashAttention/FlashAttention.md``),
  so no score matrix is ever written, in time or in memory.
- ``softmax``: ``exp(x - max(x)) / sum(exp(...))`` outside attention (TTIR
  ``SoftmaxFusionPattern`` / ``NumericStableSoftmaxFusionPattern``).
- ``norm``: the ops from a norm's input to its scaled output around one ``rsqrt``:
  RMSNorm (TTIR ``RMSNormFusionPattern``) and LayerNorm (tt-xla's
  ``tenstorrent.layer_norm`` composite -> ``ttir.layer_norm``).
- ``rope``: a rotary embedding, ``x * cos + concat(-x2, x1) * sin`` (TTIR
  ``RoPERotateHalfFusingPattern``: ``ttnn.rotary_embedding``).
- ``activation``: an elementwise function of one tensor built around ``tanh``, ``erf``
  or ``logistic`` (GELU, SiLU, Mish, sigmoid: TTIR ``GeluFusionPattern``,
  ``SiluFusionPattern``, ``MishFusingPattern``).
- ``linear``: a ``dot_general`` with the bias ``add`` after it (TTIR
  ``MatmulWithBiasFusionPattern``) and the activation after that (TTNN
  ``TTNNMatmulAndLinearWithActivation``: sigmoid, SiLU, GELU folded into the matmul);
  ``conv``: a ``convolution`` with its bias add (TTIR ``ConvAddBias``) and activation
  (TTNN ``TTNNConv2dWithActivation``).

A group must be closed: nothing outside it uses a value computed inside it except its
output(s); otherwise the ops stay separate, as tt-mlir's patterns would leave them.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir, kernels
from shard_opt.dataflow import CONSTANT_OPS, ELEMENTWISE_OPS, LAYOUT_OPS, Graph, Node
from shard_opt.pass_manager import ModulePass, PassContext

ATTR = kernels.FUSED_ATTR
SDPA_TARGETS = kernels.SDPA.custom_calls
ACTIVATION_CORES = ("stablehlo.tanh", "chlo.erf", "stablehlo.logistic")
_PASS_THROUGH = ("stablehlo.convert", "stablehlo.reshape", "stablehlo.transpose", "stablehlo.broadcast_in_dim")


@dataclass(frozen=True)
class MarkFusions(ModulePass):
    name = "mark-fusions"
    summary = "Tag the op groups tt-mlir runs as one kernel (attention, norms, softmax, RoPE, activations, linear)"

    def apply(self, ctx: PassContext, module) -> None:
        mark_fusions(module, [a.kind for a in ctx.arguments] if ctx.arguments else None)


def mark_fusions(module, arg_kinds: list[str] | None = None) -> dict[str, int]:
    """Tag ``module``'s fused groups in place; returns how many groups of each kind.
    ``arg_kinds``: the arguments' kinds (a matmul with a parameter is a projection, not
    attention scores); default their ``shard_opt.kind`` attributes."""
    # a plan's sharding constraints (in an annotated module, ``--evaluate`` of a plan's own
    # ``-o``) are not computation: the groups are those of the module without them
    g = Graph.of(module, arg_kinds, through_constraints=True)
    groups = find_groups(g)
    with module.context:
        irm = ir.ir()
        for label, members in groups:
            attr = irm.StringAttr.get(label)
            for n in members:
                g.nodes[n].op.attributes[ATTR] = attr
    counts: dict[str, int] = {}
    for label, _ in groups:
        kind = label.split(":")[0]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def find_groups(g: Graph) -> list[tuple[str, set[int]]]:
    """(label, member node indices) of every fused group, sdpa first (it holds a softmax)."""
    owner: dict[int, str] = {}
    groups: list[tuple[str, set[int]]] = []

    def claim(kernel: kernels.Kernel, members: set[int] | None) -> None:
        if not members or any(m in owner for m in members):
            return
        label = f"{kernel.kind}:{len(groups)}"
        for m in members:
            owner[m] = label
        groups.append((label, members))

    for node in g.nodes:
        if node.name == "stablehlo.custom_call" and g.attr(node, "call_target_name").strip('"') in SDPA_TARGETS:
            claim(kernels.SDPA, {node.index})
        elif node.name == "stablehlo.dot_general":
            claim(kernels.SDPA, _attention(g, node))
    for node in g.nodes:
        if node.name == "stablehlo.exponential" and node.index not in owner:
            claim(kernels.SOFTMAX, _softmax(g, node))
    for node in g.nodes:
        if node.name == "stablehlo.rsqrt" and node.index not in owner:
            claim(kernels.NORM, _norm(g, node))
    for node in g.nodes:
        if node.name == "stablehlo.add" and node.index not in owner:
            claim(kernels.ROPE, _rope(g, node))
    # linear / conv: the op, its bias add, then an activation on the result
    for node in g.nodes:
        if node.name in ("stablehlo.dot_general", "stablehlo.convolution") and node.index not in owner:
            members = {node.index} | _bias(g, node, owner)
            out = _group_output(g, members)
            act = _activation_on(g, out, owner) if out is not None else None
            if act:
                members |= act
            if len(members) > 1:
                claim(kernels.LINEAR if node.name == "stablehlo.dot_general" else kernels.CONV, members)
    for node in g.nodes:
        if node.name in ACTIVATION_CORES and node.index not in owner:
            found = _activation(g, node, owner)
            claim(kernels.ACTIVATION, found[0] if found else None)
    return groups


def _rope(g: Graph, add: Node) -> set[int] | None:
    """The ops of one rotary embedding ending at ``add``, or None: ``x * cos +
    rotate_half(x) * sin`` with ``rotate_half(x) = concat(-x[..., h:], x[..., :h])``, as
    HF's Llama writes it (TTIR ``RoPERotateHalfFusingPattern``, tt-mlir
    ``lib/Dialect/TTIR/Transforms/Fusing/RoPEFusingPattern.cpp``: one
    ``ttnn.rotary_embedding``). The cos / sin tables are inputs of the group."""
    if len(add.operands) != 2:
        return None
    muls = [g.producer(g.source(v, through=("stablehlo.convert",))) for v in add.operands]
    if any(m is None or m.name != "stablehlo.multiply" for m in muls):
        return None
    for plain, rotated in (muls, muls[::-1]):
        for xi in range(2):
            x = g.source(plain.operands[xi], through=("stablehlo.convert",))
            for ri in range(2):
                found = _rotate_half(g, rotated.operands[ri], x)
                if found is not None:
                    members = {add.index, plain.index, rotated.index} | found
                    return members if _closed(g, members, set(add.results)) else None
    return None


def _rotate_half(g: Graph, v: int, x: int) -> set[int] | None:
    """The nodes of ``concat(-x[..., h:], x[..., :h])`` (last dim) producing ``v``, or None."""
    cat = g.producer(g.source(v, through=("stablehlo.convert",)))
    if cat is None or cat.name != "stablehlo.concatenate" or len(cat.operands) != 2:
        return None
    neg = g.producer(cat.operands[0])
    if neg is None or neg.name != "stablehlo.negate":
        return None
    hi, lo = g.producer(neg.operands[0]), g.producer(cat.operands[1])
    if any(n is None or n.name != "stablehlo.slice" for n in (hi, lo)):
        return None
    if g.source(hi.operands[0], through=("stablehlo.convert",)) != x or \
            g.source(lo.operands[0], through=("stablehlo.convert",)) != x:
        return None
    return {cat.index, neg.index, hi.index, lo.index}


# ---- helpers ------------------------------------------------------------------------

def _single_user(g: Graph, v: int) -> Node | None:
    users = g.values[v].users
    return g.nodes[users[0]] if len(users) == 1 else None


def _closed(g: Graph, members: set[int], outputs: set[int]) -> bool:
    """No value computed inside ``members`` is used outside, except ``outputs`` and
    constants (free to recompute)."""
    for n in members:
        for r in g.nodes[n].results:
            if r in outputs or g.is_constant(r):
                continue
            if any(u not in members for u in g.values[r].users):
                return False
    return True


def _group_output(g: Graph, members: set[int]) -> int | None:
    """The one value of ``members`` used outside them (None if there are several or none)."""
    outs = {r for n in members for r in g.nodes[n].results
            if any(u not in members for u in g.values[r].users) or not g.values[r].users}
    return next(iter(outs)) if len(outs) == 1 else None


def _absorb_back(g: Graph, v: int, members: set[int]) -> None:
    """Add to ``members`` the single-use chain of layout ops and scalar scalings that
    produce ``v`` (a flash kernel converts, transposes, broadcasts GQA heads and scales
    its inputs on the fly)."""
    while True:
        p = g.producer(v)
        if p is None or len(g.values[v].users) != 1 or p.index in members:
            return
        if p.name in _PASS_THROUGH and len(p.operands) == 1:
            members.add(p.index)
            v = p.operands[0]
        elif p.name in ("stablehlo.multiply", "stablehlo.divide") and len(p.operands) == 2 \
                and g.is_constant(p.operands[1]):
            members.add(p.index)
            v = p.operands[0]
        elif p.name == "stablehlo.multiply" and len(p.operands) == 2 and g.is_constant(p.operands[0]):
            members.add(p.index)
            v = p.operands[1]
        else:
            return


def _absorb_forward(g: Graph, v: int, members: set[int]) -> int:
    """Add the single-use chain of converts / reshapes / transposes after ``v``; the last value."""
    while True:
        u = _single_user(g, v)
        if u is None or u.name not in _PASS_THROUGH or u.name == "stablehlo.broadcast_in_dim":
            return v
        members.add(u.index)
        v = u.results[0]


# ---- attention ----------------------------------------------------------------------

def _attention(g: Graph, d2: Node) -> set[int] | None:
    """The ops of one attention ending at ``d2`` (probabilities x values), or None.

    ``d2``'s lhs must come, through layout ops and a select (the all-masked-row guard),
    from a softmax whose input comes from another ``dot_general`` (the scores) through
    elementwise ops (scale, mask add). Every op between the two matmuls joins, with the
    Q, K and V preparation that only feeds them."""
    if len(d2.operands) != 2:
        return None
    probs = _softmax_output(g, d2.operands[0])
    if probs is None:
        return None
    div = g.producer(probs)
    soft = _softmax(g, g.producer(g.source(div.operands[0])))
    if not soft:
        return None
    x = _softmax_input(g, g.producer(g.source(div.operands[0])))
    d1 = _scores(g, x)
    if d1 is None:
        return None
    members = (g.forward(d1.index, d2.index) & g.backward(d2.index, d1.index)) | {d1.index, d2.index}
    if not members >= soft:
        return None
    for v in list(d1.operands) + [d2.operands[1]]:
        _absorb_back(g, v, members)
    out = _absorb_forward(g, d2.results[0], members)
    return members if _closed(g, members, {out}) else None


def _softmax_output(g: Graph, v: int) -> int | None:
    """The softmax ``divide`` behind ``v`` (through layout ops and a select guard)."""
    for _ in range(8):
        v = g.source(v, through=LAYOUT_OPS - CONSTANT_OPS)
        p = g.producer(v)
        if p is None:
            return None
        if p.name == "stablehlo.divide":
            num = g.producer(g.source(p.operands[0]))
            return v if num is not None and num.name == "stablehlo.exponential" else None
        if p.name == "stablehlo.select" and len(p.operands) == 3:
            # select(all-masked, zeros, probs): follow the non-constant branch
            branches = [b for b in p.operands[1:] if not g.is_constant(b)]
            if len(branches) != 1:
                return None
            v = branches[0]
            continue
        return None
    return None


def _softmax_input(g: Graph, exp: Node) -> int:
    """x of ``exp(x - max(x))`` (or of ``exp(x)``)."""
    v = exp.operands[0]
    p = g.producer(v)
    if p is not None and p.name == "stablehlo.subtract":
        stat = g.producer(g.source(p.operands[1]))
        if stat is not None and stat.name == "stablehlo.reduce":
            return p.operands[0]
    return v


def _scores(g: Graph, x: int) -> Node | None:
    """The ``dot_general`` of two activations that ``x`` is computed from by scaling,
    masking and layout ops (each step keeps x's element count)."""
    for _ in range(16):
        p = g.producer(x)
        if p is None:
            return None
        if p.name == "stablehlo.dot_general":
            return p if all(not g.is_constant(o) and not g.is_weight(o) for o in p.operands) else None
        if p.name in _PASS_THROUGH and len(p.operands) == 1:
            x = p.operands[0]
            continue
        if p.name in ("stablehlo.add", "stablehlo.multiply", "stablehlo.divide", "stablehlo.subtract",
                      "stablehlo.select", "stablehlo.maximum", "stablehlo.minimum"):
            big = [o for o in p.operands if g.values[o].elements == g.values[x].elements
                   and not g.is_constant(o) and g.values[o].dtype not in ("i1",)]
            if not big:
                return None
            # the mask operand of an add is as big as the scores only when it is its own
            # tensor; follow the operand that is computed from a matmul
            x = next((o for o in big if _leads_to_dot(g, o)), big[0])
            continue
        return None
    return None


def _leads_to_dot(g: Graph, v: int) -> bool:
    for _ in range(16):
        p = g.producer(v)
        if p is None:
            return False
        if p.name == "stablehlo.dot_general":
            return True
        if not p.operands:
            return False
        v = p.operands[0]
    return False


# ---- softmax ------------------------------------------------------------------------

def _softmax(g: Graph, exp: Node | None) -> set[int] | None:
    """``exp(x - max) / sum(exp)``: the ops from x to the divide, or None."""
    if exp is None or exp.name != "stablehlo.exponential":
        return None
    e = exp.results[0]
    div = None
    total = None
    for u in g.values[e].users:
        node = g.nodes[u]
        if node.name == "stablehlo.reduce":
            total = node
        elif node.name == "stablehlo.divide" and node.operands[0] == e:
            div = node
    if div is None or total is None or g.producer(g.source(div.operands[1])) is not total:
        return None
    x = _softmax_input(g, exp)
    members = _between(g, {x}, div.results[0])
    if members is None or not _closed(g, members, {div.results[0]}):
        return None
    return members


def _between(g: Graph, inputs: set[int], output: int) -> set[int] | None:
    """The nodes computing ``output`` from ``inputs`` and constants (elementwise, layout and
    reduce ops only); None when ``output`` also needs another tensor."""
    members: set[int] = set()
    stack = [output]
    seen = set()
    while stack:
        v = stack.pop()
        if v in seen or v in inputs:
            continue
        seen.add(v)
        p = g.producer(v)
        if p is None:
            return None  # another argument
        if g.is_constant(v):
            continue
        if p.name not in ELEMENTWISE_OPS and p.name not in LAYOUT_OPS and p.name != "stablehlo.reduce":
            return None
        members.add(p.index)
        stack.extend(p.operands)
    return members


# ---- norms --------------------------------------------------------------------------

def _norm(g: Graph, rsqrt: Node) -> set[int] | None:
    """``(x [- mean]) * rsqrt(mean_sq + eps) [* gamma] [+ beta]``: the ops from x to the
    scaled output, or None."""
    stat = g.source(rsqrt.operands[0])
    p = g.producer(stat)
    if p is None or p.name != "stablehlo.add":  # + eps
        return None
    # the normalising multiply: x_hat = xc * broadcast(rsqrt)
    r = rsqrt.results[0]
    mul = None
    for _ in range(4):
        u = _single_user(g, r)
        if u is None:
            return None
        if u.name == "stablehlo.multiply":
            mul = u
            break
        if u.name not in _PASS_THROUGH:
            return None
        r = u.results[0]
    if mul is None:
        return None
    xc = next((o for o in mul.operands if o != r), None)
    if xc is None:
        return None
    q = g.producer(xc)
    x0 = q.operands[0] if q is not None and q.name == "stablehlo.subtract" else xc  # LayerNorm: x - mean
    # the affine tail: * gamma, + beta (1-D parameters broadcast), converts, reshapes
    out = mul.results[0]
    while True:
        u = _single_user(g, out)
        if u is None:
            break
        if u.name in ("stablehlo.convert", "stablehlo.reshape"):
            out = u.results[0]
            continue
        if u.name in ("stablehlo.multiply", "stablehlo.add") and len(u.operands) == 2:
            other = u.operands[1] if u.operands[0] == out else u.operands[0]
            if g.values[g.source(other)].arg is not None and len(g.values[g.source(other)].shape) <= 1:
                out = u.results[0]
                continue
        break
    # the norm's input: x0, or a value it is converted from (LayerNorm's statistics may
    # read x through a convert of their own)
    x, members = x0, None
    for _ in range(4):
        members = _between_with_params(g, x, out)
        if members is not None:
            break
        p = g.producer(x)
        if p is None or p.name != "stablehlo.convert":
            return None
        x = p.operands[0]
    if members is None:
        return None
    while True:  # read x before its convert when only the norm uses the converted value
        p = g.producer(x)
        if p is None or p.name != "stablehlo.convert" or not set(g.values[x].users) <= members:
            break
        members.add(p.index)
        x = p.operands[0]
    if rsqrt.index not in members or not _closed(g, members, {out}):
        return None
    if not any(g.nodes[m].name == "stablehlo.reduce" for m in members):
        return None
    return members


def _between_with_params(g: Graph, x: int, output: int) -> set[int] | None:
    """Like ``_between`` from ``x``, also stopping at 1-D parameters (gamma, beta)."""
    params = set()
    stack = [output]
    while stack:
        v = stack.pop()
        p = g.producer(v)
        src = g.source(v)
        if p is None and g.values[v].arg is not None and len(g.values[v].shape) <= 1:
            params.add(v)
        elif g.values[src].arg is not None and len(g.values[src].shape) <= 1 and v != x:
            params.add(v)
            continue
        if p is not None:
            stack.extend(o for o in p.operands if o not in params and o != x)
        if len(params) > 8:
            return None
    return _between(g, {x} | params, output)


# ---- activations --------------------------------------------------------------------

def _activation(g: Graph, core: Node, owner: dict, inputs: set[int] = frozenset()) -> tuple[set[int], int] | None:
    """An elementwise function of one tensor around ``core`` (tanh, erf, logistic): the
    ops computing it from that tensor and constants, and that tensor; or None. Values in
    ``inputs`` are taken as the tensor when reached."""
    leaves = set()
    back: set[int] = set()
    stack = list(core.operands)
    back.add(core.index)
    while stack:
        v = stack.pop()
        if g.is_constant(v):
            continue
        p = g.producer(v)
        if v in inputs or p is None or p.name not in ELEMENTWISE_OPS or p.index in owner \
                or len(g.values[v].users) > 3:
            leaves.add(v)
            continue
        back.add(p.index)
        stack.extend(p.operands)
    if len(leaves) != 1:
        return None
    (x,) = leaves
    members = set(back)
    values = {x} | {r for n in members for r in g.nodes[n].results}
    changed = True
    while changed:  # grow over every elementwise op computed from x and the group alone
        changed = False
        for v in list(values):
            for u in g.values[v].users:
                node = g.nodes[u]
                if u in members or u in owner or node.name not in ELEMENTWISE_OPS:
                    continue
                if all(o in values or g.is_constant(o) for o in node.operands):
                    members.add(u)
                    values.update(node.results)
                    changed = True
    out = _group_output(g, members)
    if out is None or not _closed(g, members, {out}):
        return None
    return members, x


def _activation_on(g: Graph, v: int, owner: dict) -> set[int] | None:
    """The activation applied to ``v`` (a matmul or conv output) when nothing else reads
    ``v``: TTNN folds it into the matmul / conv. Its ops, with the converts and reshapes
    between ``v`` and the activation's input."""
    chain: dict[int, set[int]] = {v: set()}  # value on the way -> the ops before it
    x, ops = v, set()
    while True:  # v may reach the activation through a convert / reshape
        u = _single_user(g, x)
        if u is None or u.name not in ("stablehlo.convert", "stablehlo.reshape") or u.index in owner:
            break
        ops = ops | {u.index}
        x = u.results[0]
        chain[x] = ops
    near = set()
    for u in g.values[x].users:
        near |= g.forward(u, u + 32)
    for w in sorted(near):
        node = g.nodes[w]
        if node.name in ACTIVATION_CORES and w not in owner:
            found = _activation(g, node, owner, set(chain))
            if found and found[1] in chain:
                return found[0] | chain[found[1]]
    return None


def _bias(g: Graph, node: Node, owner: dict) -> set[int]:
    """The reshapes, scalar scalings (addmm's alpha) and the ``add`` of a broadcast
    parameter (the bias, maybe scaled by beta) right after ``node``."""
    members: set[int] = set()
    v = node.results[0]
    for _ in range(4):
        u = _single_user(g, v)
        if u is None or u.index in owner:
            return set()
        if u.name in ("stablehlo.reshape", "stablehlo.convert"):
            members.add(u.index)
            v = u.results[0]
            continue
        if len(u.operands) != 2:
            return set()
        other = u.operands[1] if u.operands[0] == v else u.operands[0]
        if u.name == "stablehlo.multiply" and g.is_constant(other):
            members.add(u.index)
            v = u.results[0]
            continue
        if u.name == "stablehlo.add" and _small_parameter(g, other, g.values[v].elements):
            members.add(u.index)
            return members
        return set()
    return set()


def _small_parameter(g: Graph, v: int, elements: int) -> bool:
    """``v`` is computed from one argument (a bias) by layout ops and scalar scalings, and
    holds far fewer elements than the tensor it is added to."""
    for _ in range(8):
        if g.values[v].arg is not None:
            return g.values[v].elements * 8 <= elements
        p = g.producer(v)
        if p is None:
            return False
        if p.name in _PASS_THROUGH and len(p.operands) == 1:
            v = p.operands[0]
        elif p.name == "stablehlo.multiply" and len(p.operands) == 2 and g.is_constant(p.operands[1]):
            v = p.operands[0]
        else:
            return False
    return False
