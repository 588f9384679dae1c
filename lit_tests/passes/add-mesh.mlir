// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(add-mesh{shape=2x4})' | FileCheck %s

// A module with no mesh gets one, named @mesh, with tt-xla's axis names.
// CHECK: sdy.mesh @mesh = <["batch"=2, "model"=4]>
// CHECK-LABEL: func.func @main
func.func @main(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  return %arg0 : tensor<8x16xf32>
}

// -----

// An existing mesh of the same name is replaced, not duplicated.
// CHECK: sdy.mesh @mesh = <["batch"=2, "model"=4]>
// CHECK-NOT: sdy.mesh
// CHECK-LABEL: func.func @main
module {
  sdy.mesh @mesh = <["batch"=1, "model"=8]>
  func.func @main(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
    return %arg0 : tensor<8x16xf32>
  }
}
