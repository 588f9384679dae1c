"""``unfold-batch-matmul``: one ``dot_general`` per batched matmul, every batch dim kept.

torch-mlir lowers a 4-D ``torch.matmul`` (attention's ``Q @ K^T`` and ``P @ V``) as
ATen decomposes it: both operands reshaped to fold ``[batch, heads]`` into one dim,
a 3-D ``dot_general`` batched on that dim, and a reshape that unfolds the result:

    %q3 = stablehlo.reshape %q : (tensor<32x64x1x128xbf16>) -> tensor<2048x1x128xbf16>
    %k3 = stablehlo.reshape %k : (tensor<32x64x128x129xbf16>) -> tensor<2048x128x129xbf16>
    %s3 = stablehlo.dot_general %q3, %k3, batching_dims = [0] x [0], contracting_dims = [2] x [1]
    %s  = stablehlo.reshape %s3 : (tensor<2048x1x129xbf16>) -> tensor<32x64x1x129xbf16>

Shardy cannot split the minor part of a folded dim (the heads) unless its major part
(the batch) is split whole, so with users on one mesh axis and heads on another
(tt-metal's Llama-70B Galaxy layout) propagation gathers Q, K and V before every
attention. It is an artefact of this frontend: torch_xla and JAX emit one
``dot_general`` batched on every dim, and tt-xla's SDPA composite takes ``[B, H, S, D]``
(tt-mlir ``StableHLOLegalizeCompositePass.cpp``; TTIR ``SDPAFusingPattern`` wants rank
4). This pass rewrites the three ops into that form:

    %s = stablehlo.dot_general %q, %k, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2]

when both operands are reshapes (through same-shape ``broadcast_in_dim`` copies) that
fold the same leading dims into dim 0, the matmul is batched on dim 0 alone, and its
one use unfolds dim 0 into those dims again. It is the same computation (the same
products and sums; a compiler may order the additions otherwise, so results agree to
float rounding); the reshapes left without uses are erased.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shard_opt import ir
from shard_opt.dataflow import attr_ints
from shard_opt.pass_manager import ModulePass, PassContext


@dataclass(frozen=True)
class UnfoldBatchMatmul(ModulePass):
    name = "unfold-batch-matmul"
    summary = "One dot_general per batched matmul, every batch dim kept (undo torch-mlir's reshape folding)"

    def apply(self, ctx: PassContext, module) -> None:
        unfold_batch_matmul(module)


def unfold_batch_matmul(module) -> int:
    """Rewrite the module in place; returns how many matmuls were unfolded."""
    mlir = ir.ir()
    done = 0
    with module.context:
        for dot in ir.ops_in(module.operation, ("stablehlo.dot_general",)):
            rewrite = _match(dot)
            if rewrite is None:
                continue
            lhs, rhs, unfold, k, numbers = rewrite
            attrs = {"dot_dimension_numbers": mlir.Attribute.parse(numbers)}
            for name in ("precision_config", "algorithm"):
                if name in dot.attributes:
                    attrs[name] = dot.attributes[name]
            with mlir.InsertionPoint(dot), dot.location:
                new = mlir.Operation.create("stablehlo.dot_general", results=[unfold.results[0].type],
                                            operands=[lhs, rhs], attributes=attrs)
            unfold.results[0].replace_all_uses_with(new.results[0])
            unfold.erase()
            folded = [dot.operands[0].owner, dot.operands[1].owner]
            dot.erase()
            for op in folded:
                _erase_dead(op)
            done += 1
    return done


def _match(dot):
    """(lhs, rhs, the unfolding reshape, number of batch dims, new dimension numbers) or None."""
    numbers = _numbers(str(dot.attributes["dot_dimension_numbers"]))
    if numbers["lhs_batching_dimensions"] != [0] or numbers["rhs_batching_dimensions"] != [0]:
        return None
    result = dot.results[0]
    uses = list(result.uses)
    if len(uses) != 1 or uses[0].owner.name != "stablehlo.reshape":
        return None
    unfold = uses[0].owner
    shape = ir.tensor_type(result.type)[0]
    out = ir.tensor_type(unfold.results[0].type)[0]
    k = len(out) - len(shape) + 1  # batch dims the folded one unfolds into
    if k < 2 or tuple(out[k:]) != tuple(shape[1:]) or math.prod(out[:k]) != shape[0]:
        return None
    batch = tuple(out[:k])
    sources = [_folded_source(v, batch) for v in dot.operands]
    if any(s is None for s in sources):
        return None
    shift = k - 1
    text = ("#stablehlo.dot<lhs_batching_dimensions = [{b}], rhs_batching_dimensions = [{b}], "
            "lhs_contracting_dimensions = [{lc}], rhs_contracting_dimensions = [{rc}]>").format(
        b=", ".join(str(i) for i in range(k)),
        lc=", ".join(str(d + shift) for d in numbers["lhs_contracting_dimensions"]),
        rc=", ".join(str(d + shift) for d in numbers["rhs_contracting_dimensions"]))
    return sources[0], sources[1], unfold, k, text


def _folded_source(value, batch: tuple[int, ...]):
    """The value ``value`` is a reshape of, folding ``batch`` into dim 0 (through
    same-shape ``broadcast_in_dim`` copies), or None."""
    for _ in range(4):
        op = value.owner
        name = getattr(op, "name", "")
        if name == "stablehlo.broadcast_in_dim" and op.operands[0].type == value.type:
            dims = attr_ints(str(op.attributes["broadcast_dimensions"]))
            if dims != list(range(len(dims))):
                return None
            value = op.operands[0]
            continue
        if name != "stablehlo.reshape":
            return None
        src = op.operands[0]
        s_shape = ir.tensor_type(src.type)[0]
        v_shape = ir.tensor_type(value.type)[0]
        k = len(batch)
        if tuple(s_shape[:k]) == batch and tuple(s_shape[k:]) == tuple(v_shape[1:]):
            return src
        return None
    return None


def _numbers(text: str) -> dict:
    return {key: attr_ints(text, key) for key in ("lhs_batching_dimensions", "rhs_batching_dimensions",
                                                  "lhs_contracting_dimensions", "rhs_contracting_dimensions")}


def _erase_dead(op) -> None:
    """Erase ``op`` and, going up, the reshape / copy chain that fed only it."""
    while op is not None and getattr(op, "name", "") in ("stablehlo.reshape", "stablehlo.broadcast_in_dim"):
        if any(True for r in op.results for _ in r.uses):
            return
        up = op.operands[0].owner
        op.erase()
        op = up
