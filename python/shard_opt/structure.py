"""The model's parallel structure, read from its dataflow: Megatron pairs, heads, experts.

Megatron-LM (arXiv 1909.08053, section 3) splits a matmul's weight on its output
features (column-parallel) when the next matmul contracts over exactly those features
(row-parallel): the intermediate is never gathered and one all_reduce closes the pair.
Which matmuls pair up is a property of the graph, not of parameter names:
``dataflow.dim_sources`` says which argument dims each value dim is indexed by, so

- a **column -> row pair** is a weight W1 whose output-feature dim indexes the
  contracted dim of a later matmul with weight W2, through elementwise ops, reshapes
  and attention (the per-head matmuls carry the heads as a batch dim). Two things end
  a column's features on the way (``_chains``): a reduction over them (a norm over the
  split features: LayerNorm, RMSNorm; GroupNorm reduces within groups of channels and
  does not), and an elementwise op with an unsplit tensor (the residual stream: the
  input's features or an earlier row's output; a bias, a scale and another column's
  output, SwiGLU's ``silu(g(x)) * c(x)``, do not). Pairs are closed in program order
  and a weight takes one role: a weight that closes a pair (o_proj, down_proj) is not
  also a column;
- a **convolution** pairs like a matmul: its kernel's output channels are the column
  dim, its input channels the row dim (a UNet res-block's conv1 -> conv2); grouped
  (depthwise) convolutions do not pair;
- an **expert pair** (MoE) is two stacked-expert weights whose expert dim is a batch
  dim of both matmuls: expert parallel splits that dim;
- an **output head** is a column weight with no row partner whose result leaves the
  model, through layout ops and its bias add (an LM head: Megatron splits the output
  embedding's vocabulary; GPT-J's has a bias);
- a **KV cache** dim that shares a value dim with a column weight's output (the cache
  concatenated with new keys) splits with it, so each device keeps its heads' cache;
- the **units** of a column dim: the smallest value dim it indexes (the head count
  after features are reshaped into heads); splitting it N ways needs N to divide them,
  or a device would get part of a head.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shard_opt import ir, kernels
from shard_opt.dataflow import LAYOUT_OPS, Graph, conv_layout, dim_sources
from shard_opt.lowered import indices_by_role

Dim = tuple[int, int]  # (argument index, dim)


@dataclass
class Structure:
    """What ``find_structure`` found (argument indices of the module it read).

    Attributes:
      pairs: (column (arg, dim), row (arg, dim), kind): ``mlp`` or ``attention``.
      experts: (first, second) stacked-expert (arg, dim) pairs split on the expert dim.
      heads: output-head columns (arg, dim) with no row partner.
      caches: cache (arg, dim) -> the column (arg, dim) it splits with.
      units: column (arg, dim) -> the smallest value dim it indexes (heads).
    """

    pairs: list[tuple[Dim, Dim, str]] = field(default_factory=list)
    experts: list[tuple[Dim, Dim]] = field(default_factory=list)
    heads: list[Dim] = field(default_factory=list)
    caches: dict[Dim, Dim] = field(default_factory=dict)
    units: dict[Dim, int] = field(default_factory=dict)


def find_structure(module, arguments) -> Structure:
    """The Megatron structure of ``module`` (see the module docstring)."""
    from shard_opt.passes.mark_fusions import find_groups

    g = Graph.of(module, [a.kind for a in arguments])
    attention = {n for label, members in find_groups(g) if kernels.of_label(label) is kernels.SDPA for n in members}
    src = dim_sources(g)
    kinds = [a.kind for a in arguments]
    dots = _weight_products(g, src)

    free: dict[Dim, int] = {}  # weight dims a product leaves as its output features -> its node
    for p in dots:
        for d in p.free:
            for ad in p.dims[d]:
                free[ad] = p.node.index

    def size(x: Dim) -> int:
        return g.values[g.args[x[0]]].shape[x[1]]

    st = Structure()
    rows: set[int] = set()  # weights that close a pair: not also a column (one split per weight)
    cols: set[int] = set()
    experts: set[int] = set()  # stacked-expert weights: split on the expert dim only

    def close(p: _Product, chain) -> None:
        """``p`` as the closing (row) matmul of the pairs its contracted features end."""
        act, arg, dims = p.node.operands[1 - p.weight], p.arg, p.dims
        row = next((x for d in p.contract for x in sorted(dims[d])), None)
        if row is not None and arg not in cols and arg not in experts:
            reaching = set().union(*(chain[act][d] for d in p.act_contract))
            for col in sorted(reaching & set(free)):
                if col[0] == arg or col[0] in rows or col[0] in experts or col[1] != _out_dim(dots, col):
                    continue
                kind = _kind(g, free[col], p.node.index, attention)
                st.pairs.append((col, row, kind))
                rows.add(arg)
                cols.add(col[0])
        mine = next((x for d in p.batch for x in sorted(dims[d])), None)
        if mine is not None:
            reaching = set().union(*(src[act][d] for d in p.act_batch))
            for other in sorted(reaching & set(free)):
                if other[0] != arg and size(other) == size(mine):
                    st.experts.append((other, mine))
                    experts.update((other[0], arg))

    _chains(g, dots, lambda x: x in free and x[0] not in rows, close)
    paired = {c[0] for c, _, _ in st.pairs} | {r[0] for _, r, _ in st.pairs} | \
        {x[0] for pair in st.experts for x in pair}
    returned = _returned_nodes(g)
    for p in dots:
        col = next((x for d in p.free for x in sorted(p.dims[d])), None)
        if col is not None and p.arg not in paired and p.node.index in returned:
            st.heads.append(col)
    columns = {c for c, _, _ in st.pairs} | set(st.heads)
    for v, dims in enumerate(src):
        shape = g.values[v].shape
        for d, s in enumerate(dims):
            if len(s) < 2:
                continue
            cols_here = [x for x in s if x in columns]
            for c in cols_here:
                if shape[d] > 1:
                    st.units[c] = min(st.units.get(c, shape[d]), shape[d])
            for x in s:  # a cache dim indexed, at its own size, with a column's features
                if kinds[x[0]] == "cache" and cols_here and g.values[g.args[x[0]]].shape[x[1]] == shape[d]:
                    st.caches.setdefault(x, cols_here[0])
    for v, dims in enumerate(src):  # units of columns indexed alone
        for d, s in enumerate(dims):
            if len(s) == 1:
                (x,) = s
                if x in columns and g.values[v].shape[d] > 1:
                    st.units[x] = min(st.units.get(x, g.values[v].shape[d]), g.values[v].shape[d])
    return st


@dataclass
class _Product:
    """A matmul or convolution with a weight operand.

    Attributes:
      node: the ``dot_general`` / ``convolution``; weight: which operand is the weight.
      arg: the weight's argument; dims: per weight operand dim, the argument dims it indexes.
      contract, batch, free: weight operand dims contracted, batched, left as output features.
      act_contract, act_batch: the activation operand's contracted and batching dims.
    """

    node: object
    weight: int
    arg: int
    dims: list
    contract: list[int]
    batch: list[int]
    free: list[int]
    act_contract: list[int]
    act_batch: list[int]


def _weight_products(g: Graph, src) -> list[_Product]:
    """Every ``dot_general`` with a weight operand, and every ungrouped ``convolution``
    whose kernel is a weight (its output channels free, its input channels contracted,
    its window dims neither), in program order."""
    out = []
    for node in g.nodes:
        if node.name == "stablehlo.dot_general":
            i = next((i for i, o in enumerate(node.operands) if g.is_weight(o)), None)
            if i is None:
                continue
            lb, rb, lc, rc = g.dot_dims(node)
            contract, batch = (lc, lb) if i == 0 else (rc, rb)
            act_contract, act_batch = (rc, rb) if i == 0 else (lc, lb)
            rank = len(g.values[node.operands[i]].shape)
            free = [d for d in range(rank) if d not in contract and d not in batch]
        elif node.name == "stablehlo.convolution" and g.is_weight(node.operands[1]):
            layout = conv_layout(g, node)
            if layout is None or any((g.attr(node, k).split(":")[0].strip() or "1") != "1"
                                     for k in ("feature_group_count", "batch_group_count")):
                continue  # a grouped (depthwise) convolution keeps channels apart: no pair
            lhs_l, rhs_l, _ = layout
            i, contract, batch, free = 1, [rhs_l.index("i")], [], [rhs_l.index("o")]
            act_contract, act_batch = [lhs_l.index("f")], []
        else:
            continue
        w = node.operands[i]
        arg = g.values[g.source(w)].arg
        dims = [{x for x in s if x[0] == arg} for s in src[w]]
        out.append(_Product(node, i, arg, dims, contract, batch, free, act_contract, act_batch))
    return out


_ENDED = frozenset({(-1, -1)})  # a dim normalised over its features (``_chains``)


def _chains(g: Graph, products: list[_Product], open_column, close) -> None:
    """Follow columns' output features through the graph in program order, calling
    ``close(product, chain)`` at each weight product before its result is computed.

    ``chain`` is ``dim_sources`` with the two places a column -> row pair ends:

    - a **reduction over the features** (a norm): a value combined elementwise with a
      statistic reduced over some argument dims (``x - mean(x)``, ``x * rsqrt(mean(x^2))``)
      no longer carries them; they are replaced by ``_ENDED``, which no column owns, so
      the normalised value counts as unsplit where it meets a column's output. A
      reduction over other dims (GroupNorm's groups of channels: the channel dim is split
      into groups before the reduction; softmax over keys) leaves the features alone;
    - an elementwise op with an **unsplit tensor**: where one operand's dim carries a
      source that is not an open column's features (``open_column``: a weight's output
      dim that no pair has closed yet), the open columns' features end there: the
      residual stream (the input's features, earlier rows' outputs) added to a column's
      output would have to be gathered first. Operands computed from weights alone (a
      bias, a scale) and constants follow whatever they are combined with; two columns'
      outputs (SwiGLU's ``silu(g(x)) * c(x)``) carry each other on, and so does a KV
      cache's heads dim (decode's scores carry the cache's heads beside k_proj's).
    """
    from shard_opt.dataflow import ELEMENTWISE_OPS, _node_sources

    by_node = {p.node.index: p for p in products}
    weights = {i for i, k in enumerate(g.arg_kinds) if k in ("param", "buffer")}
    caches = {i for i, k in enumerate(g.arg_kinds) if k == "cache"}

    def unsplit(x: Dim) -> bool:  # a KV cache splits with the column it extends (its heads)
        return x[0] not in caches and not open_column(x)

    chain: list[list[frozenset]] = [[frozenset()] * len(v.shape) for v in g.values]
    for i, v in enumerate(g.args):
        chain[v] = [frozenset({(i, d)}) for d in range(len(g.values[v].shape))]
    stats: list[frozenset] = [frozenset()] * len(g.values)  # argument dims a statistic is reduced over
    active = [False] * len(g.values)  # computed from an input or a cache (not weights and constants alone)
    for i, v in enumerate(g.args):
        active[v] = i not in weights
    for node in g.nodes:
        if node.index in by_node:
            close(by_node[node.index], chain)
        if not node.results:
            continue
        r = node.results[0]
        for x in node.results:
            active[x] = any(active[o] for o in node.operands)
        shape = g.values[r].shape
        res = _node_sources(g, node, chain, len(shape))
        if res is None or len(res) != len(shape):
            continue
        if node.name == "stablehlo.reduce":
            reduced = g.ints(node, "dimensions")
            stats[r] = frozenset().union(*(stats[o] for o in node.operands),
                                         *(chain[node.operands[0]][d] for d in reduced))
        elif node.name in ELEMENTWISE_OPS or node.name in LAYOUT_OPS:
            stats[r] = frozenset().union(*(stats[o] for o in node.operands))
        if node.name in ELEMENTWISE_OPS and len(node.operands) > 1:
            live = [o for o in node.operands if g.values[o].shape == shape and active[o]]
            if live:  # a bias or a scale adds nothing of its own
                res = [frozenset().union(*(chain[o][d] for o in live)) for d in range(len(shape))]
            for d in range(len(shape)):
                if any(unsplit(x) for o in live for x in chain[o][d]):
                    res[d] = frozenset(x for x in res[d] if not open_column(x))
        if stats[r]:  # normalised over those dims: they end, as an unsplit tensor's dims would
            res = [(s - stats[r]) | _ENDED if s & stats[r] else s for s in res]
        chain[r] = res


def _out_dim(dots: list[_Product], col: Dim) -> int | None:
    """The weight dim its product leaves as the output features (a free dim indexing
    nothing else): ``col``'s dim when it is one."""
    for p in dots:
        if p.arg == col[0]:
            for d in p.free:
                if len(p.dims[d]) == 1:
                    return next(iter(p.dims[d]))[1]
    return None


