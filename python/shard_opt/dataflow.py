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
        self.nodes: list[Node] = []
        self.values: list[Value] = []
        self.args: list[int] = []  # value index of each @main argument
        self.arg_kinds: list[str] = []  # "param", "buffer", "input", "cache" (shard_opt.kind; default input)

    @staticmethod
    def of(module, arg_kinds: list[str] | None = None) -> "Graph":
        """The graph of ``module``'s ``@main``; ``arg_kinds`` (the frontend's argument kinds)
        default to the ``shard_opt.kind`` argument attributes."""
        g = Graph()
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
