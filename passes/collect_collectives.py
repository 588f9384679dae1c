"""``collect-collectives``: read the collectives (and per-device work) out of the IR.

After ``shardy-propagate`` the module's collectives are explicit ops. This pass turns
them, and each compute op's per-device FLOPs and bytes, into ``ModuleFacts`` for the
search and the cost model, and makes the accounting observable for FileCheck (Shardy's
``-sdy-populate-op-sharding-rules`` habit) by stamping each collective::

    %9 = sdy.all_reduce {"model"} %8 out_sharding=<@mesh, [{}, {}]>
           {shard_opt.bytes_per_device = 32768 : i64, shard_opt.group_size = 4 : i64} : tensor<128x64xf32>

and the module with ``shard_opt.ccl_count`` and ``shard_opt.ccl_bytes``.

Options:
  annotate: write the attributes (default true).
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.analysis import extract_facts
from shard_opt.pass_manager import ModulePass, PassContext


@dataclass(frozen=True)
class CollectCollectives(ModulePass):
    name = "collect-collectives"
    summary = "Collect Shardy's collectives and per-device work as data and IR attributes"

    annotate: bool = True

    def apply(self, ctx: PassContext, module) -> None:
        kinds = [a.kind for a in ctx.arguments] if ctx.arguments else None
        facts, ops = extract_facts(module, kinds, storage=ctx.storage, return_ops=True)
        ctx.facts = facts
        if not self.annotate:
            return
        irm = ir.ir()
        with module.context:
            i64 = irm.IntegerType.get_signless(64)
            for c, op in zip(facts.collectives, ops):
                op.attributes["shard_opt.bytes_per_device"] = irm.IntegerAttr.get(i64, c.bytes_per_device)
                op.attributes["shard_opt.group_size"] = irm.IntegerAttr.get(i64, c.group_size)
            module.operation.attributes["shard_opt.ccl_count"] = irm.IntegerAttr.get(i64, len(facts.collectives))
            module.operation.attributes["shard_opt.ccl_bytes"] = irm.IntegerAttr.get(
                i64, sum(c.bytes_per_device for c in facts.collectives)
            )
