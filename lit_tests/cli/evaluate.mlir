// --evaluate: no search; the shardings already on the module are propagated by Shardy and
// the collectives it inserts are printed as explicit ops, each stamped with its
// per-device bytes and group size; the module carries the totals.
//
// RUN: shard-opt %s --evaluate --plan-json %t.json -o %t.mlir 2>&1 | FileCheck %s --check-prefix=SUMMARY
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: FileCheck %s --input-file=%t.json --check-prefix=PLAN
// The mesh may also come from the command line when it matches the module's.
// RUN: shard-opt %s --evaluate --mesh 2x4 --quiet | FileCheck %s

// Megatron column -> row on "model" with the tokens split on "batch": the partial sums
// of the second matmul are all_reduced over "model" (128/2 x 64 f32 = 16384 B per
// device), then the output, returned whole, is all_gathered over "batch".
// CHECK: module attributes {shard_opt.ccl_bytes = 32768 : i64, shard_opt.ccl_count = 2 : i64}
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>})
// CHECK: stablehlo.dot_general
// CHECK-SAME: {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"batch"}, {"model"}]>]>}
// CHECK: %[[SUM:.*]] = stablehlo.dot_general
// CHECK-NEXT: %[[REDUCED:.*]] = sdy.all_reduce {"model"} %[[SUM]] out_sharding=<@mesh, [{"batch"}, {}]>
// CHECK-SAME: {shard_opt.bytes_per_device = 16384 : i64, shard_opt.group_size = 4 : i64} : tensor<128x64xf32>
// CHECK-NEXT: %[[WHOLE:.*]] = sdy.all_gather [{"batch"}, {}] %[[REDUCED]] out_sharding=<@mesh, [{}, {}]>
// CHECK-SAME: {shard_opt.bytes_per_device = 16384 : i64, shard_opt.group_size = 2 : i64} : tensor<128x64xf32>
// CHECK-NEXT: return %[[WHOLE]]
// CHECK-NOT: sdy.all_

// SUMMARY: shard-opt: evaluate on 2x4 (wh-loudbox):
// SUMMARY-SAME: CCLs: all_gather x1, all_reduce x1

// PLAN: "collectives": [
// PLAN: "kind": "all_reduce",
// PLAN-NEXT: "axes": [
// PLAN-NEXT: "model"
// PLAN: "bytes_per_device": 16384,
// PLAN: "kind": "all_gather",
// PLAN-NEXT: "axes": [
// PLAN-NEXT: "batch"
// PLAN: "ccl_count": 2,
// PLAN-NEXT: "ccl_bytes": 32768,
// PLAN: "candidates_evaluated": 1,

module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @main(%arg0: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"batch"}, {}]>}) -> tensor<128x64xf32> {
    %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
    return %1 : tensor<128x64xf32>
  }
}
