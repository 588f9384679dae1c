// RUN: shard-opt %s --split-input-file --pass-pipeline='builtin.module(mark-fusions)' | FileCheck %s

// Attention as torch-mlir lowers it (scale, scores, stable softmax, probabilities x
// values) is one group: tt-mlir runs it as ttnn.scaled_dot_product_attention, whose
// scores never reach DRAM. The Q scale and the K transpose join it; Q, K, V do not.
// CHECK-LABEL: func.func @attention
// CHECK: stablehlo.constant dense<2.500000e-01> : tensor<2x8x16xf32>
// CHECK: stablehlo.transpose %arg1{{.*}}shard_opt.fused = "sdpa:0"
// CHECK: stablehlo.multiply %arg0, %{{.*}}shard_opt.fused = "sdpa:0"
// CHECK: stablehlo.dot_general{{.*}}shard_opt.fused = "sdpa:0"
// CHECK-COUNT-7: shard_opt.fused = "sdpa:0"
// CHECK: stablehlo.dot_general %{{.*}}, %arg2{{.*}}shard_opt.fused = "sdpa:0"
// CHECK-NEXT: return
module {
  func.func @attention(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    %cst = stablehlo.constant dense<2.500000e-01> : tensor<2x8x16xf32>
    %neg = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %kt = stablehlo.transpose %k, dims = [0, 2, 1] : (tensor<2x8x16xf32>) -> tensor<2x16x8xf32>
    %qs = stablehlo.multiply %q, %cst : tensor<2x8x16xf32>
    %s = stablehlo.dot_general %qs, %kt, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x8x16xf32>, tensor<2x16x8xf32>) -> tensor<2x8x8xf32>
    %m = stablehlo.reduce(%s init: %neg) applies stablehlo.maximum across dimensions = [2] : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %mb = stablehlo.broadcast_in_dim %m, dims = [0, 1] : (tensor<2x8xf32>) -> tensor<2x8x8xf32>
    %d = stablehlo.subtract %s, %mb : tensor<2x8x8xf32>
    %e = stablehlo.exponential %d : tensor<2x8x8xf32>
    %t = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [2] : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %tb = stablehlo.broadcast_in_dim %t, dims = [0, 1] : (tensor<2x8xf32>) -> tensor<2x8x8xf32>
    %p = stablehlo.divide %e, %tb : tensor<2x8x8xf32>
    %o = stablehlo.dot_general %p, %v, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    return %o : tensor<2x8x16xf32>
  }
}

// -----

// A softmax whose exponentials are also used elsewhere is not closed: tt-mlir's
// pattern would leave it as separate ops, and so does the pass.
// CHECK-LABEL: func.func @open_softmax
// CHECK-NOT: shard_opt.fused
module {
  func.func @open_softmax(%x: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
    %neg = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %m = stablehlo.reduce(%x init: %neg) applies stablehlo.maximum across dimensions = [1] : (tensor<8x8xf32>, tensor<f32>) -> tensor<8xf32>
    %mb = stablehlo.broadcast_in_dim %m, dims = [0] : (tensor<8xf32>) -> tensor<8x8xf32>
    %d = stablehlo.subtract %x, %mb : tensor<8x8xf32>
    %e = stablehlo.exponential %d : tensor<8x8xf32>
    %t = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<8x8xf32>, tensor<f32>) -> tensor<8xf32>
    %tb = stablehlo.broadcast_in_dim %t, dims = [0] : (tensor<8xf32>) -> tensor<8x8xf32>
    %p = stablehlo.divide %e, %tb : tensor<8x8xf32>
    return %p, %e : tensor<8x8xf32>, tensor<8x8xf32>
  }
}

// -----

// RMSNorm as Hugging Face writes it (x * rsqrt(mean(x^2) + eps) * weight, in f32): one
// group from the input's convert to the scaled output (TTIR RMSNormFusionPattern).
// CHECK-LABEL: func.func @rms_norm
// CHECK: stablehlo.convert %arg0 {shard_opt.fused = "norm:0"}
// CHECK-COUNT-10: shard_opt.fused = "norm:0"
// CHECK-NEXT: return
module {
  func.func @rms_norm(%x: tensor<4x64xbf16>, %w: tensor<64xbf16> {shard_opt.kind = "param"}) -> tensor<4x64xbf16> {
    %two = stablehlo.constant dense<2.000000e+00> : tensor<4x64xf32>
    %n = stablehlo.constant dense<6.400000e+01> : tensor<4x1xf32>
    %eps = stablehlo.constant dense<9.99999974E-6> : tensor<4x1xf32>
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %xf = stablehlo.convert %x : (tensor<4x64xbf16>) -> tensor<4x64xf32>
    %sq = stablehlo.power %xf, %two : tensor<4x64xf32>
    %s = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<4x64xf32>, tensor<f32>) -> tensor<4xf32>
    %s2 = stablehlo.reshape %s : (tensor<4xf32>) -> tensor<4x1xf32>
    %mean = stablehlo.divide %s2, %n : tensor<4x1xf32>
    %a = stablehlo.add %mean, %eps : tensor<4x1xf32>
    %r = stablehlo.rsqrt %a : tensor<4x1xf32>
    %rb = stablehlo.broadcast_in_dim %r, dims = [0, 1] : (tensor<4x1xf32>) -> tensor<4x64xf32>
    %y = stablehlo.multiply %xf, %rb : tensor<4x64xf32>
    %yb = stablehlo.convert %y : (tensor<4x64xf32>) -> tensor<4x64xbf16>
    %wb = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<64xbf16>) -> tensor<4x64xbf16>
    %out = stablehlo.multiply %wb, %yb : tensor<4x64xbf16>
    return %out : tensor<4x64xbf16>
  }
}

