// Bad input ends in exit status 1 and one line on stderr saying what, where and what to
// do: no traceback, nothing on stdout, no output file written. `not` checks the status.
//
// RUN: not shard-opt %s --mesh 3x3 2>&1 | FileCheck %s --check-prefix=MESH
// MESH: shard-opt: error: mesh 3x3 is not one tt-mlir accepts (tt-mlir issue 4668, 'Mesh is not valid'); choose one of: 1x1 1x2 1x4 1x8{{.*$}}
// MESH-NOT: {{.}}
//
// RUN: not shard-opt %s 2>&1 | FileCheck %s --check-prefix=NOMESH
// NOMESH: shard-opt: error: no target mesh: pass --mesh RxC (e.g. --mesh 2x4) or --devices N{{$}}
// NOMESH-NOT: {{.}}
//
// RUN: not shard-opt %S/no-such-file.mlir --mesh 2x4 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: shard-opt: error:
// MISSING-SAME: no-such-file.mlir{{.*$}}
// MISSING-NOT: {{.}}
//
// RUN: not shard-opt %s --mesh 2x4 --parallelism pipeline 2>&1 | FileCheck %s --check-prefix=PAR
// PAR: shard-opt: error: --parallelism 'pipeline': use a comma list of{{.*$}}
// PAR-NOT: {{.}}
//
// --emit-torch rewrites a PyTorch load script; a .mlir input has none.
// RUN: rm -f %t.py
// RUN: not shard-opt %s --mesh 2x4 --emit-torch %t.py 2>&1 | FileCheck %s --check-prefix=TORCH
// RUN: not test -e %t.py
// TORCH: shard-opt: error: --emit-torch needs a PyTorch load script input; errors is a mlir input (for .mlir the annotated module is the deliverable: use -o){{$}}
// TORCH-NOT: {{.}}
//
// An output path in a missing directory is refused before any work.
// RUN: not shard-opt %s --mesh 2x4 -o %t.missing-dir/out.mlir 2>&1 | FileCheck %s --check-prefix=OUTDIR
// OUTDIR: shard-opt: error: cannot write {{.*}}missing-dir/out.mlir: directory {{.*}} does not exist{{.*$}}
// OUTDIR-NOT: {{.}}
//
// --evaluate needs a mesh: from the module or from --mesh.
// RUN: not shard-opt %s --evaluate 2>&1 | FileCheck %s --check-prefix=EVAL
// EVAL: shard-opt: error: errors: --evaluate needs a mesh: the module has no sdy.mesh; pass --mesh RxC{{$}}
// EVAL-NOT: {{.}}

func.func @main(%arg0: tensor<256x64xf32>, %arg1: tensor<64x256xf32>, %arg2: tensor<128x64xf32>) -> tensor<128x64xf32> {
  %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
  %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
  return %1 : tensor<128x64xf32>
}
