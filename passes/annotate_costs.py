"""``annotate-costs``: price the module and write the times into the IR.

Runs after ``collect-collectives``: prices its ``ModuleFacts`` with a cost model on a
hardware preset (``shard_opt.costmodel``), puts the ``Cost`` in the pass context, and
makes the pricing observable for FileCheck by stamping each collective with its modeled
time in microseconds::

    %2 = sdy.all_reduce {"model"} %1 out_sharding=<@mesh, [{}, {}]>
           {shard_opt.bytes_per_device = 16384 : i64, shard_opt.group_size = 4 : i64,
            shard_opt.time_us = 2.878000e+01 : f64} : tensor<8x1024xbf16>

and the module with ``shard_opt.total_us``, ``shard_opt.ccl_us``,
``shard_opt.compute_us`` (f64) and ``shard_opt.system`` (the preset's name), plus
``shard_opt.score`` when the model scores other than by time (``autoshard-heuristic``).
Times are
rounded to 0.01 us; a collective tt-mlir cannot lower (collective_permute) is ``inf``
(printed ``0x7FF0000000000000``).

Options:
  system: hardware preset (default: the context's, else the Wormhole system with the
    mesh's device count; see ``shard-opt --list-systems``).
  cost-model: ``tenstorrent`` (default), ``alpha-beta``, ``autoshard-heuristic`` or one
    added by entry point.
  allow-collective-permute: price collective_permute instead of ``inf``.

Example::

    // shard-opt %s --pass-pipeline='builtin.module(add-mesh{shape=2x4}, apply-shardings,
    //   shardy-propagate, collect-collectives, annotate-costs{system=wh-loudbox})'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shard_opt import costmodel, ir
from shard_opt.analysis import extract_facts
from shard_opt.pass_manager import ModulePass, PassContext


@dataclass(frozen=True)
class AnnotateCosts(ModulePass):
    name = "annotate-costs"
    summary = "Price collectives and compute with a cost model; stamp shard_opt.time_us etc. on the IR"

    system: str = ""
    cost_model: str = ""
    allow_collective_permute: bool = False

    def apply(self, ctx: PassContext, module) -> None:
        kinds = [a.kind for a in ctx.arguments] if ctx.arguments else None
        # read the IR itself: the collective ops are needed to stamp them anyway, and the
        # facts then match the IR even when no collect-collectives ran before
        facts, ops = extract_facts(module, kinds, return_ops=True)
        ctx.facts = facts
        system_name = self.system or ctx.system or costmodel.default_system_for_mesh(facts.mesh_shape)
        system = costmodel.get_system(system_name)
        model = costmodel.get_cost_model(
            self.cost_model or ctx.cost_model or "tenstorrent",
            allow_collective_permute=self.allow_collective_permute,
        )
        cost = model.price(facts, system)
        ctx.cost = cost

        irm = ir.ir()
        with module.context:
            for op, t in zip(ops, cost.collective_us):
                op.attributes["shard_opt.time_us"] = irm.FloatAttr.get_f64(_us(t))
            attrs = module.operation.attributes
            attrs["shard_opt.system"] = irm.StringAttr.get(system.name)
            attrs["shard_opt.total_us"] = irm.FloatAttr.get_f64(_us(cost.total_us))
            attrs["shard_opt.ccl_us"] = irm.FloatAttr.get_f64(_us(cost.ccl_us))
            attrs["shard_opt.compute_us"] = irm.FloatAttr.get_f64(_us(cost.compute_us))
            if cost.score != cost.total_us:  # a heuristic model's own score
                attrs["shard_opt.score"] = irm.FloatAttr.get_f64(round(cost.score, 4))


def _us(t: float) -> float:
    """Round to 0.01 us so the printed IR is stable (``inf`` stays ``inf``)."""
    return t if math.isinf(t) else round(t, 2)