def _kind(g: Graph, start: int, stop: int, attention: set[int]) -> str:
    """``attention`` when an attention op lies between the two products, else ``conv``
    when the column is a convolution, else ``mlp``."""
    if attention & g.forward(start, stop):
        return "attention"
    return "conv" if g.nodes[start].name == "stablehlo.convolution" else "mlp"


def _returned_nodes(g: Graph) -> set[int]:
    """Nodes whose result reaches ``func.return`` through layout ops, constant scalings
    and bias adds only (an LM head with a bias, GPT-J's: ``lm_head(x) + b`` is what the
    model returns; a classifier's ``addmm``)."""

    def bias(v: int) -> bool:
        """A 1-D weight, broadcast, maybe scaled by a constant (addmm's beta)."""
        for _ in range(8):
            x = g.source(v)
            if g.values[x].arg is not None:
                return g.is_weight(x) and len(g.values[x].shape) <= 1
            p = g.producer(x)
            if p.name != "stablehlo.multiply" or not g.is_constant(p.operands[1]):
                return False
            v = p.operands[0]
        return False

    out = set()
    for node in g.nodes:
        if node.name != "func.return":
            continue
        stack = list(node.operands)
        while stack:
            v = stack.pop()
            p = g.producer(v)
            if p is None or p.index in out:
                continue
            out.add(p.index)
            if p.name in LAYOUT_OPS:
                stack.extend(p.operands)
            elif p.name == "stablehlo.add" and len(p.operands) == 2:
                x, b = p.operands
                stack.extend(a for a, b in ((x, b), (b, x)) if bias(b))
            elif p.name == "stablehlo.multiply" and len(p.operands) == 2:  # addmm's alpha
                x, c = p.operands
                stack.extend(a for a, c in ((x, c), (c, x)) if g.is_constant(c))
    return out


