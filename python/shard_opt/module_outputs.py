"""Which torch module's output a value of a lowered module is, and how its dims map.

A guard or constraint shard-opt prices sits on a value inside ``forward()``; the user's
tt-xla script can only constrain a module's *output* (a forward hook,
``tt_torch.sharding_constraint_hook``). This module ties the two, for
``FusedSplit.script_guards`` and the equivalence harness (``shard_opt.emit.rebuild``),
which must find the same place from both sides:

- ``module_output(reader)``: the value a torch module returns, for the op that reads its
  weight (``stablehlo.dot_general`` of a ``Linear``, ``stablehlo.convolution`` of a
  ``ConvNd``): the reader's result and, after it, the ops the module's own lowering adds
  — the reshape that restores a flattened batch (``[b*s, n] -> [b, s, n]``), the bias
  add and the ``addmm`` scalings (an add / multiply by a value computed from constants and
  weights alone), converts, and the collectives Shardy puts between them;
- ``trace(value)``: back from a value through the ops that keep it the same data (layout
  ops, collectives, elementwise ops of it and of constants or weights, slices of other
  dims) to the op reading a weight, and the ops between that module's output and the value;
- ``back_dims(ops, dims)``: the dims of the module output that hold ``dims`` of the value.

Nothing here guesses a module from a name pattern: the weight is a ``@main`` argument the
frontend named (``Argument.name`` is the parameter's FQN); the module is that name
without ``.weight``. A value that reaches no weight, a matmul of two activations, or a
weight that is not its reader's own (a tied embedding read by ``lm_head``) is not tied,
and the reason says why in words (``Untied``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shard_opt import ir
from shard_opt.dataflow import CONSTANT_OPS, ELEMENTWISE_OPS, attr_ints

READER_OPS = ("stablehlo.dot_general", "stablehlo.convolution")
COLLECTIVES = ("sdy.all_reduce", "sdy.all_gather", "sdy.all_slice", "sdy.reduce_scatter", "sdy.all_to_all",
               "sdy.collective_permute", "sdy.reshard", "sdy.sharding_constraint")
# a weight is read through these (PyTorch Linear.weight is transposed for the matmul)
WEIGHT_VIEWS = frozenset({"stablehlo.transpose", "stablehlo.reshape", "stablehlo.convert",
                          "stablehlo.broadcast_in_dim", *COLLECTIVES})
# one operand, the same data (or a part of it): followed back from a guarded value
SAME_DATA = frozenset({"stablehlo.transpose", "stablehlo.reshape", "stablehlo.convert", "stablehlo.slice",
                       "stablehlo.broadcast_in_dim", *COLLECTIVES})
UNARY = frozenset(n for n in ELEMENTWISE_OPS if n not in {
    "stablehlo.add", "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide", "stablehlo.power",
    "stablehlo.maximum", "stablehlo.minimum", "stablehlo.select", "stablehlo.compare", "stablehlo.and",
    "stablehlo.or", "stablehlo.clamp", "stablehlo.remainder"})
BINARY = frozenset(ELEMENTWISE_OPS - UNARY)
# what a module's own lowering adds after its reader (with a static second operand)
BIAS_OPS = ("stablehlo.add", "stablehlo.multiply")
MAX_DEPTH = 64


class Untied(Exception):
    """A value no module output can stand for; ``str(e)`` says why, in words."""


@dataclass
class Tie:
    """A value tied to the module whose output holds it.

    Attributes:
      reader: the op reading the weight (dot_general / convolution).
      weight: the ``@main`` argument index of that weight.
      output: the module's output value (``module_output(reader)``).
      path: the ops from ``output`` (exclusive) to the traced value (inclusive), in
        program order: what ``back_dims`` maps the dims through.
    """

    reader: object
    weight: int
    output: object
    path: list


def is_block_arg(value) -> bool:
    return type(value.owner).__name__ == "Block"


def owner(value):
    """The ``Operation`` defining ``value`` (an OpView's ``name`` may be an attribute)."""
    o = value.owner
    return o.operation if hasattr(o, "operation") else o


def _arg_number(value) -> int | None:
    """The ``@main`` argument index of a block argument of a function's entry block."""
    if not is_block_arg(value):
        return None
    parent = value.owner.owner
    parent = parent.operation if hasattr(parent, "operation") else parent
    if parent.name != "func.func":
        return None
    return ir.ir().BlockArgument(value).arg_number


class Graph:
    """A (propagated or annotated) module and its argument kinds, with the memoized
    facts the tracing asks about each value."""

    def __init__(self, module, arguments):
        self.module = module
        self.arguments = list(arguments)
        self.func = ir.main_func(module)
        self._static: dict = {}

    def kind(self, index: int | None) -> str | None:
        return self.arguments[index].kind if index is not None and index < len(self.arguments) else None

    def weight_of(self, value) -> int | None:
        """The parameter argument ``value`` is a layout view of, or None."""
        for _ in range(MAX_DEPTH):
            index = _arg_number(value)
            if index is not None:
                return index if self.kind(index) in ("param", "buffer") else None
            if is_block_arg(value):
                return None
            op = owner(value)
            if op.name not in WEIGHT_VIEWS or not op.operands:
                return None
            value = op.operands[0]
        return None

    def static(self, value) -> bool:
        """Whether ``value`` is computed from constants and weights alone (no activation)."""
        stack = [value]
        order = []
        while stack:
            v = stack.pop()
            key = v
            if key in self._static:
                continue
            index = _arg_number(v)
            if index is not None:
                self._static[key] = self.kind(index) in ("param", "buffer")
                continue
            if is_block_arg(v):
                self._static[key] = False
                continue
            op = owner(v)
            if op.name in CONSTANT_OPS:
                self._static[key] = True
                continue
            if len(order) > 4096:
                return False  # too deep to tell: not static (the caller then follows it)
            order.append(v)
            self._static[key] = None  # visiting
            stack.extend(o for o in op.operands if o not in self._static)
        for v in reversed(order):
            if self._static.get(v) is None:
                ops = owner(v).operands
                self._static[v] = bool(ops) and all(self._static.get(o) for o in ops)
        return bool(self._static.get(value))

    def reader_weight(self, op) -> int | None:
        """The weight a dot_general / convolution reads (its kernel: operand 1 first)."""
        for operand in reversed(list(op.operands)):
            w = self.weight_of(operand)
            if w is not None:
                return w
        return None

    def module_output(self, reader):
        """The value the module whose weight ``reader`` reads returns (see the module
        docstring): its result, on through the ops the module's lowering adds."""
        value = reader.results[0]
        last = value
        in_rank = len(ir.tensor_type(value.type)[0])
        width = ir.tensor_type(value.type)[0][-1] if in_rank else None
        for _ in range(MAX_DEPTH):
            uses = [_operation(u.owner) for u in value.uses]
            if len(uses) != 1:
                break
            user = uses[0]
            name = user.name
            if name in COLLECTIVES and name != "sdy.sharding_constraint":
                value = user.results[0]  # transparent; the output is after it only if more of the module follows
                continue
            if name == "stablehlo.convert":
                pass
            elif name in BIAS_OPS and len(user.operands) == 2:
                other = user.operands[1] if user.operands[0] == value else user.operands[0]
                if not self.static(other):
                    break
            elif name == "stablehlo.reshape" and width is not None:
                src, dst = ir.tensor_type(value.type)[0], ir.tensor_type(user.results[0].type)[0]
                # the unflatten of a batch a Linear flattened: [b*s, n] -> [b, s, n]
                if not (len(dst) > len(src) and dst[-1] == src[-1] == width
                        and math.prod(dst[:-1]) == math.prod(src[:-1])):
                    break
            else:
                break
            value = last = user.results[0]
        return last

    def trace(self, value, depth: int = 0) -> Tie:
        """``value`` tied to the module output it is the same data as (module docstring);
        raises ``Untied``."""
        path = []
        v = value
        while True:
            depth += 1
            if depth > MAX_DEPTH:
                raise Untied("it is too many ops away from the op reading a weight")
            index = _arg_number(v)
            if index is not None or is_block_arg(v):
                kind = self.kind(index) or "block"
                what = {"input": "a model input", "cache": "a KV cache", "param": "a parameter",
                        "buffer": "a buffer"}.get(kind, "a block argument")
                raise Untied(f"it is {what} ({self.arguments[index].name if index is not None else '?'}), "
                             f"no module's output")
            op = owner(v)
            name = op.name
            if name in READER_OPS:
                w = self.reader_weight(op)
                if w is None:
                    raise Untied(f"it is a {name.split('.')[-1]} of two activations (no weight: no module output)")
                out = self.module_output(op)
                chain = _after(out, op, path)
                if chain is None:
                    raise Untied(f"the output of {self.arguments[w].name}'s module reaches it only through "
                                 f"ops the module's own lowering adds")
                return Tie(op, w, out, chain)
            if name in SAME_DATA or name in UNARY:
                path.insert(0, op)
                v = op.operands[0]
                continue
            if name in BINARY:
                moving = [o for o in op.operands if not self.static(o)]
                if not moving:
                    raise Untied("it is computed from constants and weights alone, no module's output")
                if len(moving) == 1:
                    path.insert(0, op)
                    v = moving[0]
                    continue
                ties = []
                for o in moving:
                    try:
                        ties.append(self.trace(o, depth))
                    except Untied:
                        ties.append(None)
                found = [t for t in ties if t is not None]
                if not found or any(t is None or t.output != found[0].output for t in ties):
                    raise Untied(f"it is a {name.split('.')[-1]} of values that are not one module's output")
                best = min(found, key=lambda t: len(t.path))  # silu: x * sigmoid(x), x the shorter way
                return Tie(best.reader, best.weight, best.output, best.path + [op] + path)
            raise Untied(f"it is computed by {name}, which does not keep a module's output as it is")


def _operation(o):
    return o.operation if hasattr(o, "operation") else o


def _after(out, reader, path) -> list | None:
    """The ops of ``path`` after the module output ``out`` (``path`` runs from the reader's
    result on); None when ``out`` is not on it."""
    if out == reader.results[0]:
        return list(path)
    for i, op in enumerate(path):
        if op.results[0] == out:
            return list(path[i + 1:])
    return None


def reshape_groups(src, dst) -> list[tuple[list[int], list[int]]]:
    """The reshape ``src -> dst`` as groups of contiguous dims with equal products:
    ``[(src dims, dst dims)]``, size-1 dims joined to a neighbour's group."""
    groups = []
    i = j = 0
    while i < len(src) or j < len(dst):
        gi, gj = [], []
        pi = pj = 1
        if i < len(src):
            gi.append(i)
            pi *= src[i]
            i += 1
        if j < len(dst):
            gj.append(j)
            pj *= dst[j]
            j += 1
        while pi != pj:
            if pi < pj and i < len(src):
                gi.append(i)
                pi *= src[i]
                i += 1
            elif j < len(dst):
                gj.append(j)
                pj *= dst[j]
                j += 1
            else:
                break
        # trailing size-1 dims belong to this group
        while i < len(src) and src[i] == 1 and (j >= len(dst) or dst[j] != 1):
            gi.append(i)
            i += 1
        while j < len(dst) and dst[j] == 1 and (i >= len(src) or src[i] != 1):
            gj.append(j)
            j += 1
        groups.append((gi, gj))
    return groups


def back_dims(path: list, dims: set[int]) -> tuple[set[int], dict[int, int]]:
    """The dims of the value before ``path`` (the module output) that hold ``dims`` of the
    value after it, mapped back op by op: (dims kept whole, {dim: the split factor it may
    keep}). A reshape ``[n] -> [h, d]`` keeping ``d`` whole leaves ``n`` free to split by a
    factor of ``h`` (whole ``d`` per device), recorded in the second dict."""
    dims = set(dims)
    limits: dict[int, int] = {}
    for op in reversed(path):
        name = op.name
        if name == "stablehlo.transpose":
            perm = attr_ints(str(op.attributes["permutation"]))
            dims = {perm[d] for d in dims}
            limits = {perm[d]: f for d, f in limits.items()}
        elif name == "stablehlo.broadcast_in_dim":
            bdims = attr_ints(str(op.attributes["broadcast_dimensions"]))
            dims = {k for k, d in enumerate(bdims) if d in dims}
            limits = {k: limits[d] for k, d in enumerate(bdims) if d in limits}
        elif name == "stablehlo.reshape":
            src = ir.tensor_type(op.operands[0].type)[0]
            dst = ir.tensor_type(op.results[0].type)[0]
            kept, lim = set(), {}
            for gi, gj in reshape_groups(list(src), list(dst)):
                real = [j for j in gj if dst[j] != 1]
                hit = [j for j in real if j in dims]
                if not hit:
                    continue
                if real and real[0] in dims or len([i for i in gi if src[i] != 1]) > 1:
                    kept.update(gi)  # the major part kept whole (or dims merged): all of it
                else:
                    first = [i for i in gi if src[i] != 1]
                    if first:
                        major = math.prod(dst[j] for j in real[:real.index(hit[0])])
                        lim[first[0]] = major
            dims, limits = kept, lim
        # elementwise, convert, slice, collectives: the same dims
    return dims, limits
