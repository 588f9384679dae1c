// RUN: shard-opt %s --evaluate --mesh 2x4 | FileCheck %s

// shard-opt lit test: the plan for mlp_megatron on a 2x4 mesh (batch, model).
// shard-opt lit test: 2 collectives, 512 bytes per device, modeled 30.508 us; regenerate with --emit-lit-test when the plan changes.

// CHECK: module attributes
// CHECK-SAME: shard_opt.ccl_bytes = 512 : i64
// CHECK-SAME: shard_opt.ccl_count = 2 : i64
// CHECK-LABEL: func.func @main
// CHECK: sdy.all_reduce {
// CHECK-SAME: "model"
// CHECK-SAME: } %
// CHECK-SAME: shard_opt.bytes_per_device = 256 : i64
// CHECK-SAME: : tensor<8x16xf32>
// CHECK: sdy.all_gather [
// CHECK-SAME: "batch"
// CHECK-SAME: ] %
// CHECK-SAME: shard_opt.bytes_per_device = 256 : i64
// CHECK-SAME: : tensor<8x16xf32>
// CHECK-NOT: {{sdy\.(all_reduce|all_gather|all_slice|reduce_scatter|all_to_all|collective_permute)}}

module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"batch"}, {}]>}, %arg1: tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg2: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) -> (tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [1] : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
    %1 = stablehlo.dot_general %0, %arg2, contracting_dims = [1] x [1] : (tensor<8x32xf32>, tensor<16x32xf32>) -> tensor<8x16xf32>
    return %1 : tensor<8x16xf32>
  }
}
