"""The device ops TTNN runs that the compute model has no op for: layout and data movement.

tt-mlir's TTNN program runs 2-3x the device ops shard-opt prices (issue 20: full Llama-3-8B,
1960 per step on 1x8 and 3082 on 2x4, against ~903 priced), most of them layout and data
movement (``to_layout``, ``typecast``, ``reshape``, ``permute``, ``concat``, ``slice``,
``repeat_interleave``) around the kernels the model prices. Each costs at least the
shortest kernel plus the op-to-op gap (``TenstorrentModel.unpriced_op_us``).

When the tt-mlir check ran, their number per step is read from the TTNN IR
(``shard_opt.ttmlir.check.checked_cost``). When it did not, it is estimated from the
module's own graph: per priced op of each class and per collective, the number of extra
TTNN device ops tt-mlir emitted for it on the checked zoo, ``EXTRA_OPS_PER_CLASS``
(fitted by ``benchmarks/fit_ttnn_ops.py``; re-run it after the frontends change what they
emit, e.g. tt-xla's composites, and paste the table it prints here). The estimate uses
counts from the graph only, never a model's name.
"""

from __future__ import annotations

import math

from shard_opt import kernels
from shard_opt.facts import ModuleFacts, OpWork

# The classes the estimate counts: matmul-like kernels, fused groups (passes/mark_fusions.py),
# every other priced op, each priced collective (a reshape / layout change around it), and
# the module itself (1 each: the layout work at its boundary -- inputs, embedding, outputs --
# that no per-op class follows).
CLASSES = ("matmul", "fused", "other", "collective", "module")
def op_class(op: OpWork) -> str:
    """``matmul``, ``fused`` or ``other``: the op's kind's ``ttnn_class`` (shard_opt.kernels)."""
    return kernels.of(op.kind).ttnn_class


def class_counts(facts: ModuleFacts) -> dict[str, int]:
    """{class: count} of the priced ops and collectives of ``facts`` (all_slice is free: no op)."""
    out = dict.fromkeys(CLASSES, 0)
    for op in facts.ops:
        out[op_class(op)] += 1
    out["collective"] = sum(1 for c in facts.collectives if c.kind != "all_slice")
    out["module"] = 1
    return out


# Extra TTNN device ops per step (beyond the priced ops and TTNN's collectives) per priced
# op of each class, and per module: least squares over the calibration cases (FIT_CASES) of
# benchmarks/fit_ttnn_ops.py -- their checked plans' `checks.tt_mlir.ttnn_ops_breakdown`
# against `priced_op_classes` -- with every per-op class non-negative; jax-tt-plugin 0.1.3,
# 2026-12-02, refitted after the -o module carries tt-xla's SDPA composite as well as its
# LayerNorm / GELU ones (passes/wrap_composites.py), with 4-layer Llama copies added to the
# calibration so the per-layer growth is fitted, not extrapolated from 1-2 layers (the fits
# before: matmul 3.08, fused 5.019, collective 4.26, module -11.594 with no composites;
# matmul 6.045, collective 4.074, module -17.333 with LayerNorm / GELU only; refitted on the
# 11 cases without the 4-layer ones the SDPA counts give matmul 4.727, collective 4.165,
# module -13.014, held out 0.80 on the full llama-3-8b 1x8). The per-module term is negative:
# a 1-layer module runs fewer extra ops than one more layer adds (tt-mlir's const-eval and
# CSE take more of its boundary). The classes are nearly collinear on these cases (every
# fused group sits next to matmuls), so the split between matmul and fused is not
# meaningful, only their sum per layer. Held out (HELD_OUT): estimated/actual 0.99
# (llama-3.2-1b 1L 1x8: 62 of 63), 0.97 (qwen2.5-7b 1L 2x4: 74 of 76), 0.92 (full
# llama-3-8b 1x8: 1517 of 1644), 0.96 (full llama-3-8b 2x4: 2366 of 2453). docs/costmodel.md 2.6.
EXTRA_OPS_PER_CLASS = {"matmul": 5.731, "fused": 0.0, "other": 0.0, "collective": 3.76, "module": -17.224}
FIT_CASES = ("mlp@1x8", "mlp@2x4", "transformer-block@2x4", "llama-3-8b:1@1x8", "llama-3-8b:1@2x4",
             "llama-3-8b:2@1x8", "llama-3-8b:2@2x4", "llama-3-8b:4@1x8", "llama-3-8b:4@2x4",
             "llama-3-8b:1@2x4:decode", "llama-3-8b:2@2x4:decode", "gpt2-xl:1@2x4", "llama-3.2-1b:1@2x4")
HELD_OUT = ("llama-3.2-1b:1@1x8", "qwen2.5-7b:1@2x4", "llama-3-8b@1x8", "llama-3-8b@2x4")
FIT_SOURCE = "benchmarks/fit_ttnn_ops.py on FIT_CASES (jax-tt-plugin 0.1.3, 2026-12-02)"


def estimated_extra_ops(facts: ModuleFacts, table: dict[str, float] | None = None) -> float:
    """Extra TTNN device ops per step that tt-mlir is expected to emit for ``facts``."""
    return estimated_from_counts(class_counts(facts), table)


def estimated_from_counts(counts: dict[str, int], table: dict[str, float] | None = None) -> float:
    """``estimated_extra_ops`` from ``class_counts`` (as the plan JSON's
    ``checks.tt_mlir.priced_op_classes`` holds them)."""
    table = EXTRA_OPS_PER_CLASS if table is None else table
    return max(0.0, math.fsum(table.get(k, 0.0) * counts.get(k, 1 if k == "module" else 0) for k in CLASSES))
