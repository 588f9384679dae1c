// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(insert-guards)' | FileCheck %s
// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(insert-guards{allow=fused-split})' | FileCheck %s --check-prefix=ALLOWED
// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(insert-guards{opaque-ops=false})' | FileCheck %s --check-prefix=NOOPAQUE

// A slice of a packed q|k|v value (rule fused-split): the sliced dim is kept whole and the
// others left open, so Shardy gathers the dim before the slice instead of leaving the
// data movement implicit. Without the model's arguments (a bare module) each slice gets
// its own guard (with them, the guards of one module output are one constraint on it).
// With the rule turned off (--allow fused-split) no guard.
// CHECK-LABEL: func.func @packed_slice
// CHECK: %[[G:.*]] = sdy.sharding_constraint %arg0 <@mesh_batch_2_model_4, [{?}, {}]> : tensor<8x48xf32>
// CHECK-NEXT: stablehlo.slice %[[G]] [0:8, 0:16]
// CHECK-NEXT: %[[H:.*]] = sdy.sharding_constraint %arg0 <@mesh_batch_2_model_4, [{?}, {}]> : tensor<8x48xf32>
// CHECK-NEXT: stablehlo.slice %[[H]] [0:8, 16:32]
// ALLOWED-LABEL: func.func @packed_slice
// ALLOWED-NOT: sdy.sharding_constraint
module {
  sdy.mesh @mesh_batch_2_model_4 = <["batch"=2, "model"=4]>
  func.func @packed_slice(%arg0: tensor<8x48xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{}, {"model"}]>}) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
    %0 = stablehlo.slice %arg0 [0:8, 0:16] : (tensor<8x48xf32>) -> tensor<8x16xf32>
    %1 = stablehlo.slice %arg0 [0:8, 16:32] : (tensor<8x48xf32>) -> tensor<8x16xf32>
    return %0, %1 : tensor<8x16xf32>, tensor<8x16xf32>
  }
}

// -----

// An op Shardy has no sharding rule for (a custom call): each tensor operand constrained
// replicated, so the gather it needs is explicit and priced; opaque-ops=false leaves it.
// CHECK-LABEL: func.func @opaque
// CHECK: %[[R:.*]] = sdy.sharding_constraint %arg0 <@mesh_batch_2_model_4, [{}, {}]> : tensor<8x32xf32>
// CHECK-NEXT: stablehlo.custom_call @my_kernel(%[[R]])
// NOOPAQUE-LABEL: func.func @opaque
// NOOPAQUE-NOT: sdy.sharding_constraint
// (--allow fused-split leaves this guard: it is no rule's)
// ALLOWED-LABEL: func.func @opaque
// ALLOWED: sdy.sharding_constraint %arg0 <@mesh_batch_2_model_4, [{}, {}]>
module {
  sdy.mesh @mesh_batch_2_model_4 = <["batch"=2, "model"=4]>
  func.func @opaque(%arg0: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh_batch_2_model_4, [{}, {"model"}]>}) -> tensor<8x32xf32> {
    %0 = stablehlo.custom_call @my_kernel(%arg0) : (tensor<8x32xf32>) -> tensor<8x32xf32>
    return %0 : tensor<8x32xf32>
  }
}
