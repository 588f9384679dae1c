"""Systems past one box (two and four Wormhole Galaxies), and the sub-mesh a replica runs on.

Links per edge are tt-metal's mesh graph descriptors
(``tt_metal/fabric/mesh_graph_descriptors/``; references/serving.md "Meshes past one box"):

- ``single_galaxy_mesh_graph_descriptor.textproto``: one WH Galaxy, ``device_topology
  [8, 4]``, ``channels { count: 4 }`` (``wormhole.WH_GALAXY`` keeps tt-metal llms.md's
  4 on the 8-long axis and 3 on the 4-long one).
- ``dual_galaxy_mesh_graph_descriptor.textproto``: ``[8, 8]`` over ``host_topology [1, 2]``,
  ``channels { count: 1 }``; ``dual_galaxy_4x16_mesh_graph_descriptor.textproto``: ``[4,
  16]``, ``dim_types [LINE, RING]`` ("two 8x4 galaxies connected side-by-side with wrap
  only along the long dimension"), ``channels { count: 4 }``.
- ``quad_galaxy_mesh_graph_descriptor.textproto``: ``[8, 16]`` over ``host_topology [1, 4]``,
  ``channels { count: 1 }``; ``quad_galaxy_torus_xy_graph_descriptor.textproto``: ``[16, 8]``
  ``RING, RING``, ``channels { count: 2 }`` -- a shape tt-mlir refuses (below).

Read with the search tool (stored tt-metal versions: single_galaxy 10bf9b87, dual_galaxy
4b5a2e0a, dual_galaxy_4x16 db786595, quad_galaxy 60bb652c, quad_galaxy_torus_xy 03c47511):
every one ``arch: WORMHOLE_B0``, ``channels { ... policy: RELAXED }``; the count is the
descriptor's, for every edge of its mesh (inside a host and between hosts alike).

tt-xla's mesh table names 64 chips (8, 8) and 128 chips (8, 16) (references/serving.md,
tt-xla ``tests/infra/utilities/torch_multichip_utils.py``), the default meshes here. tt-mlir
compiles only the shapes of its ``SupportedMeshes`` (tt-mlir
``include/ttmlir/Dialect/StableHLO/Utils/ShardingUtils.h``, read at 19c86fca, 2026-08-21;
``shard_opt.sharding`` ``TT_MLIR_SUPPORTED_MESHES``); 16x8 is not among them.

``replica_system(system, shape)``: the preset a data-parallel replica of ``shape`` runs on
when it is a part of ``system`` (a 2x4 replica of a Galaxy): the chips of a sub-rectangle
of the system's mesh, each logical axis wired as the physical axis it lies along. A
replica that fits in one host of a multi-host system runs on that host's own fabric
(tt-metal opens one mesh per replica: ``HOST_SYSTEM``); one that spans hosts gets the
multi-host descriptor's links.
"""

from __future__ import annotations

import dataclasses
import math

from shard_opt.costmodel import wormhole
from shard_opt.costmodel.system import AxisLinks, System

_MGD = "tt-metal tt_metal/fabric/mesh_graph_descriptors/"
_SHARDING_UTILS = "tt-mlir include/ttmlir/Dialect/StableHLO/Utils/ShardingUtils.h (SupportedMeshes)"

_LINE1 = AxisLinks("line", 1)

WH_GALAXY_X2 = dataclasses.replace(
    wormhole.WH_GALAXY, name="wh-galaxy-x2", title="Two Wormhole Galaxies (64 chips, 2 hosts)", chips=64,
    meshes=((8, 8), (4, 16)),
    axis_links={(8, 8): (_LINE1, _LINE1), (4, 16): (AxisLinks("line", 4), AxisLinks("ring", 4))},
    sources=(_MGD + "dual_galaxy_mesh_graph_descriptor.textproto",
             _MGD + "dual_galaxy_4x16_mesh_graph_descriptor.textproto",
             "tt-xla tests/infra/utilities/torch_multichip_utils.py (64 -> (8, 8))"),
    refused_meshes={},
)

WH_GALAXY_X4 = dataclasses.replace(
    wormhole.WH_GALAXY, name="wh-galaxy-x4", title="Four Wormhole Galaxies (128 chips, 4 hosts)", chips=128,
    meshes=((8, 16),),
    axis_links={(8, 16): (_LINE1, _LINE1)},
    sources=(_MGD + "quad_galaxy_mesh_graph_descriptor.textproto",
             "tt-xla tests/infra/utilities/torch_multichip_utils.py (128 -> (8, 16))"),
    refused_meshes={(16, 8): ("tt-metal's quad Galaxy torus is 16x8 (" + _MGD
                              + "quad_galaxy_torus_xy_graph_descriptor.textproto, 2 channels), a shape tt-mlir "
                              "does not compile: " + _SHARDING_UTILS)},
)

SYSTEMS = [WH_GALAXY_X2, WH_GALAXY_X4]

# A multi-host system -> the system of one of its hosts (a replica within one host runs on it).
HOST_SYSTEM = {"wh-galaxy-x2": "wh-galaxy", "wh-galaxy-x4": "wh-galaxy"}


def _embed(shape: tuple[int, int], physical: tuple[int, int]) -> tuple[int, int] | None:
    """Which physical axis each logical axis of ``shape`` lies along, or None when it is no
    sub-rectangle of ``physical`` (either orientation; the logical major axis first)."""
    a, b = shape
    for order in ((0, 1), (1, 0)):
        if physical[order[0]] % a == 0 and physical[order[1]] % b == 0:
            return order
    return None


def replica_system(system: System, shape: tuple[int, ...], host: System | None = None) -> System | None:
    """The preset a replica of mesh ``shape`` runs on inside ``system`` (``system`` itself when
    ``shape`` is one of its meshes), or None when ``shape`` is no sub-rectangle of its mesh.

    ``host``: the system of one host of a multi-host ``system`` (``HOST_SYSTEM``): a replica
    that fits in one host is wired as that host. Each logical axis of the replica keeps the
    links of the physical axis it lies along; it is a ring only when it spans a whole ring
    axis (a part of a ring is a line)."""
    shape = tuple(shape) if len(shape) == 2 else (1, int(shape[0]))
    if shape in system.axis_links:
        return system
    if host is not None and math.prod(shape) <= host.chips:
        inner = replica_system(host, shape)
        if inner is not None:
            return inner
    physical = tuple(system.default_mesh)
    order = _embed(shape, physical)
    if order is None or math.prod(shape) > system.chips:
        return None
    wiring = system.links_for(physical)
    links = []
    for size, axis in zip(shape, order):
        w = wiring[axis]
        links.append(AxisLinks(w.topology if size == physical[axis] else "line", w.links))
    name = f"{system.name}[{shape[0]}x{shape[1]}]"
    return dataclasses.replace(
        system, name=name, chips=math.prod(shape), meshes=(shape,), axis_links={shape: tuple(links)},
        title=f"{shape[0]}x{shape[1]} part of {system.title or system.name}", refused_meshes={},
    )
