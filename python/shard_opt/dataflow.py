"""A module's dataflow as plain Python: ops, values, producers and users.

Analyses that walk the graph (which ops form an attention or a norm, which matmuls
pair up as Megatron column -> row, where the residual stream runs) read it here instead
of through the MLIR bindings, where every attribute access is a C++ call. ``Graph.of``
snapshots the top-level block of ``@main`` once; ``Node.op`` keeps the MLIR operation
for the passes that annotate it.

Only the top-level ops of ``@main`` are nodes: the body of a ``stablehlo.reduce``
(its ``add`` / ``maximum``) belongs to the reduce. Call sites stay nodes (inline first,
``passes/inline_calls.py``, to see through them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from shard_opt import ir

# Ops that only relabel or move data layout; a compiler fuses them into their users
# (shard_opt.analysis prices them as free).
LAYOUT_OPS = frozenset({
    "stablehlo.reshape", "stablehlo.transpose", "stablehlo.convert", "stablehlo.broadcast_in_dim",
    "stablehlo.constant", "sdy.constant", "func.return", "stablehlo.return",
    "stablehlo.get_tuple_element", "stablehlo.tuple", "stablehlo.iota", "stablehlo.bitcast_convert",
    "sdy.sharding_constraint", "sdy.reshard", "sdy.return", "arith.constant",
})

# Elementwise ops: one result, the shape of their (non-scalar) operands.
ELEMENTWISE_OPS = frozenset({
    "stablehlo.add", "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide", "stablehlo.power",
    "stablehlo.maximum", "stablehlo.minimum", "stablehlo.negate", "stablehlo.exponential",
    "stablehlo.exponential_minus_one", "stablehlo.log", "stablehlo.log_plus_one", "stablehlo.logistic",
    "stablehlo.tanh", "stablehlo.rsqrt", "stablehlo.sqrt", "stablehlo.abs", "stablehlo.sign",
    "stablehlo.select", "stablehlo.compare", "stablehlo.and", "stablehlo.or", "stablehlo.not",
    "stablehlo.clamp", "stablehlo.sine", "stablehlo.cosine", "stablehlo.floor", "stablehlo.ceil",
    "stablehlo.round_nearest_even", "stablehlo.remainder", "stablehlo.convert", "chlo.erf", "chlo.tan",
    "stablehlo.is_finite",
})

CONSTANT_OPS = frozenset({"stablehlo.constant", "sdy.constant", "arith.constant", "stablehlo.iota"})

# Ops that move data between positions along some dims (``moved_dims_of``): split there,
# a device would need another device's data.
MOVING_OPS = ("stablehlo.slice", "stablehlo.pad", "stablehlo.reverse")


def moved_dims_of(op) -> list[int]:
    """Dims along which ``op`` (one of ``MOVING_OPS``, an MLIR operation) moves data between
    positions: what a slice cuts, a pad pads, a reverse reverses."""
    name = op.operation.name
    tt = ir.tensor_type(op.operands[0].type) if op.operands else None
    if tt is None:
        return []
    shape = tt[0]
    attrs = op.attributes
    if name == "stablehlo.slice":
        start, limit, strides = (list(attrs[k]) for k in ("start_indices", "limit_indices", "strides"))
        return [d for d in range(len(shape)) if start[d] != 0 or limit[d] != shape[d] or strides[d] != 1]
    if name == "stablehlo.pad":
        lo, hi, inner = (list(attrs[k]) for k in ("edge_padding_low", "edge_padding_high", "interior_padding"))
        return [d for d in range(len(shape)) if lo[d] or hi[d] or inner[d]]
    if name == "stablehlo.reverse":
        return sorted(set(attrs["dimensions"]))
    return []


@dataclass
class Value:
    """One SSA value: its type, producer and users (node indices)."""

    index: int
    shape: tuple[int, ...]
    dtype: str
    producer: int | None = None  # node index; None for a function argument
    arg: int | None = None  # @main argument number
    users: list[int] = field(default_factory=list)

    @property
    def elements(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass
class Node:
    """One top-level op of ``@main``."""

    index: int
    name: str
    op: object  # the MLIR operation
    operands: list[int]
    results: list[int]


class Graph:
    """Ops and values of ``@main``'s body, in program order."""

    def __init__(self):
        self.module = None
        self.nodes: list[Node] = []
        self.values: list[Value] = []
        self.args: list[int] = []  # value index of each @main argument
        self.arg_kinds: list[str] = []  # "param", "buffer", "input", "cache" (shard_opt.kind; default input)

    @staticmethod
    def of(module, arg_kinds: list[str] | None = None, *, through_constraints: bool = False) -> "Graph":
        """The graph of ``module``'s ``@main``; ``arg_kinds`` (the frontend's argument kinds)
        default to the ``shard_opt.kind`` argument attributes. ``through_constraints``: an
        ``sdy.sharding_constraint`` is no node, its result the value it constrains (the
        computation, as a fusion pattern reads it, whether or not a plan's constraints are in
        the module yet)."""
        g = Graph()
        g.module = module  # the nodes' operations live as long as their module
        func = ir.main_func(module)
        block = func.regions[0].blocks[0]
        ids: dict = {}

        def value(v, producer=None, arg=None) -> int:
            tt = ir.tensor_type(v.type)
            shape, dtype = tt if tt is not None else ((), "none")
            val = Value(len(g.values), tuple(shape), dtype, producer, arg)
            g.values.append(val)
            ids[v] = val.index
            return val.index

        for a in block.arguments:
            g.args.append(value(a, arg=a.arg_number))
        g.arg_kinds = list(arg_kinds) if arg_kinds else _arg_kinds(func, len(g.args))
        for op in block.operations:
            if through_constraints and op.operation.name == "sdy.sharding_constraint":
                ids[op.results[0]] = ids[op.operands[0]]
                continue
            n = len(g.nodes)
            operands = []
            for v in op.operands:
                if v not in ids:  # defined outside the block (cannot happen in @main)
                    value(v)
                operands.append(ids[v])
            node = Node(n, op.operation.name, op.operation, operands, [value(r, producer=n) for r in op.results])
            g.nodes.append(node)
            for i in operands:
                g.values[i].users.append(n)
        return g

    # ---- navigation ---------------------------------------------------------------------

    def is_weight(self, v: int) -> bool:
        """``v`` is a parameter or buffer argument, or a layout view of one."""
        arg = self.values[self.source(v)].arg
        return arg is not None and self.arg_kinds[arg] in ("param", "buffer")

    def producer(self, v: int) -> Node | None:
        p = self.values[v].producer
        return None if p is None else self.nodes[p]

    def forward(self, start: int, stop: int) -> set[int]:
        """Nodes reachable from node ``start`` through users, up to node index ``stop``."""
        seen, stack = set(), [start]
        while stack:
            n = stack.pop()
            if n in seen or n > stop:
                continue
            seen.add(n)
            for r in self.nodes[n].results:
                stack.extend(self.values[r].users)
        return seen

    def backward(self, start: int, stop: int) -> set[int]:
        """Nodes ``start`` depends on, down to node index ``stop``."""
        seen, stack = set(), [start]
        while stack:
            n = stack.pop()
            if n in seen or n < stop:
                continue
            seen.add(n)
            for v in self.nodes[n].operands:
                p = self.values[v].producer
                if p is not None:
                    stack.append(p)
        return seen

    def attr(self, node: Node, key: str) -> str:
        """An attribute's text ('' when absent)."""
        attrs = node.op.attributes
        return str(attrs[key]) if key in attrs else ""

    def source(self, v: int, through=LAYOUT_OPS - CONSTANT_OPS) -> int:
        """``v`` with the single-operand layout ops that produced it peeled off."""
        while True:
            p = self.producer(v)
            if p is None or p.name not in through or len(p.operands) != 1:
                return v
            v = p.operands[0]

    def is_constant(self, v: int) -> bool:
        """Computed from constants only (splat scalars broadcast, iotas...)."""
        seen = set()
        stack = [v]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            p = self.producer(x)
            if p is None:
                return False
            if p.name in CONSTANT_OPS:
                continue
            if p.name not in LAYOUT_OPS and p.name not in ELEMENTWISE_OPS:
                return False
            stack.extend(p.operands)
        return True

    def ints(self, node: Node, key: str) -> list[int]:
        """An integer-array attribute of ``node`` (``dimensions`` of a reduce...)."""
        return attr_ints(self.attr(node, key))

    def dot_dims(self, node: Node) -> tuple[list[int], list[int], list[int], list[int]]:
        """(lhs batching, rhs batching, lhs contracting, rhs contracting) dims of a dot_general."""
        text = self.attr(node, "dot_dimension_numbers")
        return tuple(attr_ints(text, k) for k in (  # type: ignore[return-value]
            "lhs_batching_dimensions", "rhs_batching_dimensions",
            "lhs_contracting_dimensions", "rhs_contracting_dimensions"))


