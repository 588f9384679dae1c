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
  guard-moved-dims: before propagating, keep whole the dims that a ``stablehlo.slice``
    cuts, a ``pad`` pads or a ``reverse`` reverses (``sdy.sharding_constraint`` with those
    dims closed and replicated, the others open) (default true). Shardy marks such a
    dim as a permutation factor and exports no collective when it stays split, leaving
    the data movement to the partitioner (XLA emits collective-permutes for a slice of a
    packed q|k|v projection); with the guard the gather is explicit and priced.
  verify: run MLIR's verifier after every pass (default true). The search turns it off
    for the candidates it only prices (the verifier is most of the pipeline's time) and
    keeps it for the plan it emits.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.errors import UserError
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.sharding import TensorSharding


@dataclass(frozen=True)
class ShardyPropagate(ModulePass):
    name = "shardy-propagate"
    summary = "Run Shardy propagation and insert explicit collectives"

    propagation: str = "sdy-propagation-pipeline"
    explicit_collectives: bool = True
    guard_opaque_ops: bool = True
    guard_moved_dims: bool = True
    verify: bool = True

    def apply(self, ctx: PassContext, module) -> None:
        if not any(op.operation.name == "func.func" for op in module.body.operations):
            # Shardy aborts the process (a failed CHECK, not an error) on a module without functions
            raise UserError("shardy-propagate: the module has no func.func; give a module with a @main function")
        insert_guards(module, opaque_ops=self.guard_opaque_ops, moved_dims=self.guard_moved_dims)
        export = "sdy-export-pipeline"
        if self.explicit_collectives:
            export += "{enable-insert-explicit-collectives=true}"
        ir.run_pipeline(module, f"builtin.module({self.propagation}, {export})", name=self.name,
                        verify=self.verify)


def insert_guards(module, *, opaque_ops: bool = True, moved_dims: bool = True) -> None:
    """The constraints Shardy needs to make every data movement explicit (see the options),
    in one walk over the module. The driver also writes them into the annotated module it
    emits, so XLA and tt-mlir propagate from the same hints the plan was priced with.

    - in front of every tensor operand of an op Shardy has no sharding rule for: a
      replicated constraint, so the gather the op needs is explicit and priced;
    - in front of a slice / pad / reverse: its moved dims closed and whole, the others
      open (``{?}``), so Shardy gathers them instead of leaving the movement implicit.
    """
    if not (opaque_ops or moved_dims):
        return
    mesh_name = mesh_name_of(module) or "mesh"
    with module.context:
        for op in list(ir.walk_ops(module.operation)):
            name = op.operation.name
            if opaque_ops and name in OPAQUE_OPS and not _shardy_own(op):
                for i, value in enumerate(list(op.operands)):
                    tt = ir.tensor_type(value.type)
                    if tt is not None:
                        constrain_operand(op, i, TensorSharding.replicated(len(tt[0]), mesh_name).to_attr())
            elif moved_dims and name in MOVING_OPS:
                dims = moved_dims_of(op)
                if dims:
                    rank = len(ir.tensor_type(op.operands[0].type)[0])
                    body = ", ".join("{}" if d in dims else "{?}" for d in range(rank))
                    constrain_operand(op, 0, f"#sdy.sharding<@{mesh_name}, [{body}]>")


OPAQUE_OPS = ("stablehlo.custom_call", "chlo.top_k")
SHARDY_OWN_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "xla.sdy.")
MOVING_OPS = ("stablehlo.slice", "stablehlo.pad", "stablehlo.reverse")


def _shardy_own(op) -> bool:
    return ("call_target_name" in op.attributes
            and str(op.attributes["call_target_name"]).strip('"').startswith(SHARDY_OWN_TARGETS))


def mesh_name_of(module) -> str | None:
    """The name of the module's first ``sdy.mesh``, or None."""
    for op in module.body.operations:
        if op.operation.name == "sdy.mesh":
            return op.attributes["sym_name"].value
    return None


def constraint_op(value, sharding: str):
    """An ``sdy.sharding_constraint`` of ``value`` (``sharding``: the attribute's text),
    created at the current insertion point."""
    irm = ir.ir()
    return irm.Operation.create("sdy.sharding_constraint", results=[value.type], operands=[value],
                                attributes={"sharding": irm.Attribute.parse(sharding)})


def constrain_operand(op, i: int, sharding: str) -> None:
    """Route operand ``i`` of ``op`` through a constraint placed just before ``op``."""
    irm = ir.ir()
    with irm.InsertionPoint(op), op.location:
        guard = constraint_op(op.operands[i], sharding)
    op.operation.operands[i] = guard.result


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
