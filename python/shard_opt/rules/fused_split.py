"""A slice of a split dim gathers it first (torch.split / chunk of a fused projection)."""

from shard_opt import ir
from shard_opt.rules import Rule

MOVING_OPS = ("stablehlo.slice", "stablehlo.pad", "stablehlo.reverse")


class FusedSplit(Rule):
    def guard(self, op) -> str | None:
        """The moved dims closed and whole, the others open (``{?}``): Shardy then gathers
        them instead of leaving the movement implicit (a permutation factor)."""
        dims = moved_dims_of(op)
        if not dims:
            return None
        rank = len(ir.tensor_type(op.operands[0].type)[0])
        body = ", ".join("{}" if d in dims else "{?}" for d in range(rank))
        return f"[{body}]"

    def breaks(self, walk) -> bool:
        """An unguarded slice / pad / reverse whose operand is split on a dim it moves."""
        for op in walk.moving:
            s = walk.shard.get(op.operands[0])
            if s is not None and any(s.dims[d] for d in moved_dims_of(op) if d < s.rank):
                return True
        return False


def moved_dims_of(op) -> list[int]:
    """Dims along which ``op`` moves data between positions: what a slice cuts, a pad pads,
    a reverse reverses. Split there, each device would need another device's data."""
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


RULE = FusedSplit(
    "fused-split", "a slice of a split dim gathers it first", "expert_fused_split", "guard",
    "torch.split / chunk across a sharded fused dim cuts it where devices do not, which miscompiles under "
    "Shardy; shardy-propagate's guard-moved-dims gathers the dim before the slice, and the plan pays for it",
    guard_ops=MOVING_OPS)
