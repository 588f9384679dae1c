"""Wormhole systems: n150, n300, LoudBox (T3000) and Galaxy, and their CCL calibration.

Every figure names its source; section numbers are references/tenstorrent.md's.
Adding a Wormhole system is one more ``System(...)`` in ``SYSTEMS``.
"""

from __future__ import annotations

from shard_opt.costmodel.fabric import Anchor, Fabric, Startup, mean
from shard_opt.costmodel.system import AxisLinks, System

_SUMMARY = "tt-metal tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md"

# Ethernet: 16 ports x 100 Gb/s = 12.5 GB/s per link and direction (section 3; also the
# line rate in the SUMMARY file's header).
LINE_RATE_GBPS = 12.5


def _efficiency(fitted_gbps: float, ring: bool = False) -> float:
    """A fit's large-size bandwidth as a share of the line rate (fits measured on 1 link)."""
    return fitted_gbps / (LINE_RATE_GBPS * (2 if ring else 1))


# Fitted startup terms, LoudBox, bf16, 6144-byte packets (section 4, from _SUMMARY):
# t = base + line_hop*(N-1) on a line, base + ring_hop*N/2 on a ring.
STARTUP = {
    "all_gather": Startup(4.47, 1.91, 2.50),
    "reduce_scatter": Startup(3.23, 3.97, 3.06),
    "all_reduce": Startup(9.07, 5.82, 5.25),
    "all_to_all": Startup(2.99, 2.14, 3.40),
}

# Large-size bandwidths of the same fits (section 4): the line fits' peak is at N=4, the
# ring fits' at N=8 (the SUMMARY file: "the peak rate they reach at the largest device
# count").
EFFICIENCY = {
    ("all_gather", "line"): {4: _efficiency(11.8)},
    ("all_gather", "ring"): {8: _efficiency(20.8, ring=True)},
    ("reduce_scatter", "line"): {4: _efficiency(11.1)},
    ("reduce_scatter", "ring"): {8: _efficiency(16.7, ring=True)},
    ("all_reduce", "line"): {4: _efficiency(10.9)},
    ("all_reduce", "ring"): {8: _efficiency(18.4, ring=True)},
    ("all_to_all", "line"): {4: _efficiency(7.6)},
    ("all_to_all", "ring"): {8: _efficiency(16.5, ring=True)},
}

# Measured small-message points (section 4). The all_gather row's 16 KiB is the gathered
# output (nccl-tests convention; the same table's 8 GiB row, 361 ms, only matches the fit
# with b = size/8), so its per-device input is 2 KiB.
ANCHORS = (
    Anchor("all_reduce", "line", 2, 4096, 12.8, _SUMMARY),
    Anchor("all_reduce", "ring", 8, 16384, 35.8, _SUMMARY),
    Anchor("all_gather", "ring", 8, 16384 // 8, 17.6, _SUMMARY),
)

FABRIC = Fabric(
    arch="wormhole",
    line_rate_gbps=LINE_RATE_GBPS,
    hop_latency_us=0.711,  # fabric hop, 1D fabric (section 3)
    startup=STARTUP,
    efficiency=EFFICIENCY,
    anchors=ANCHORS,
    # One ttnn.point_to_point: the all_to_all fit's fixed term, and the all_to_all line
    # fit's bandwidth share (derived from section 4; no point_to_point measurement exists).
    p2p_startup_us=STARTUP["all_to_all"].base_us,
    p2p_efficiency=_efficiency(7.6),
    # alpha-beta model: "a fixed sync of several microseconds" (section 4), taken as the
    # mean of the four fitted fixed terms (4.94 us).
    sync_us=mean(s.base_us for s in STARTUP.values()),
    calibration_links=1,  # T3000 CCLs use 1 link ("1 for T3K", CCL_Performance_Best_Practices.md)
)

# Per chip (section 3): 64 cores in the TT-NN compute grid x 4 / 2 / 1 TFLOPS per core at
# LoFi / HiFi2 / HiFi4.
PEAK_TFLOPS = {"LoFi": 64 * 4.0, "HiFi2": 64 * 2.0, "HiFi4": 64 * 1.0}

# 12 GB GDDR6 per chip, 288 GB/s (section 3; n300 = 2 chips, 24 GB, 576 GB/s). GDDR6
# capacities are binary, so 12 GiB (unconfirmed; the spec page says "12 GB").
DRAM_BYTES = 12 * 2**30
DRAM_GBPS = 288.0


def _wormhole(name, title, chips, axis_links, sources) -> System:
    return System(
        name=name, arch="wormhole", chips=chips, meshes=tuple(axis_links), axis_links=axis_links,
        dram_bytes=DRAM_BYTES, dram_gbps=DRAM_GBPS, peak_tflops=PEAK_TFLOPS, fabric=FABRIC,
        title=title, sources=sources,
    )


_LINE1 = AxisLinks("line", 1)

N150 = _wormhole("n150", "Wormhole n150", 1, {(1, 1): (_LINE1, _LINE1)},
                 ("docs.tenstorrent.com Wormhole specifications",))

# n300: 2 chips as 1x2; 1 of the 2 links is reserved for dispatch (section 2).
N300 = _wormhole("n300", "Wormhole n300", 2, {(1, 2): (_LINE1, _LINE1)},
                 ("docs.tenstorrent.com Wormhole specifications",
                  "tt-metal Programming_Mesh_of_Devices_with_TT-NN.md"))

# LoudBox / T3000 = 4x n300: 2x4 is a line of 2 by lines of 4; the wraparound exists only
# as the 8-chip perimeter ring, so 1x8 is a ring (section 2, CCLs/CCL_bandwidth.md).
WH_LOUDBOX = _wormhole(
    "wh-loudbox", "Wormhole LoudBox / T3000 (4x n300)", 8,
    {(2, 4): (_LINE1, _LINE1), (1, 8): (_LINE1, AxisLinks("ring", 1))},
    ("tt-metal EthernetMultichip/BasicEthernetGuide.md", "tt-metal CCLs/CCL_bandwidth.md"),
)

# Galaxy: line x line by default (tt-xla forces FABRIC_1D, no both-axis wrap; section 2).
# 4 links on the 8-long axis (cluster_axis 0 of 8x4), 3 on the 4-long axis (tt-metal
# LLMs/llms.md 3.3.1). Bandwidth is scaled linearly with links (an upper bound).
WH_GALAXY = _wormhole(
    "wh-galaxy", "Wormhole Galaxy (TG)", 32,
    {(8, 4): (AxisLinks("line", 4), AxisLinks("line", 3)),
     (4, 8): (AxisLinks("line", 3), AxisLinks("line", 4))},
    ("tt-xla mesh_shapes.md", "tt-metal LLMs/llms.md 3.3.1",
     "tt-xla pjrt_implementation/src/api/client_instance.cc"),
)

# Some hosts wrap the Galaxy axes (tt-xla PR 5383): the ring-per-axis option.
WH_GALAXY_RING = WH_GALAXY.with_topology("wh-galaxy-ring", "ring", "Wormhole Galaxy, ring on each axis")

SYSTEMS = [N150, N300, WH_LOUDBOX, WH_GALAXY, WH_GALAXY_RING]
