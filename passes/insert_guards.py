"""``insert-guards``: the constraints Shardy needs to make every data movement explicit.

Before propagation, in one walk over the module:

- in front of every tensor operand of an op Shardy has no sharding rule for (a custom
  call, ``chlo.top_k``): a replicated ``sdy.sharding_constraint``, so the gather the op
  needs is explicit and priced;
- in front of an op a compiler-safety rule guards (``shard_opt.rules``: a slice / pad /
  reverse, rule ``fused-split``): the constraint the rule asks for (the moved dims closed
  and whole, the others open, ``{?}``), so Shardy gathers them instead of leaving the
  movement implicit. With the model's arguments in the pass context (names and kinds),
  a guard whose value is a module's output as it is (``Rule.hoist``: the sliced tensor
  traced back through layout and elementwise ops to the dot_general / convolution reading
  a ``.weight``) sits on that output instead, the guards of one output merged into one
  constraint: the form the emitted script writes (a forward hook on the module).

The driver runs it once per evaluator (every candidate shares the guards: they depend on
the ops alone) and in the ``-o`` module it emits, so XLA and tt-mlir propagate from the
hints the plan was priced with (``shard_opt.pipelines``); ``shardy-propagate`` runs it
first when its guard options are on.

Example::

    %s = stablehlo.slice %qkv [0:8, 0:16]        %g = sdy.sharding_constraint %qkv <@mesh, [{?}, {}]>
                                           ->    %s = stablehlo.slice %g [0:8, 0:16]

Options:
  opaque-ops: guard the operands of ops Shardy has no rule for (default true).
  moved-dims: guard the ops a safety rule guards (default true).
  allow: comma list of rules whose guards are left out (``--allow``).
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.rules import GUARDS
from shard_opt.sdy import constrain_operand, constrain_value, mesh_name_of
from shard_opt.sharding import TensorSharding

OPAQUE_OPS = ("stablehlo.custom_call", "chlo.top_k")
SHARDY_OWN_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "xla.sdy.")
GUARDED_OPS = tuple(op for r in GUARDS for op in r.guard_ops)  # the safety rules' guards (shard_opt.rules)


@dataclass(frozen=True)
class InsertGuards(ModulePass):
    name = "insert-guards"
    summary = "Constrain what Shardy would move implicitly: opaque ops' operands, the safety rules' guards"

    opaque_ops: bool = True
    moved_dims: bool = True
    allow: str = ""

    def apply(self, ctx: PassContext, module) -> None:
        allow = frozenset(x for x in self.allow.split(",") if x)
        insert_guards(module, opaque_ops=self.opaque_ops, moved_dims=self.moved_dims, allow=allow,
                      arguments=ctx.arguments or None)


def insert_guards(module, *, opaque_ops: bool = True, moved_dims: bool = True, ops=None,
                  allow: frozenset = frozenset(), arguments=None) -> None:
    """The constraints Shardy needs to make every data movement explicit (the module
    docstring), in one walk over the module:

    - in front of every tensor operand of an op Shardy has no sharding rule for: a
      replicated constraint, so the gather the op needs is explicit and priced;
    - in front of an op a safety rule guards (``shard_opt.rules``: a slice / pad /
      reverse, rule ``fused-split``): the constraint the rule asks for (its moved dims
      closed and whole, the others open, ``{?}``), so Shardy gathers them instead of
      leaving the movement implicit; not for a rule in ``allow`` (``--allow``). With the
      model's ``arguments`` (names and kinds), a guard whose value is a module's output as it
      is (``Rule.hoist``: the sliced tensor traced back through layout and elementwise ops to
      the dot_general / convolution reading a ``.weight``) sits on that output instead, the
      guards of one output merged into one constraint: the form the emitted script writes
      (a forward hook on the module), so the plan is priced as the user's script runs.
    """
    if not (opaque_ops or moved_dims):
        return
    mesh_name = mesh_name_of(module) or "mesh"
    with module.context:
        if ops is None:  # else the caller's walk found them (``ir.ops_in``, in pre-order)
            ops = ir.ops_in(module.operation, OPAQUE_OPS + GUARDED_OPS)
        graph = None
        if moved_dims and arguments and any(op.name in GUARDED_OPS for op in ops):
            from shard_opt.module_outputs import Graph

            graph = Graph(module, arguments)
        hoisted: dict = {}  # module output value -> the dims its guards keep whole
        for op in ops:
            name = op.name
            if opaque_ops and name in OPAQUE_OPS and not _shardy_own(op):
                for i, value in enumerate(list(op.operands)):
                    tt = ir.tensor_type(value.type)
                    if tt is not None:
                        constrain_operand(op, i, TensorSharding.replicated(len(tt[0]), mesh_name).to_attr())
            elif moved_dims and name in GUARDED_OPS:
                for rule in GUARDS:
                    body = rule.id not in allow and name in rule.guard_ops and rule.guard(op)
                    if body:
                        at = rule.hoist(graph, op) if graph is not None else None
                        if at is not None:
                            hoisted.setdefault(at[0], set()).update(at[1])
                        else:
                            constrain_operand(op, 0, f"#sdy.sharding<@{mesh_name}, {body}>")
                        break
        for value, kept in hoisted.items():
            rank = len(ir.tensor_type(value.type)[0])
            body = ", ".join("{}" if d in kept else "{?}" for d in range(rank))
            constrain_value(value, f"#sdy.sharding<@{mesh_name}, [{body}]>")


def _shardy_own(op) -> bool:
    return ("call_target_name" in op.attributes
            and str(op.attributes["call_target_name"]).strip('"').startswith(SHARDY_OWN_TARGETS))
