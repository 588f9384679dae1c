"""The ``CostModel`` base class: from ``ModuleFacts`` on a ``System`` to a ``Cost``.

A cost model is a small frozen dataclass (like a pass): ``name`` is its registry name,
its fields are its options. Subclasses implement ``collective_us`` and ``op_us``; the
base ``price`` sums them (collectives block every chip, so nothing overlaps) and checks
memory. Override ``price`` to score differently (see ``autoshard_heuristic.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from shard_opt.costmodel.system import System
from shard_opt.facts import Collective, Cost, ModuleFacts, OpWork


@dataclass(frozen=True)
class CostModel:
    """Base class. Options shared by every model:

    Attributes:
      allow_collective_permute: price ``collective_permute`` (alpha-beta) instead of
        ``inf``. tt-mlir cannot lower it today (issue 3370), so by default a plan that
        needs one is never chosen.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    allow_collective_permute: bool = False

    def collective_us(self, c: Collective, facts: ModuleFacts, system: System) -> float:
        raise NotImplementedError

    def op_us(self, op: OpWork, system: System) -> float:
        raise NotImplementedError

    def price(self, facts: ModuleFacts, system: System) -> Cost:
        times = [self.collective_us(c, facts, system) for c in facts.collectives]
        ccl = math.fsum(times)
        compute = math.fsum(self.op_us(op, system) for op in facts.ops)
        memory = memory_per_device(facts)
        return Cost(
            total_us=compute + ccl, compute_us=compute, ccl_us=ccl, collective_us=times,
            memory_per_device_bytes=memory, fits=memory <= system.usable_dram_bytes,
        )


def memory_per_device(facts: ModuleFacts) -> int:
    """Parameters and buffers + KV cache arguments + the activation peak, on one chip."""
    cache = sum(b for b, k in zip(facts.arg_local_bytes, facts.arg_kinds) if k == "cache")
    return facts.param_bytes_per_device + cache + facts.peak_activation_bytes


def collective_axis(c: Collective, facts: ModuleFacts):
    """What to pass as ``axis`` for ``c``: its axis names, or its group size when they
    do not multiply to it (sub-axes)."""
    sizes = dict(zip(facts.mesh_axes, facts.mesh_shape))
    if c.axes and all(a in sizes for a in c.axes) and math.prod(sizes[a] for a in c.axes) == c.group_size:
        return list(c.axes)
    return c.group_size
