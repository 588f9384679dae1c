"""Blackhole systems: p150, p300, QuietBox 2, LoudBox and Galaxy, and their CCL calibration.

Blackhole has no published fitted latency model. Its calibration is scaled from
Wormhole's (references/tenstorrent.md section 4):
  * bandwidth: the BH Galaxy large-size link efficiencies at 25 GB/s per link and
    direction, 2 links per neighbour pair;
  * startup: Wormhole's fitted startup terms times the mean ratio of the BH to WH
    measured small-message times (0.686), then anchored on the three BH points;
  * the tuned profile: Wormhole's tuned startup terms times the same 0.686, at the same
    bandwidth (no tuned Blackhole CCL is measured).
Adding a Blackhole system is one more ``System(...)`` in ``SYSTEMS``.
"""

from __future__ import annotations

import dataclasses

from shard_opt.costmodel import wormhole
from shard_opt.costmodel.fabric import Anchor, Fabric, mean
from shard_opt.costmodel.system import AxisLinks, System

_SUMMARY = "tt-metal tech_reports/CCLs/results/SUMMARY_blackhole_bfloat16_8192.md"

# 14 ports rated 400 Gb/s, run at half speed today: 25 GB/s per link and direction
# (section 3; the SUMMARY file's header says the same).
LINE_RATE_GBPS = 25.0

# Measured small-message times, Blackhole Galaxy vs Wormhole LoudBox (section 4):
# all_reduce 2 devices 4 KiB, all_reduce 8-ring 16 KiB, all_gather 8-ring 16 KiB.
_BH_POINTS = (9.15, 23.3, 12.2)
_WH_POINTS = (12.8, 35.8, 17.6)
STARTUP_SCALE = mean(bh / wh for bh, wh in zip(_BH_POINTS, _WH_POINTS))  # 0.686

STARTUP = {kind: s.scaled(STARTUP_SCALE) for kind, s in wormhole.STARTUP.items()}

# BH Galaxy, % of 25 GB/s per link and direction at large sizes (section 4).
EFFICIENCY = {
    ("all_gather", "line"): {2: 0.95, 4: 0.96},
    ("all_gather", "ring"): {8: 0.945},
    ("reduce_scatter", "line"): {2: 0.745, 4: 0.78},
    ("reduce_scatter", "ring"): {8: 0.80},
    ("all_reduce", "line"): {2: 0.84, 4: 0.86},
    ("all_reduce", "ring"): {8: 0.86},
    # No BH all_to_all figure in the references: Wormhole's fitted shares (unconfirmed).
    ("all_to_all", "line"): wormhole.EFFICIENCY[("all_to_all", "line")],
    ("all_to_all", "ring"): wormhole.EFFICIENCY[("all_to_all", "ring")],
}

