"""``replicate-non-splittable``: tt-mlir's ReplicateNonSplittableValuesPass, mirrored.

tt-mlir's StableHLO pipeline runs it after propagation and ``sdy-sharding-constraint-to-
reshard``, right before inserting explicit reshards (tt-mlir
``lib/Dialect/StableHLO/Transforms/ReplicateNonSplittableValues.cpp``, scheduled in
``lib/Dialect/StableHLO/Pipelines/StableHLOPipelines.cpp``; pass description in
``include/ttmlir/Dialect/StableHLO/Transforms/Passes.td``). It sets the sharding of a
value SPMD cannot split to closed and fully replicated, so Shardy then reshards between
it and its sharded neighbours:

- a ``stablehlo.slice`` sharded on a dim it narrows: its start and limit are absolute
  positions, which line up per shard only when the slice spans the whole dim. A strided
  slice that starts before its stride, runs to the end and whose stride divides the
  per-shard width (``[::2]``, ``[1::2]``) is a per-shard interleave and is kept;
- a ``stablehlo.iota`` sharded on its iota dimension (0, 1, ..., N-1 is not periodic);
- a non-splat ``stablehlo.constant`` whose shards differ (not periodic across every
  sharded dim; a dim split over two axes at once counts as not periodic).

Why shard-opt needs it: jaxlib's Shardy keeps such a slice split and partitions it with a
local slice, so a plan that splits the two halves of a fused gate|up projection on the
ffn dim (Mixtral's experts, the down projection split on ``batch``) priced one all_slice
where tt-mlir gathers the experts' dim and slices again (Mixtral 8x7B 1-layer 2x4, the
one plan of benchmarks/results.md's tt-mlir table that did not match: 4 all_to_all in
tt-mlir's shlo_compiler, lowered as 2 all_gather + 2 mesh_partition in TTIR).

A step of ``shardy-propagate``'s tt-mlir pipeline, between its propagation and its
export, on the propagated ``sdy.sharding`` of each op.

Example::

    %s = stablehlo.slice %x [0:8, 0:16]                      %s = stablehlo.slice %x [0:8, 0:16]
      {sdy.sharding = #sdy.sharding_per_value<[<@mesh,   ->     {sdy.sharding = #sdy.sharding_per_value<[<@mesh,
       [{}, {"model"}]>]>} : (tensor<8x48xf32>) -> ...           [{}, {}]>]>} : ...

Options: none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shard_opt import ir
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.sharding import TensorSharding

OPS = ("stablehlo.slice", "stablehlo.iota", "stablehlo.constant")


@dataclass(frozen=True)
class ReplicateNonSplittable(ModulePass):
    name = "replicate-non-splittable"
    summary = "Replicate the slices, iotas and constants SPMD cannot split (tt-mlir's ReplicateNonSplittableValues)"

    def apply(self, ctx: PassContext, module) -> None:
        replicate_non_splittable(module)


def replicate_non_splittable(module, *, ops=None) -> int:
    """Set each non-splittable value's sharding to closed replicated, as tt-mlir does.
    ``ops``: the module's slice / iota / constant ops when the caller's walk found them.
    Returns the number of values changed."""
    from shard_opt.analysis import meshes_of

    meshes = meshes_of(module)
    if len(meshes) != 1:  # tt-mlir: none -> nothing to do; several -> it refuses (shard-opt writes one)
        return 0
    mesh = next(iter(meshes.values()))
    changed = 0
    with module.context:
        _ir = ir.ir()
        for op in (ir.ops_in(module.operation, OPS) if ops is None else ops):
            if "sdy.sharding" not in op.attributes:
                continue
            text = str(op.attributes["sdy.sharding"])
            s = TensorSharding.parse(text)
            if s.is_replicated:
                continue
            if not _non_splittable(op, s, mesh):
                continue
            rep = TensorSharding.replicated(s.rank, s.mesh_name)
            op.attributes["sdy.sharding"] = _ir.Attribute.parse(f"#sdy.sharding_per_value<[{rep.body()}]>")
            changed += 1
    return changed


def _non_splittable(op, s: TensorSharding, mesh) -> bool:
    if op.name == "stablehlo.slice":
        return _slice_cuts_a_split_dim(op, s, mesh)
    if op.name == "stablehlo.iota":
        d = ir.ir().IntegerAttr(op.attributes["iota_dimension"]).value
        return d < s.rank and bool(s.dims[d])
    return _constant_not_periodic(op, s, mesh)


def _slice_cuts_a_split_dim(op, s: TensorSharding, mesh) -> bool:
    shape = ir.tensor_type(op.operands[0].type)[0]
    start = list(ir.ir().DenseI64ArrayAttr(op.attributes["start_indices"]))
    limit = list(ir.ir().DenseI64ArrayAttr(op.attributes["limit_indices"]))
    strides = list(ir.ir().DenseI64ArrayAttr(op.attributes["strides"]))
    for i, axes in enumerate(s.dims[:len(start)]):
        if not axes:
            continue
        if start[i] == 0 and limit[i] == shape[i] and strides[i] == 1:
            continue  # the whole dim: each shard's local slice is the identity
        if strides[i] > 1 and start[i] < strides[i] and limit[i] == shape[i]:
            parts = s.split_factor(i, mesh)
            if shape[i] % parts == 0 and (shape[i] // parts) % strides[i] == 0:
                continue  # an interleave that every shard takes at the same phase
        return True
    return False


def _constant_not_periodic(op, s: TensorSharding, mesh) -> bool:
    value = op.attributes["value"]
    if not isinstance(value, ir.ir().DenseElementsAttr) or value.is_splat:
        return False
    shape = ir.tensor_type(op.result.type)[0]
    split = [(i, s.split_factor(i, mesh)) for i, axes in enumerate(s.dims) if axes]
    split = [(i, n) for i, n in split if n > 1]
    if not split:
        return False  # local type == global type: nothing is split
    if any(len(s.dims[i]) > 1 for i, _ in split):
        return True  # tt-mlir checks periodicity for one axis per dim only
    data = np.asarray(value)
    if data.shape != tuple(shape):
        return True  # a value numpy cannot read as laid out (e.g. i1 bit-packed): keep tt-mlir's safe side
    for i, n in split:
        if shape[i] % n:
            return True
        blocks = np.split(data, n, axis=i)
        if any(not np.array_equal(blocks[0], b) for b in blocks[1:]):
            return True
    return False
