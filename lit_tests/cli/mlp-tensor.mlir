// The main job on the bundled MLP (fc1 Linear(1024, 4096) -> relu -> fc2 Linear(4096, 1024)),
// weights only (--parallelism tensor). The annotated module is printed on stdout.
//
// RUN: shard-opt %S/../../examples/mlp.mlir --mesh 1x8 --parallelism tensor --quiet | FileCheck %s
// The *-opt habits give the same plan: single-dash flags with '=', the module on stdin.
// RUN: shard-opt - -mesh=1x8 -parallelism=tensor -quiet < %S/../../examples/mlp.mlir | FileCheck %s
// The summary goes to stderr, the module to -o.
// RUN: shard-opt %S/../../examples/mlp.mlir --mesh 1x8 --parallelism tensor -o %t.mlir 2>&1 | FileCheck %s --check-prefix=SUMMARY
// RUN: FileCheck %s --input-file=%t.mlir

// 1x8: Megatron column -> row on "model" (fc1 split along its outputs, fc2 along its
// inputs); fc1's bias follows fc1's outputs; the input is replicated. A constraint on
// the reshape after fc2 splits its output features, so fc2's partial sums are
// reduce-scattered, the bias add runs on 1/8 of the output and one all_gather returns
// it whole: Korthikanti et al.'s all_reduce = reduce_scatter + all_gather, found by the
// search (119.4 us vs 125.7 us with the plain all_reduce). fc2's bias is left open and
// Shardy gives it its consumer's split.
// CHECK: sdy.mesh @mesh = <["batch"=1, "model"=8]>
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<4096x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>, shard_opt.kind = "param", shard_opt.name = "fc1.weight"}
// CHECK-SAME: %arg1: tensor<4096xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}]>, shard_opt.kind = "param", shard_opt.name = "fc1.bias"}
// CHECK-SAME: %arg2: tensor<1024x4096xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>, shard_opt.kind = "param", shard_opt.name = "fc2.weight"}
// CHECK-SAME: %arg3: tensor<1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}]>, shard_opt.kind = "param", shard_opt.name = "fc2.bias"}
// CHECK-SAME: %arg4: tensor<4x32x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>, shard_opt.kind = "input", shard_opt.name = "x"}
// The result is returned whole (the boundary rule): closed replicated.
// CHECK-SAME: -> (tensor<4x32x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>})
// The annotated module is the input plus shardings: no collectives yet (--evaluate adds them).
// CHECK-NOT: sdy.all_reduce
// CHECK: %[[OUT:.*]] = stablehlo.reshape %{{.*}} : (tensor<128x1024xf32>) -> tensor<4x32x1024xf32>
// CHECK-NEXT: sdy.sharding_constraint %[[OUT]] <@mesh, [{}, {}, {"model"}]>

// SUMMARY: shard-opt: mlp on 1x8 (wh-loudbox): tensor parallel on model;
// SUMMARY-SAME: CCLs: all_gather x1, reduce_scatter x1; speed-up vs replicated
// SUMMARY-NOT: error
