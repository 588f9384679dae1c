// --list-passes: one line per pass, its CLI name then a summary (the names
// --pass-pipeline accepts), in alphabetical order; nothing else runs.
//
// RUN: shard-opt --list-passes | FileCheck %s
// The single-dash spelling works too.
// RUN: shard-opt -list-passes | FileCheck %s

// CHECK:      {{^  }}add-mesh {{ +}}Declare the device mesh (sdy.mesh)
// CHECK-NEXT: {{^  }}annotate-costs {{ +}}Price collectives and compute with a cost model
// CHECK-NEXT: {{^  }}apply-constraints {{ +}}Constrain the sharding of intermediate values
// CHECK-NEXT: {{^  }}apply-shardings {{ +}}Set sdy.sharding on @main's arguments
// CHECK-NEXT: {{^  }}collect-collectives {{ +}}Collect Shardy's collectives
// CHECK-NEXT: {{^  }}decouple-const-fanout {{ +}}Clone constant-fed broadcasts per use (tt-mlir's DecoupleConstFanoutPass)
// CHECK-NEXT: {{^  }}inline-calls {{ +}}Inline func.call sites
// CHECK-NEXT: {{^  }}insert-guards {{ +}}Constrain what Shardy would move implicitly
// CHECK-NEXT: {{^  }}mark-fusions {{ +}}Tag the op groups tt-mlir runs as one kernel (attention, norms, softmax, RoPE, activations, linear)
// CHECK-NEXT: {{^  }}merge-collectives {{ +}}Merge identical collectives on one value and erase unused ones
// CHECK-NEXT: {{^  }}replicate-non-splittable {{ +}}Replicate the slices, iotas and constants SPMD cannot split
// CHECK-NEXT: {{^  }}shardy-propagate {{ +}}Run Shardy propagation and insert explicit collectives
// CHECK-NEXT: {{^  }}unfold-batch-matmul {{ +}}One dot_general per batched matmul, every batch dim kept (undo torch-mlir's reshape folding)
// CHECK-NEXT: {{^  }}wrap-composites {{ +}}Wrap decomposed attention / RMSNorm / LayerNorm / GELU in tt-xla's tenstorrent.* composites
// CHECK-NOT: {{.}}

// --list-systems: the hardware presets, with their meshes.
// RUN: shard-opt --list-systems | FileCheck %s --check-prefix=SYS
// SYS: n300: Wormhole n300 - 2 Wormhole chips; meshes 1x2
// SYS: wh-loudbox: Wormhole LoudBox / T3000 (4x n300) - 8 Wormhole chips; meshes 2x4 (line of 2, 1 link x line of 4, 1 link), 1x8 (ring of 8, 1 link)
// SYS: wh-galaxy: Wormhole Galaxy (TG) - 32 Wormhole chips; meshes 8x4
// SYS: bh-loudbox: Blackhole LoudBox (8x p150b) - 8 Blackhole chips; meshes 2x4