def _arg_kinds(func, n: int) -> list[str]:
    """Each argument's ``shard_opt.kind`` (the frontends write it), ``input`` when absent."""
    kinds = ["input"] * n
    if "arg_attrs" in func.attributes:
        irm = ir.ir()
        for i, a in enumerate(func.attributes["arg_attrs"]):
            d = irm.DictAttr(a)
            if "shard_opt.kind" in d:
                kinds[i] = str(d["shard_opt.kind"]).strip('"')
    return kinds


def attr_ints(text: str, key: str | None = None) -> list[int]:
    """The integers of an attribute's text (``array<i64: 1, 2>``, ``[0, 1]``); with ``key``,
    those of ``key = [...]`` inside a struct attribute (``#stablehlo.dot<...>``)."""
    if key:
        m = re.search(re.escape(key) + r"\s*=\s*\[([-\d,\s]*)\]", text)
        return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []
    if text.startswith("array<"):
        text = text.partition(":")[2]
    return [int(x) for x in re.findall(r"-?\d+", text)]


# ---- dim provenance ---------------------------------------------------------------------

Sources = frozenset  # of (argument index, argument dim)
_NONE: frozenset = frozenset()


def dim_sources(g: Graph, barriers: set[int] = frozenset()) -> list[list[frozenset]]:
    """Per value, per dim: the (argument, dim) pairs that dim is indexed by.

    A dim carries the argument dims it comes from through elementwise ops, broadcasts,
    transposes, reshapes, slices, concatenates, reductions (of the other dims), gathers,
    convolutions and the batch and free dims of a ``dot_general`` (so a projection's
    output features reach, through attention's per-head matmuls, the next projection's
    contracted features). A reshape that splits a dim gives the split's major part the
    sources (splitting features into heads x head_dim: heads carry the features; a split
    of N devices over the features splits the heads); a merge takes the union. Results
    of the ``barriers`` nodes (the norms: a value normalised over its features starts
    anew) and of ops not covered carry nothing.
    """
    out: list[list[frozenset]] = [[_NONE] * len(v.shape) for v in g.values]
    for i, v in enumerate(g.args):
        out[v] = [frozenset({(i, d)}) for d in range(len(g.values[v].shape))]
    for node in g.nodes:
        if node.index in barriers or not node.results:
            continue
        r = node.results[0]
        rank = len(g.values[r].shape)
        res = _node_sources(g, node, out, rank)
        if res is not None and len(res) == rank:
            out[r] = res
    return out


