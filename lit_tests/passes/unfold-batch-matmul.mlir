// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(unfold-batch-matmul)' | FileCheck %s

// Attention scores as torch-mlir lowers a 4-D matmul: [batch, heads] folded into one
// dim around a 3-D batched dot_general. Unfolded: one dot_general batched on both dims,
// the contracting dims shifted by one, the reshapes gone.
// CHECK-LABEL: func.func @scores
// CHECK-NOT: stablehlo.reshape
// CHECK: %[[S:.*]] = stablehlo.dot_general %arg0, %arg1, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<4x8x1x16xf32>, tensor<4x8x16x65xf32>) -> tensor<4x8x1x65xf32>
// CHECK-NEXT: return %[[S]]
func.func @scores(%q: tensor<4x8x1x16xf32>, %k: tensor<4x8x16x65xf32>) -> tensor<4x8x1x65xf32> {
  %q3 = stablehlo.reshape %q : (tensor<4x8x1x16xf32>) -> tensor<32x1x16xf32>
  %k3 = stablehlo.reshape %k : (tensor<4x8x16x65xf32>) -> tensor<32x16x65xf32>
  %k3b = stablehlo.broadcast_in_dim %k3, dims = [0, 1, 2] : (tensor<32x16x65xf32>) -> tensor<32x16x65xf32>
  %s3 = stablehlo.dot_general %q3, %k3b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<32x1x16xf32>, tensor<32x16x65xf32>) -> tensor<32x1x65xf32>
  %s = stablehlo.reshape %s3 : (tensor<32x1x65xf32>) -> tensor<4x8x1x65xf32>
  return %s : tensor<4x8x1x65xf32>
}

// -----

// The folded result is used as it is too: the matmul stays as written.
// CHECK-LABEL: func.func @kept
// CHECK: stablehlo.dot_general %{{.*}}, %{{.*}}, batching_dims = [0] x [0], contracting_dims = [2] x [1]
func.func @kept(%q: tensor<4x8x1x16xf32>, %k: tensor<4x8x16x65xf32>) -> (tensor<4x8x1x65xf32>, tensor<32x1x65xf32>) {
  %q3 = stablehlo.reshape %q : (tensor<4x8x1x16xf32>) -> tensor<32x1x16xf32>
  %k3 = stablehlo.reshape %k : (tensor<4x8x16x65xf32>) -> tensor<32x16x65xf32>
  %s3 = stablehlo.dot_general %q3, %k3, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<32x1x16xf32>, tensor<32x16x65xf32>) -> tensor<32x1x65xf32>
  %s = stablehlo.reshape %s3 : (tensor<32x1x65xf32>) -> tensor<4x8x1x65xf32>
  return %s, %s3 : tensor<4x8x1x65xf32>, tensor<32x1x65xf32>
}

// -----

// A reshape that folds other dims than the ones the result unfolds into (heads x
// batch, not batch x heads) is not the same program: left alone.
// CHECK-LABEL: func.func @other_fold
// CHECK: batching_dims = [0] x [0]
func.func @other_fold(%q: tensor<8x4x1x16xf32>, %k: tensor<4x8x16x65xf32>) -> tensor<4x8x1x65xf32> {
  %q3 = stablehlo.reshape %q : (tensor<8x4x1x16xf32>) -> tensor<32x1x16xf32>
  %k3 = stablehlo.reshape %k : (tensor<4x8x16x65xf32>) -> tensor<32x16x65xf32>
  %s3 = stablehlo.dot_general %q3, %k3, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<32x1x16xf32>, tensor<32x16x65xf32>) -> tensor<32x1x65xf32>
  %s = stablehlo.reshape %s3 : (tensor<32x1x65xf32>) -> tensor<4x8x1x65xf32>
  return %s : tensor<4x8x1x65xf32>
}
