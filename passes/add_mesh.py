"""``add-mesh``: declare the device mesh (``sdy.mesh``) at the top of the module.

Options:
  shape: ``RxC`` (defaults to the driver's ``--mesh``).
  axes: comma-separated axis names (default ``batch,model``, tt-xla's names).

Example::

    // shard-opt --pass-pipeline='builtin.module(add-mesh{shape=2x4})'
    module {                         module {
      func.func @main(...)     ->      sdy.mesh @mesh = <["batch"=2, "model"=4]>
                                       func.func @main(...)

An existing mesh of the same name is replaced.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.errors import UserError
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.sharding import Mesh


@dataclass(frozen=True)
class AddMesh(ModulePass):
    name = "add-mesh"
    summary = "Declare the device mesh (sdy.mesh) at the top of the module"

    shape: str = ""
    axes: str = ""

    def apply(self, ctx: PassContext, module) -> None:
        if self.shape:
            mesh = Mesh.parse(self.shape, tuple(self.axes.split(",")) if self.axes else None)
            ctx.mesh = mesh
        elif ctx.mesh is not None:
            mesh = ctx.mesh
        else:
            raise UserError("add-mesh: no mesh given; pass --mesh RxC or add-mesh{shape=RxC}")
        set_mesh(module, mesh)


def set_mesh(module, mesh: Mesh) -> None:
    """Insert ``mesh`` as the first op of ``module``, replacing a same-named mesh."""
    with module.context:
        body = module.body
        for op in list(body.operations):
            if op.operation.name == "sdy.mesh" and op.attributes["sym_name"].value == mesh.name:
                op.operation.erase()
        holder = ir.ir().Module.parse(f"module {{\n  {mesh}\n}}")
        new_op = holder.body.operations[0].operation.clone()
        first = next(iter(body.operations), None)
        ip = ir.ir().InsertionPoint.at_block_begin(body) if first is None else ir.ir().InsertionPoint(first)
        ip.insert(new_op)
