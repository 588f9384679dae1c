"""``inline-calls``: inline every ``func.call`` into its caller, then drop dead functions.

tt-mlir's StableHLO pipeline starts with MLIR's inliner ("Inline all operations to
make analysis easier", tt-mlir ``lib/Dialect/StableHLO/Pipelines/StableHLOPipelines.cpp``),
so Shardy propagates through the bodies of a JAX model's private helpers (``@silu``,
``@triu``) as if they were written in ``@main``. jaxlib's MLIR context does not register
the inliner interfaces of the func and StableHLO dialects, so its ``inline`` pass
leaves every call in place; this pass does the same job with the Python bindings: each
call site gets its own copy of the callee's body (callee arguments replaced by the
call's operands, the call's results by what the callee returns), innermost calls
last, until no call is left; then ``symbol-dce`` removes the private functions nothing
calls any more.

Only single-block callees are inlined (StableHLO functions have one block); a call to
a function with several blocks or a declaration is left as it is.

Options:
  max-depth: how many rounds of nested calls to inline (default 16).
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.pass_manager import ModulePass, PassContext


@dataclass(frozen=True)
class InlineCalls(ModulePass):
    name = "inline-calls"
    summary = "Inline func.call sites (MLIR's inliner, which jaxlib cannot run on StableHLO)"

    max_depth: int = 16

    def apply(self, ctx: PassContext, module) -> None:
        inline_calls(module, max_depth=self.max_depth)


def inline_calls(module, *, max_depth: int = 16) -> int:
    """Inline the module's calls in place; returns how many call sites were inlined."""
    done = 0
    if sum(1 for op in module.body.operations if op.operation.name == "func.func") < 2:
        return 0  # one function calls none: no walk
    with module.context:
        for _ in range(max_depth):
            funcs = {f.attributes["sym_name"].value: f for f in module.body.operations
                     if f.operation.name == "func.func"}
            calls = ir.ops_in(module.operation, ("func.call",))
            inlined = 0
            for call in calls:
                callee = funcs.get(call.attributes["callee"].value)
                if callee is None or len(callee.regions[0].blocks) != 1:
                    continue
                _inline(call, callee)
                inlined += 1
            done += inlined
            if not inlined:
                break
        if done:
            ir.run_pipeline(module, "builtin.module(symbol-dce)", name="inline-calls")
    return done


def _inline(call, callee) -> None:
    body = callee.operation.clone()  # a private copy: the callee may have other call sites
    block = body.regions[0].blocks[0]
    for argument, operand in zip(block.arguments, call.operands):
        argument.replace_all_uses_with(operand)
    ops = list(block.operations)
    for op in ops[:-1]:  # all but func.return
        op.move_before(call)
    for result, value in zip(call.results, ops[-1].operands):
        result.replace_all_uses_with(value)
    call.operation.erase()
    body.erase()
