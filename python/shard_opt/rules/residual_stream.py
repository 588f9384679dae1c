"""The residual stream stays whole on the axis row-parallel projections reduce over."""

import functools
import re

from shard_opt import ir
from shard_opt.rules import Rule
from shard_opt.sharding import parse_axis_refs


class ResidualStream(Rule):
    def breaks(self, walk) -> bool:
        trace = Trace(walk.weight_values, walk.shard)
        return any(splits_residual_stream(op, walk.weight_values, walk.shard, trace) for op in walk.adds)


def splits_residual_stream(add, weight_values: set, shard: dict, trace=None) -> bool:
    """A residual connection (``x + proj(...)``: an add of two activations, one of them a
    weight projection's output) whose result is split on the projection's output
    features on an axis the projection reduces over, as the plan shards its weight, as
    the propagated module runs it or as its input was laid out before Shardy gathered
    it: the residual stream sharded where the row-parallel projection's all-reduce
    should make it whole, however Shardy realised it (a reduce_scatter of the partial
    sums; the weight sliced into a column split so the all-reduce is gone; or the
    projection's input all-gathered on its contracting features to feed such a column
    split: Falcon's and Qwen3.5's column-parallel layers fed gathered inputs). A split on
    another axis (tt-metal's 2-D layout keeps the stream split on the axis the projection
    does not reduce over) is not; a bias add (one operand from weights alone) is not a
    residual connection; a split of the tokens (sequence parallelism) is not a feature
    split. The projection is found through views, collectives, bias adds, a sum of
    projections (Falcon's parallel attention and MLP: ``x + attn(...) + mlp(...)``) and a
    norm after it (Gemma-2's ``x + post_norm(proj(...))``): ``Trace``."""
    operands = list(add.operands)
    if any(o in weight_values for o in operands):
        return False
    s = shard.get(add.results[0])
    if s is None or not any(s.dims):
        return False
    trace = trace or Trace(weight_values, shard)
    shape = _shape(add.results[0].type)
    split = [(shape[d], set(axes)) for d, axes in enumerate(s.dims) if axes]
    for o in operands:
        features, dots = trace.follow(o)
        hits = [axes for size, axes in split if size in features]
        if hits:
            reduced = trace.reduced(dots)
            if any(axes & reduced for axes in hits):
                return True
    return False


def projection(value, weight_values: set, shard: dict) -> tuple[set[int], set]:
    """(output-feature sizes, axes its contracting dims are split on) of the weight
    projection ``value`` is; empty if none (``Trace``)."""
    trace = Trace(weight_values, shard)
    features, dots = trace.follow(value)
    return set(features), set(trace.reduced(dots))


_NONE = (frozenset(), frozenset(), frozenset())
_VIEWS = frozenset({"stablehlo.reshape", "stablehlo.convert", "stablehlo.transpose", "sdy.all_reduce",
                    "sdy.reduce_scatter", "sdy.all_gather", "sdy.all_slice", "sdy.reshard"})
_SAME_DIMS = frozenset({"stablehlo.convert", "sdy.all_gather", "sdy.all_slice", "sdy.reshard"})
# a norm's steps: the value scaled, divided or centred by a statistic of itself or by weights alone
_NORM_STEPS = frozenset({"stablehlo.multiply", "stablehlo.divide", "stablehlo.subtract"})
_CONSTANTS = frozenset({"stablehlo.constant", "sdy.constant", "arith.constant", "stablehlo.iota"})
_CONE_OPS = 48  # ops a statistic's (or a scale's) dataflow may hold: an RMSNorm's are ~10
_CHAIN = 12  # ops from a residual add back to its projection's dot_general


