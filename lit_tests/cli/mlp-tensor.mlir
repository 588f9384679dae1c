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
// inputs); fc1's bias follows fc1's outputs; the input is replicated. How fc2's partial
// sums are closed is not pinned here: one all_reduce (Megatron) and a reduce_scatter, fc2's
// bias added on an eighth, then an all_gather are a tie within the layout-op estimate
// (costmodel/ttnn_ops.py; 166.5 against 167.6 us today, swapped with its refits). What is
// pinned is the property: the plan is no slower than Megatron (the summary line: its speed-up over
// Megatron is at least 1.00x), and fc2's bias is either split on "model" or whole.
// CHECK: sdy.mesh @mesh = <["batch"=1, "model"=8]>
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<4096x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>, shard_opt.kind = "param", shard_opt.name = "fc1.weight"}
// CHECK-SAME: %arg1: tensor<4096xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}]>, shard_opt.kind = "param", shard_opt.name = "fc1.bias"}
// CHECK-SAME: %arg2: tensor<1024x4096xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>, shard_opt.kind = "param", shard_opt.name = "fc2.weight"}
// CHECK-SAME: %arg3: tensor<1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{{.("model")?.}}]>, shard_opt.kind = "param", shard_opt.name = "fc2.bias"}
// CHECK-SAME: %arg4: tensor<4x32x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>, shard_opt.kind = "input", shard_opt.name = "x"}
// The result is returned whole (the boundary rule): closed replicated.
// CHECK-SAME: -> (tensor<4x32x1024xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}]>})
// The annotated module is the input plus shardings: no collectives yet (--evaluate adds them).
// CHECK-NOT: sdy.all_reduce
// CHECK: return

// SUMMARY: shard-opt: mlp on 1x8 (wh-loudbox): tensor parallel on model;
// SUMMARY-SAME: speed-up vs replicated {{[0-9.]+}}x, megatron {{[1-9][0-9]*\.[0-9]+}}x
// SUMMARY-NOT: error
