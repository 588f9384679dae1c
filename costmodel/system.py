"""A hardware preset: chips, mesh shapes, links per mesh axis, DRAM, compute peaks.

``System.collective_time_us`` prices one collective on one (or several) mesh axes;
``System.compute_time_us`` is the per-op roofline. Cost models build on these two.
Presets live one family per file (``wormhole.py``, ``blackhole.py``); the registry is
``shard_opt.costmodel.registry``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from shard_opt.costmodel.fabric import TOPOLOGIES, Fabric, effective_topology
from shard_opt import kernels
from shard_opt.errors import UserError
from shard_opt.facts import COLLECTIVE_KINDS

DEFAULT_AXIS_NAMES = ("batch", "model")  # tt-xla's names (references/tenstorrent.md section 1)

CCL_PROFILES = ("generic", "tuned")  # docs/costmodel.md 1.9

# Math fidelity a block-float weight's matmul runs at in tt-metal's models: BFP8 with
# HiFi2, BFP4 with LoFi (tt-metal models/tt_transformers/tt/model_config.py, performance
# mode: FF1/FF3 BFP4 + LoFi, the rest BFP8 + HiFi2; GEMM_FLOPS.md pairs BF16 with
# HiFi4). 8-bit float / int at LoFi is ours (unconfirmed).
FORMAT_FIDELITY = {"bfp8": "HiFi2", "bfp4": "LoFi", "f8E4M3FN": "LoFi", "f8E5M2": "LoFi", "i8": "LoFi", "ui8": "LoFi"}


@dataclass(frozen=True)
class Compute:
    """How one software path uses a chip: one compute profile's calibration
    (docs/costmodel.md section 2). Each architecture file defines its profiles.

    Attributes:
      name: ``generic`` (what tt-mlir compiles) or ``tuned`` (tt-metal's hand-written models).
      fidelity: ``hifi4``: every matmul at HiFi4 (tt-mlir at optimization level 0 sets
        HiFi4 on every matmul); ``format``: by the weight's format (``FORMAT_FIDELITY``).
      matmul_efficiency: per math fidelity, the share of its peak a large matmul reaches.
      dram_efficiency: the share of spec DRAM bandwidth an op's reads and writes reach.
      sdpa_efficiency: the share of the HiFi4 peak a flash attention kernel reaches.
      sdpa_dram_efficiency: the DRAM share of a flash decode kernel (reading the KV cache).
      kernel_floor_us: the shortest kernel: a device op takes at least this long.
      dispatch_us: the op-to-op gap every device op pays, ``traced`` and ``untraced``.
      sources: where the figures come from.
      prefetch_compute_share: with prefetched weights (the ``prefetch_weights`` option:
        tt-metal's DRAM prefetcher), the share of the compute grid a matmul runs on -- the
        prefetcher's receiver cores; 1.0 where no layout is published (the full grid).
      latency_us: per kernel class (``KERNEL_CLASSES``: ``matmul``, ``norm``, ``sdpa``,
        ``cache_update``, ``gather``), the fixed time a kernel of that class takes on top
        of its roofline (program start on its cores, circular-buffer setup, cross-core
        reductions and ring passes). Fitted to decode kernels (one tile row of
        activations, docs/costmodel.md 2.0); a class not listed has none (the roofline,
        at least ``kernel_floor_us``).
      prefill_weight_efficiency: the DRAM share at which a matmul of ``PREFILL_TILES``
        or more tile rows streams its weight (its activations keep ``dram_efficiency``);
        from one tile row (``dram_efficiency``) to ``PREFILL_TILES`` the time per weight
        byte rises linearly in tile rows (``weight_share``). None: every matmul streams
        its weight at ``dram_efficiency``.
      sdpa_position_us: a fused attention's time per cached position it walks
        (``OpWork.kv_len``), on top of its roofline: the serial chain of one (user, KV
        head) group through its cache, which more heads per chip do not lengthen (fitted
        to tt_transformers' long-context decode, docs/costmodel.md 2.0).
    """

    name: str
    fidelity: str
    matmul_efficiency: dict[str, float] = field(hash=False, compare=False)
    dram_efficiency: float
    sdpa_efficiency: float
    sdpa_dram_efficiency: float
    kernel_floor_us: float
    dispatch_us: dict[str, float] = field(hash=False, compare=False)
    sources: tuple[str, ...] = ()
    prefetch_compute_share: float = 1.0
    latency_us: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    prefill_weight_efficiency: float | None = None
    sdpa_position_us: float = 0.0

    def fidelity_of(self, weight_format: str | None) -> str:
        if self.fidelity == "hifi4":
            return "HiFi4"
        return FORMAT_FIDELITY.get(weight_format or "", "HiFi4")


COMPUTE_PROFILES = ("generic", "tuned")

# The kernel classes ``Compute.latency_us`` is keyed by (``kernel_class``; each op kind's
# class is its entry in shard_opt.kernels).
KERNEL_CLASSES = tuple(dict.fromkeys(k.kernel_class for k in kernels.KERNELS if k.kernel_class))

# Tenstorrent tensors are stored in 32x32 tiles (tt-metal tt_metal/api/tt-metalium/
# constants.hpp TILE_HEIGHT = TILE_WIDTH = 32): a matmul's activation rows on one device
# are padded up to whole tiles, so 16 rows cost the math, the activation traffic and the
# weight stream of 32 (docs/costmodel.md 2.0).
TILE_ROWS = 32

# The tile rows of the two measured matmul regimes: the decode kernels the latencies were
# fitted to read one tile row (batch 32 or less); the prefill kernels the prefill weight
# share was fitted to read four (tt-metal's Llama-70B Galaxy prefill at 128 tokens). The
# time per weight byte runs linearly in tile rows between them (``weight_share``): no
# kernel at 2 or 3 tile rows is measured, so the straight line is our assumption.
PREFILL_TILES = 4


def tile_rows(rows: float) -> int:
    """``rows`` activation rows on one device, padded up to whole tiles (at least one)."""
    return TILE_ROWS * max(1, math.ceil(rows / TILE_ROWS - 1e-9))


def tile_padding(shape) -> float:
    """How much larger a tensor of ``shape`` is laid out in 32x32 tiles than its elements,
    read as rows (every dim but the last, flattened: a decode step's users are rows, as
    tt-metal lays them out) by columns (the last dim), each padded up to a multiple of 32:
    a one-token [1, 1, 4096] moves as [32, 4096]. 1 for a scalar. Optimistic where the
    compiled program keeps a [users, 1, hidden] tensor 3-D (each user's row then pads to a
    tile of its own: not modeled)."""
    shape = tuple(shape)
    if not shape or 0 in shape:
        return 1.0
    rows, cols = math.prod(shape[:-1]), shape[-1]
    return tile_rows(rows) * tile_rows(cols) / (rows * cols)


def weight_share(tiles: float, decode: float, prefill: float | None) -> float:
    """The DRAM share a matmul of ``tiles`` tile rows streams its weight at: ``decode`` at
    one tile row, ``prefill`` from ``PREFILL_TILES`` on, and between them the share whose
    time per byte lies on the straight line between the two (continuous in tile rows, never
    faster as rows are added while ``prefill <= decode``)."""
    if prefill is None:
        return decode
    x = min(1.0, max(0.0, (tiles - 1) / (PREFILL_TILES - 1)))
    return 1.0 / ((1 - x) / decode + x / prefill)


def kernel_class(kind: str, name: str = "") -> str:
    """The ``KERNEL_CLASSES`` entry of a device op (its ``OpWork.kind``), or ``""``: its
    ``shard_opt.kernels`` entry's (matmul-like fused groups are ``matmul``; ``cache_update``
    is the KV-cache append of a decode step, ``shard_opt.analysis``). ``name`` is accepted
    for callers that have it."""
    return kernels.of(kind).kernel_class

# Usable share of DRAM: the rest is left to firmware, dispatch, program cache and
# fragmentation. Our choice, unconfirmed by a measurement.
USABLE_DRAM_FRACTION = 0.9


@dataclass(frozen=True)
class AxisLinks:
    """How one mesh axis is wired: a line or a ring, and parallel links per neighbour pair."""

    topology: str
    links: int

    def __str__(self) -> str:
        return f"{self.topology}/{self.links} link{'s' if self.links != 1 else ''}"


@dataclass(frozen=True)
class System:
    """A hardware preset.

    Attributes:
      name: registry name (``wh-loudbox``).
      arch: ``wormhole`` or ``blackhole``.
      chips: number of chips.
      meshes: supported logical mesh shapes, default first.
      axis_links: per mesh shape, per mesh dim, its ``AxisLinks``.
      dram_bytes: DRAM per chip.
      dram_gbps: DRAM bandwidth per chip (spec).
      peak_tflops: per chip, matmul peak per math fidelity (LoFi, HiFi2, HiFi4).
      fabric: the architecture's CCL calibration for the ``generic`` profile (the plain
        TTNN CCL ops tt-mlir emits).
      tuned_fabric: the calibration of the ``tuned`` profile (tt-metal's hand-tuned
        persistent CCLs); None where no tuned CCL is measured (the generic one is used).
      compute: the compute profiles (``generic``, ``tuned``) of the architecture.
      title: product name for ``describe``.
      sources: where the figures come from.
      refused_meshes: mesh shapes tt-mlir accepts that this system must not run, with
        the cited reason (the error names it).
    """

    name: str
    arch: str
    chips: int
    meshes: tuple[tuple[int, ...], ...]
    axis_links: dict[tuple[int, ...], tuple[AxisLinks, ...]] = field(hash=False, compare=False)
    dram_bytes: int
    dram_gbps: float
    peak_tflops: dict[str, float] = field(hash=False, compare=False)
    fabric: Fabric = field(hash=False, compare=False)
    tuned_fabric: Fabric | None = field(default=None, hash=False, compare=False)
    compute: dict[str, Compute] = field(default_factory=dict, hash=False, compare=False)
    title: str = ""
    sources: tuple[str, ...] = ()
    refused_meshes: dict[tuple[int, ...], str] = field(default_factory=dict, hash=False, compare=False)

    # ---- description -------------------------------------------------------------------

    @property
    def default_mesh(self) -> tuple[int, ...]:
        return self.meshes[0]

    @property
    def usable_dram_bytes(self) -> float:
        return USABLE_DRAM_FRACTION * self.dram_bytes

    def describe(self) -> str:
        """One line for ``--list-systems``."""
        def wiring(m):
            axes = [f"{a.topology} of {n}, {a.links} link{'s' if a.links != 1 else ''}"
                    for n, a in zip(m, self.axis_links[m]) if n > 1]
            return "x".join(map(str, m)) + (f" ({' x '.join(axes)})" if axes else "")

        meshes = ", ".join(wiring(m) for m in self.meshes)
        return (
            f"{self.name}: {self.title or self.arch} - {self.chips} {self.arch.capitalize()} chip"
            f"{'s' if self.chips != 1 else ''}; meshes {meshes}; {self.dram_bytes / 2**30:.0f} GiB "
            f"{self.dram_gbps:.0f} GB/s DRAM and {self.peak_tflops['HiFi4']:.0f} TFLOPS HiFi4 "
            f"({self.peak_tflops['LoFi']:.0f} LoFi) per chip; links {self.fabric.line_rate_gbps:g} GB/s"
        )

    def with_topology(self, name: str, topology: str, title: str = "") -> "System":
        """The same system with every mesh axis of more than 2 devices wired as ``topology``."""
        links = {
            m: tuple(AxisLinks(topology if s > 2 else a.topology, a.links) for a, s in zip(axes, m))
            for m, axes in self.axis_links.items()
        }
        return dataclasses.replace(self, name=name, axis_links=links, title=title or self.title)

    # ---- topology ------------------------------------------------------------------------

    def links_for(self, mesh_shape: tuple[int, ...] | None = None) -> tuple[AxisLinks, ...]:
        """The ``AxisLinks`` of each dim of ``mesh_shape`` (default: the default mesh).

        A shape the preset does not list but that fits in its chips is wired as lines
        with the fewest links any of its axes has (a sub-mesh: conservative).
        """
        shape = tuple(mesh_shape) if mesh_shape is not None else self.default_mesh
        if shape in self.axis_links:
            return self.axis_links[shape]
        if math.prod(shape) > self.chips:
            raise UserError(
                f"mesh {'x'.join(map(str, shape))} needs {math.prod(shape)} chips; {self.name} has "
                f"{self.chips} (see shard-opt --list-systems)"
            )
        fewest = min((a.links for axes in self.axis_links.values() for a in axes), default=1)
        return tuple(AxisLinks("line", fewest) for _ in shape)

    def group_wiring(self, devices: int, mesh_shape: tuple[int, ...] | None = None) -> AxisLinks:
        """The wiring a collective over a group of ``devices`` chips is priced on when only
        its size is known (an integer ``axis``: sub-axes, what-if studies).

        The group is placed inside a mesh axis that holds it (at least ``devices`` long)
        where it gets the most links per pair, as a line; an axis of exactly its size wins
        a tie and keeps its own topology (the minor axis first). A group longer
        than every axis crosses axes: a line on the fewest links any axis has. Every axis
        that holds ``devices + 1`` chips holds ``devices`` too, so links never grow with
        the group and time never falls with it: on a Wormhole Galaxy 8x4 (4 links on the
        8-long axis, 3 on the 4-long one: tt-metal LLMs/llms.md 3.3.1) groups of 2 to 8
        get 4 links and larger ones 3 (docs/costmodel.md 1.7).
        """
        shape = tuple(mesh_shape) if mesh_shape is not None else self.default_mesh
        wiring = self.links_for(shape)
        holders = [(a.links, size == devices, dim) for dim, (size, a) in enumerate(zip(shape, wiring))
                   if size >= devices]
        if not holders:
            return AxisLinks("line", min((a.links for a in wiring), default=1))
        links, exact, dim = max(holders)
        return wiring[dim] if exact else AxisLinks("line", links)

    def _axis_groups(self, axis, mesh_shape, axis_names) -> list[tuple[int, AxisLinks]]:
        """(size, links) of each mesh axis a collective runs over, in order."""
        shape = tuple(mesh_shape) if mesh_shape is not None else self.default_mesh
        wiring = self.links_for(shape)
        if axis_names:
            names = tuple(axis_names)
        else:
            names = DEFAULT_AXIS_NAMES[-len(shape):] if len(shape) <= 2 else ()
        if isinstance(axis, bool):
            raise UserError(f"axis {axis!r}: give an axis name, a list of names or a device count")
        if isinstance(axis, int):
            if axis <= 1:
                return []
            return [(axis, self.group_wiring(axis, shape))]
        axes = [axis] if isinstance(axis, str) else list(axis)
        out = []
        for a in axes:
            if a not in names:
                raise UserError(
                    f"{self.name}: mesh axis {a!r} is not one of {', '.join(names) or '(none)'} "
                    f"of mesh {'x'.join(map(str, shape))}"
                )
            dim = names.index(a)
            out.append((shape[dim], wiring[dim]))
        return out

    # ---- time ----------------------------------------------------------------------------

    def collective_time_us(
        self, kind: str, bytes_per_device: float, axis, mesh_shape: tuple[int, ...] | None = None, *,
        axis_names: tuple[str, ...] | None = None, topology: str | None = None,
        allow_collective_permute: bool = False, native_all_to_all: bool = False,
        alpha_beta: bool = False, profile: str = "generic",
    ) -> float:
        """Modeled time (us) of one collective, as tt-mlir lowers it.

        Args:
          kind: one of ``shard_opt.facts.COLLECTIVE_KINDS``.
          bytes_per_device: per-device INPUT bytes (the ``b`` of the tt-metal fits).
          axis: a mesh axis name (``"batch"``/``"model"`` = dims 0/1 with the default
            names), a device count, or a list of axis names. A multi-axis collective
            runs as one CCL per axis, in the listed order (TTIR/TTNN CCLs take one
            ``cluster_axis``): all_gather's input grows by each axis size, reduce_scatter's
            shrinks, all_reduce and all_to_all repeat on the same bytes.
          mesh_shape: the mesh (default: the system's default mesh).
          axis_names: names of the mesh dims (default ``batch, model``).
          topology: force ``line`` or ``ring`` on every axis (what-if studies).
          allow_collective_permute: price collective_permute with the alpha-beta model
            instead of returning ``inf`` (tt-mlir cannot lower it, issue 3370).
          native_all_to_all: price all_to_all as one ttnn all_to_all (the fitted model)
            instead of the N(N-1) point-to-point ops tt-mlir emits today.
          profile: ``generic`` (the TTNN CCL ops tt-mlir emits) or ``tuned``
            (tt-metal's persistent CCLs, where measured; see ``fabric_for``).

        Example (8 KiB all_reduce over the 4-chip "model" line of a LoudBox's 2x4)::

            get_system("wh-loudbox").collective_time_us("all_reduce", 8192, "model")  # 25.19
        """
        if kind not in COLLECTIVE_KINDS:
            raise UserError(f"unknown collective kind {kind!r}; kinds: {', '.join(COLLECTIVE_KINDS)}")
        if kind == "all_slice":
            return 0.0  # a local slice of a replicated value (tt-mlir ShardyToTTIRPatterns.cpp)
        groups = self._axis_groups(axis, mesh_shape, axis_names)
        if topology is not None:
            if topology not in TOPOLOGIES:
                raise UserError(f"topology {topology!r}: expected one of {', '.join(TOPOLOGIES)}")
            groups = [(n, AxisLinks(topology, links.links)) for n, links in groups]
        elif isinstance(axis, int) and not isinstance(axis, bool) and axis > 1 and kind != "collective_permute":
            # A group inside a ring axis longer than itself may run as that ring's collective
            # (the chips outside the group forward on the fabric), so it never costs more
            # than the whole ring: 7 chips of an 8-ring are priced at most as the 8-ring
            # (docs/costmodel.md 1.7).
            options = dict(allow_collective_permute=allow_collective_permute, native_all_to_all=native_all_to_all,
                           alpha_beta=alpha_beta, profile=profile, axis_names=axis_names)
            shape = tuple(mesh_shape) if mesh_shape is not None else self.default_mesh
            rings = [size for size, a in zip(shape, self.links_for(shape))
                     if size > axis and effective_topology(a.topology, size) == "ring"
                     and a.links >= self.group_wiring(axis, shape).links]
            own = self.collective_time_us(kind, bytes_per_device, axis, shape, topology=self.group_wiring(
                axis, shape).topology, **options)
            return min([own] + [self.collective_time_us(kind, bytes_per_device, m, shape, topology="ring", **options)
                                for m in rings])
        groups = [(n, links) for n, links in groups if n > 1]
        if not groups:
            return 0.0
        fabric = self.fabric_for(profile)
        if kind == "collective_permute":
            if not allow_collective_permute:
                return math.inf  # "not implemented yet" in tt-mlir (issue 3370)
            n = math.prod(g for g, _ in groups)
            links = min(li.links for _, li in groups)
            topo = groups[0][1].topology if len(groups) == 1 else "line"
            return fabric.alpha_beta_us(kind, topo, n, bytes_per_device, links)
        total, b = 0.0, float(bytes_per_device)
        for n, links in groups:
            topo = effective_topology(links.topology, n)
            if alpha_beta:
                total += fabric.alpha_beta_us(kind, topo, n, b, links.links)
            elif kind == "all_to_all" and not native_all_to_all:
                total += fabric.point_to_point_all_to_all_us(topo, n, b, links.links)
            else:
                total += fabric.fitted_us(kind, topo, n, b, links.links)
            if kind == "all_gather":
                b *= n
            elif kind == "reduce_scatter":
                b /= n
        return total

    def fabric_for(self, profile: str) -> Fabric:
        """The CCL calibration of ``profile``: ``generic`` or ``tuned`` (the generic one
        where the architecture has no tuned measurement)."""
        if profile not in CCL_PROFILES:
            raise UserError(f"unknown collective profile {profile!r}; use one of {', '.join(CCL_PROFILES)}")
        return self.tuned_fabric if profile == "tuned" and self.tuned_fabric is not None else self.fabric

    def compute_profile(self, name: str) -> Compute:
        if name not in self.compute:
            raise UserError(f"unknown compute profile {name!r}; use one of {', '.join(self.compute) or 'none'}")
        return self.compute[name]

    def peak_flops_per_us(self, fidelity: str) -> float:
        """Matmul peak of one chip at a math fidelity (LoFi, HiFi2, HiFi4), in FLOPs per us."""
        return self.peak_tflops[fidelity] * 1e6

    def dram_us(self, nbytes: float, efficiency: float) -> float:
        """Time to move ``nbytes`` through one chip's DRAM at ``efficiency`` of its spec bandwidth."""
        return nbytes / (self.dram_gbps * 1e3 * efficiency)

    def compute_time_us(self, flops: float, nbytes: float, *, fidelity: str = "HiFi4", profile: str = "generic",
                        floor: bool = True) -> float:
        """Roofline time (us) of one op on one chip: the slower of math and DRAM traffic,
        at least the profile's shortest kernel. ``flops`` and ``nbytes`` (operands read +
        results written) are per chip. No kernel latency (it has no op class): the cost
        models price ops through ``TenstorrentModel.kernel_us``."""
        c = self.compute_profile(profile)
        math_us = flops / (self.peak_flops_per_us(fidelity) * c.matmul_efficiency[fidelity])
        t = max(math_us, self.dram_us(nbytes, c.dram_efficiency))
        return max(t, c.kernel_floor_us) if floor else t
