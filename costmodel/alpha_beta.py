"""``alpha-beta``: the textbook model, for comparison with the calibrated one.

Per collective and mesh axis: a fixed sync (the mean of the fitted fixed terms) + hop
latency over the axis diameter + bytes on the busiest link at the raw line rate.
all_to_all uses its bottleneck-bytes formula (not tt-mlir's point-to-point lowering).
Compute: FLOPs at the matmul peak of the op's weight format (HiFi4 for plain weights),
no DRAM term, no efficiency.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt.costmodel.cost_model import CostModel, collective_axis
from shard_opt.costmodel.system import FORMAT_FIDELITY, System
from shard_opt.facts import Collective, ModuleFacts, OpWork


@dataclass(frozen=True)
class AlphaBetaModel(CostModel):
    name = "alpha-beta"
    summary = "Fixed sync per CCL + bottleneck bytes at line rate + FLOPs at peak (uncalibrated)"

    def collective_us(self, c: Collective, facts: ModuleFacts, system: System) -> float:
        return system.collective_time_us(
            c.kind, c.bytes_per_device, collective_axis(c, facts), facts.mesh_shape,
            axis_names=facts.mesh_axes, allow_collective_permute=self.allow_collective_permute,
            alpha_beta=True,
        )

    def op_us(self, op: OpWork, system: System) -> float:
        return op.flops / system.peak_flops_per_us(FORMAT_FIDELITY.get(op.fidelity or "", "HiFi4"))