def _node_sources(g: Graph, node: Node, out, rank: int) -> list[frozenset] | None:
    name = node.name
    ops = node.operands
    shape = g.values[node.results[0]].shape
    if name in ELEMENTWISE_OPS or name in ("stablehlo.slice", "stablehlo.pad", "stablehlo.dynamic_slice",
                                           "stablehlo.dynamic_update_slice", "stablehlo.reverse",
                                           "sdy.sharding_constraint", "sdy.reshard", "stablehlo.concatenate",
                                           "stablehlo.custom_call"):
        res = [set() for _ in range(rank)]
        for o in (ops[:1] if name in ("stablehlo.slice", "stablehlo.pad", "stablehlo.dynamic_slice",
                                      "stablehlo.custom_call") else ops):
            if len(out[o]) != rank:
                continue
            for d in range(rank):
                if name != "stablehlo.concatenate" and g.values[o].shape[d] != shape[d] and \
                        name not in ("stablehlo.slice", "stablehlo.pad", "stablehlo.dynamic_slice"):
                    continue  # a broadcast scalar-like operand dim
                res[d] |= out[o][d]
        return [frozenset(s) for s in res]
    if name == "stablehlo.broadcast_in_dim":
        dims = g.ints(node, "broadcast_dimensions")
        res = [_NONE] * rank
        src = out[ops[0]]
        for i, d in enumerate(dims):
            if i < len(src) and g.values[ops[0]].shape[i] == shape[d]:
                res[d] = src[i]
        return res
    if name == "stablehlo.transpose":
        perm = g.ints(node, "permutation")
        src = out[ops[0]]
        return [src[p] for p in perm] if len(perm) == rank and len(src) == rank else None
    if name == "stablehlo.reshape":
        return _reshape_sources(g.values[ops[0]].shape, shape, out[ops[0]])
    if name == "stablehlo.reduce":
        dims = set(g.ints(node, "dimensions"))
        src = out[ops[0]]
        return [s for d, s in enumerate(src) if d not in dims]
    if name == "stablehlo.dot_general":
        lb, rb, lc, rc = g.dot_dims(node)
        lhs, rhs = out[ops[0]], out[ops[1]]
        res = [lhs[a] | rhs[b] for a, b in zip(lb, rb)]
        res += [lhs[d] for d in range(len(lhs)) if d not in lb and d not in lc]
        res += [rhs[d] for d in range(len(rhs)) if d not in rb and d not in rc]
        return res
    if name == "stablehlo.gather":
        return _gather_sources(g, node, out, rank)
    if name == "stablehlo.convolution":
        return _conv_sources(g, node, out, rank)
    return None