def structure_of(model) -> Structure:
    """``find_structure`` of a ``LoweredModel``, calls inlined and batched matmuls
    unfolded, as candidates are evaluated (its 1-layer copy when it has one: the
    structure of a layer is every layer's; arguments are then mapped back by role).

    Unfolded, attention's matmuls keep the batch and the heads apart: torch-mlir folds
    ``[batch, heads]`` into one dim for them, and a merge takes the union of its dims'
    sources while the split back gives them all to the major part (the batch), so with a
    batch of more than one the heads dim came out of attention carrying nothing: no
    column reached o_proj through it (K/V, and all of a Llama's attention, lost their
    pair and their heads) and q_proj's units read as the batch size."""
    short = model
    if model.with_layers is not None and (model.num_layers or 0) > 1:
        short = model.with_layers(1)
    from shard_opt.passes.inline_calls import inline_calls
    from shard_opt.passes.unfold_batch_matmul import unfold_batch_matmul

    module = ir.parse(short.text, filename=short.name)
    inline_calls(module)  # a JAX model's helpers (@relu) are part of its dataflow
    unfold_batch_matmul(module)  # [b*h, s, d] matmuls as [b, h, s, d] (evaluate.prepare does the same)
    st = find_structure(module, short.arguments)
    if short is model:
        return st
    return _by_role(st, short.arguments, model.arguments)


