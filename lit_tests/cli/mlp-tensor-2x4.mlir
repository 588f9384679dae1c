// The bundled MLP on a 2x4 LoudBox mesh, weights only: the 4096 hidden dim is split on
// "model" as on 1x8, and fc2 is also split along its 1024 outputs on "batch"; a
// constraint on the reshape after fc2 splits its 4 sequences on "model", so fc2's
// partial sums are reduce-scattered instead of all-reduced, and two all_gathers
// return the output whole.
//
// RUN: shard-opt %S/../../examples/mlp.mlir --mesh 2x4 --parallelism tensor --plan-json %t.json -o %t.mlir 2>&1 | FileCheck %s --check-prefix=SUMMARY
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: FileCheck %s --input-file=%t.json --check-prefix=PLAN

// CHECK: sdy.mesh @mesh = <["batch"=2, "model"=4]>
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<4096x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>
// CHECK-SAME: %arg1: tensor<4096xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}]>
// CHECK-SAME: %arg2: tensor<1024x4096xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"batch"}, {"model"}]>
// CHECK-SAME: %arg4: tensor<4x32x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>
// CHECK: sdy.sharding_constraint %{{.*}} <@mesh, [{"model"}, {}, {}]> : tensor<4x32x1024xf32>

// SUMMARY: shard-opt: mlp on 2x4 (wh-loudbox): tensor parallel on batch+model;
// SUMMARY-SAME: CCLs: all_gather x2, reduce_scatter x1

// The plan JSON carries the same shardings and the collectives Shardy inserted.
// PLAN: "mesh": {
// PLAN-NEXT: "shape": [
// PLAN-NEXT: 2,
// PLAN-NEXT: 4
// PLAN: "name": "fc2.weight",
// PLAN: "collectives": [
// PLAN: "kind": "reduce_scatter",
// PLAN: "kind": "all_gather",
// PLAN: "kind": "all_gather",
// PLAN: "ccl_count": 3,
// PLAN: "constraints": [
// PLAN-NEXT: {
// PLAN-NEXT: "site": "128x1024xf32->4x32x1024xf32",
