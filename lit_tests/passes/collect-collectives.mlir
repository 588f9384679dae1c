// RUN: shard-opt %s --pass-pipeline='builtin.module(add-mesh{shape=2x4}, apply-shardings{shardings=0:model/-,1:-/model}, shardy-propagate, collect-collectives)' | FileCheck %s

// The accounting is observable: each collective carries its per-device input bytes
// (128 x 64 f32 = 32768) and group size (the 4 devices of "model"); the module its
// totals.
// CHECK: module attributes {shard_opt.ccl_bytes = 32768 : i64, shard_opt.ccl_count = 1 : i64}
// CHECK-LABEL: func.func @main
// CHECK: sdy.all_reduce {"model"}
// CHECK-SAME: {shard_opt.bytes_per_device = 32768 : i64, shard_opt.group_size = 4 : i64} : tensor<128x64xf32>
func.func @main(%arg0: tensor<256x64xf32>, %arg1: tensor<64x256xf32>, %arg2: tensor<128x64xf32>) -> tensor<128x64xf32> {
  %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
  %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
  return %1 : tensor<128x64xf32>
}
