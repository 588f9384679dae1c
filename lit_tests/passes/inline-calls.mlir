// RUN: shard-opt %s --pass-pipeline='builtin.module(inline-calls)' | FileCheck %s

// Each call site gets its own copy of the callee (a JAX helper such as @silu), nested
// calls included; functions nothing calls any more are dropped.
// CHECK-LABEL: func.func @main
// CHECK-NOT: call
// CHECK: %[[A:.*]] = stablehlo.logistic %arg0
// CHECK: %[[B:.*]] = stablehlo.multiply %arg0, %[[A]]
// CHECK: %[[C:.*]] = stablehlo.logistic %[[B]]
// CHECK: %[[D:.*]] = stablehlo.multiply %[[B]], %[[C]]
// CHECK: %[[E:.*]] = stablehlo.add %[[D]], %[[D]]
// CHECK: return %[[E]]
// CHECK-NOT: func.func private
module {
  func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = call @silu(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
    %1 = call @twice(%0) : (tensor<8xf32>) -> tensor<8xf32>
    return %1 : tensor<8xf32>
  }
  func.func private @silu(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = stablehlo.logistic %arg0 : tensor<8xf32>
    %1 = stablehlo.multiply %arg0, %0 : tensor<8xf32>
    return %1 : tensor<8xf32>
  }
  func.func private @twice(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = call @silu(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
    %1 = stablehlo.add %0, %0 : tensor<8xf32>
    return %1 : tensor<8xf32>
  }
}
