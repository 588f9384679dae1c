"""Wormhole systems: n150, n300, LoudBox (T3000) and Galaxy, and their CCL calibrations.

Two collective profiles (docs/costmodel.md 1.9):

- ``generic`` (``FABRIC``): the plain ``ttnn.all_gather`` / ``reduce_scatter`` /
  ``all_reduce`` ops tt-mlir emits (tt-mlir ``TTIRToTTNN.cpp``), fitted by tt-metal on
  a LoudBox (``tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md``).
- ``tuned`` (``TUNED_FABRIC``): the persistent-buffer async CCLs tt-metal's Llama-70B
  Galaxy demo runs, fitted to its measured per-op kernel times
  (``GALAXY_LLAMA70B_CCLS``, references/measurements.md section 2).

Every figure names its source; section numbers are references/tenstorrent.md's.
Adding a Wormhole system is one more ``System(...)`` in ``SYSTEMS``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import dataclasses as _dc
import math

from shard_opt.costmodel.fabric import Anchor, Fabric, Startup, hops, mean, traffic_bytes
from shard_opt.costmodel.system import AxisLinks, Compute, System, kernel_class
from shard_opt import kernels
from shard_opt.facts import OpWork, dtype_bytes

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
# count"). A line of 2 never reaches the N=4 rate: its rows plateau lower (the same file's
# n=2 linkbw column at the largest sizes: all_gather 6.36, reduce_scatter 8.92,
# all_reduce 7.42, all_to_all 6.32 GB/s), so N=2 has its own entry. No line of 3 and no
# ring other than 8 is measured: Fabric.link_efficiency interpolates a line of 3's time
# per byte between N=2 and N=4, and holds the nearest end's share outside (lines of 5 and
# more at N=4's, rings of 3 to 7 at N=8's: docs/costmodel.md 1.2).
EFFICIENCY = {
    ("all_gather", "line"): {2: _efficiency(6.36), 4: _efficiency(11.8)},
    ("all_gather", "ring"): {8: _efficiency(20.8, ring=True)},
    ("reduce_scatter", "line"): {2: _efficiency(8.92), 4: _efficiency(11.1)},
    ("reduce_scatter", "ring"): {8: _efficiency(16.7, ring=True)},
    ("all_reduce", "line"): {2: _efficiency(7.42), 4: _efficiency(10.9)},
    ("all_reduce", "ring"): {8: _efficiency(18.4, ring=True)},
    ("all_to_all", "line"): {2: _efficiency(6.32), 4: _efficiency(7.6)},
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

# ---- the tuned profile: tt-metal's Llama-70B Galaxy decode CCLs ----------------------

_GALAXY_6U = "tt-metal models/demos/llama3_70b_galaxy/tests/decoder_perf_targets_6u.json"
_GALAXY_4U = "tt-metal models/demos/llama3_70b_galaxy/tests/decoder_perf_targets_4u.json"


@dataclass(frozen=True)
class Measured:
    """One measured collective: kind, topology and links of its axis, devices, per-device
    input bytes, kernel time (us), source, and what it is used for."""

    label: str
    kind: str
    topology: str
    links: int
    devices: int
    bytes_per_device: int
    time_us: float
    source: str
    use: str = "calibration"


# Llama-3.3-70B decode, batch 32, position 127, traced, "DEVICE KERNEL DURATION" (per op,
# per decoder layer). 6U runs FABRIC_1D_RING with num_links 4, 4U FABRIC_1D (line) with
# num_links 3 (tt-metal tests/ttnn/unit_tests/operations/ccl/test_ccl_async_TG_llama.py).
# Bytes per device are the op's input, from the demo's shapes (tt-metal
# models/demos/llama3_70b_galaxy/tt/llama_attention.py, llama_mlp.py, llama_ccl.py):
# all_reduce [32, 2048] bfp8 = 64 tiles x 1088 B; reduce_scatter [32, 3840] bfp8 = 120
# tiles; all_gather [32, 960] bfp8 = 30 tiles. The two all_reduces of a layer (DO, FF2)
# have the same shape: their mean is the point.
GALAXY_LLAMA70B_CCLS = (
    Measured("AllReduceAsync_DO/FF2 (axis 0)", "all_reduce", "ring", 4, 8, 64 * 1088, (13.30 + 13.44) / 2,
             _GALAXY_6U),
    Measured("AllReduceAsync_DO/FF2 (axis 0)", "all_reduce", "line", 3, 8, 64 * 1088, (19.11 + 18.90) / 2,
             _GALAXY_4U),
    Measured("AllGatherAsync_Binary_Mult (axis 1)", "all_gather", "ring", 4, 4, 30 * 1088, 7.08, _GALAXY_6U),
    Measured("AllGatherAsync_Binary_Mult (axis 1)", "all_gather", "line", 3, 4, 30 * 1088, 9.38, _GALAXY_4U),
    Measured("ReduceScatter_FF3 (axis 1)", "reduce_scatter", "ring", 4, 4, 120 * 1088, 7.22, _GALAXY_6U),
    Measured("ReduceScatter_FF3 (axis 1)", "reduce_scatter", "line", 3, 4, 120 * 1088, 9.46, _GALAXY_4U),
)


def _fit_tuned_startup(points) -> dict[str, Startup]:
    """Per kind, the startup ``base + hop * hops(N)`` through its two points (one ring,
    one line), after the bytes term at the generic fits' link efficiencies: the tuned
    CCLs move bytes at the same link speed; what tuning removes is per-invocation and
    per-hop overhead (persistent buffers, no fabric open/close)."""
    out = {}
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        rows = [m for m in points if m.kind == kind and m.use == "calibration"]
        (r1, r2) = rows
        fixed = []
        for m in (r1, r2):
            bw = FABRIC.bandwidth_gbps(kind, m.topology, m.devices, m.links)
            fixed.append((hops(m.topology, m.devices), m.time_us - traffic_bytes(kind, m.devices, m.bytes_per_device)
                          / (bw * 1e3)))
        (h1, t1), (h2, t2) = fixed
        hop = (t2 - t1) / (h2 - h1)
        base = t1 - hop * h1
        out[kind] = Startup(base, hop, hop)
    out["all_to_all"] = STARTUP["all_to_all"]  # no tuned all_to_all is measured: the generic fit
    return out


TUNED_STARTUP = _fit_tuned_startup(GALAXY_LLAMA70B_CCLS)
TUNED_FABRIC = dataclasses.replace(FABRIC, startup=TUNED_STARTUP, anchors=())


# Per chip (section 3): 64 cores in the TT-NN compute grid x 4 / 2 / 1 TFLOPS per core at
# LoFi / HiFi2 / HiFi4.
PEAK_TFLOPS = {"LoFi": 64 * 4.0, "HiFi2": 64 * 2.0, "HiFi4": 64 * 1.0}

# 12 GB GDDR6 per chip, 288 GB/s (section 3; n300 = 2 chips, 24 GB, 576 GB/s). GDDR6
# capacities are binary, so 12 GiB (unconfirmed; the spec page says "12 GB").
DRAM_BYTES = 12 * 2**30
DRAM_GBPS = 288.0


# ---- compute profiles ------------------------------------------------------------------

_GEMM = "tt-metal tech_reports/GEMM_FLOPS/GEMM_FLOPS.md"
_LLMS = "tt-metal tech_reports/LLMs/llms.md"

# Shortest kernel: a device op takes at least this long. Fitted: the mean of the two
# smallest per-op kernels of the Llama-70B Galaxy decode layer (RotaryEmbeddingLlamaFusedQK
# 2.23 us, Binary_Mult_Silu 2.37 us; references/measurements.md section 2), which the
# roofline prices well under 1 us. Checked against BinaryDeviceOperation 2.5 us and
# Embeddings 3.3 us (tt-metal models/demos/llama3_70b_galaxy/tests/tg_perf_unit_tests/
# test_llama_ops_perf_TG_llama.py, 6U) in benchmarks/fidelity.py.
KERNEL_FLOOR_US = (2.23 + 2.37) / 2

# Op-to-op gap, traced: the mean of the 16 gaps of that layer (599-868 ns, "OP TO OP
# LATENCY" of decoder_perf_targets_6u.json). Untraced: the median of the same file's
# "non-overlapped-dispatch-time" (3.4-23 us per op); tt-metal llms.md 4.5.4 shows an
# untraced model spending 756 us between ops against 362 us on device.
DISPATCH_US = {"traced": 0.728, "untraced": 5.8, "none": 0.0}

# With weights prefetched (tenstorrent models' prefetch_weights option) a matmul runs on the
# prefetcher's receiver cores only: one prefetcher core per DRAM bank ("Each prefetcher
# core reads tensors from it's assigned DRAM bank"), each feeding "the two Matmul cores on
# the right" (tt-metal tech_reports/Prefetcher/Prefetcher.md); Wormhole has 12 DRAM banks
# (llms.md 4.3.2.2, "the 12 DRAM banks"). 2 x 12 = 24 cores: the ring matmul's 24 input
# cores (RING_CRS) of tt-metal tests/ttnn/unit_tests/operations/ccl/test_ccl_async_TG_llama.py.
# Of the 64-core compute grid (PEAK_TFLOPS).
PREFETCH_MATMUL_CORES = 12 * 2
PREFETCH_COMPUTE_SHARE = PREFETCH_MATMUL_CORES / 64

# generic: what tt-mlir compiles. At optimization level 0 it sets HiFi4 on every matmul
# (tt-mlir include/ttmlir/Dialect/TTNN/Pipelines/TTNNPipelines.h); matmuls use TTNN's
# automatic program configs (GEMM_FLOPS.md "out of box": BF16 HiFi2 4096^3 68.15 TFLOPS
# of 128, 0.53, taken for every fidelity: unconfirmed at HiFi4); tensors are DRAM
# interleaved ("A matmul can expect to read around 190 GB/s", llms.md 4.6.1).
GENERIC_COMPUTE = Compute(
    name="generic", fidelity="hifi4",
    matmul_efficiency={"LoFi": 68.15 / 128, "HiFi2": 68.15 / 128, "HiFi4": 68.15 / 128},
    dram_efficiency=190 / 288,
    # FlashAttention: no Wormhole utilisation is published as text; Blackhole's ring SDPA
    # reaches 62-70% of its math peak (from an earlier research pass; the tt-metal file it
    # came from was not recorded: unsourced); 0.65 taken for Wormhole too (unconfirmed). FlashDecode reads the KV cache at up to
    # 180 GB/s (tech_reports/FlashAttention/FlashDecode.md): replaced below by the long-context fit
    # (fit_cache_walk: the share and a time per cached position).
    sdpa_efficiency=0.65, sdpa_dram_efficiency=180 / 288,
    kernel_floor_us=KERNEL_FLOOR_US, dispatch_us=DISPATCH_US,
    sources=(_GEMM, _LLMS, "tt-mlir include/ttmlir/Dialect/TTNN/Pipelines/TTNNPipelines.h"),
    prefetch_compute_share=PREFETCH_COMPUTE_SHARE,
)

# tuned: tt-metal's hand-written models. Matmul fidelity by weight format; manually
# tuned GEMMs (GEMM_FLOPS.md, 16384^3: BF16 HiFi4 54.31 of 64, BFP8 HiFi2 102.42 of 128,
# BFP4 LoFi 199.76 of 256); DRAM-sharded decode matmuls "around 240 GB/s" (llms.md 4.6.1;
# 239-260 GB/s measured for Llama3-70B decode, Saturating_DRAM_bandwidth.md).
TUNED_COMPUTE = Compute(
    name="tuned", fidelity="format",
    matmul_efficiency={"LoFi": 199.76 / 256, "HiFi2": 102.42 / 128, "HiFi4": 54.31 / 64},
    dram_efficiency=240 / 288,
    sdpa_efficiency=0.65, sdpa_dram_efficiency=180 / 288,
    kernel_floor_us=KERNEL_FLOOR_US, dispatch_us=DISPATCH_US,
    sources=(_GEMM, _LLMS, "tt-metal tech_reports/Saturating_DRAM_bandwidth/Saturating_DRAM_bandwidth.md",
             "tt-metal models/tt_transformers/tt/model_config.py", "tt-metal tech_reports/Prefetcher/Prefetcher.md"),
    prefetch_compute_share=PREFETCH_COMPUTE_SHARE,
)
# ---- kernel latencies: fitted to tt-metal's standalone Llama-70B Galaxy decode kernels -----
#
# Small decode kernels do not run at their roofline: a [32, 2048] RMSNorm's 266 KB take 1.1 us
# at 240 GB/s, the kernel 10.9 us. ``Compute.latency_us`` is the fixed part per kernel class,
# fitted here to the standalone 6U unit kernels (one op per test, the layer's shapes), so that
# the 16 ops *inside* tt-metal's decode layer (decoder_perf_targets_6u.json, measured apart
# from these) are validation (benchmarks/fidelity.py). Sources:
#   _OPS: test_llama_ops_perf_TG_llama.py, "expected_kernel_duration_6u_us" (CI targets copied
#     from measured averages, margin 5-16%): LayerNorm 10.9 (a [32, 2048] bf16 RMSNorm on one
#     chip: pre- and post-all-gather statistics, no collective; test_llama_ops.py,
#     input_width 2048), ScaledDotProductAttentionDecode 8.18, PagedUpdateCacheDeviceOperation
#     3.67, Embeddings 3.3.
#   _RING: test_ring_matmul_perf_TG_llama.py "perf_target_us" (the run must stay under
#     target + 1.0 us): ring matmuls qkv 9.2, do 7.3, ff13 9.9, ff2 14.8, on the prefetcher's
#     24 cores (test_matmul_1d_gather_in0.py test_matmul_1d_ring_llama_perf).
# The shapes are the decode layer's per-chip shapes (benchmarks/fidelity.py GALAXY_6U_OPS;
# the unit tests' own sizes were not read beyond LayerNorm's). One constant per class: the
# matmul latency is the mean of its four residuals (4.8, 3.8, 3.2, 1.7 us: the spread is
# what one fixed term cannot follow). Not fitted to: any op inside the layer (held out),
# prefill (docs/costmodel.md 2.0: four tile rows, PREFILL_KERNELS below).
_OPS = "tt-metal models/demos/llama3_70b_galaxy/tests/tg_perf_unit_tests/test_llama_ops_perf_TG_llama.py"
_RING = "tt-metal models/demos/llama3_70b_galaxy/tests/tg_perf_unit_tests/test_ring_matmul_perf_TG_llama.py"


def _nb(shape, dtype: str) -> int:
    return int(round(math.prod(shape) * dtype_bytes(dtype)))


def _mm(m, k, n, w, a="bf16", out="bf16") -> OpWork:
    weight = _nb((k, n), w)
    return OpWork("matmul", 2 * m * k * n, _nb((m, k), a) + weight, _nb((m, n), out), weight, out, kind="matmul",
                  fidelity=None if w == "bf16" else w)


@_dc.dataclass(frozen=True)
class KernelPoint:
    """One measured standalone kernel: its label, the op (per-chip shapes), the time (us),
    the source, whether its weight comes from the prefetcher, and its use."""

    label: str
    op: OpWork
    time_us: float
    source: str
    prefetched: bool = False
    use: str = "calibration"


GALAXY_KERNELS = (
    KernelPoint("LayerNorm [32, 2048]", OpWork("norm", 4 * 32 * 2048, _nb((32, 2048), "bf16") + _nb((2048,), "bf16"),
                                                _nb((32, 2048), "bf16"), 0, "bf16", kind="norm"), 10.9, _OPS),
    KernelPoint("ScaledDotProductAttentionDecode (8 users x 8 heads, 128 positions, bfp8 KV)",
                OpWork("sdpa", 4 * 8 * 128 * 128 * 8, _nb((8, 8, 128), "bf16") + 2 * _nb((8, 1, 128, 128), "bfp8"),
                       _nb((8, 8, 128), "bf16"), 0, "bf16", kind="sdpa", kv_len=128), 8.18, _OPS),
    KernelPoint("PagedUpdateCacheDeviceOperation (K and V rows of 8 users, bfp8)",
                OpWork("update", 0, _nb((2, 8, 1, 128), "bf16"), _nb((2, 8, 1, 128), "bfp8"), 0, "bfp8",
                       kind="cache_update"), 3.67, _OPS),
    KernelPoint("Embeddings (32 rows of 2048)", OpWork("gather", 0, _nb((32, 2048), "bf16") + 32 * 4,
                                                        _nb((32, 2048), "bf16"), 0, "bf16", kind="gather"), 3.3, _OPS),
    KernelPoint("ring matmul qkv [32, 2048] x [2048, 1280] bfp8", _mm(32, 2048, 1280, "bfp8"), 9.2, _RING, True),
    KernelPoint("ring matmul do [32, 1024] x [1024, 2048] bfp8", _mm(32, 1024, 2048, "bfp8", out="bfp8"), 7.3, _RING,
                True),
    KernelPoint("ring matmul ff13 [32, 2048] x [2048, 3840] bfp4", _mm(32, 2048, 3840, "bfp4", out="bfp8"), 9.9, _RING,
                True),
    KernelPoint("ring matmul ff2 [32, 3840] x [3840, 2048] bfp8", _mm(32, 3840, 2048, "bfp8", "bfp8", "bfp8"), 14.8,
                _RING, True),
)


def roofline_us(op: OpWork, c: Compute, *, prefetched: bool = False) -> float:
    """A Wormhole kernel's roofline under profile ``c`` (the formula of
    ``TenstorrentModel._kernel_us`` without latency and floor; every calibration kernel reads
    one tile row, so no padding and the decode weight share): what the latency fit subtracts
    from each measured kernel. An attention's walk through its cache (``kv_len`` positions at
    ``sdpa_position_us``) is part of it."""
    nbytes = op.bytes_in + op.bytes_out - (op.weight_bytes if prefetched else 0)
    if kernel_class(op.kind) == kernels.SDPA.kernel_class:
        return max(op.flops / (PEAK_TFLOPS["HiFi4"] * 1e6 * c.sdpa_efficiency),
                   nbytes / (DRAM_GBPS * 1e3 * c.sdpa_dram_efficiency)) + op.kv_len * c.sdpa_position_us
    fidelity = c.fidelity_of(op.fidelity)
    share = c.prefetch_compute_share if prefetched else 1.0
    return max(op.flops / (PEAK_TFLOPS[fidelity] * 1e6 * c.matmul_efficiency[fidelity] * share),
               nbytes / (DRAM_GBPS * 1e3 * c.dram_efficiency))


def fit_latencies(points, c: Compute) -> dict[str, float]:
    """Per kernel class, the mean of (measured - roofline) over its calibration points."""
    residuals: dict[str, list[float]] = {}
    for p in points:
        if p.use == "calibration":
            residuals.setdefault(kernel_class(p.op.kind, p.op.name), []).append(
                p.time_us - roofline_us(p.op, c, prefetched=p.prefetched))
    return {k: max(0.0, mean(v)) for k, v in residuals.items()}


# ---- four tile rows: tt-metal's Llama-70B Galaxy prefill at 128 tokens ---------------------
#
# tt-metal models/demos/llama3_70b_galaxy/tests/perf_targets/prefill_128.json (targets of
# test_prefill_device_perf.py: one layer, batch 1, 128 tokens; kernel_duration in ns), per
# chip x [128, 2048]. Its matmuls run far over the decode kernels' time: after the matmul
# latency and their activations at the DRAM-sharded rate, QKV streams its 2.8 MB weight in
# 38 us and FF2 its 7.8 MB in 106 us: 73 GB/s both (the DRAM-interleaved 2-D matmuls of
# prefill, not the decode prefetcher). Another reading fits the rows too (12% of the math
# peak: bfp4 runs at LoFi, twice bfp8's rate, so the bfp4 rows cannot tell them apart); it
# would make long prompts 6x slower with nothing measured behind it, where a slow weight
# stream leaves them math bound at the large-matmul efficiency: the conservative reading.
# Fitted to QKV_MM and matmul_ffn_2 (bfp8); matmul_attn_out, matmul_ffn_1 and
# matmul_ffn_3 are held out (benchmarks/fidelity.py). These are four tile rows (128); the
# share applies from there on, and between one tile row (the decode kernels) and four the
# time per weight byte runs on a straight line (system.weight_share: no kernel at 2-3 tile
# rows is measured). Checked against Falcon-7B's whole-model N150 prefill
# (falcon7b_common/tests/test_falcon_device_perf.py): too slow for large matmuls there
# (fidelity.py notes, docs/costmodel.md 2.0), not gated.
_PREFILL = "tt-metal models/demos/llama3_70b_galaxy/tests/perf_targets/prefill_128.json"
PREFILL_KERNELS = (
    KernelPoint("prefill 128 QKV_MM [128, 2048] x [2048, 1280] bfp8", _mm(128, 2048, 1280, "bfp8"), 45.011, _PREFILL),
    KernelPoint("prefill 128 matmul_ffn_2 [128, 3584] x [3584, 2048] bfp8", _mm(128, 3584, 2048, "bfp8"), 115.297,
                _PREFILL),
)


def fit_prefill_weight_efficiency(points, latency_us: float, c: Compute) -> float:
    """The mean DRAM share at which each point's weight streams in its time, less the
    latency and its activations at ``c.dram_efficiency``."""
    def share(p):
        rest_us = (p.op.bytes_in + p.op.bytes_out - p.op.weight_bytes) / (DRAM_GBPS * 1e3 * c.dram_efficiency)
        return p.op.weight_bytes / (DRAM_GBPS * 1e3 * (p.time_us - latency_us - rest_us))
    return mean(share(p) for p in points)


# ---- decode attention through a long cache: tt_transformers' 64K-token rows ---------------
#
# tt-metal models/tt_transformers/PERF.md gives each model's decode speed (t/s/u, batch 1,
# traced) at a 128-token prompt ("Performance") and at a 64K-token prompt ("Long-context (64K
# Tokens)"), both over 200 generated tokens: mean positions 128 + 100 and 65536 + 100. Only
# the KV cache attention reads grows between them, so 1/t/s/u(64K) - 1/t/s/u(128), per decoder
# layer, is the growth of one decode SDPA kernel over 65408 positions. Per chip the kernel
# reads kv_heads_per_chip x 2 x head_dim x 1.0625 B (bfp8 cache) per position; the growth
# is not that traffic at one rate: Llama-3.1-8B grows 744, 490 and 334 us per layer with 8, 4
# and 1 KV heads per chip (N150, N300, T3K), a fixed time per position beside the traffic.
# Fitted (``fit_cache_walk``, least squares of growth per position against bytes per
# position) to the three Llama-3.1-8B rows: the time per position (one (user, KV head)
# group's walk through its cache, which more groups on the chip do not lengthen) and the
# share of the DRAM spec the traffic moves at. Unconstrained the traffic share comes out at
# 1.05 (302 GB/s); it is capped at the spec (our choice) and the per-position time refitted.
# Held out (benchmarks/fidelity.py): the 1B, 3B and 70B rows of the same tables, and the
# Galaxy Llama-70B demo's 1K-128K rows (models/demos/llama3_70b_galaxy/PERF.md).
_PERF = "tt-metal models/tt_transformers/PERF.md"
LONG_CONTEXT_POSITIONS = (128 + 100, 65536 + 100)


@_dc.dataclass(frozen=True)
class CachePoint:
    """Decode speed at a short and a long cache for one model on one system (tt_transformers
    PERF.md): the growth per decoder layer is one SDPA kernel's growth over the positions."""

    label: str
    kv_heads_per_chip: int
    head_dim: int
    layers: int
    tps_short: float
    tps_long: float
    source: str = _PERF
    use: str = "calibration"
    positions: tuple = LONG_CONTEXT_POSITIONS

    @property
    def growth_us(self) -> float:
        """Measured growth of one layer's decode step (us) from the short to the long cache."""
        return (1e6 / self.tps_long - 1e6 / self.tps_short) / self.layers

    @property
    def bytes_per_position(self) -> float:
        """KV-cache bytes one chip reads per cached position (K and V, bfp8)."""
        return self.kv_heads_per_chip * 2 * self.head_dim * dtype_bytes("bfp8")

    def sdpa(self, position: int) -> OpWork:
        """One decode SDPA kernel on one chip at ``position`` (batch 1, Llama's 4 query heads per
        KV head; the query and output are tiny beside the cache)."""
        q = _nb((self.kv_heads_per_chip * 4, self.head_dim), "bf16")
        return OpWork("sdpa", 4 * position * self.head_dim * 4 * self.kv_heads_per_chip,
                      q + int(round(position * self.bytes_per_position)), q, 0, "bf16", kind="sdpa",
                      kv_len=position)


