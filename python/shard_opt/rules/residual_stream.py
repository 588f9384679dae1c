"""The residual stream stays whole on the axis row-parallel projections reduce over."""

from shard_opt import ir
from shard_opt.rules import Rule


class ResidualStream(Rule):
    def breaks(self, walk) -> bool:
        return any(splits_residual_stream(op, walk.weight_values, walk.shard) for op in walk.adds)


def splits_residual_stream(add, weight_values: set, shard: dict) -> bool:
    """A residual connection (``x + proj(...)``: an add of two activations, one of them a
    weight projection's output) whose result is split on the projection's output
    features on an axis the projection reduces over, as the plan shards its weight or as
    the propagated module runs it: the residual stream sharded where the row-parallel
    projection's all-reduce should make it whole, however Shardy realised it (a
    reduce_scatter of the partial sums, or the weight sliced into a column split so the
    all-reduce is gone). A split on another axis (tt-metal's 2-D layout keeps the stream
    split on the axis the projection does not reduce over) is not; a bias add (one
    operand from weights alone) is not a residual connection; a split of the tokens
    (sequence parallelism) is not a feature split."""
    operands = list(add.operands)
    if any(o in weight_values for o in operands):
        return False
    s = shard.get(add.results[0])
    if s is None:
        return False
    shape = ir.tensor_type(add.results[0].type)[0]
    for o in operands:
        features, reduced = projection(o, weight_values, shard)
        if any(shape[d] in features and set(axes) & reduced for d, axes in enumerate(s.dims)):
            return True
    return False


_PASS_THROUGH = ("stablehlo.reshape", "stablehlo.convert", "stablehlo.transpose", "sdy.all_reduce",
                 "sdy.reduce_scatter", "sdy.all_gather", "sdy.all_slice", "sdy.reshard", "stablehlo.add")
_SAME_DIMS = ("stablehlo.convert", "sdy.all_gather", "sdy.all_slice", "sdy.reshard")


def projection(value, weight_values: set, shard: dict, depth: int = 0) -> tuple[set[int], set[str]]:
    """(output-feature sizes, axes its contracting dims are split on) of the weight
    projection ``value`` is, through views, collectives and bias adds; empty if none.
    The axes are the weight's at the dot and at every step back to its argument."""
    from shard_opt.analysis import _dims

    producer = value.owner
    name = getattr(producer, "name", "")
    if name == "stablehlo.dot_general":
        text = str(producer.attributes["dot_dimension_numbers"])
        features, axes = set(), set()
        for i, key in ((0, "lhs"), (1, "rhs")):
            w = producer.operands[i]
            if w not in weight_values:
                continue
            shape = ir.tensor_type(w.type)[0]
            contracting = set(_dims(text, f"{key}_contracting_dimensions"))
            used = contracting | set(_dims(text, f"{key}_batching_dimensions"))
            features |= {shape[d] for d in range(len(shape)) if d not in used}
            for _ in range(8):
                sh = shard.get(w)
                if sh is not None:
                    axes |= {a for d in contracting if d < sh.rank for a in sh.dims[d]}
                owner = w.owner
                if getattr(owner, "name", "") not in _SAME_DIMS:
                    break
                w = owner.operands[0]
        return features, axes
    if depth >= 6 or name not in _PASS_THROUGH:
        return set(), set()
    if name == "stablehlo.add":  # through a bias add only
        rest = [o for o in producer.operands if o not in weight_values]
        if len(rest) != 1:
            return set(), set()
        return projection(rest[0], weight_values, shard, depth + 1)
    return projection(producer.operands[0], weight_values, shard, depth + 1)


RULE = ResidualStream(
    "residual-stream", "the residual stream stays whole on the axis row-parallel matmuls reduce over",
    "expert_residual_stream", "inf",
    "a residual stream split on its hidden features (found in the propagated module: a residual add whose "
    "result is split on a projection's output features, whether a reduce_scatter or weights sliced to match "
    "a hidden-split embedding made it so) lets tt-mlir drop the all-reduces after row-parallel layers, "
    "silently corrupting the result (PCC ~0.37); the experts keep it replicated")
