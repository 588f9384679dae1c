"""``decouple-const-fanout``: tt-mlir's DecoupleConstFanoutPass, mirrored as it is.

tt-mlir's StableHLO pipeline runs it right before propagation (tt-mlir
``lib/Dialect/StableHLO/Transforms/DecoupleConstFanout.cpp``, scheduled in
``lib/Dialect/StableHLO/Pipelines/StableHLOPipelines.cpp``): in a function with an
explicitly sharded argument, every ``stablehlo.broadcast_in_dim`` whose operand is a
``stablehlo.constant`` and whose result has two or more uses is cloned once per use
after the first, so the uses can take different shardings. Nothing else is copied: not
the constants themselves, and not a broadcast fed through another op (a reshape of a
constant, as torch-mlir writes the softmax scale). Such a broadcast stays shared, and
its single sharding ties its users together in Shardy's propagation: that is how
tt-mlir ties q's and k's shardings through the one ``scale`` broadcast of a Llama
prefill (the tie costs all_to_all reshards the plan must price).

shard-opt used to run Shardy's ``sdy-constant-or-scalar-splitter`` in its place, which
copies every constant and scalar broadcast per use: a plan priced that way could lose
collectives tt-mlir then inserts (the 2x4 prefill plans, docs/ttmlir.md).

Options:
  only-sharded: only in functions with an explicitly sharded argument (default true), as
    tt-mlir's is (``hasExplicitlyShardedArguments``): a no-op on a function whose arguments
    are all replicated. false: in every function (the evaluator decouples once, before any
    candidate's shardings are applied: ``shard_opt.pipelines``).
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.pass_manager import ModulePass, PassContext


@dataclass(frozen=True)
class DecoupleConstFanout(ModulePass):
    name = "decouple-const-fanout"
    summary = "Clone constant-fed broadcasts per use (tt-mlir's DecoupleConstFanoutPass)"

    only_sharded: bool = True

    def apply(self, ctx: PassContext, module) -> None:
        decouple_const_fanout(module, only_sharded=self.only_sharded)


def decouple_const_fanout(module, *, ops=None, only_sharded: bool = True) -> int:
    """Clone each constant-fed ``broadcast_in_dim`` of many uses once per extra use.

    ``ops``: the module's ``stablehlo.broadcast_in_dim`` ops when the caller's walk found
    them already. ``only_sharded=False`` decouples in every function: the evaluator
    prepares its module once, before any candidate's shardings are applied (a function
    whose arguments are replicated has no reshard for the copies to change). Returns the
    number of clones made."""
    made = 0
    with module.context:
        if ops is None:
            ops = ir.ops_in(module.operation, ("stablehlo.broadcast_in_dim",))
        skip = set() if not only_sharded else {id(f) for f in _replicated_functions(module)}
        for op in ops:
            if op.name != "stablehlo.broadcast_in_dim":
                continue
            if skip and id(_function_of(op)) in skip:
                continue
            src = op.operands[0].owner
            if not hasattr(src, "name") or src.name != "stablehlo.constant":
                continue
            uses = [(u.owner, u.operand_number) for u in op.result.uses]
            for owner, number in uses[1:]:
                clone = op.clone(ip=ir.ir().InsertionPoint(owner))
                owner.operands[number] = clone.result
                made += 1
    return made


def _function_of(op):
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        parent = parent.parent
    return parent


def _replicated_functions(module) -> list:
    """The functions none of whose arguments is sharded: tt-mlir's
    ``hasExplicitlyShardedArguments`` counts a dim with axes (``{"model"}``) or an open
    dim (``{?}``) as sharded."""
    from shard_opt.analysis import arg_shardings

    out = []
    for f in module.body.operations:
        if f.operation.name != "func.func":
            continue
        if not any(s is not None and (not s.is_replicated or s.open_dims) for s in arg_shardings(f)):
            out.append(f.operation)
    return out
