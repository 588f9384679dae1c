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
// inputs); fc1's bias follows fc1's outputs; the input is replicated; fc2's partial sums
// are reduce-scattered over fc2's output features (a constraint after fc2's reshape), fc2's
// bias added on its eighth, then gathered again (166.5 us against the plain all_reduce's
// 167.6 us; what tt-mlir emits is checked at 197.6 us against 203.9). The two are a tie
// within the layout-op estimate (costmodel/ttnn_ops.py) and have swapped with its refits:
// this test pins today's.
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
// CHECK: sdy.sharding_constraint %{{.*}} <@mesh, [{}, {}, {"model"}]> : tensor<4x32x1024xf32>
// CHECK-NOT: sdy.all_reduce

// SUMMARY: shard-opt: mlp on 1x8 (wh-loudbox): tensor parallel on model;
// SUMMARY-SAME: CCLs: all_gather x1, reduce_scatter x1; speed-up vs replicated
// SUMMARY-NOT: error
