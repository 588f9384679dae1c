"""Writing and reading Shardy's ops in a module: sharding constraints, the mesh's name,
the explicit collectives.

The passes that constrain values (``apply-constraints``, ``insert-guards``), the
activation specs (``shard_opt.activations``) and the script rebuild
(``shard_opt.emit.rebuild``) all write ``sdy.sharding_constraint`` the same way, here.
"""

from __future__ import annotations

from shard_opt import ir

# the explicit collectives Shardy's export writes (a partitioned module holds them)
COLLECTIVE_OPS = ("sdy.all_reduce", "sdy.all_gather", "sdy.all_slice", "sdy.reduce_scatter", "sdy.all_to_all",
                  "sdy.collective_permute")


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


def constrain_value(value, sharding: str) -> None:
    """Route every use of ``value`` through a constraint placed right after its producer."""
    irm = ir.ir()
    where = value.owner
    where = where.operation if hasattr(where, "operation") else where
    with irm.InsertionPoint.after(where), where.location:
        guard = constraint_op(value, sharding)
    value.replace_all_uses_except(guard.result, guard.operation)


def constrain_operand(op, i: int, sharding: str) -> None:
    """Route operand ``i`` of ``op`` through a constraint placed just before ``op``."""
    irm = ir.ir()
    with irm.InsertionPoint(op), op.location:
        guard = constraint_op(op.operands[i], sharding)
    op.operation.operands[i] = guard.result
