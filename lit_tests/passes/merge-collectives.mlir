// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(merge-collectives)' | FileCheck %s

// Shardy makes one collective per use: two identical all_gathers of one value become one
// (TTIR's cse merges its Pure CCL ops), and an all_reduce nothing uses is erased, with the
// all_gather that only fed it (ShardyCCLCanonicalization's clean-up).
// CHECK-LABEL: func.func @identical_and_dead
// CHECK: %[[G:.*]] = sdy.all_gather [{}, {"model"}] %arg0 out_sharding=<@mesh_batch_2_model_4, [{}, {}]> : tensor<8x32xf32>
// CHECK-NOT: sdy.all_
// CHECK: stablehlo.add %[[G]], %[[G]] : tensor<8x32xf32>
module {
  sdy.mesh @mesh_batch_2_model_4 = <["batch"=2, "model"=4]>
  func.func @identical_and_dead(%arg0: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{}, {"model"}]>}, %arg1: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{}, {"model"}]>}) -> tensor<8x32xf32> {
    %0 = sdy.all_gather [{}, {"model"}] %arg0 out_sharding=<@mesh_batch_2_model_4, [{}, {}]> : tensor<8x32xf32>
    %1 = sdy.all_gather [{}, {"model"}] %arg0 out_sharding=<@mesh_batch_2_model_4, [{}, {}]> : tensor<8x32xf32>
    %2 = sdy.all_gather [{}, {"model"}] %arg1 out_sharding=<@mesh_batch_2_model_4, [{}, {}]> : tensor<8x32xf32>
    %3 = sdy.all_reduce {"batch"} %2 out_sharding=<@mesh_batch_2_model_4, [{}, {}]> : tensor<8x32xf32>
    %4 = stablehlo.add %0, %1 : tensor<8x32xf32>
    return %4 : tensor<8x32xf32>
  }
}

// -----

// Collectives on different values, or with different axes, are not merged.
// CHECK-LABEL: func.func @different
// CHECK: sdy.all_gather [{}, {"model"}] %arg0
// CHECK: sdy.all_gather [{"batch"}, {"model"}] %arg0
// CHECK-NOT: sdy.all_
module {
  sdy.mesh @mesh_batch_2_model_4 = <["batch"=2, "model"=4]>
  func.func @different(%arg0: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{"batch"}, {"model"}]>}) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
    %0 = sdy.all_gather [{}, {"model"}] %arg0 out_sharding=<@mesh_batch_2_model_4, [{"batch"}, {}]> : tensor<8x32xf32>
    %1 = sdy.all_gather [{"batch"}, {"model"}] %arg0 out_sharding=<@mesh_batch_2_model_4, [{}, {}]> : tensor<8x32xf32>
    return %0, %1 : tensor<8x32xf32>, tensor<8x32xf32>
  }
}