def reshape_blocks(src_shape, dst_shape) -> list[tuple[list[int], list[int]]] | None:
    """A reshape's dims in blocks of equal element counts, (source dims, result dims);
    None when the sizes do not line up."""
    out = []
    i = j = 0
    while i < len(src_shape) or j < len(dst_shape):
        bi, bj = [i] if i < len(src_shape) else [], [j] if j < len(dst_shape) else []
        pi = src_shape[i] if i < len(src_shape) else 1
        pj = dst_shape[j] if j < len(dst_shape) else 1
        i, j = i + (i < len(src_shape)), j + (j < len(dst_shape))
        while pi != pj:
            if pi < pj and i < len(src_shape):
                bi.append(i)
                pi *= src_shape[i]
                i += 1
            elif pj < pi and j < len(dst_shape):
                bj.append(j)
                pj *= dst_shape[j]
                j += 1
            else:
                return None
        out.append((bi, bj))
    return out


def _reshape_sources(src_shape, dst_shape, src) -> list[frozenset] | None:
    """Map dims through a reshape by blocks of equal element counts (see ``dim_sources``)."""
    blocks = reshape_blocks(src_shape, dst_shape)
    if blocks is None:
        return None
    res = [_NONE] * len(dst_shape)
    for bi, bj in blocks:
        sources = frozenset().union(*(src[k] for k in bi if src_shape[k] > 1)) if bi else _NONE
        big = [k for k in bj if dst_shape[k] > 1]
        if big:
            res[big[0]] = sources  # a split: the major part carries them
    return res


def _gather_sources(g: Graph, node: Node, out, rank: int) -> list[frozenset] | None:
    text = g.attr(node, "dimension_numbers")
    offset = attr_ints(text, "offset_dims")
    collapsed = set(attr_ints(text, "collapsed_slice_dims"))
    ivd = attr_ints(text, "index_vector_dim")
    table, indices = out[node.operands[0]], out[node.operands[1]]
    kept = [d for d in range(len(table)) if d not in collapsed]
    batch = [d for d in range(len(indices)) if not ivd or d != ivd[0]]
    res = [_NONE] * rank
    it_off, it_batch = iter(kept), iter(batch)
    for d in range(rank):
        if d in offset:
            k = next(it_off, None)
            res[d] = table[k] if k is not None else _NONE
        else:
            k = next(it_batch, None)
            res[d] = indices[k] if k is not None else _NONE
    return res


def conv_layout(g: Graph, node: Node) -> tuple[list[str], list[str], list[str]] | None:
    """A ``convolution``'s dim labels, (input, kernel, output): ``b``/``f`` batch and
    features, ``o``/``i`` kernel output and input channels, digits the window dims."""
    m = re.search(r"\[([^\]]*)\]x\[([^\]]*)\]->\[([^\]]*)\]", g.attr(node, "dimension_numbers"))
    if not m:
        return None
    return tuple([p.strip() for p in part.split(",")] for part in m.groups())  # type: ignore[return-value]


def _conv_sources(g: Graph, node: Node, out, rank: int) -> list[frozenset] | None:
    layout = conv_layout(g, node)
    if layout is None:
        return None
    lhs_l, rhs_l, out_l = layout
    lhs, rhs = out[node.operands[0]], out[node.operands[1]]
    res = [_NONE] * rank
    for d, label in enumerate(out_l):
        if label == "b":
            res[d] = lhs[lhs_l.index("b")]
        elif label == "f":
            res[d] = rhs[rhs_l.index("o")]
        elif label in lhs_l:
            res[d] = lhs[lhs_l.index(label)]
    return res
