"""``merge-collectives``: one collective per value, and none that nothing uses.

The last step of ``shardy-propagate``'s tt-mlir pipeline, after Shardy has made every
reshard an explicit collective. Shardy inserts one ``sdy.reshard`` per *use*: a value four
consumers need gathered gets four identical collectives. tt-mlir merges them with the
``cse`` it runs right after lowering to TTIR (``lib/Dialect/TTIR/Pipelines/TTIRPipelines.cpp``:
TTIR CCL ops are Pure), so this pass merges collectives that are the same op, with the
same attributes, on the same value in the same block. Then it erases the collectives
whose result nothing uses, until none is left (ShardyCCLCanonicalization's clean-up,
tt-mlir ``lib/Dialect/StableHLO/Transforms/ShardyCCLCanonicalization.cpp``: a
canonicalization can leave, say, the all_reduce of an argmax's unused max value).

Example::

    %1 = sdy.all_gather [{"model"}] %0 ...       %1 = sdy.all_gather [{"model"}] %0 ...
    %2 = sdy.all_gather [{"model"}] %0 ...  ->   (uses of %2 read %1)
    %3 = sdy.all_reduce {"model"} %x ...         (%3 had no use: gone)

Options: none.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.sdy import COLLECTIVE_OPS


@dataclass(frozen=True)
class MergeCollectives(ModulePass):
    name = "merge-collectives"
    summary = "Merge identical collectives on one value and erase unused ones (TTIR cse, ShardyCCLCanonicalization)"

    def apply(self, ctx: PassContext, module) -> None:
        _, left = _merge_identical(module)
        _erase_dead(left)


def merge_identical_collectives(module) -> int:
    """Merge collectives that are the same op, with the same attributes, on the same value
    in the same block (what TTIR's ``cse`` does to the Pure TTIR CCLs); returns how many
    went. The first one dominates the others: ops of one block run in order."""
    return _merge_identical(module)[0]


def _merge_identical(module) -> tuple[int, list]:
    """``merge_identical_collectives``: (how many went, the collectives left, in pre-order)."""
    merged = 0
    with module.context:
        left = ir.ops_in(module.operation, COLLECTIVE_OPS)
        blocks: dict = {}  # block -> its collectives, in block order
        for op in left:
            blocks.setdefault(op.block, []).append(op)
        groups = list(blocks.values())
        if len(groups) > 1:
            # blocks in the order a pre-order walk reaches their parent op (an outer block
            # before the blocks nested in it): a merge outside can make two inside identical
            order = {}
            for op in ir.ops_in(module.operation):
                order.setdefault(op, len(order))
            rank = {id(ops): (order.get(ops[0].parent, -1), i) for i, ops in enumerate(groups)}
            groups.sort(key=lambda ops: rank[id(ops)])
        gone = set()
        for ops in groups:
            first = {}
            for child in ops:
                attrs = child.attributes
                # attributes are uniqued: equal ones are one object (hashed, compared by identity)
                named = sorted(((attrs[i].name, attrs[i].attr) for i in range(len(attrs))), key=lambda na: na[0])
                key = (child.name, child.operands[0], tuple(named))
                if key in first:
                    child.results[0].replace_all_uses_with(first[key].results[0])
                    gone.add(id(child))  # ids: an erased op is not to be hashed or compared
                    child.erase()
                    merged += 1
                else:
                    first[key] = child
    return merged, [op for op in left if id(op) not in gone]


def erase_dead_collectives(module) -> int:
    """Erase collectives whose result nothing uses (ShardyCCLCanonicalization's clean-up:
    a canonicalization can leave, say, the all_reduce of an argmax's unused max value),
    until none is left (erasing one can leave its operand's collective unused); returns
    how many went."""
    with module.context:
        return _erase_dead(ir.ops_in(module.operation, COLLECTIVE_OPS))


def _erase_dead(alive: list) -> int:
    """``erase_dead_collectives`` over the collectives ``alive`` (all of the module's)."""
    erased = 0
    changed = True
    while changed:
        changed = False
        keep = []
        for op in alive:
            if not any(True for _ in op.results[0].uses):
                op.erase()
                erased += 1
                changed = True
            else:
                keep.append(op)
        alive = keep
    return erased