# Llama-3.1-8B (32 layers, 8 KV heads of 128): PERF.md "Performance" 28.3 / 44.2 / 64.3 t/s/u,
# "Long-context (64K Tokens)" 16.9 / 26.1 / 38.1 t/s/u on N150 / N300 / T3K (1-D split of the
# KV heads over the chips: 8, 4, 1 per chip).
CACHE_POINTS = (
    CachePoint("Llama-3.1-8B N150 (8 KV heads per chip)", 8, 128, 32, 28.3, 16.9),
    CachePoint("Llama-3.1-8B N300 (4 KV heads per chip)", 4, 128, 32, 44.2, 26.1),
    CachePoint("Llama-3.1-8B T3K (1 KV head per chip)", 1, 128, 32, 64.3, 38.1),
)


def fit_cache_walk(points) -> tuple[float, float]:
    """(us per cached position, DRAM share of the cache traffic) from the calibration points:
    growth / positions = per_position + bytes_per_position / (share x spec), least squares;
    a share above 1 is capped at the spec and the per-position time refitted to the mean."""
    rows = [(p.bytes_per_position, p.growth_us / (p.positions[1] - p.positions[0])) for p in points
            if p.use == "calibration"]
    mx, my = mean(x for x, _ in rows), mean(y for _, y in rows)
    slope = sum((x - mx) * (y - my) for x, y in rows) / sum((x - mx) ** 2 for x, _ in rows)
    share = 1.0 / (slope * DRAM_GBPS * 1e3)
    if share > 1.0:
        share = 1.0
        slope = 1.0 / (DRAM_GBPS * 1e3)
    return mean(y - slope * x for x, y in rows), share


