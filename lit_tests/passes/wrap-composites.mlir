// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(wrap-composites)' | FileCheck %s

// torch-mlir's attention (f32 casts, the scale split over Q and K^T, GQA's reshape ->
// broadcast -> reshape, the additive mask) becomes tt-xla's SDPA composite: bf16 Q, K and V
// with their own 2 KV heads, the mask, is_causal written and the scale multiplied out
// (0.594603539^2 = 1/sqrt(8)). The body is the flat group.
// CHECK-LABEL: func.func @main
// CHECK: stablehlo.composite "tenstorrent.scaled_dot_product_attention" %arg0, %arg1, %arg2, %arg3 {composite_attributes = {is_causal = false, scale = 0.353553355 : f32}, decomposition = @tenstorrent.scaled_dot_product_attention.impl} : (tensor<1x4x16x8xbf16>, tensor<1x2x16x8xbf16>, tensor<1x2x16x8xbf16>, tensor<1x1x16x16xbf16>) -> tensor<1x4x16x8xbf16>
// CHECK-NOT: stablehlo.exponential
// CHECK: func.func private @tenstorrent.scaled_dot_product_attention.impl
// CHECK: stablehlo.exponential
module {
  func.func @main(%q: tensor<1x4x16x8xbf16> {shard_opt.kind = "input"}, %k: tensor<1x2x16x8xbf16> {shard_opt.kind = "input"}, %v: tensor<1x2x16x8xbf16> {shard_opt.kind = "input"}, %mask: tensor<1x1x16x16xbf16> {shard_opt.kind = "input"}) -> tensor<1x4x16x8xbf16> {
    %cst = stablehlo.constant dense<0.594603539> : tensor<f32>
    %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %k1 = stablehlo.reshape %k : (tensor<1x2x16x8xbf16>) -> tensor<1x2x1x16x8xbf16>
    %k2 = stablehlo.broadcast_in_dim %k1, dims = [0, 1, 2, 3, 4] : (tensor<1x2x1x16x8xbf16>) -> tensor<1x2x2x16x8xbf16>
    %k3 = stablehlo.reshape %k2 : (tensor<1x2x2x16x8xbf16>) -> tensor<1x4x16x8xbf16>
    %v1 = stablehlo.reshape %v : (tensor<1x2x16x8xbf16>) -> tensor<1x2x1x16x8xbf16>
    %v2 = stablehlo.broadcast_in_dim %v1, dims = [0, 1, 2, 3, 4] : (tensor<1x2x1x16x8xbf16>) -> tensor<1x2x2x16x8xbf16>
    %v3 = stablehlo.reshape %v2 : (tensor<1x2x2x16x8xbf16>) -> tensor<1x4x16x8xbf16>
    %qf = stablehlo.convert %q : (tensor<1x4x16x8xbf16>) -> tensor<1x4x16x8xf32>
    %kf = stablehlo.convert %k3 : (tensor<1x4x16x8xbf16>) -> tensor<1x4x16x8xf32>
    %vf = stablehlo.convert %v3 : (tensor<1x4x16x8xbf16>) -> tensor<1x4x16x8xf32>
    %sq = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<1x4x16x8xf32>
    %qs = stablehlo.multiply %qf, %sq : tensor<1x4x16x8xf32>
    %kt = stablehlo.transpose %kf, dims = [0, 1, 3, 2] : (tensor<1x4x16x8xf32>) -> tensor<1x4x8x16xf32>
    %sk = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<1x4x8x16xf32>
    %ks = stablehlo.multiply %kt, %sk : tensor<1x4x8x16xf32>
    %s = stablehlo.dot_general %qs, %ks, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<1x4x16x8xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x16x16xf32>
    %mf = stablehlo.convert %mask : (tensor<1x1x16x16xbf16>) -> tensor<1x1x16x16xf32>
    %mb = stablehlo.broadcast_in_dim %mf, dims = [0, 1, 2, 3] : (tensor<1x1x16x16xf32>) -> tensor<1x4x16x16xf32>
    %x = stablehlo.add %s, %mb : tensor<1x4x16x16xf32>
    %mx = stablehlo.reduce(%x init: %ninf) applies stablehlo.maximum across dimensions = [3] : (tensor<1x4x16x16xf32>, tensor<f32>) -> tensor<1x4x16xf32>
    %mx1 = stablehlo.reshape %mx : (tensor<1x4x16xf32>) -> tensor<1x4x16x1xf32>
    %mx2 = stablehlo.broadcast_in_dim %mx1, dims = [0, 1, 2, 3] : (tensor<1x4x16x1xf32>) -> tensor<1x4x16x16xf32>
    %d = stablehlo.subtract %x, %mx2 : tensor<1x4x16x16xf32>
    %e = stablehlo.exponential %d : tensor<1x4x16x16xf32>
    %sm = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [3] : (tensor<1x4x16x16xf32>, tensor<f32>) -> tensor<1x4x16xf32>
    %sm1 = stablehlo.reshape %sm : (tensor<1x4x16xf32>) -> tensor<1x4x16x1xf32>
    %sm2 = stablehlo.broadcast_in_dim %sm1, dims = [0, 1, 2, 3] : (tensor<1x4x16x1xf32>) -> tensor<1x4x16x16xf32>
    %p = stablehlo.divide %e, %sm2 : tensor<1x4x16x16xf32>
    %o = stablehlo.dot_general %p, %vf, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<1x4x16x16xf32>, tensor<1x4x16x8xf32>) -> tensor<1x4x16x8xf32>
    %ob = stablehlo.convert %o : (tensor<1x4x16x8xf32>) -> tensor<1x4x16x8xbf16>
    return %ob : tensor<1x4x16x8xbf16>
  }
}