def _by_role(st: Structure, short_args, full_args) -> Structure:
    """Map a short model's structure onto every layer of the full model (by role)."""
    full_by_role = indices_by_role(full_args)
    role = {a.index: (a.role, a.shape) for a in short_args}
    layer = {a.index: a.layer for a in full_args}

    def expand(x: Dim) -> list[Dim]:
        return [(i, x[1]) for i in full_by_role.get(role[x[0]], [])]

    def pair(x: Dim, y: Dim) -> list[tuple[Dim, Dim]]:
        xs, ys = expand(x), expand(y)
        if len(xs) == len(ys):  # layer by layer
            return [(a, b) for a, b in zip(sorted(xs), sorted(ys)) if layer[a[0]] == layer[b[0]]] or list(zip(xs, ys))
        return [(a, b) for a in xs for b in ys]

    out = Structure()
    for c, r, k in st.pairs:
        out.pairs += [(a, b, k) for a, b in pair(c, r)]
    for a, b in st.experts:
        out.experts += pair(a, b)
    for h in st.heads:
        out.heads += expand(h)
    for cache, col in st.caches.items():
        for a, b in pair(cache, col):
            out.caches[a] = b
    for c, n in st.units.items():
        for x in expand(c):
            out.units[x] = n
    return out


def graph_weights(g: Graph, unknown: set[int]) -> set[int]:
    """Which of the ``unknown`` arguments (neither an attribute nor a name says what they
    are) are weights, read from the graph (calls inlined): an argument is a weight when
    it is contracted against an activation, as a projection's weight is:

    - the kernel of a ``convolution``;
    - an operand of a ``dot_general`` with no batching dims whose other operand is
      computed in the graph (not a layout view of an argument): ``relu(x @ w1) @ w2``
      makes ``w2`` a weight. A matmul with batching dims reads two activations
      (attention's scores, a KV cache) and decides nothing;
    - of a ``dot_general`` of two arguments, the one whose free (not contracted) dims do
      not all reach the module's results while the other's do: in ``relu(x @ w1) @ w2``
      the result is indexed by ``x``'s batch and token dims and ``w2``'s outputs, and
      ``w1``'s output features are contracted away by ``w2``. A lone ``x @ w`` decides
      nothing. The same test keeps an argument multiplied with a computed weight
      (``x @ dequantize(w)``) an input;
    - the bias added to a weight's matmul (``mark-fusions``' linear pattern: a small
      broadcast argument added to its result).

    Everything else stays an input: an activation has rank >= 2 too, and calling one a
    weight would let the search split it for free."""
    from shard_opt.passes.mark_fusions import _bias

    src = dim_sources(g)
    reach: set = set()  # argument dims that index a result of the module
    for node in g.nodes:
        if node.name == "func.return":
            for o in node.operands:
                for s in src[o]:
                    reach |= s

    def arg_of(v: int) -> int | None:
        return g.values[g.source(v)].arg

    def reaches(v: int, contracted: list[int]) -> bool:
        """Every free dim of operand ``v`` indexes a result of the module."""
        return all(s <= reach for d, s in enumerate(src[v]) if d not in contracted)

    weights: set[int] = set()
    for node in g.nodes:
        if node.name == "stablehlo.convolution":
            weights.add(arg_of(node.operands[1]))
        if node.name != "stablehlo.dot_general":
            continue
        lb, rb, lc, rc = g.dot_dims(node)
        if lb or rb:
            continue
        (x, y), (cx, cy) = node.operands, (lc, rc)
        for (v, cv), (other, co) in (((x, cx), (y, cy)), ((y, cy), (x, cx))):
            if arg_of(v) is None:
                continue
            if arg_of(other) is None:  # contracted against a computed value
                if reaches(other, co) or not reaches(v, cv):
                    weights.add(arg_of(v))
            elif arg_of(other) != arg_of(v) and reaches(other, co) and not reaches(v, cv):
                weights.add(arg_of(v))
    weights &= unknown
    for node in g.nodes:  # the biases of the weights' matmuls
        if node.name in ("stablehlo.dot_general", "stablehlo.convolution") and \
                any(arg_of(o) in weights for o in node.operands):
            for m in _bias(g, node, {}):
                if g.nodes[m].name == "stablehlo.add":
                    weights.update(x for x in map(arg_of, g.nodes[m].operands) if x in unknown)
    return weights
