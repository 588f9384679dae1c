// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(add-mesh{shape=2x4}, apply-shardings{shardings=0:model/-,1:-/model})' | FileCheck %s

// Column-parallel first weight, row-parallel second; the result is returned whole
// (closed, replicated), the boundary rule of docs/design.md.
// CHECK-LABEL: func.func @column_then_row
// CHECK-SAME: %arg0: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}
// CHECK-SAME: %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}
// CHECK-SAME: %arg2: tensor<128x64xf32>)
// CHECK-SAME: -> (tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>})
func.func @column_then_row(%arg0: tensor<256x64xf32>, %arg1: tensor<64x256xf32>, %arg2: tensor<128x64xf32>) -> tensor<128x64xf32> {
  %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
  %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
  return %1 : tensor<128x64xf32>
}

// -----

// A result that already carries a sharding keeps it; other attributes survive.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>, tf.aliasing_output = 0 : i32}
// CHECK-SAME: -> (tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"batch"}, {}]>})
module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @main(%arg0: tensor<256x64xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<64x256xf32>) -> (tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"batch"}, {}]>}) {
    return %arg0 : tensor<256x64xf32>
  }
}
