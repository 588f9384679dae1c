// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(shardy-propagate)' | FileCheck %s
// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(shardy-propagate{guard-moved-dims=false})' | FileCheck %s --check-prefix=UNGUARDED
// Shardy's own pipelines (the previous default) reshard once per use:
// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(shardy-propagate{pipeline=sdy})' | FileCheck %s --check-prefix=SDY

// Megatron column -> row (Megatron-LM section 3): the intermediate stays split, the
// second matmul leaves partial sums, one all_reduce on "model" makes them whole.
// CHECK-LABEL: func.func @column_then_row
// CHECK: stablehlo.dot_general
// CHECK-SAME: {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{}, {"model"}]>]>}
// CHECK: %[[SUM:.*]] = stablehlo.dot_general
// CHECK-NEXT: sdy.all_reduce {"model"} %[[SUM]] out_sharding=<@mesh_batch_2_model_4, [{}, {}]> : tensor<128x64xf32>
// CHECK-NOT: sdy.all_
module {
  sdy.mesh @mesh_batch_2_model_4 = <["batch"=2, "model"=4]>
  func.func @column_then_row(%arg0: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{"model"}, {}]>}, %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{}, {"model"}]>}, %arg2: tensor<128x64xf32>) -> (tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{}, {}]>}) {
    %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
    return %1 : tensor<128x64xf32>
  }
}

// -----

// Tokens split on "batch" with a replicated result: no partial sums, one all_gather
// at the output (outputs are returned whole).
// CHECK-LABEL: func.func @token_split
// CHECK-NOT: sdy.all_reduce
// CHECK: sdy.all_gather [{"batch"}, {}] %{{.*}} out_sharding=<@mesh_batch_2_model_4, [{}, {}]> : tensor<128x64xf32>
module {
  sdy.mesh @mesh_batch_2_model_4 = <["batch"=2, "model"=4]>
  func.func @token_split(%arg0: tensor<256x64xf32>, %arg1: tensor<64x256xf32>, %arg2: tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{"batch"}, {}]>}) -> (tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{}, {}]>}) {
    %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
    return %1 : tensor<128x64xf32>
  }
}

// -----

// A slice of a packed q|k|v value whose features are split: Shardy would keep the slice's
// result split with no collective (the sliced dim is a permutation factor, its data
// movement left to the partitioner). guard-moved-dims keeps the sliced dim whole, so the
// gather is explicit and priced.
// CHECK-LABEL: func.func @packed_slice
// CHECK: %[[G:.*]] = sdy.all_gather [{}, {"model"}] %arg0 out_sharding=<@mesh, [{}, {}]> : tensor<8x48xf32>
// CHECK-NEXT: stablehlo.slice %[[G]] [0:8, 0:16]
// Without the guard, tt-mlir's replicate-non-splittable-values step (mirrored) replicates
// the slice, which cuts a split dim: the same gather, then a local slice for the output.
// (Shardy alone would keep the result split with no collective at all.)
// UNGUARDED-LABEL: func.func @packed_slice
// UNGUARDED: %[[G:.*]] = sdy.all_gather [{}, {"model"}] %arg0 out_sharding=<@mesh, [{}, {}]> : tensor<8x48xf32>
// UNGUARDED-NEXT: %[[S:.*]] = stablehlo.slice %[[G]] [0:8, 0:16] {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{}, {}]>]>}
// UNGUARDED-NEXT: sdy.all_slice [{}, {"model"}] %[[S]]
module {
  sdy.mesh @mesh = <["model"=4]>
  func.func @packed_slice(%arg0: tensor<8x48xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) -> (tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) {
    %0 = stablehlo.slice %arg0 [0:8, 0:16] : (tensor<8x48xf32>) -> tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}

// -----

// One reshard per value, as tt-mlir runs it. Shardy inserts a reshard of %x for each of
// its three consumers; tt-mlir's cse (on TTIR, where CCLs are Pure) keeps one all_gather.
// CHECK-LABEL: func.func @three_consumers
// CHECK: %[[X:.*]] = sdy.all_gather [{}, {"model"}] %arg0 out_sharding=<@mesh, [{}, {}]> : tensor<128x64xf32>
// CHECK-NOT: sdy.all_gather
// CHECK-COUNT-3: stablehlo.dot_general %[[X]], %{{.*}}
// CHECK-NOT: sdy.all_gather
// Shardy's own export prices the same gather three times.
// SDY-LABEL: func.func @three_consumers
// SDY-COUNT-3: sdy.all_gather [{}, {"model"}] %arg0
module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @three_consumers(%x: tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %w1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %w2: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %w3: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) -> (tensor<128x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, tensor<128x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, tensor<128x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) {
    %0 = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %x, %w2, contracting_dims = [1] x [0] : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
    %2 = stablehlo.dot_general %x, %w3, contracting_dims = [1] x [0] : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
    return %0, %1, %2 : tensor<128x256xf32>, tensor<128x256xf32>, tensor<128x256xf32>
  }
}

// -----

// ShardyCCLCanonicalization (tt-mlir PR 6843): a row-parallel result kept split on its
// features is reduce-scattered: Shardy's all_reduce of the partial sums followed by an
// all_slice of the same axis becomes one reduce_scatter (half the bytes of the pair).
// CHECK-LABEL: func.func @row_parallel_kept_split
// CHECK-NOT: sdy.all_reduce
// CHECK-NOT: sdy.all_slice
// CHECK: sdy.reduce_scatter [{}, {"model"}] %{{.*}} out_sharding=<@mesh, [{}, {"model"}]> : tensor<128x64xf32>
// CHECK-NOT: sdy.all_
module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @row_parallel_kept_split(%x: tensor<128x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %w: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}) -> (tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<128x256xf32>, tensor<256x64xf32>) -> tensor<128x64xf32>
    return %0 : tensor<128x64xf32>
  }
}
