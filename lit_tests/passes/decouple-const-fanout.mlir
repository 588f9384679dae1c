// RUN: shard-opt %s --pass-pipeline='builtin.module(decouple-const-fanout)' | FileCheck %s

// A broadcast fed directly by a constant, with two uses, is cloned for the second use; a
// broadcast fed through a reshape (torch-mlir's softmax scale) is left shared, as tt-mlir's
// DecoupleConstFanoutPass leaves it.
sdy.mesh @mesh = <["batch"=2, "model"=4]>
// CHECK-LABEL: func.func @main
// CHECK: %[[C:.*]] = stablehlo.constant dense<2.000000e+00>
// CHECK: stablehlo.broadcast_in_dim %[[C]], dims = []
// CHECK-NEXT: stablehlo.broadcast_in_dim %[[C]], dims = []
// CHECK-NEXT: stablehlo.multiply
// CHECK-NEXT: stablehlo.multiply
// CHECK-NEXT: %[[R:.*]] = stablehlo.reshape
// CHECK-NEXT: stablehlo.broadcast_in_dim %[[R]], dims = []
// CHECK-NEXT: stablehlo.multiply
// CHECK-NEXT: stablehlo.multiply
// CHECK-NEXT: return
func.func @main(%a: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %b: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) {
  %c = stablehlo.constant dense<2.0> : tensor<f32>
  %s = stablehlo.constant dense<0.5> : tensor<1xf32>
  %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<8x16xf32>
  %1 = stablehlo.multiply %a, %0 : tensor<8x16xf32>
  %2 = stablehlo.multiply %b, %0 : tensor<8x16xf32>
  %r = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<f32>
  %3 = stablehlo.broadcast_in_dim %r, dims = [] : (tensor<f32>) -> tensor<8x16xf32>
  %4 = stablehlo.multiply %a, %3 : tensor<8x16xf32>
  %5 = stablehlo.multiply %b, %3 : tensor<8x16xf32>
  return %1, %2, %4, %5 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}
