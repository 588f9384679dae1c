// RUN: shard-opt %s --pass-pipeline='builtin.module(apply-constraints{constraints=1x8x64xf32->1x8x4x16xf32=-/-/model/-})' | FileCheck %s
// RUN: shard-opt %s --pass-pipeline='builtin.module(apply-constraints{constraints=1x8x64xf32->1x8x4x16xf32=-/-/model/-}, shardy-propagate)' | FileCheck %s --check-prefix=PROP

// The head-split reshape (a constraint site: it splits 64 features into 4 heads of 16)
// gets a constraint; every later use reads the constrained value. The reshape that only
// adds a unit dim is not a site.
// CHECK-LABEL: func.func @main
// CHECK: %[[R:.*]] = stablehlo.reshape %arg0 : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
// CHECK-NEXT: %[[C:.*]] = sdy.sharding_constraint %[[R]] <@mesh, [{}, {}, {"model"}, {}]> : tensor<1x8x4x16xf32>
// CHECK-NEXT: stablehlo.transpose %[[C]]
// CHECK: stablehlo.reshape %{{.*}} : (tensor<1x4x8x16xf32>) -> tensor<1x1x4x8x16xf32>
// CHECK-NOT: sdy.sharding_constraint

// Shardy propagates from the constraint as from an argument: back into the open input
// (its features split, whole heads per device) and on through the transpose.
// PROP: func.func @main(%arg0: tensor<1x8x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {"model"}]>})
// PROP: stablehlo.transpose {{.*}}{sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{}, {"model"}, {}, {}]>]>}
// PROP-NOT: sdy.all_
module {
  sdy.mesh @mesh = <["model"=4]>
  func.func @main(%arg0: tensor<1x8x64xf32>) -> tensor<1x1x4x8x16xf32> {
    %0 = stablehlo.reshape %arg0 : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
    %1 = stablehlo.transpose %0, dims = [0, 2, 1, 3] : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
    %2 = stablehlo.reshape %1 : (tensor<1x4x8x16xf32>) -> tensor<1x1x4x8x16xf32>
    return %2 : tensor<1x1x4x8x16xf32>
  }
}