class Trace:
    """The weight projections behind the values of one propagated module (``extract_facts``
    makes one per candidate; every add asks it), memoized per value.

    ``follow`` walks back from a value to the ``dot_general`` whose weight operand is a
    parameter (or a layout view, gather or slice of one) through:

    - views and collectives (reshape, convert, transpose, ``sdy.*``);
    - an add whose other operands are computed from weights alone (a bias) or are
      projections too (a sum of projections);
    - a multiply, divide or subtract whose other operand is computed from weights alone
      (a norm's scale, Gemma's ``1 + weight``) or from the value itself (a norm's
      ``rsqrt(mean(x^2) + eps)``, a LayerNorm's mean and variance): an RMSNorm or
      LayerNorm after the projection keeps its output features.
    """

    def __init__(self, weight_values: set, shard: dict):
        self.weight_values = weight_values
        self.shard = shard
        self._memo: dict = {}
        self._weight_only: dict = {}
        self._axes: dict = {}

    def follow(self, value) -> tuple[frozenset, frozenset]:
        """(output-feature sizes, dot_generals) of the projections ``value`` is; empty if none."""
        features, dots, _ = self._follow(value, _CHAIN)
        return features, dots

    def reduced(self, dots) -> frozenset:
        """The axes the projections ``dots`` reduce over: their weights' contracting dims'
        at the dot and at every step back to the argument, and the axes their inputs
        were all-gathered on over their contracting dims."""
        out = frozenset()
        for dot in dots:
            got = self._axes.get(dot)
            if got is None:
                got = self._axes[dot] = self._dot_axes(dot)
            out |= got
        return out

    def _follow(self, value, budget: int):
        """(features, dots, the values on the path back to them) of ``value`` within
        ``budget`` ops (memoized with it: a path cut short is not the value's answer)."""
        key = (value, budget)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._step(value, budget)
        return got

    def _step(self, value, budget: int):
        producer = value.owner
        name = getattr(producer, "name", "")
        if name == "stablehlo.dot_general":
            features = self._features(producer)
            return (features, frozenset((producer,)), frozenset((value,))) if features else _NONE
        if budget <= 0:
            return _NONE
        if name in _VIEWS:
            return _on(self._follow(producer.operands[0], budget - 1), value)
        if name == "stablehlo.add":  # a bias add, or a sum of projections (x + attn + mlp)
            found = []
            for o in producer.operands:
                if o in self.weight_values:
                    continue
                got = self._follow(o, budget - 1)
                if got[0]:
                    found.append(got)
                elif not self.weight_only(o):
                    return _NONE
            if not found:
                return _NONE
            return (frozenset().union(*(g[0] for g in found)), frozenset().union(*(g[1] for g in found)),
                    frozenset().union(*(g[2] for g in found)) | {value})
        if name in _NORM_STEPS:
            a, b = producer.operands
            for main, other in ((a, b), (b, a)):
                got = self._follow(main, budget - 1)
                if got[0] and (other in got[2] or self.weight_only(other) or self._cone(other, got[2])):
                    return _on(got, value)
        return _NONE

    def _features(self, dot) -> frozenset:
        """The output-feature sizes of a dot_general's weight operands (none: not a projection)."""
        dims = _dot_dims(dot.attributes["dot_dimension_numbers"])
        features = set()
        for i in (0, 1):
            w = dot.operands[i]
            if w in self.weight_values:
                shape = _shape(w.type)
                used = dims[i][0] | dims[i][1]
                features |= {shape[d] for d in range(len(shape)) if d not in used}
        return frozenset(features)

    def _dot_axes(self, dot) -> frozenset:
        dims = _dot_dims(dot.attributes["dot_dimension_numbers"])
        axes = set()
        for i in (0, 1):
            w = dot.operands[i]
            if w not in self.weight_values:
                continue
            contracting = dims[i][0]
            for _ in range(8):
                sh = self.shard.get(w)
                if sh is not None:
                    axes |= {a for d in contracting if d < sh.rank for a in sh.dims[d]}
                owner = w.owner
                if getattr(owner, "name", "") not in _SAME_DIMS:
                    break
                w = owner.operands[0]
            other = dot.operands[1 - i]
            if other not in self.weight_values:
                axes |= _gathered(other, set(dims[1 - i][0]))
        return frozenset(axes)

    def weight_only(self, value) -> bool:
        """Computed from weights and constants alone (a norm's ``1 + weight``)."""
        got = self._weight_only.get(value)
        if got is None:
            got = self._weight_only[value] = self._cone(value, frozenset())
        return got

    def _cone(self, value, sources: frozenset) -> bool:
        """Whether every dataflow path back from ``value`` ends at ``sources`` (a
        projection's output and its views: the statistics of a norm), a weight or a
        constant within ``_CONE_OPS`` ops."""
        seen, stack, ops = set(), [value], 0
        known = self._weight_only
        while stack:
            v = stack.pop()
            if v in seen or v in sources or v in self.weight_values or known.get(v):
                continue
            seen.add(v)
            owner = v.owner
            name = getattr(owner, "name", None)
            if name is None or name == "stablehlo.dot_general":  # an argument, or a matmul
                return False
            if name in _CONSTANTS:
                continue
            ops += 1
            if ops > _CONE_OPS or not owner.operands:
                return False
            stack.extend(owner.operands)
        if not sources:  # every value seen is computed from weights and constants
            known.update(dict.fromkeys(seen, True))
        return True


