"""``tenstorrent`` and ``tenstorrent-tuned``: the calibrated models.

Two profiles of the same model (docs/costmodel.md 1.9 and 2):

- ``tenstorrent`` (default): the program tt-xla runs today. Collectives are the plain
  TTNN ops tt-mlir emits (the LoudBox-fitted ``generic`` profile); matmuls run at HiFi4
  (tt-mlir's optimization level 0) with TTNN's automatic configs, on DRAM-interleaved
  tensors.
- ``tenstorrent-tuned``: what tt-metal's hand-written models reach: persistent async
  collectives (fitted to the Llama-70B Galaxy decode), fidelity by weight format,
  tuned GEMMs, DRAM-sharded weights.

Collectives: the fitted tt-metal CCL models per mesh axis (``fabric.py``), priced as
tt-mlir lowers them (all_to_all as N(N-1) point-to-point ops, all_slice free,
collective_permute ``inf`` unless allowed).

Compute: a roofline per device op, at least the shortest kernel::

    op_us = max(latency_us[class] + max(flops / (peak(fidelity) * matmul_efficiency[fidelity]),
                                        (bytes_in + bytes_out) / (dram_gbps * dram_efficiency)),
                kernel_floor_us)

``latency_us`` is the fixed time of a kernel class (matmul, norm, sdpa, KV-cache update,
gather), fitted to tt-metal's standalone decode kernels (``wormhole.GALAXY_KERNELS``).
Activation rows are padded to whole 32-row tiles on each device. The latencies are the
decode kernels' (one tile row); a matmul streams its weight at a share that runs, per
tile row, from ``dram_efficiency`` at one tile row to ``prefill_weight_efficiency`` (fitted
to tt-metal's 128-token Galaxy prefill, four tile rows) and stays there; its activations
move at ``dram_efficiency``; long prompts are math bound and keep the large-matmul
efficiency (docs/costmodel.md 2.0). No regime switches at a row count: 33 rows cost one
tile row more than 32, not a different kernel.

A fused attention (``sdpa``) reaches ``sdpa_efficiency`` of the HiFi4 peak, reads its KV
at ``sdpa_dram_efficiency`` and walks its cache at ``sdpa_position_us`` per position
(``OpWork.kv_len``). Every device op and every collective also pays the op-to-op gap
(``dispatch``: ``traced``, ``untraced`` or ``none``).

Under the generic profile (the program tt-mlir compiles) the step also pays for the device
ops TTNN runs that no priced op stands for -- layout and data movement, 2-3x the priced ops
on the checked zoo -- each at the shortest kernel plus the op-to-op gap
(``unpriced_op_us``). Their number is estimated from the module's graph
(``costmodel/ttnn_ops.py``, per priced op class and collective, calibrated on the checked
zoo); the tt-mlir check replaces the estimate with the count it reads from the TTNN IR
(``shard_opt.ttmlir.check.checked_cost``), so the checked and the unchecked costs are the
same sum. The tuned profile prices tt-metal's own programs and charges none (``layout_ops``).

Weights are read from DRAM by every op that uses them, so at small batch (decode) the time
is weight-read bound: a replicated weight makes every chip read all of it, a weight split
N ways is read N times faster. With ``prefetch_weights`` (tt-metal's Galaxy Llama demo:
a DRAM prefetcher streams matmul weights on dedicated cores while the rest of the layer
runs, tt-metal ``tech_reports/Prefetcher/Prefetcher.md``), a step takes the longer of
streaming every matmul weight once and everything else; a matmul then reads its weight
from L1 and runs on the cores the prefetcher feeds (``Compute.prefetch_compute_share``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from shard_opt.costmodel.cost_model import CostModel, collective_axis, memory_per_device
from shard_opt.costmodel.system import (CCL_PROFILES, COMPUTE_PROFILES, PREFILL_TILES, TILE_ROWS, System,
                                        kernel_class, tile_padding, tile_rows, weight_share)
from shard_opt.costmodel.ttnn_ops import estimated_extra_ops
from shard_opt import kernels
from shard_opt.errors import UserError
from shard_opt.facts import Collective, Cost, ModuleFacts, OpWork

MATMUL_KINDS = tuple(k.kind for k in kernels.KERNELS if k.is_matmul)  # priced as a matmul (shard_opt.kernels)
DISPATCH = ("traced", "untraced", "none")


@dataclass(frozen=True)
class TenstorrentModel(CostModel):
    """Calibrated collectives + per-op roofline compute.

    Attributes:
      ccl_profile: ``generic`` (tt-mlir's TTNN CCLs) or ``tuned`` (tt-metal's).
      compute_profile: ``generic`` or ``tuned`` (the architecture's ``Compute``).
      dispatch: the op-to-op gap: ``traced`` (default; tt-xla's benchmarks trace),
        ``untraced`` (tt-xla's own default) or ``none``.
      prefetch_weights: matmul weight reads overlap the rest of the step.
      matmul_efficiency, dram_efficiency: override the profile's shares (None: keep).
      native_all_to_all: price all_to_all as one ttnn all_to_all (tt-metal fit) instead
        of tt-mlir's N(N-1) point-to-point ops.
      layout_ops: charge the estimated layout / data-movement ops TTNN runs beyond the
        priced ones (generic profile only; ``charges_layout_ops``).
    """

    name = "tenstorrent"
    summary = "The tt-xla path: tt-mlir's TTNN CCLs (LoudBox fits) + per-op roofline at HiFi4 (default)"

    ccl_profile: str = "generic"
    compute_profile: str = "generic"
    dispatch: str = "traced"
    prefetch_weights: bool = False
    matmul_efficiency: float | None = None
    dram_efficiency: float | None = None
    native_all_to_all: bool = False
    layout_ops: bool = True

    def __post_init__(self):
        for option, value, allowed in (("ccl_profile", self.ccl_profile, CCL_PROFILES),
                                       ("compute_profile", self.compute_profile, COMPUTE_PROFILES),
                                       ("dispatch", self.dispatch, DISPATCH)):
            if value not in allowed:
                raise UserError(f"cost model {self.name}: {option}={value!r}; use one of {', '.join(allowed)}")

    def collective_us(self, c: Collective, facts: ModuleFacts, system: System) -> float:
        # a tilized tensor moves whole 32x32 tiles: a decode step's [1, 4096] row moves as [32, 4096]
        nbytes = c.bytes_per_device * tile_padding(c.in_local_shape)
        t = system.collective_time_us(
            c.kind, nbytes, collective_axis(c, facts), facts.mesh_shape,
            axis_names=facts.mesh_axes, allow_collective_permute=self.allow_collective_permute,
            native_all_to_all=self.native_all_to_all, profile=self.ccl_profile,
        )
        return t + self._gap(system) if t > 0 else t

    def op_us(self, op: OpWork, system: System) -> float:
        return self.kernel_us(op, system) + self._gap(system)

    def kernel_us(self, op: OpWork, system: System, *, prefetched: bool = False) -> float:
        """One op's kernel time, without the op-to-op gap. ``prefetched``: a matmul's weight
        comes from the prefetcher, as ``price`` charges it under ``prefetch_weights`` (the
        weight's stream is priced against the whole step, not here)."""
        if prefetched and op.kind in MATMUL_KINDS and op.weight_bytes:
            c = system.compute_profile(self.compute_profile)
            return self._kernel_us(op, system, op.bytes_in + op.bytes_out - op.weight_bytes,
                                   c.prefetch_compute_share, weight_bytes=0)
        return self._kernel_us(op, system, op.bytes_in + op.bytes_out, weight_bytes=op.weight_bytes)

    def _gap(self, system: System) -> float:
        return system.compute_profile(self.compute_profile).dispatch_us[self.dispatch]

    def charges_layout_ops(self) -> bool:
        """Whether ``price`` adds the estimated unpriced TTNN ops (the compiler's program)."""
        return self.layout_ops and self.compute_profile == "generic"

    def unpriced_op_us(self, system: System) -> float:
        """One device op the compute model has no op for (a layout or data-movement op):
        the shortest kernel plus the op-to-op gap (docs/costmodel.md 2.6)."""
        return system.compute_profile(self.compute_profile).kernel_floor_us + self._gap(system)

    def layout(self, facts: ModuleFacts, system: System) -> tuple[float, float]:
        """(estimated unpriced TTNN ops per step, their time in us) for ``facts``."""
        if not self.charges_layout_ops():
            return 0.0, 0.0
        n = estimated_extra_ops(facts)
        return n, n * self.unpriced_op_us(system)

    def _kernel_us(self, op: OpWork, system: System, nbytes: float, share: float = 1.0, *,
                   weight_bytes: float = 0) -> float:
        """One kernel: the roofline of ``nbytes`` of traffic (``weight_bytes`` of it a
        weight), its math on ``share`` of the compute grid, at least the shortest kernel.
        Activation rows are padded to whole tiles (``TILE_ROWS``); a matmul streams its
        weight at the share its tile rows give (``weight_share``: continuous from the
        decode kernels' one tile row to the prefill kernels' four, docs/costmodel.md 2.0)."""
        c = system.compute_profile(self.compute_profile)
        dram = self.dram_efficiency if self.dram_efficiency is not None else c.dram_efficiency
        latency = c.latency_us.get(kernel_class(op.kind, op.name), 0.0)
        if kernels.of(op.kind).kernel_class == kernels.SDPA.kernel_class:
            # its query rows are not padded: a decode kernel packs a KV group's query heads
            # into one tile row, and a sub-tile sequence split is removed (rule tile-aligned)
            math_us = op.flops / (system.peak_flops_per_us("HiFi4") * c.sdpa_efficiency)
            kv_us = system.dram_us(nbytes, c.sdpa_dram_efficiency)
            return max(latency + max(math_us, kv_us) + op.kv_len * c.sdpa_position_us, c.kernel_floor_us)
        fidelity = c.fidelity_of(op.fidelity)
        eff = self.matmul_efficiency if self.matmul_efficiency is not None else c.matmul_efficiency[fidelity]
        rows = self.rows(op)
        pad = tile_rows(rows) / rows if rows else 1.0
        math_us = op.flops * pad / (system.peak_flops_per_us(fidelity) * eff * share)
        weight = min(weight_bytes, nbytes)
        dram_us = system.dram_us((nbytes - weight) * pad, dram)
        if weight:
            prefill = c.prefill_weight_efficiency if self.dram_efficiency is None else None
            dram_us += system.dram_us(weight, weight_share(tile_rows(rows) / TILE_ROWS, dram, prefill))
        return max(latency + max(math_us, dram_us), c.kernel_floor_us)

    @staticmethod
    def rows(op: OpWork) -> float:
        """Activation rows of a matmul-like op with a weight on one device: its FLOPs over
        twice its weight's elements (``2 * M * K * N / (K * N)``), the weight's elements read
        at its block-float format or else at the op's own element type (a weight stored
        narrower than the op computes, a bf16 weight converted to f32, gives half the rows:
        optimistic); 0 for any other op (its traffic is priced as read, unpadded)."""
        if op.kind in MATMUL_KINDS and op.weight_bytes:
            from shard_opt.facts import dtype_bytes

            elements = op.weight_bytes / dtype_bytes(op.fidelity or op.dtype or "bf16")
            if elements and op.flops:
                return op.flops / (2 * elements)
        return 0.0

    def prefill_share(self, op: OpWork) -> float:
        """How far a matmul is from the decode kernels to the prefill ones: 0 at one tile
        row of activations, 1 from ``PREFILL_TILES`` tile rows on (linear in tile rows
        between); 0 for an op without a weight."""
        rows = self.rows(op)
        if not rows:
            return 0.0
        return min(1.0, (tile_rows(rows) / TILE_ROWS - 1) / (PREFILL_TILES - 1))

    def price(self, facts: ModuleFacts, system: System) -> Cost:
        cost = self._price(facts, system)
        n, us = self.layout(facts, system)
        if not us:
            return cost
        return dataclasses.replace(cost, total_us=cost.total_us + us, compute_us=cost.compute_us + us, score=None,
                                   layout_us=us, layout_ops=n)

    def _price(self, facts: ModuleFacts, system: System) -> Cost:
        if not self.prefetch_weights:
            return super().price(facts, system)
        times = [self.collective_us(c, facts, system) for c in facts.collectives]
        ccl = math.fsum(times)
        c = system.compute_profile(self.compute_profile)
        dram = self.dram_efficiency if self.dram_efficiency is not None else c.dram_efficiency
        rest, streamed = 0.0, 0.0
        for op in facts.ops:
            if op.kind in MATMUL_KINDS and op.weight_bytes:
                # the weight arrives from the prefetcher; the kernel reads the rest, and runs
                # on the cores the prefetcher feeds (Compute.prefetch_compute_share)
                streamed += op.weight_bytes
                rest += self.kernel_us(op, system, prefetched=True) + self._gap(system)
            else:
                rest += self.op_us(op, system)
        compute = max(rest, system.dram_us(streamed, dram) - ccl)
        memory = memory_per_device(facts)
        return Cost(total_us=compute + ccl, compute_us=compute, ccl_us=ccl, collective_us=times,
                    memory_per_device_bytes=memory, fits=memory <= system.usable_dram_bytes)


@dataclass(frozen=True)
class TunedTenstorrentModel(TenstorrentModel):
    """``tenstorrent`` with tt-metal's tuned profiles (collectives and compute)."""

    name = "tenstorrent-tuned"
    summary = "tt-metal's hand-tuned path: persistent CCLs (Galaxy Llama-70B fits), fidelity by weight format"

    ccl_profile: str = "tuned"
    compute_profile: str = "tuned"
