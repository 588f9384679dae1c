"""``shardy-propagate``: run real Shardy propagation and make collectives explicit.

Two pipelines, both run by jaxlib's in-process Shardy (references/toolchain.md):

``tt-mlir`` (default): the sharding steps of tt-mlir's ``stablehlo-pipeline``
(tt-mlir ``lib/Dialect/StableHLO/Pipelines/StableHLOPipelines.cpp``,
``createStableHLOPipeline``) that jaxlib can run, in tt-mlir's order. The pass runs them
as a pipeline (``steps()``: every step a registered pass or one of MLIR's), after its
guards (``insert-guards``)::

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
    sdy-close-shardings,
    merge-collectives                         # the rest of TTIR's cse, and the clean-up
                                              # (passes/merge_collectives.py)

Shardy inserts one ``sdy.reshard`` per *use*: a value four consumers need gathered gets
four identical reshards. tt-mlir merges the identical collectives with the ``cse`` it
runs right after lowering to TTIR (``lib/Dialect/TTIR/Pipelines/TTIRPipelines.cpp``:
TTIR CCL ops are Pure; the sdy collectives are not, so ``cse`` runs on the Pure
``sdy.reshard`` ops before they become collectives, and the collectives Shardy creates
directly, such as the ``all_reduce`` of a partial sum, are merged by ``merge-collectives``
when they are the same op on the same value). ShardyCCLCanonicalization
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
  guard-opaque-ops: before propagating (``insert-guards{opaque-ops}``), constrain the operands of ops Shardy has no
    sharding rule for (custom calls, ``chlo.top_k``) to replicated with
    ``sdy.sharding_constraint`` (default true). Shardy otherwise lets a split value flow
    into such an op with no collective, and the plan would be priced without the gather
    the op needs.
  guard-moved-dims: before propagating (``insert-guards{moved-dims}``), keep whole the dims that a ``stablehlo.slice``
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

from shard_opt.errors import UserError
from shard_opt.pass_manager import ModulePass, PassContext, PassManager
from shard_opt.passes.insert_guards import InsertGuards


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

    def steps(self) -> list[str]:
        """The pipeline this pass runs, as text (the module docstring): its guards, then
        ``PIPELINES[pipeline]`` with tt-mlir's own steps in their places."""
        if self.pipeline not in PIPELINES:
            raise UserError(f"shardy-propagate: unknown pipeline {self.pipeline!r}; use one of "
                            f"{', '.join(PIPELINES)}")
        out = []
        if self.guard_opaque_ops or self.guard_moved_dims:
            out.append(InsertGuards(opaque_ops=self.guard_opaque_ops, moved_dims=self.guard_moved_dims).pipeline_text())
        propagate, export = PIPELINES[self.pipeline]
        if self.pipeline == "tt-mlir":
            out.append("inline-calls")
            if self.decouple_const_fanout:
                out.append("decouple-const-fanout")
        if not self.explicit_collectives:
            export = () if self.pipeline == "tt-mlir" else ("sdy-export-pipeline",)
        out += propagate
        if self.pipeline == "tt-mlir" and export:
            # tt-mlir replicates the values SPMD cannot split between its propagation and its
            # explicit reshards (passes/replicate_non_splittable.py)
            out += [export[0], "replicate-non-splittable", *export[1:], "merge-collectives"]
        else:
            out += export
        return out

    def apply(self, ctx: PassContext, module) -> None:
        if not any(op.operation.name == "func.func" for op in module.body.operations):
            # Shardy aborts the process (a failed CHECK, not an error) on a module without functions
            raise UserError("shardy-propagate: the module has no func.func; give a module with a @main function")
        steps = self.steps()
        # inside a pipeline: the enclosing pass manager's repro covers a failing step
        PassManager("builtin.module(" + ", ".join(steps) + ")", ctx, verify=self.verify, name=self.name,
                    repro=False).run(module)


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
