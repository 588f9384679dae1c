"""Registries of hardware presets and cost models.

Built-in systems come from the family modules listed in ``SYSTEM_MODULES`` (each has a
``SYSTEMS`` list); built-in cost models from ``COST_MODELS`` (name -> "module:Class",
imported on first use). Outside packages add either through entry points::

    [project.entry-points."shard_opt.systems"]
    my-box = "my_pkg.systems:MY_BOX"          # a System, a list of them, or a callable

    [project.entry-points."shard_opt.cost_models"]
    my-model = "my_pkg.cost:MyModel"          # a CostModel subclass

or, in-process, with ``register_system`` / ``register_cost_model``.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
from importlib import metadata

from shard_opt.costmodel.system import System
from shard_opt.errors import UserError
from shard_opt.options import option_value

SYSTEM_MODULES = (
    "shard_opt.costmodel.wormhole",
    "shard_opt.costmodel.blackhole",
    "shard_opt.costmodel.multihost",
)

COST_MODELS = {
    "tenstorrent": "shard_opt.costmodel.tenstorrent:TenstorrentModel",
    "tenstorrent-tuned": "shard_opt.costmodel.tenstorrent:TunedTenstorrentModel",
    "alpha-beta": "shard_opt.costmodel.alpha_beta:AlphaBetaModel",
    "autoshard-heuristic": "shard_opt.costmodel.autoshard_heuristic:AutoshardHeuristic",
}

# Device count -> the preset a bare --mesh picks: the Wormhole system of that size
# (docs/design.md, "Command-line contract"); 4 chips only exist as a Blackhole QuietBox 2 among the presets.
DEFAULT_SYSTEM_BY_CHIPS = {1: "n150", 2: "n300", 4: "bh-quietbox2", 8: "wh-loudbox", 32: "wh-galaxy",
                           64: "wh-galaxy-x2", 128: "wh-galaxy-x4"}

_systems: dict[str, System] | None = None
_extra_systems: dict[str, System] = {}
_extra_models: dict[str, type] = {}


def _load(target: str):
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


def _as_systems(obj) -> list[System]:
    if callable(obj) and not isinstance(obj, System):
        obj = obj()
    if isinstance(obj, System):
        return [obj]
    return [s for s in obj if isinstance(s, System)]


def _all_systems() -> dict[str, System]:
    global _systems
    if _systems is None:
        found: dict[str, System] = {}
        for module in SYSTEM_MODULES:
            for s in importlib.import_module(module).SYSTEMS:
                found[s.name] = s
        for ep in metadata.entry_points(group="shard_opt.systems"):
            try:
                for s in _as_systems(ep.load()):
                    found.setdefault(s.name, s)
            except Exception as e:  # a broken plug-in must not break the built-ins
                print(f"shard-opt: warning: system entry point {ep.name} ({ep.value}): {e}", file=sys.stderr)
        _systems = found
    return {**_systems, **_extra_systems}


def register_system(system: System) -> None:
    """Add (or replace) a preset for this process."""
    _extra_systems[system.name] = system


def get_system(name: str) -> System:
    """The preset called ``name``; a ``UserError`` names the known ones otherwise."""
    systems = _all_systems()
    if name not in systems:
        raise UserError(f"unknown system {name!r}; known systems: {', '.join(systems)} "
                        f"(shard-opt --list-systems)")
    return systems[name]


def list_systems() -> list[System]:
    """Every preset, built-ins first in family order."""
    return list(_all_systems().values())


def default_system_for_mesh(shape) -> str:
    """The preset a mesh of this shape runs on when no ``--system`` is given."""
    chips = math.prod(shape)
    if chips not in DEFAULT_SYSTEM_BY_CHIPS:
        counts = ", ".join(f"{n} ({s})" for n, s in DEFAULT_SYSTEM_BY_CHIPS.items())
        raise UserError(f"no preset system has {chips} chips (mesh {'x'.join(map(str, shape))}); "
                        f"presets exist for {counts}; pick one with --system")
    return DEFAULT_SYSTEM_BY_CHIPS[chips]


# ---- cost models ----------------------------------------------------------------------

def _model_targets() -> dict[str, object]:
    targets: dict[str, object] = dict(COST_MODELS)
    for ep in metadata.entry_points(group="shard_opt.cost_models"):
        targets.setdefault(ep.name, ep)
    targets.update(_extra_models)
    return targets


def register_cost_model(cls: type) -> type:
    """Add a ``CostModel`` subclass under its ``name`` (usable as a class decorator)."""
    _extra_models[cls.name] = cls
    return cls


def get_cost_model_class(name: str) -> type:
    targets = _model_targets()
    if name not in targets:
        raise UserError(f"unknown cost model {name!r}; known cost models: {', '.join(targets)}")
    target = targets[name]
    if isinstance(target, str):
        return _load(target)
    if isinstance(target, type):
        return target
    try:
        return target.load()  # an entry point
    except Exception as e:
        raise UserError(f"cost model {name} (entry point {target.value}) failed to load: {e}") from None


def get_cost_model(name: str, **options):
    """An instance of the cost model ``name`` with ``options`` (its dataclass fields).

    ``name`` may carry options itself, as the command line writes them:
    ``tenstorrent:dispatch=untraced,prefetch_weights=true`` (``options`` win)."""
    name, _, spec = name.partition(":")
    cls = get_cost_model_class(name)
    if spec:
        fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        for item in filter(None, (x.strip() for x in spec.split(","))):
            key, eq, raw = item.partition("=")
            key = key.strip().replace("-", "_")
            if not eq or key not in fields:
                raise UserError(f"cost model {name}: bad option {item!r}; write KEY=VALUE with KEY one of "
                                f"{', '.join(sorted(fields)) or 'none'}")
            options.setdefault(key, option_value(raw.strip(), fields[key], f"cost model {name}"))
    known = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else None
    if known is not None:
        unknown = sorted(set(options) - known)
        if unknown:
            raise UserError(f"cost model {name}: unknown option(s) {', '.join(unknown)} "
                            f"(options: {', '.join(sorted(known)) or 'none'})")
    return cls(**options)


def list_cost_models() -> list[str]:
    """Names of every cost model (built-in, entry point, registered)."""
    return list(_model_targets())