// -----

// The same attention in f32: tt-xla's composite takes bf16 Q/K/V only, so it stays flat.
// CHECK-LABEL: func.func @main
// CHECK-NOT: stablehlo.composite
// CHECK: stablehlo.exponential
module {
  func.func @main(%q: tensor<1x4x16x8xf32> {shard_opt.kind = "input"}, %k: tensor<1x2x16x8xf32> {shard_opt.kind = "input"}, %v: tensor<1x2x16x8xf32> {shard_opt.kind = "input"}, %mask: tensor<1x1x16x16xf32> {shard_opt.kind = "input"}) -> tensor<1x4x16x8xf32> {
    %cst = stablehlo.constant dense<0.594603539> : tensor<f32>
    %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %k1 = stablehlo.reshape %k : (tensor<1x2x16x8xf32>) -> tensor<1x2x1x16x8xf32>
    %k2 = stablehlo.broadcast_in_dim %k1, dims = [0, 1, 2, 3, 4] : (tensor<1x2x1x16x8xf32>) -> tensor<1x2x2x16x8xf32>
    %k3 = stablehlo.reshape %k2 : (tensor<1x2x2x16x8xf32>) -> tensor<1x4x16x8xf32>
    %v1 = stablehlo.reshape %v : (tensor<1x2x16x8xf32>) -> tensor<1x2x1x16x8xf32>
    %v2 = stablehlo.broadcast_in_dim %v1, dims = [0, 1, 2, 3, 4] : (tensor<1x2x1x16x8xf32>) -> tensor<1x2x2x16x8xf32>
    %v3 = stablehlo.reshape %v2 : (tensor<1x2x2x16x8xf32>) -> tensor<1x4x16x8xf32>
    %sq = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<1x4x16x8xf32>
    %qs = stablehlo.multiply %q, %sq : tensor<1x4x16x8xf32>
    %kt = stablehlo.transpose %k3, dims = [0, 1, 3, 2] : (tensor<1x4x16x8xf32>) -> tensor<1x4x8x16xf32>
    %sk = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<1x4x8x16xf32>
    %ks = stablehlo.multiply %kt, %sk : tensor<1x4x8x16xf32>
    %s = stablehlo.dot_general %qs, %ks, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<1x4x16x8xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x16x16xf32>
    %mb = stablehlo.broadcast_in_dim %mask, dims = [0, 1, 2, 3] : (tensor<1x1x16x16xf32>) -> tensor<1x4x16x16xf32>
    %x = stablehlo.add %s, %mb : tensor<1x4x16x16xf32>
    %mx = stablehlo.reduce(%x init: %ninf) applies stablehlo.maximum across dimensions = [3] : (tensor<1x4x16x16xf32>, tensor<f32>) -> tensor<1x4x16xf32>
    %mx1 = stablehlo.reshape %mx : (tensor<1x4x16xf32>) -> tensor<1x4x16x1xf32>
    %mx2 = stablehlo.broadcast_in_dim %mx1, dims = [0, 1, 2, 3] : (tensor<1x4x16x1xf32>) -> tensor<1x4x16x16xf32>
    %d = stablehlo.subtract %x, %mx2 : tensor<1x4x16x16xf32>
    %e = stablehlo.exponential %d : tensor<1x4x16x16xf32>
    %sm = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [3] : (tensor<1x4x16x16xf32>, tensor<f32>) -> tensor<1x4x16xf32>
    %sm1 = stablehlo.reshape %sm : (tensor<1x4x16xf32>) -> tensor<1x4x16x1xf32>
    %sm2 = stablehlo.broadcast_in_dim %sm1, dims = [0, 1, 2, 3] : (tensor<1x4x16x1xf32>) -> tensor<1x4x16x16xf32>
    %p = stablehlo.divide %e, %sm2 : tensor<1x4x16x16xf32>
    %o = stablehlo.dot_general %p, %v3, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<1x4x16x16xf32>, tensor<1x4x16x8xf32>) -> tensor<1x4x16x8xf32>
    return %o : tensor<1x4x16x8xf32>
  }
}
