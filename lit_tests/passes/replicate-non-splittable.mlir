// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(replicate-non-splittable)' | FileCheck %s

// tt-mlir's ReplicateNonSplittableValuesPass, mirrored: after propagation, a value SPMD
// cannot split gets a closed, replicated sharding. A slice that narrows its split dim
// ([0:16] of a dim split 4 ways: its offsets do not line up per shard) is replicated; an
// interleave every shard takes at the same phase ([0:32:2]) and a slice of another dim
// keep their split.
// CHECK-LABEL: func.func @slices
// CHECK: stablehlo.slice %arg0 [0:8, 0:16] {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{}, {}]>]>}
// CHECK: stablehlo.slice %arg0 [0:8, 0:32:2] {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{}, {"model"}]>]>}
// CHECK: stablehlo.slice %arg0 [0:4, 0:32] {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{}, {"model"}]>]>}
module {
  sdy.mesh @mesh_batch_2_model_4 = <["batch"=2, "model"=4]>
  func.func @slices(%arg0: tensor<8x32xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<4x32xf32>) {
    %0 = stablehlo.slice %arg0 [0:8, 0:16] {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{}, {"model"}]>]>} : (tensor<8x32xf32>) -> tensor<8x16xf32>
    %1 = stablehlo.slice %arg0 [0:8, 0:32:2] {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{}, {"model"}]>]>} : (tensor<8x32xf32>) -> tensor<8x16xf32>
    %2 = stablehlo.slice %arg0 [0:4, 0:32] {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{}, {"model"}]>]>} : (tensor<8x32xf32>) -> tensor<4x32xf32>
    return %0, %1, %2 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<4x32xf32>
  }
}

// -----

// An iota split on its iota dimension (0..N-1 is not periodic) is replicated; split across
// the other dim (every row the same 0..31) it keeps its split.
// CHECK-LABEL: func.func @iotas
// CHECK: stablehlo.iota dim = 1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{}, {}]>]>}
// CHECK: stablehlo.iota dim = 1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{"model"}, {}]>]>}
module {
  sdy.mesh @mesh_batch_2_model_4 = <["batch"=2, "model"=4]>
  func.func @iotas() -> (tensor<8x32xi32>, tensor<8x32xi32>) {
    %0 = stablehlo.iota dim = 1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{}, {"model"}]>]>} : tensor<8x32xi32>
    %1 = stablehlo.iota dim = 1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh_batch_2_model_4, [{"model"}, {}]>]>} : tensor<8x32xi32>
    return %0, %1 : tensor<8x32xi32>, tensor<8x32xi32>
  }
}
