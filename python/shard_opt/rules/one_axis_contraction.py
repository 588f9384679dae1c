"""A contraction's operands reach it split on one mesh axis: a dim that moves from one axis to
another on its way into a matmul is found and said (not priced: what tt-mlir emits for it
is the collectives the plan already pays for, or a collective_permute, priced infinite).

Tenstorrent's bring-ups moved away from 2-D alternating specs for this: tt-forge-models PR
857 (Lumina, 2x4): column-parallel ``("model", "batch")`` and row-parallel ``("batch",
"model")`` made a row-parallel output feeding the next column-parallel layer move the same
logical dim from one axis to the other; Shardy wrote that as ``sdy.collective_permute``
(tt-mlir cannot lower it: PR 780's error) or, once it compiled, the sharded output's PCC was
0.093; single-axis Megatron, "every contraction dim ... on one axis", fixed it. Issue 32
cites PRs 775, 847 and 853 for the same move (not read here).

- ``breaks``: a ``dot_general`` operand that a collective (or a chain of them) made from a
  value whose same dim was split on other mesh axes, none in common (``{"batch"} ->
  {"model"}``): an axis swap on the way into a contraction. What it costs is priced as the
  collectives Shardy wrote; whether tt-mlir computes it right is the tt-mlir numerics
  check's verdict (the deliverable-plans issue), which this rule only points to.
"""

from shard_opt.rules import Rule

_COLLECTIVES = frozenset({"sdy.all_gather", "sdy.all_slice", "sdy.all_reduce", "sdy.reduce_scatter", "sdy.reshard",
                          "sdy.all_to_all", "sdy.collective_permute", "stablehlo.convert"})


class OneAxisContraction(Rule):
    def breaks(self, walk) -> bool:
        return bool(axis_swaps(walk))


def axis_swaps(walk) -> list[tuple[str, int, tuple, tuple]]:
    """(dot's result type, operand, axes before, axes at the dot) of every contraction operand
    whose dim moved between disjoint mesh axes through the collectives feeding it."""
    out = []
    for op in walk.dots:
        for k, v in enumerate(list(op.operands)[:2]):
            at = walk.shard.get(v)
            if at is None:
                continue
            src, steps = v, 0
            while getattr(src.owner, "name", "") in _COLLECTIVES and steps < 8:
                src, steps = src.owner.operands[0], steps + 1
            if src is v:
                continue
            before = walk.shard.get(src)
            if before is None or before.rank != at.rank:
                continue
            for d in range(at.rank):
                a, b = set(_axes(before.dims[d])), set(_axes(at.dims[d]))
                if a and b and not a & b:
                    out.append((str(op.results[0].type), k, tuple(sorted(a)), tuple(sorted(b))))
    return out


def _axes(dim) -> list[str]:
    """The mesh axis names of one dim's sharding (sub-axes by their axis)."""
    out = []
    for x in dim or ():
        name = getattr(x, "name", None) or (x[0] if isinstance(x, tuple) else str(x))
        out.append(str(name).split(":")[0])
    return out


RULE = OneAxisContraction(
    "one-axis-contraction", "a contraction's operands stay on one mesh axis", "tt_forge_models_one_axis", "report",
    "a dim that moves from one mesh axis to another on its way into a matmul (2-D alternating specs): Shardy "
    "writes an axis swap (a collective_permute tt-mlir cannot lower, or collectives whose result tt-forge-models "
    "PR 857 saw at PCC 0.093 on Lumina); reported, priced as the collectives it runs, and left to the tt-mlir "
    "numerics check")