SDPA_POSITION_US, SDPA_KV_SHARE = fit_cache_walk(CACHE_POINTS)
GENERIC_COMPUTE = _dc.replace(GENERIC_COMPUTE, sdpa_dram_efficiency=SDPA_KV_SHARE, sdpa_position_us=SDPA_POSITION_US)
TUNED_COMPUTE = _dc.replace(TUNED_COMPUTE, sdpa_dram_efficiency=SDPA_KV_SHARE, sdpa_position_us=SDPA_POSITION_US)


# Fitted on the tuned profile (the measured programs are tt-metal's). The generic profile
# takes the same latencies: a tt-mlir TTNN kernel pays at least the fixed cost of the tuned
# kernel of its class (unconfirmed: no per-op tt-mlir measurement is published).
# The prefill share likewise: tt-mlir's DRAM-interleaved prefill matmuls are not known to
# read faster than tt-metal's (unconfirmed), and a generic share above the tuned one would
# price the compiler's program faster than the hand-tuned one.
KERNEL_LATENCY_US = fit_latencies(GALAXY_KERNELS, TUNED_COMPUTE)
PREFILL_WEIGHT_EFFICIENCY = fit_prefill_weight_efficiency(PREFILL_KERNELS, KERNEL_LATENCY_US["matmul"], TUNED_COMPUTE)
GENERIC_COMPUTE = _dc.replace(GENERIC_COMPUTE, latency_us=KERNEL_LATENCY_US,
                              prefill_weight_efficiency=PREFILL_WEIGHT_EFFICIENCY,
                              sources=GENERIC_COMPUTE.sources + (_OPS, _RING, _PREFILL, _PERF))
