"""``shardy-propagate``: run real Shardy propagation and make collectives explicit.

Runs, in jaxlib's in-process Shardy (references/toolchain.md)::

    sdy-propagation-pipeline,
    sdy-export-pipeline{enable-insert-explicit-collectives=true}

after which every reshard is an ``sdy.all_reduce`` / ``all_gather`` / ``all_slice`` /
``reduce_scatter`` / ``all_to_all`` / ``collective_permute`` with its tensor type, the
same step tt-mlir's StableHLO pipeline takes (InsertExplicitReshards then
ReshardToCollectives; references/tenstorrent.md section 5).

Options:
  propagation: the propagation pass to run (``sdy-propagation-pipeline`` by default;
    ``sdy-user-priority-propagate`` and the basic/aggressive variants work too).
  explicit-collectives: insert the collectives (default true).
  guard-opaque-ops: before propagating, constrain the operands of ops Shardy has no
    sharding rule for (custom calls, ``chlo.top_k``) to replicated with
    ``sdy.sharding_constraint`` (default true). Shardy otherwise lets a split value flow
    into such an op with no collective, and the plan would be priced without the gather
    the op needs.
  verify: run MLIR's verifier after every pass (default true). The search turns it off
    for the candidates it only prices (the verifier is most of the pipeline's time) and
    keeps it for the plan it emits.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.sharding import TensorSharding


@dataclass(frozen=True)
class ShardyPropagate(ModulePass):
    name = "shardy-propagate"
    summary = "Run Shardy propagation and insert explicit collectives"

    propagation: str = "sdy-propagation-pipeline"
    explicit_collectives: bool = True
    guard_opaque_ops: bool = True
    verify: bool = True

    def apply(self, ctx: PassContext, module) -> None:
        if self.guard_opaque_ops:
            guard_opaque_ops(module)
        export = "sdy-export-pipeline"
        if self.explicit_collectives:
            export += "{enable-insert-explicit-collectives=true}"
        ir.run_pipeline(module, f"builtin.module({self.propagation}, {export})", name=self.name,
                        verify=self.verify)


OPAQUE_OPS = ("stablehlo.custom_call", "chlo.top_k")
SHARDY_OWN_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "xla.sdy.")


def guard_opaque_ops(module) -> None:
    """Put a replicated ``sdy.sharding_constraint`` in front of every tensor operand of an
    op Shardy has no sharding rule for, so the gather it needs is explicit and priced."""
    irm = ir.ir()
    meshes = [op for op in module.body.operations if op.operation.name == "sdy.mesh"]
    mesh_name = meshes[0].attributes["sym_name"].value if meshes else "mesh"
    with module.context:
        for op in list(ir.walk_ops(module.operation)):
            if op.operation.name not in OPAQUE_OPS:
                continue
            if "call_target_name" in op.attributes and str(op.attributes["call_target_name"]).strip('"').startswith(SHARDY_OWN_TARGETS):
                continue
            for i, value in enumerate(list(op.operands)):
                tt = ir.tensor_type(value.type)
                if tt is None:
                    continue
                attr = irm.Attribute.parse(TensorSharding.replicated(len(tt[0]), mesh_name).to_attr())
                with irm.InsertionPoint(op), op.location:
                    guard = irm.Operation.create("sdy.sharding_constraint", results=[value.type],
                                                 operands=[value], attributes={"sharding": attr})
                op.operation.operands[i] = guard.result