def _on(got, value):
    return (got[0], got[1], got[2] | {value}) if got[0] else _NONE


def _gathered(value, dims: set) -> frozenset:
    """The axes ``value`` (a dot's activation operand) was all-gathered on over ``dims``
    (its contracting dims), through converts, transposes and reshapes that keep them."""
    axes = set()
    for _ in range(8):
        owner = value.owner
        name = getattr(owner, "name", "")
        if name == "sdy.all_gather":
            per_dim = _axes_per_dim(owner.attributes["gathering_axes"])
            axes |= {a for d in dims if d < len(per_dim) for a in per_dim[d]}
        elif name == "stablehlo.transpose":
            perm = list(owner.attributes["permutation"])
            dims = {perm[d] for d in dims}
        elif name == "stablehlo.reshape":
            dims = _reshaped_from(_shape(owner.operands[0].type), _shape(value.type), frozenset(dims))
        elif name not in _SAME_DIMS:
            break
        if not dims:
            break
        value = owner.operands[0]
    return frozenset(axes)


@functools.lru_cache(maxsize=4096)
def _reshaped_from(src: tuple, dst: tuple, dims: frozenset) -> set:
    """The dims of ``src`` a reshape to ``dst`` folds into (or splits out of) ``dims`` of
    ``dst``: those whose span of strides overlaps one of theirs (size-1 dims span none)."""

    def spans(shape):
        out, stride = [], 1
        for n in reversed(shape):
            out.append((stride, stride * n))
            stride *= n
        return out[::-1]

    want = [(a, b) for a, b in (spans(dst)[d] for d in dims) if b > a]
    return {i for i, (lo, hi) in enumerate(spans(src)) if hi > lo and any(lo < b and a < hi for a, b in want)}


@functools.lru_cache(maxsize=4096)
def _shape(t) -> tuple:
    """A ranked tensor type's shape (types are uniqued: cached by the type itself)."""
    tt = ir.tensor_type(t)
    return tuple(tt[0]) if tt else ()


@functools.lru_cache(maxsize=4096)
def _dot_dims(attr) -> tuple:
    """((lhs contracting, lhs batching), (rhs contracting, rhs batching)) of a
    ``dot_dimension_numbers`` attribute, once per (uniqued) attribute."""
    from shard_opt.analysis import _dims

    text = str(attr)
    return tuple((frozenset(_dims(text, f"{k}_contracting_dimensions")), frozenset(_dims(text, f"{k}_batching_dimensions")))
                 for k in ("lhs", "rhs"))


@functools.lru_cache(maxsize=4096)
def _axes_per_dim(attr) -> tuple[tuple, ...]:
    """Per dim, the axes of ``#sdy<list_of_axis_ref_lists[{}, {"model"}]>`` (a gather's
    ``gathering_axes``), once per (uniqued) attribute."""
    text = str(attr)
    inner = text[text.index("[") + 1:text.rindex("]")] if "[" in text else ""
    return tuple(tuple(parse_axis_refs(d)) for d in re.findall(r"\{([^{}]*)\}", inner))


RULE = ResidualStream(
    "residual-stream", "the residual stream stays whole on the axis row-parallel matmuls reduce over",
    "expert_residual_stream", "inf",
    "a residual stream split on its hidden features (found in the propagated module: a residual add whose "
    "result is split on a projection's output features, whether a reduce_scatter, weights sliced to match "
    "a hidden-split embedding or a column-parallel layer fed a gathered input made it so, through a norm "
    "after the projection too) lets tt-mlir drop the all-reduces after row-parallel layers, silently "
    "corrupting the result (PCC ~0.37); tt-forge-models' Llama-70B and Nemotron loaders keep it replicated for "
    "that reason")