TUNED_COMPUTE = _dc.replace(TUNED_COMPUTE, latency_us=KERNEL_LATENCY_US, prefill_weight_efficiency=PREFILL_WEIGHT_EFFICIENCY,
                            sources=TUNED_COMPUTE.sources + (_OPS, _RING, _PREFILL, _PERF))
COMPUTE = {"generic": GENERIC_COMPUTE, "tuned": TUNED_COMPUTE}


def _wormhole(name, title, chips, axis_links, sources, refused=None) -> System:
    return System(
        name=name, arch="wormhole", chips=chips, meshes=tuple(axis_links), axis_links=axis_links,
        dram_bytes=DRAM_BYTES, dram_gbps=DRAM_GBPS, peak_tflops=PEAK_TFLOPS, fabric=FABRIC,
        tuned_fabric=TUNED_FABRIC, compute=COMPUTE, title=title, sources=sources,
        refused_meshes=refused or {},
    )


# The loaders' get_mesh_config(32) asks for 1x32 (tt-forge-models), which tt-mlir accepts
# but a Wormhole Galaxy cannot run (tt-metal issue 43749).
_GALAXY_REFUSED = {(1, 32): "all_reduce on a Galaxy 1x32 mesh hangs: tt-metal issue 43749"}


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
    _GALAXY_REFUSED,
)

# Some hosts wrap the Galaxy axes (tt-xla PR 5383): the ring-per-axis option.
WH_GALAXY_RING = WH_GALAXY.with_topology("wh-galaxy-ring", "ring", "Wormhole Galaxy, ring on each axis")

# The 6U Galaxy tt-metal's Llama-70B demo is measured on: a ring of 4 links on each axis
# (FABRIC_1D_RING, num_links 4: tt-metal tests/ttnn/unit_tests/operations/ccl/test_ccl_async_TG_llama.py).
_RING4 = AxisLinks("ring", 4)
WH_GALAXY_6U = _wormhole(
    "wh-galaxy-6u", "Wormhole Galaxy 6U (ring of 4 links on each axis)", 32,
    {(8, 4): (_RING4, _RING4), (4, 8): (_RING4, _RING4)},
    ("tt-metal tests/ttnn/unit_tests/operations/ccl/test_ccl_async_TG_llama.py",),
    _GALAXY_REFUSED,
)

SYSTEMS = [N150, N300, WH_LOUDBOX, WH_GALAXY, WH_GALAXY_RING, WH_GALAXY_6U]
