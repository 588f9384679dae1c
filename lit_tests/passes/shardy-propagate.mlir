// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(shardy-propagate)' | FileCheck %s

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
