"""What the device runs, one entry per kind: the registry every reader of an op's kind asks.

An ``OpWork.kind`` (``shard_opt.facts``) is one of these: a plain op (``matmul``,
``gather``, ``cache_update``, or ``""`` for any other op) or a fused kernel, a group of ops
``mark-fusions`` tags (``passes/mark_fusions.py``, ``shard_opt.fused = "<kind>:<n>"``)
because tt-mlir runs it as one device op. Each entry says, in one place:

- ``kernel_class``: the ``costmodel.system.KERNEL_CLASSES`` entry its latency and roofline
  are priced by (``matmul``, ``norm``, ``sdpa``, ``gather``, ``cache_update``; ``""``: none);
- ``ttnn_class``: its class in the estimate of the TTNN ops no priced op stands for
  (``costmodel/ttnn_ops.py``: ``matmul``, ``fused`` or ``other``);
- ``reduction_cause`` / ``gather_cause``: what an all_reduce that completes its sums, or an
  all_gather that feeds it, is for (``analysis``: a collective's ``cause``);
- ``tt_mlir``: the tt-mlir pattern or tt-xla composite that makes it one op (its source).

Adding a fused kernel is an entry here and its finder in ``passes/mark_fusions.py``
(with its lit test); every reader (the analysis, the cost models, the TTNN estimate, the
weight roles, the structure) asks this table.
"""

from __future__ import annotations

from dataclasses import dataclass


# the attribute mark-fusions writes on every op of a group: "<kind>:<group number>"
FUSED_ATTR = "shard_opt.fused"


@dataclass(frozen=True)
class Kernel:
    kind: str
    title: str
    kernel_class: str = ""
    ttnn_class: str = "other"
    fused: bool = True
    reduction_cause: str = ""
    gather_cause: str = ""
    tt_mlir: str = ""
    custom_calls: tuple[str, ...] = ()  # call targets that are this kernel already (one op)

    @property
    def is_matmul(self) -> bool:
        """Priced as a matmul (a weight read, a math fidelity, the prefill regime)."""
        return self.kernel_class == "matmul"


# plain ops (what analysis._kind calls an op that no fused group holds)
MATMUL = Kernel("matmul", "matmul (dot_general, convolution)", "matmul", "matmul", fused=False,
                reduction_cause="row-parallel partial sums")
GATHER = Kernel("gather", "gather (an embedding lookup)", "gather", fused=False)
CACHE_UPDATE = Kernel("cache_update", "KV-cache write of a decode step", "cache_update", fused=False)

# fused kernels (passes/mark_fusions.py finds each; the order is the order it claims them in)
SDPA = Kernel("sdpa", "attention (scaled dot-product)", "sdpa", "fused", gather_cause="attention inputs",
              tt_mlir="TTIR SDPAFusingPattern -> ttnn.scaled_dot_product_attention; tt-xla's "
                      "tenstorrent.scaled_dot_product_attention composite",
              custom_calls=("tt.scaled_dot_product_attention", "tenstorrent.scaled_dot_product_attention"))
SOFTMAX = Kernel("softmax", "softmax", "", "fused", reduction_cause="softmax statistics",
                 tt_mlir="TTIR SoftmaxFusionPattern / NumericStableSoftmaxFusionPattern")
NORM = Kernel("norm", "RMSNorm / LayerNorm", "norm", "fused", reduction_cause="norm statistics",
              tt_mlir="TTIR RMSNormFusionPattern; tt-xla's tenstorrent.layer_norm composite")
ROPE = Kernel("rope", "rotary embedding", "", "other", tt_mlir="TTIR RoPERotateHalfFusingPattern")
LINEAR = Kernel("linear", "matmul with its bias (and activation)", "matmul", "matmul",
                reduction_cause="row-parallel partial sums",
                tt_mlir="TTIR MatmulWithBiasFusionPattern; TTNN TTNNMatmulAndLinearWithActivation")
CONV = Kernel("conv", "convolution with its bias (and activation)", "matmul", "matmul",
              tt_mlir="TTIR ConvAddBias; TTNN TTNNConv2dWithActivation")
ACTIVATION = Kernel("activation", "activation (GELU, SiLU, Mish, sigmoid)", "", "fused",
                    tt_mlir="TTIR GeluFusionPattern, SiluFusionPattern, MishFusingPattern")

KERNELS: tuple[Kernel, ...] = (MATMUL, GATHER, CACHE_UPDATE, SDPA, SOFTMAX, NORM, ROPE, LINEAR, CONV, ACTIVATION)
BY_KIND: dict[str, Kernel] = {k.kind: k for k in KERNELS}
FUSED: tuple[Kernel, ...] = tuple(k for k in KERNELS if k.fused)
OTHER = Kernel("", "any other op")


def of(kind: str | None) -> Kernel:
    """The entry of an op kind (``OTHER`` for ``""`` or a kind this table does not know)."""
    return BY_KIND.get(kind or "", OTHER)


def of_label(label: str) -> Kernel:
    """The entry of a ``mark-fusions`` group label (``sdpa:3`` -> ``SDPA``)."""
    return of(label.split(":", 1)[0])
