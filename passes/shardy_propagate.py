"""``shardy-propagate``: run real Shardy propagation and make collectives explicit.

Two pipelines, both run by jaxlib's in-process Shardy (references/toolchain.md):

``tt-mlir`` (default): the sharding steps of tt-mlir's ``stablehlo-pipeline``
(tt-mlir ``lib/Dialect/StableHLO/Pipelines/StableHLOPipelines.cpp``,
``createStableHLOPipeline``) that jaxlib can run, in tt-mlir's order::

    inline-calls,                             # tt-mlir's inline (passes/inline_calls.py)
    decouple-const-fanout,                    # tt-mlir's own (passes/decouple_const_fanout.py)
    sdy-apply-sharding-constraints,
    sdy-user-priority-propagate{conservative-propagation=true},
    func.func(sdy-sharding-constraint-to-reshard),
    replicate-non-splittable,                 # tt-mlir's own (passes/replicate_non_splittable.py)
    func.func(sdy-insert-explicit-reshards{enable-full-version=true}),
    cse,                                      # one reshard per value (see below)
    func.func(sdy-reshard-to-collectives),
    canonicalize{enable-patterns=sdy-collective},  # ShardyCCLCanonicalization
    sdy-close-shardings
    + identical collectives merged            # the rest of TTIR's cse (below)
    + dead collectives erased                 # ShardyCCLCanonicalization's clean-up

Shardy inserts one ``sdy.reshard`` per *use*: a value four consumers need gathered gets
four identical reshards. tt-mlir merges the identical collectives with the ``cse`` it
runs right after lowering to TTIR (``lib/Dialect/TTIR/Pipelines/TTIRPipelines.cpp``:
TTIR CCL ops are Pure; the sdy collectives are not, so ``cse`` runs on the Pure
``sdy.reshard`` ops before they become collectives, and the collectives Shardy creates
directly, such as the ``all_reduce`` of a partial sum, are merged here when they are
the same op on the same value). ShardyCCLCanonicalization
(tt-mlir ``lib/Dialect/StableHLO/Transforms/ShardyCCLCanonicalization.cpp``, tt-mlir
PR 6843 and #7786) applies Shardy's own collective canonicalizations: an
``all_reduce`` whose users all ``all_slice`` the reduced axes becomes one
``reduce_scatter``, an ``all_slice`` of an ``all_gather`` on the same axes cancels,
empty collectives vanish; then it erases collectives nothing uses. The tt-mlir steps
jaxlib cannot run are listed in docs/costmodel.md ("Propagation").

``sdy``: Shardy's own pipelines, as shard-opt ran before::

    sdy-propagation-pipeline,
    sdy-export-pipeline{enable-insert-explicit-collectives=true}

After either, every reshard is an ``sdy.all_reduce`` / ``all_gather`` / ``all_slice`` /
``reduce_scatter`` / ``all_to_all`` / ``collective_permute`` with its tensor type.

Options:
  pipeline: ``tt-mlir`` (default) or ``sdy`` (see above).
  explicit-collectives: insert the collectives (default true); false stops after
    propagation (the search's probes read only the propagated argument shardings).
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
    packed q|k|v projection); with the guard the gather is explicit and priced. When the
    pass context names the arguments (the driver's evaluations always do), a guard whose
    sliced tensor is a module's output as it is (a Linear / Conv output, through layout and
    elementwise ops) sits on that output instead, one constraint for all the slices of it:
    that is what the emitted script can hook (``FusedSplit.script_guards``), so the plan is
    priced as the user's script runs.
  decouple-const-fanout: with the tt-mlir pipeline, clone constant-fed broadcasts per
    use first, as tt-mlir does (``passes/decouple_const_fanout.py``) (default true; the
    evaluator does it once in the module every candidate copies).
  verify: run MLIR's verifier after every pass (default true). The search turns it off
    for the candidates it only prices (the verifier is most of the pipeline's time) and
    keeps it for the plan it emits.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.errors import UserError
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.passes.decouple_const_fanout import decouple_const_fanout
from shard_opt.passes.inline_calls import inline_calls
from shard_opt.passes.replicate_non_splittable import replicate_non_splittable
from shard_opt.rules import GUARDS
from shard_opt.sharding import TensorSharding


@dataclass(frozen=True)
class ShardyPropagate(ModulePass):
    name = "shardy-propagate"
    summary = "Run Shardy propagation and insert explicit collectives"

    pipeline: str = "tt-mlir"
    explicit_collectives: bool = True
    guard_opaque_ops: bool = True
    guard_moved_dims: bool = True
    decouple_const_fanout: bool = True
    verify: bool = True

    def apply(self, ctx: PassContext, module) -> None:
        if not any(op.operation.name == "func.func" for op in module.body.operations):
            # Shardy aborts the process (a failed CHECK, not an error) on a module without functions
            raise UserError("shardy-propagate: the module has no func.func; give a module with a @main function")
        if self.pipeline not in PIPELINES:
            raise UserError(f"shardy-propagate: unknown pipeline {self.pipeline!r}; use one of "
                            f"{', '.join(PIPELINES)}")
        # one walk finds the ops to guard and tells whether any call is left to inline (a
        # module of one function calls none: no walk when there is nothing to guard either)
        found = []
        decouple = self.decouple_const_fanout and self.pipeline == "tt-mlir"
        if self.guard_opaque_ops or self.guard_moved_dims or decouple or _functions(module) > 1:
            found = ir.ops_in(module.operation, OPAQUE_OPS + GUARDED_OPS + ("func.call", BROADCAST))
        insert_guards(module, opaque_ops=self.guard_opaque_ops, moved_dims=self.guard_moved_dims,
                      ops=[op for op in found if op.name not in ("func.call", BROADCAST)],
                      arguments=ctx.arguments or None)
        propagate, export = PIPELINES[self.pipeline]
        if self.pipeline == "tt-mlir" and any(op.name == "func.call" for op in found):
            inline_calls(module)
            found = ir.ops_in(module.operation, (BROADCAST,))  # the inlined bodies' broadcasts too
        if decouple:
            decouple_const_fanout(module, ops=[op for op in found if op.name == BROADCAST])
        if not self.explicit_collectives:
            export = () if self.pipeline == "tt-mlir" else ("sdy-export-pipeline",)
        if self.pipeline == "tt-mlir" and export:
            # tt-mlir replicates the values SPMD cannot split between its propagation and its
            # explicit reshards (passes/replicate_non_splittable.py): two runs around that step
            ir.run_pipeline(module, "builtin.module(" + ", ".join((*propagate, export[0])) + ")",
                            name=self.name, verify=self.verify)
            replicate_non_splittable(module)
            ir.run_pipeline(module, "builtin.module(" + ", ".join(export[1:]) + ")", name=self.name,
                            verify=self.verify)
        else:
            ir.run_pipeline(module, "builtin.module(" + ", ".join((*propagate, *export)) + ")", name=self.name,
                            verify=self.verify)
        if self.pipeline == "tt-mlir" and self.explicit_collectives:
            _, left = _merge_identical(module)
            _erase_dead(left)


def _functions(module) -> int:
    return sum(1 for op in module.body.operations if op.operation.name == "func.func")


# pipeline -> (propagation passes, passes that make the collectives explicit)
PIPELINES = {
    "tt-mlir": (
        ("sdy-apply-sharding-constraints",
         "sdy-user-priority-propagate{conservative-propagation=true}"),
        ("func.func(sdy-sharding-constraint-to-reshard)",
         "func.func(sdy-insert-explicit-reshards{enable-full-version=true})",
         "cse",
         "func.func(sdy-reshard-to-collectives)",
         "canonicalize{enable-patterns=sdy-collective}",
         "sdy-close-shardings"),
    ),
    "sdy": (("sdy-propagation-pipeline",), ("sdy-export-pipeline{enable-insert-explicit-collectives=true}",)),
}

COLLECTIVE_OPS = ("sdy.all_reduce", "sdy.all_gather", "sdy.all_slice", "sdy.reduce_scatter", "sdy.all_to_all",
                  "sdy.collective_permute")


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


def insert_guards(module, *, opaque_ops: bool = True, moved_dims: bool = True, ops=None,
                  allow: frozenset = frozenset(), arguments=None) -> None:
    """The constraints Shardy needs to make every data movement explicit (see the options),
    in one walk over the module. The driver also writes them into the annotated module it
    emits, so XLA and tt-mlir propagate from the same hints the plan was priced with.

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


BROADCAST = "stablehlo.broadcast_in_dim"
OPAQUE_OPS = ("stablehlo.custom_call", "chlo.top_k")
SHARDY_OWN_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "xla.sdy.")
GUARDED_OPS = tuple(op for r in GUARDS for op in r.guard_ops)  # the safety rules' guards (shard_opt.rules)


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


