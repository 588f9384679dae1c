"""``autoshard-heuristic``: tt-mlir AutoShardingPass's score, re-implemented from its
description (references/tenstorrent.md section 7; tt-mlir PR 7517,
``lib/Dialect/StableHLO/Utils/ShardingCostModel.cpp``), so its plans can be compared
with ours on equal terms.

    score = sum over CCLs (1.0 + w * elements / max_arg_elements) - memory_benefit

    w = 1.0 for all_gather and collective_permute, 1.5 for reduce_scatter, all_reduce
    and all_to_all; elements = the CCL operand's per-device element count;
    max_arg_elements = the largest @main argument's element count. all_slice is not a
    CCL once lowered (a local slice) and is not counted.

    memory_benefit = sum over sharded arguments of
        multiplier * (elements / max_arg_elements) * fraction_saved
    multiplier = 3.0 for parameters and buffers, 1.0 otherwise; fraction_saved =
    1 - local/global elements ((N-1)/N for one axis of N).

Differences from tt-mlir, both forced by our data: parameters are known by their
argument kind (tt-mlir guesses: rank <= 4 and more than 1024 elements), and
fraction_saved covers multi-axis splits (tt-mlir shards on one axis).

``Cost.score`` is the heuristic (what its search minimises); ``total_us`` and the other
times are the calibrated ``tenstorrent`` model's, so its plans are priced fairly.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from shard_opt.costmodel.cost_model import CostModel
from shard_opt.costmodel.system import System
from shard_opt.costmodel.tenstorrent import TenstorrentModel
from shard_opt.facts import Cost, ModuleFacts

CCL_WEIGHTS = {
    "all_gather": 1.0, "collective_permute": 1.0,
    "reduce_scatter": 1.5, "all_reduce": 1.5, "all_to_all": 1.5,
}


@dataclass(frozen=True)
class AutoshardHeuristic(CostModel):
    """Attributes:
      base_latency: fixed cost per CCL (1.0 in tt-mlir).
      parameter_multiplier: weight of a sharded parameter's memory benefit (3.0).
    """

    name = "autoshard-heuristic"
    summary = ("tt-mlir AutoShardingPass heuristic score (CCL count and volume minus memory benefit); "
               "times calibrated")

    base_latency: float = 1.0
    parameter_multiplier: float = 3.0

    def price(self, facts: ModuleFacts, system: System) -> Cost:
        cost = TenstorrentModel(allow_collective_permute=self.allow_collective_permute).price(facts, system)
        return dataclasses.replace(cost, score=self.communication(facts) - self.memory_benefit(facts))

    def communication(self, facts: ModuleFacts) -> float:
        top = max(facts.arg_global_elements, default=1) or 1
        return math.fsum(
            self.base_latency + CCL_WEIGHTS[c.kind] * math.prod(c.in_local_shape) / top
            for c in facts.collectives if c.kind in CCL_WEIGHTS
        )

    def memory_benefit(self, facts: ModuleFacts) -> float:
        top = max(facts.arg_global_elements, default=1) or 1
        benefit = 0.0
        for i, (elements, kind) in enumerate(zip(facts.arg_global_elements, facts.arg_kinds)):
            saved = shard_fraction_saved(facts, i)
            if saved <= 0:
                continue
            multiplier = self.parameter_multiplier if kind in ("param", "buffer") else 1.0
            benefit += multiplier * elements / top * saved
        return benefit


def shard_fraction_saved(facts: ModuleFacts, i: int) -> float:
    """1 - local/global elements of argument ``i``."""
    elements = facts.arg_global_elements[i]
    if not elements:
        return 0.0
    return max(0.0, 1.0 - facts.arg_local_elements[i] / elements)
