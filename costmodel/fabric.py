"""Time of one collective on one fabric axis: the calibrated link models.

A ``Fabric`` holds one architecture's CCL calibration. Its main model is the form of
the tt-metal fitted latency models (references/tenstorrent.md section 4, tt-metal
``tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md``)::

    t(kind, N, b) = startup + hop * hops(N) + traffic(kind, N, b) / bandwidth

    hops(N)     = N - 1 on a line, N / 2 on a ring
    traffic     = bytes on the busiest link, from the per-device INPUT bytes b:
                  all_gather (N-1)*b, reduce_scatter (N-1)/N*b,
                  all_reduce 2(N-1)/N*b, all_to_all floor(N/2)ceil(N/2)/N*b
    bandwidth   = efficiency * line_rate * links * (2 on a ring)

With one link, the Wormhole efficiencies (``wormhole.py``) are the fits' own
bandwidths divided by the line rate, so the formula *is* the fit. ``Anchor`` points (measured small-message
times) move the startup term of their (kind, topology) from their N upwards so the
model passes through them; the plain fits miss these points by up to 19%
(docs/costmodel.md).

Besides the fitted model a fabric prices:
  * ``point_to_point_all_to_all``: what tt-mlir emits for ``all_to_all``: N(N-1)
    ``ttnn.point_to_point`` transfers of b/N bytes, one op after another
    (references/tenstorrent.md section 6, tt-mlir ``TTIRToTTNN.cpp``).
  * ``alpha_beta``: a fixed sync per op + hop latency + traffic over the raw line rate;
    used for ``collective_permute`` (no measurement exists: tt-mlir cannot lower it)
    and by the simple ``alpha-beta`` cost model.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

TOPOLOGIES = ("line", "ring")
FITTED_KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


def traffic_bytes(kind: str, n: int, b: float) -> float:
    """Bytes through the busiest link for a collective over ``n`` devices.

    ``b`` is the per-device input (tt-metal ``CCLs/CCL_bandwidth.md`` states the same
    factors on the full tensor T = N*b for all_gather, T = b for the others).
    """
    if n <= 1:
        return 0.0
    if kind == "all_gather":
        return (n - 1) * b
    if kind == "reduce_scatter":
        return (n - 1) / n * b
    if kind == "all_reduce":
        return 2 * (n - 1) / n * b
    if kind == "all_to_all":
        return (n // 2) * ((n + 1) // 2) / n * b
    if kind == "collective_permute":
        return b  # each device sends its shard to one peer: one shard per link
    return 0.0


def hops(topology: str, n: int) -> float:
    """The hop term of the fits: N-1 on a line, N/2 on a ring."""
    return n / 2 if topology == "ring" else n - 1


def effective_topology(topology: str, n: int) -> str:
    """A 2-device "ring" is a line (tt-mlir ``mesh_fabric_config.cpp``, section 2)."""
    return "ring" if topology == "ring" and n > 2 else "line"


@dataclass(frozen=True)
class Startup:
    """Startup latency of one CCL kind: ``base + per_hop * hops(N)`` (microseconds)."""

    base_us: float
    line_hop_us: float
    ring_hop_us: float

    def at(self, topology: str, n: int) -> float:
        per_hop = self.ring_hop_us if topology == "ring" else self.line_hop_us
        return self.base_us + per_hop * hops(topology, n)

    def scaled(self, factor: float) -> "Startup":
        return Startup(self.base_us * factor, self.line_hop_us * factor, self.ring_hop_us * factor)


@dataclass(frozen=True)
class Anchor:
    """A measured time the model must reproduce (calibration point).

    ``bytes_per_device`` is the per-device input (for all_gather: the table's ``size``
    divided by N, because tt-metal's benchmark follows nccl-tests and reports the
    gathered output there).
    """

    kind: str
    topology: str
    devices: int
    bytes_per_device: int
    time_us: float
    source: str


@dataclass(frozen=True)
class Fabric:
    """One architecture's collective calibration.

    Attributes:
      arch: ``wormhole`` / ``blackhole``.
      line_rate_gbps: Ethernet line rate per link and direction (GB/s).
      hop_latency_us: fabric hop latency (1D fabric).
      startup: per CCL kind, the fitted startup latency.
      efficiency: per (kind, topology), fraction of ``line_rate * links * (2 on ring)``
        reached at large sizes, by measured device count (``link_efficiency`` prices the
        counts in between and beyond).
      anchors: measured points the model passes through.
      p2p_startup_us: fixed cost of one ``ttnn.point_to_point`` op.
      p2p_efficiency: fraction of one link's line rate one point-to-point transfer gets.
      sync_us: fixed per-op sync of the alpha-beta model.
    """

    arch: str
    line_rate_gbps: float
    hop_latency_us: float
    startup: dict[str, Startup] = field(hash=False)
    efficiency: dict[tuple[str, str], dict[int, float]] = field(hash=False)
    anchors: tuple[Anchor, ...] = ()
    p2p_startup_us: float = 0.0
    p2p_efficiency: float = 1.0
    sync_us: float = 5.0
    calibration_links: int = 1

    # ---- the fitted model -----------------------------------------------------------

    def __post_init__(self):
        for (kind, topology), table in self.efficiency.items():
            per_byte = [(m, traffic_bytes(kind, m, 1.0) / table[m]) for m in sorted(table)]
            for (m1, c1), (m2, c2) in zip(per_byte, per_byte[1:]):
                if c2 < c1:
                    raise ValueError(
                        f"{self.arch} {kind} {topology}: the measured rates make {m2} devices cheaper per "
                        f"byte than {m1} ({c2:.4g} < {c1:.4g} per line-rate byte); the interpolation in "
                        f"link_efficiency would make time fall with devices")
        for kind, s in self.startup.items():
            if min(s.line_hop_us, s.ring_hop_us) < 0:
                raise ValueError(f"{self.arch} {kind}: a negative hop term makes time fall with devices")

    def link_efficiency(self, kind: str, topology: str, n: int) -> float:
        """Large-size efficiency for (kind, topology, n).

        At a measured n, the measured share. Between two measured counts m1 < n < m2, the
        share that puts the bandwidth term's time per input byte, ``traffic(kind, n, 1) /
        efficiency``, on the straight line between its values at m1 and m2. Outside the
        measured range, the share of the nearest end (the time per byte still grows with
        ``traffic``). So the bandwidth term never falls as devices are added, provided the
        measured points do not (``__post_init__`` checks them); docs/costmodel.md 1.2.
        """
        table = self.efficiency.get((kind, topology)) or self.efficiency.get((kind, "line"))
        if not table:
            raise KeyError(f"{self.arch}: no efficiency for {kind} on a {topology}")
        if n in table:
            return table[n]
        measured = sorted(table)
        if n < measured[0]:
            return table[measured[0]]
        if n > measured[-1]:
            return table[measured[-1]]
        hi = next(m for m in measured if m > n)
        lo = max(m for m in measured if m < n)
        c_lo, c_hi = (traffic_bytes(kind, m, 1.0) / table[m] for m in (lo, hi))
        c_n = c_lo + (c_hi - c_lo) * (n - lo) / (hi - lo)
        return traffic_bytes(kind, n, 1.0) / c_n

    def bandwidth_gbps(self, kind: str, topology: str, n: int, links: int) -> float:
        """Bytes per second (GB/s) the busiest link's traffic drains at."""
        ring = 2 if topology == "ring" else 1
        return self.link_efficiency(kind, topology, n) * self.line_rate_gbps * links * ring

    def _fit_us(self, kind: str, topology: str, n: int, b: float, links: int) -> float:
        bw = self.bandwidth_gbps(kind, topology, n, links)
        return self.startup[kind].at(topology, n) + traffic_bytes(kind, n, b) / (bw * 1e3)

    def anchor_shift_us(self, kind: str, topology: str, n: int) -> float:
        """Startup correction that makes the model pass through a measured point.

        The anchor of the same kind and topology with the largest device count <= n
        applies: its measured offset from the fit is kept for larger groups (so time
        still grows with devices), smaller groups use the plain fit.
        """
        best = None
        for a in self.anchors:
            if a.kind == kind and effective_topology(a.topology, a.devices) == topology and a.devices <= n:
                if best is None or a.devices > best.devices:
                    best = a
        if best is None:
            return 0.0
        fit = self._fit_us(kind, topology, best.devices, best.bytes_per_device, self.calibration_links)
        return best.time_us - fit

    def fitted_us(self, kind: str, topology: str, n: int, b: float, links: int) -> float:
        """The calibrated time of a ttnn CCL over ``n`` devices of one axis."""
        if n <= 1:
            return 0.0
        topology = effective_topology(topology, n)
        return self._fit_us(kind, topology, n, b, links) + self.anchor_shift_us(kind, topology, n)

    # ---- what tt-mlir emits for all_to_all -------------------------------------------

    def point_to_point_all_to_all_us(self, topology: str, n: int, b: float, links: int) -> float:
        """N(N-1) point-to-point ops, each moving one b/N chunk, run in program order.

        Each op pays ``p2p_startup_us``, one hop latency per hop of its path, and its
        chunk over one pair's links.
        """
        if n <= 1:
            return 0.0
        topology = effective_topology(topology, n)
        pairs = n * (n - 1)
        total_hops = _total_hops(topology, n)
        chunk_us = (b / n) / (self.p2p_efficiency * self.line_rate_gbps * links * 1e3)
        return pairs * (self.p2p_startup_us + chunk_us) + total_hops * self.hop_latency_us

    # ---- the simple model --------------------------------------------------------------

    def alpha_beta_us(self, kind: str, topology: str, n: int, b: float, links: int) -> float:
        """Fixed sync + hop latency over the diameter + traffic at the raw line rate."""
        if n <= 1 or kind == "all_slice":
            return 0.0
        topology = effective_topology(topology, n)
        ring = 2 if topology == "ring" else 1
        diameter = n // 2 if topology == "ring" else n - 1
        bw = self.line_rate_gbps * links * ring
        return self.sync_us + diameter * self.hop_latency_us + traffic_bytes(kind, n, b) / (bw * 1e3)


@functools.lru_cache(maxsize=None)
def _total_hops(topology: str, n: int) -> int:
    """Hops summed over the N(N-1) ordered pairs of an axis of ``n`` devices (a few
    topologies and sizes recur in every pricing: computed once each)."""
    return sum(_distance(topology, n, i, j) for i in range(n) for j in range(n) if i != j)


def _distance(topology: str, n: int, i: int, j: int) -> int:
    d = abs(i - j)
    return min(d, n - d) if topology == "ring" else d


def mean(values) -> float:
    values = list(values)
    return math.fsum(values) / len(values)
