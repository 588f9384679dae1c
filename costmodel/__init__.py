"""Tenstorrent cost model: hardware presets, calibrated collective and compute time.

Public API::

    from shard_opt import costmodel
    system = costmodel.get_system("wh-loudbox")         # a System preset
    system.collective_time_us("all_reduce", 8192, "model")   # microseconds
    costmodel.default_system_for_mesh((2, 4))             # "wh-loudbox"
    model = costmodel.get_cost_model("tenstorrent")
    cost = model.price(facts, system)                     # a shard_opt.facts.Cost

Formulas, constants and their sources: docs/costmodel.md.
"""

from shard_opt.costmodel.cost_model import CostModel, memory_per_device
from shard_opt.costmodel.fabric import Anchor, Fabric, Startup
from shard_opt.costmodel.registry import (
    default_system_for_mesh,
    get_cost_model,
    get_cost_model_class,
    get_system,
    list_cost_models,
    list_systems,
    register_cost_model,
    register_system,
)
from shard_opt.costmodel.system import AxisLinks, System

__all__ = [
    "Anchor", "AxisLinks", "CostModel", "Fabric", "Startup", "System",
    "default_system_for_mesh", "get_cost_model", "get_cost_model_class", "get_system",
    "list_cost_models", "list_systems", "memory_per_device", "register_cost_model",
    "register_system",
]