// -----

// A projection, its bias and a tanh GELU are one linear op (TTIR
// MatmulWithBiasFusionPattern, then TTNN folds the activation into the matmul).
// CHECK-LABEL: func.func @linear_gelu
// CHECK: stablehlo.dot_general{{.*}}shard_opt.fused = "linear:0"
// CHECK: stablehlo.add{{.*}}shard_opt.fused = "linear:0"
// CHECK: stablehlo.tanh{{.*}}shard_opt.fused = "linear:0"
// CHECK-COUNT-3: shard_opt.fused = "linear:0"
// CHECK-NEXT: return
module {
  func.func @linear_gelu(%x: tensor<8x16xf32>, %w: tensor<16x32xf32> {shard_opt.kind = "param"}, %b: tensor<32xf32> {shard_opt.kind = "param"}) -> tensor<8x32xf32> {
    %half = stablehlo.constant dense<5.000000e-01> : tensor<8x32xf32>
    %one = stablehlo.constant dense<1.000000e+00> : tensor<8x32xf32>
    %c = stablehlo.constant dense<0.797884583> : tensor<8x32xf32>
    %k = stablehlo.constant dense<4.471500e-02> : tensor<8x32xf32>
    %three = stablehlo.constant dense<3.000000e+00> : tensor<8x32xf32>
    %mm = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<32xf32>) -> tensor<8x32xf32>
    %h = stablehlo.add %mm, %bb : tensor<8x32xf32>
    %x3 = stablehlo.power %h, %three : tensor<8x32xf32>
    %kx3 = stablehlo.multiply %x3, %k : tensor<8x32xf32>
    %in = stablehlo.add %h, %kx3 : tensor<8x32xf32>
    %sc = stablehlo.multiply %in, %c : tensor<8x32xf32>
    %t = stablehlo.tanh %sc : tensor<8x32xf32>
    %t1 = stablehlo.add %t, %one : tensor<8x32xf32>
    %hh = stablehlo.multiply %h, %half : tensor<8x32xf32>
    %g = stablehlo.multiply %hh, %t1 : tensor<8x32xf32>
    return %g : tensor<8x32xf32>
  }
}

// -----

// A rotary embedding as HF's Llama writes it, x * cos + rotate_half(x) * sin with
// rotate_half(x) = concat(-x[..., 4:], x[..., :4]): one group (TTIR's
// RoPERotateHalfFusingPattern makes it ttnn.rotary_embedding); the cos / sin
// broadcasts are its inputs.
// CHECK-LABEL: func.func @rope
// CHECK: stablehlo.broadcast_in_dim %arg1, dims = [0, 1, 2, 3] : (tensor<1x1x1x8xf32>) -> tensor<2x4x1x8xf32>{{$}}
// CHECK: stablehlo.multiply %arg0, %{{.*}}shard_opt.fused = "rope:0"
// CHECK-COUNT-4: shard_opt.fused = "rope:0"
// CHECK: stablehlo.broadcast_in_dim %arg2, dims = [0, 1, 2, 3] : (tensor<1x1x1x8xf32>) -> tensor<2x4x1x8xf32>{{$}}
// CHECK: stablehlo.multiply {{.*}}shard_opt.fused = "rope:0"
// CHECK-NEXT: stablehlo.add {{.*}}shard_opt.fused = "rope:0"
module {
  func.func @rope(%x: tensor<2x4x1x8xf32>, %cos: tensor<1x1x1x8xf32>, %sin: tensor<1x1x1x8xf32>) -> tensor<2x4x1x8xf32> {
    %cb = stablehlo.broadcast_in_dim %cos, dims = [0, 1, 2, 3] : (tensor<1x1x1x8xf32>) -> tensor<2x4x1x8xf32>
    %a = stablehlo.multiply %x, %cb : tensor<2x4x1x8xf32>
    %lo = stablehlo.slice %x [0:2, 0:4, 0:1, 0:4] : (tensor<2x4x1x8xf32>) -> tensor<2x4x1x4xf32>
    %hi = stablehlo.slice %x [0:2, 0:4, 0:1, 4:8] : (tensor<2x4x1x8xf32>) -> tensor<2x4x1x4xf32>
    %n = stablehlo.negate %hi : tensor<2x4x1x4xf32>
    %r = stablehlo.concatenate %n, %lo, dim = 3 : (tensor<2x4x1x4xf32>, tensor<2x4x1x4xf32>) -> tensor<2x4x1x8xf32>
    %sb = stablehlo.broadcast_in_dim %sin, dims = [0, 1, 2, 3] : (tensor<1x1x1x8xf32>) -> tensor<2x4x1x8xf32>
    %b = stablehlo.multiply %r, %sb : tensor<2x4x1x8xf32>
    %o = stablehlo.add %a, %b : tensor<2x4x1x8xf32>
    return %o : tensor<2x4x1x8xf32>
  }
}
