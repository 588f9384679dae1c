// The tt-mlir check: the plan is compiled by tt-mlir itself (jax-tt-plugin, compile-only,
// a child process) and its TTIR / TTNN collectives are matched with the priced ones.
// The suite turns the check off by default (SHARD_OPT_CHECK=0); --check turns it on.
// On 1x8 fc2's partial sums are closed by one all_reduce or by a reduce_scatter and an
// all_gather: a tie within the layout-op estimate (lit_tests/cli/mlp-tensor.mlir), either passes.
//
// RUN: shard-opt %S/../../examples/mlp.mlir --mesh 1x8 --check -o /dev/null 2>&1 | FileCheck %s
// CHECK: shard-opt: tt-mlir: compiling 3 finalists and megatron
// CHECK: shard-opt: tt-mlir: plan compiled ({{[0-9.]+}} s, the check {{[0-9.]+}} s), matches the priced collectives; TTNN per step: {{(all_gather x1, reduce_scatter x1|all_reduce x1)}}, {{[0-9]+}} device ops (0 at load); checked {{[0-9.]+}} us
//
// --no-check: nothing is compiled.
// RUN: shard-opt %S/../../examples/mlp.mlir --mesh 1x8 --check --no-check -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOCHECK
// NOCHECK-NOT: tt-mlir