# Small-size points (section 4). all_gather: 16 KiB gathered = 2 KiB per-device input.
ANCHORS = (
    Anchor("all_reduce", "line", 2, 4096, 9.15, _SUMMARY),
    Anchor("all_reduce", "ring", 8, 16384, 23.3, _SUMMARY),
    Anchor("all_gather", "ring", 8, 16384 // 8, 12.2, _SUMMARY),
)

FABRIC = Fabric(
    arch="blackhole",
    line_rate_gbps=LINE_RATE_GBPS,
    hop_latency_us=0.515,  # fabric hop, 1D fabric (section 3)
    startup=STARTUP,
    efficiency=EFFICIENCY,
    anchors=ANCHORS,
    p2p_startup_us=STARTUP["all_to_all"].base_us,
    p2p_efficiency=wormhole.FABRIC.p2p_efficiency,  # unconfirmed for Blackhole
    sync_us=wormhole.FABRIC.sync_us * STARTUP_SCALE,
    calibration_links=2,  # BH Galaxy descriptors: channels { count: 2 } (section 2)
)

# The tuned profile (docs/costmodel.md 1.9). No Blackhole measurement of tt-metal's async
# persistent CCLs is published (the references' Blackhole CCL figures, section 4, are the
# plain ttnn ops of SUMMARY_blackhole_bfloat16_8192.md), so it is derived the way the
# generic profile is: Wormhole's tuned startup terms (fitted to the Galaxy Llama-70B CCLs,
# wormhole.GALAXY_LLAMA70B_CCLS) times STARTUP_SCALE, at the BH Galaxy large-size link
# shares above (EFFICIENCY, section 4) -- as Wormhole's tuned profile keeps its generic
# rates. No anchors: they are generic-op measurements. Unconfirmed (no tuned BH point).
TUNED_STARTUP = {kind: s.scaled(STARTUP_SCALE) for kind, s in wormhole.TUNED_STARTUP.items()}
TUNED_FABRIC = dataclasses.replace(FABRIC, startup=TUNED_STARTUP, anchors=())

# Per chip (section 3): 110 cores for compute x 5.4 / 2.7 / 1.35 TFLOPS per core at
# LoFi / HiFi2 / HiFi4 (140 on the spec page, 120 enabled since firmware 19.5.0).
PEAK_TFLOPS = {"LoFi": 110 * 5.4, "HiFi2": 110 * 2.7, "HiFi4": 110 * 1.35}

# Compute profiles (docs/costmodel.md section 2). Blackhole has no published "out of
# box" HiFi4 figure and no model-level DRAM measurement; generic takes Wormhole's
# out-of-box share (unconfirmed) and the p150 DRAM microbenchmark with Wormhole's
# interleaved/benchmark ratio (190/267) applied (unconfirmed); tuned takes the p150
# manually tuned GEMMs (GEMM_FLOPS.md: BF16 HiFi4 168.24, BFP8 HiFi2 322.00, BFP4 LoFi
# 626.46 TFLOPS, against 110 cores here: the shares are capped at 0.95) and the p150
# DRAM microbenchmark, 500.5 GB/s of 512 (tech_reports/Saturating_DRAM_bandwidth/
# Saturating_DRAM_bandwidth_Blackhole.md). Kernel floor and dispatch: Wormhole's (unconfirmed).
# Prefetched matmuls: no Blackhole prefetcher layout is published (Prefetcher.md: "For
# other device architectures we can have one prefetch serving more or less Matmul cores"),
# so they keep the full grid (prefetch_compute_share 1.0), not Wormhole's 24 of 64.
# Kernel latencies and the prefill DRAM share are Wormhole's (wormhole.KERNEL_LATENCY_US,
# PREFILL_WEIGHT_EFFICIENCY, as a share of Blackhole's 512 GB/s): no Blackhole per-op
# measurement is in the references (unconfirmed).
GENERIC_COMPUTE = dataclasses.replace(
    wormhole.GENERIC_COMPUTE, dram_efficiency=500.5 / 512 * 190 / 267, prefetch_compute_share=1.0,
    sources=("tt-metal tech_reports/Saturating_DRAM_bandwidth/Saturating_DRAM_bandwidth_Blackhole.md",),
)
TUNED_COMPUTE = dataclasses.replace(
    wormhole.TUNED_COMPUTE, prefetch_compute_share=1.0,
    matmul_efficiency={"LoFi": min(0.95, 626.46 / 594), "HiFi2": min(0.95, 322.00 / 297),
                       "HiFi4": min(0.95, 168.24 / 148.5)},
    dram_efficiency=500.5 / 512,
    sources=("tt-metal tech_reports/GEMM_FLOPS/GEMM_FLOPS.md",
             "tt-metal tech_reports/Saturating_DRAM_bandwidth/Saturating_DRAM_bandwidth_Blackhole.md"),
)
COMPUTE = {"generic": GENERIC_COMPUTE, "tuned": TUNED_COMPUTE}

# p150: 32 GB GDDR6, 512 GB/s (section 3); binary GiB as for Wormhole (unconfirmed).
# p300, QuietBox 2, LoudBox and Galaxy chips are taken to have the p150's memory
# (unconfirmed: the references give per-chip memory for p150/p100a only).
DRAM_BYTES = 32 * 2**30
DRAM_GBPS = 512.0

# 2 links per neighbour pair: BH Galaxy descriptors (section 2); the same count on
# p300 / QuietBox 2 / LoudBox cabling is unconfirmed.
_LINE2 = AxisLinks("line", 2)


def _blackhole(name, title, chips, axis_links, sources) -> System:
    return System(
        name=name, arch="blackhole", chips=chips, meshes=tuple(axis_links), axis_links=axis_links,
        dram_bytes=DRAM_BYTES, dram_gbps=DRAM_GBPS, peak_tflops=PEAK_TFLOPS, fabric=FABRIC,
        tuned_fabric=TUNED_FABRIC, compute=COMPUTE, title=title, sources=sources,
    )


P150 = _blackhole("p150", "Blackhole p150", 1, {(1, 1): (_LINE2, _LINE2)},
                  ("docs.tenstorrent.com Blackhole specifications",))

P300 = _blackhole("p300", "Blackhole p300", 2, {(1, 2): (_LINE2, _LINE2)},
                  ("tt-metal tt_metal/fabric/mesh_graph_descriptors/p300_mesh_graph_descriptor.textproto",))

# QuietBox 2 = 2x p300c: 1x4 or 2x2 (section 1). Wired as lines (no wrap documented).
BH_QUIETBOX2 = _blackhole(
    "bh-quietbox2", "Blackhole QuietBox 2 (2x p300c)", 4,
    {(1, 4): (_LINE2, _LINE2), (2, 2): (_LINE2, _LINE2)},
    ("tenstorrent/tt-quietbox2-guide", "tt-xla tests/runner/test_models.py"),
)

# LoudBox = 8x p150b: 2x4, with a 1x8 perimeter ring (section 1, tt-metal PR 55497).
BH_LOUDBOX = _blackhole(
    "bh-loudbox", "Blackhole LoudBox (8x p150b)", 8,
    {(2, 4): (_LINE2, _LINE2), (1, 8): (_LINE2, AxisLinks("ring", 2))},
    ("docs.tenstorrent.com Blackhole multi-card topologies", "tt-metal PR 55497"),
)

BH_GALAXY = _blackhole(
    "bh-galaxy", "Blackhole Galaxy", 32, {(8, 4): (_LINE2, _LINE2)},
    ("tt-metal mesh graph descriptors",),
)

# Torus descriptors exist (single_bh_galaxy_torus_xy_graph_descriptor.textproto).
BH_GALAXY_TORUS = BH_GALAXY.with_topology("bh-galaxy-torus", "ring", "Blackhole Galaxy, torus")

SYSTEMS = [P150, P300, BH_QUIETBOX2, BH_LOUDBOX, BH_GALAXY, BH_GALAXY_TORUS]
