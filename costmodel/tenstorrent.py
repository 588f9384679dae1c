"""``tenstorrent``: the calibrated model (default).

Collectives: the fitted tt-metal CCL models per mesh axis (``fabric.py``), priced as
tt-mlir lowers them (all_to_all as N(N-1) point-to-point ops, all_slice free,
collective_permute ``inf`` unless allowed).

Compute: a roofline per op, summed over ``facts.ops``::

    op_us = max(flops / (peak(dtype) * matmul_efficiency),
                (bytes_in + bytes_out) / (dram_gbps * dram_efficiency))

Weights are read from DRAM by every op that uses them, so at small batch (decode) the
time is weight-read bound: a replicated weight makes every chip read all of it, a
weight split N ways is read N times faster.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt.costmodel.cost_model import CostModel, collective_axis
from shard_opt.costmodel.system import DRAM_EFFICIENCY, MATMUL_EFFICIENCY, System
from shard_opt.facts import Collective, ModuleFacts, OpWork


@dataclass(frozen=True)
class TenstorrentModel(CostModel):
    """Calibrated collectives + per-op roofline compute.

    Attributes:
      matmul_efficiency: share of the matmul peak reached (default 190/256, Wormhole's
        measured GEMM TFLOPS over its LoFi peak).
      dram_efficiency: share of spec DRAM bandwidth reached (default 267/288).
      native_all_to_all: price all_to_all as one ttnn all_to_all (tt-metal fit) instead
        of tt-mlir's N(N-1) point-to-point ops.
    """

    name = "tenstorrent"
    summary = "Calibrated tt-metal CCL fits per mesh axis + per-op compute/DRAM roofline (default)"

    matmul_efficiency: float = MATMUL_EFFICIENCY
    dram_efficiency: float = DRAM_EFFICIENCY
    native_all_to_all: bool = False

    def collective_us(self, c: Collective, facts: ModuleFacts, system: System) -> float:
        return system.collective_time_us(
            c.kind, c.bytes_per_device, collective_axis(c, facts), facts.mesh_shape,
            axis_names=facts.mesh_axes, allow_collective_permute=self.allow_collective_permute,
            native_all_to_all=self.native_all_to_all,
        )

    def op_us(self, op: OpWork, system: System) -> float:
        return system.compute_time_us(
            op.flops, op.bytes_in + op.bytes_out, op.dtype,
            matmul_efficiency=self.matmul_efficiency, dram_efficiency=self.dram_efficiency,
        )
