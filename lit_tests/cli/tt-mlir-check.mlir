// The tt-mlir check: the plan is compiled by tt-mlir itself (jax-tt-plugin, compile-only,
// a child process), its TTIR / TTNN collectives are matched with the priced ones, and the
// program tt-mlir partitioned runs on 8 XLA CPU devices against the unsharded module.
// The suite turns the check off by default (SHARD_OPT_CHECK=0); --check turns it on.
// On 1x8 fc2's partial sums are closed by one all_reduce or by a reduce_scatter and an
// all_gather: a tie within the layout-op estimate (lit_tests/cli/mlp-tensor.mlir), either passes.
//
// RUN: shard-opt %S/../../examples/mlp.mlir --mesh 1x8 --check -o %t.mlir 2>&1 | FileCheck %s
// CHECK: shard-opt: tt-mlir: compiling 3 finalists and megatron
// CHECK: shard-opt: plan: tt-mlir verdict: compiled; numerics passed (tt-mlir's partitioned program computes the unsharded model's answer)
// CHECK: shard-opt: plan: tt-mlir ({{.*}}) matches the priced collectives; TTNN per step: {{(all_gather x1, reduce_scatter x1|all_reduce x1)}}, {{[0-9]+}} device ops (0 at load); checked {{[0-9.]+}} us
// CHECK: shard-opt: mlp on 1x8 {{.*}}; tt-mlir verdict: compiled; numerics passed (tt-mlir's partitioned program computes the unsharded model's answer)
//
// The -o module opens with the same verdict.
// RUN: FileCheck %s --check-prefix=MODULE < %t.mlir
// MODULE: // shard-opt: tt-mlir verdict: compiled; numerics passed (tt-mlir's partitioned program computes the unsharded model's answer)
// MODULE-NEXT: module {
//
// --no-check: nothing is compiled, and no verdict is written.
// RUN: shard-opt %S/../../examples/mlp.mlir --mesh 1x8 --check --no-check -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOCHECK
// NOCHECK-NOT: tt-mlir
