// --split-input-file: each '// -----' chunk runs through the pass pipeline on its own
// (the shardings are the chunk's own; apply-shardings closes the results replicated, the
// boundary rule) and the outputs are printed in order, separated by '// -----'.
//
// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(add-mesh{shape=2x4}, apply-shardings, shardy-propagate, collect-collectives)' | FileCheck %s
// Without the flag the file is one input holding three modules, which is an error.
// RUN: not shard-opt %s --pass-pipeline='builtin.module(add-mesh{shape=2x4})' 2>&1 | FileCheck %s --check-prefix=WHOLE
// WHOLE: shard-opt: error: {{.*}}split-input-file.mlir:
// WHOLE-NOT: Traceback

// Megatron column -> row: one all_reduce of the partial sums over "model".
// CHECK: module attributes {shard_opt.ccl_bytes = 32768 : i64, shard_opt.ccl_count = 1 : i64}
// CHECK-LABEL: func.func @column_then_row
// CHECK: sdy.all_reduce {"model"}
// CHECK-SAME: {shard_opt.bytes_per_device = 32768 : i64, shard_opt.group_size = 4 : i64} : tensor<128x64xf32>
// CHECK-NOT: sdy.all_
// CHECK: // -----

module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @column_then_row(%arg0: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> tensor<128x64xf32> {
    %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
    return %1 : tensor<128x64xf32>
  }
}

// -----

// Both weights column-parallel: Shardy does not gather the intermediate; it moves the
// second weight to row-parallel with an all_to_all. tt-mlir's conservative propagation
// then reduce-scatters the partial sums onto the output's features and gathers them
// for the replicated result (the same bytes as one all_reduce, one more collective).
// CHECK: module attributes {shard_opt.ccl_bytes = 57344 : i64, shard_opt.ccl_count = 3 : i64}
// CHECK-LABEL: func.func @column_then_column
// CHECK: sdy.all_to_all [{"model"}: 0->1] %arg1 out_sharding=<@mesh, [{}, {"model"}]>
// CHECK-SAME: {shard_opt.bytes_per_device = 16384 : i64, shard_opt.group_size = 4 : i64} : tensor<64x256xf32>
// CHECK: sdy.reduce_scatter [{}, {"model"}]
// CHECK-SAME: {shard_opt.bytes_per_device = 32768 : i64, shard_opt.group_size = 4 : i64} : tensor<128x64xf32>
// CHECK: sdy.all_gather [{}, {"model"}]
// CHECK-SAME: {shard_opt.bytes_per_device = 8192 : i64, shard_opt.group_size = 4 : i64} : tensor<128x64xf32>
// CHECK-NOT: sdy.all_
// CHECK: // -----

module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @column_then_column(%arg0: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg2: tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> tensor<128x64xf32> {
    %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
    return %1 : tensor<128x64xf32>
  }
}

// -----

// Tokens split on "batch", weights replicated: no partial sums; the output, returned
// whole, is all_gathered over "batch".
// CHECK: module attributes {shard_opt.ccl_bytes = 16384 : i64, shard_opt.ccl_count = 1 : i64}
// CHECK-LABEL: func.func @tokens_on_batch
// CHECK-SAME: %arg2: tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"batch"}, {}]>}
// CHECK-SAME: -> (tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>})
// CHECK: sdy.all_gather [{"batch"}, {}]
// CHECK-SAME: {shard_opt.bytes_per_device = 16384 : i64, shard_opt.group_size = 2 : i64} : tensor<128x64xf32>
// CHECK-NOT: sdy.all_

module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @tokens_on_batch(%arg0: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg2: tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"batch"}, {}]>}) -> tensor<128x64xf32> {
    %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
    return %1 : tensor<128x64xf32>
  }
}
