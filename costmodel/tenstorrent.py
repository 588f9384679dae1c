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
The latencies are the decode regime's (``regime``: 32 activation rows or fewer); a matmul
in the prefill regime streams its weight at ``prefill_weight_efficiency`` (fitted to
tt-metal's 128-token Galaxy prefill) and its activations at ``dram_efficiency``; long
prompts are math bound and keep the large-matmul efficiency (docs/costmodel.md 2.0).

A fused attention (``sdpa``) reaches ``sdpa_efficiency`` of the HiFi4 peak and reads
its KV at ``sdpa_dram_efficiency``. Every device op and every collective also pays the
op-to-op gap (``dispatch``: ``traced``, ``untraced`` or ``none``).

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
from shard_opt.costmodel.system import CCL_PROFILES, COMPUTE_PROFILES, DECODE_ROWS, System, kernel_class
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
        t = system.collective_time_us(
            c.kind, c.bytes_per_device, collective_axis(c, facts), facts.mesh_shape,
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
                                   c.prefetch_compute_share)
        return self._kernel_us(op, system, op.bytes_in + op.bytes_out)

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

    def _kernel_us(self, op: OpWork, system: System, nbytes: float, share: float = 1.0) -> float:
        """One kernel: the roofline of ``nbytes`` of traffic, its math on ``share`` of the
        compute grid, at least the shortest kernel."""
        c = system.compute_profile(self.compute_profile)
        dram = self.dram_efficiency if self.dram_efficiency is not None else c.dram_efficiency
        latency = c.latency_us.get(kernel_class(op.kind, op.name), 0.0)
        if kernels.of(op.kind).kernel_class == kernels.SDPA.kernel_class:
            math_us = op.flops / (system.peak_flops_per_us("HiFi4") * c.sdpa_efficiency)
            return max(latency + max(math_us, system.dram_us(nbytes, c.sdpa_dram_efficiency)), c.kernel_floor_us)
        fidelity = c.fidelity_of(op.fidelity)
        eff = self.matmul_efficiency if self.matmul_efficiency is not None else c.matmul_efficiency[fidelity]
        math_us = op.flops / (system.peak_flops_per_us(fidelity) * eff * share)
        if (self.dram_efficiency is None and c.prefill_weight_efficiency is not None and op.weight_bytes
                and nbytes >= op.weight_bytes and self.regime(op) == "prefill"):
            # docs/costmodel.md 2.0: a prefill matmul streams its weight at its own share
            dram_us = (system.dram_us(nbytes - op.weight_bytes, dram)
                       + system.dram_us(op.weight_bytes, c.prefill_weight_efficiency))
        else:
            dram_us = system.dram_us(nbytes, dram)
        return max(latency + max(math_us, dram_us), c.kernel_floor_us)

    @staticmethod
    def regime(op: OpWork) -> str:
        """``decode`` or ``prefill``: which calibration regime an op is priced in. A matmul
        with a weight is ``prefill`` when its activation has more than ``DECODE_ROWS`` rows
        (rows = flops / (2 x weight elements)); everything else is ``decode``: it is priced
        with the decode regime's constants, the only ones its class has (norms and
        attention have no prefill constant; docs/costmodel.md 2.0)."""
        if op.kind in MATMUL_KINDS and op.weight_bytes:
            from shard_opt.facts import dtype_bytes

            elements = op.weight_bytes / dtype_bytes(op.fidelity or "bf16")
            if elements and op.flops / (2 * elements) > DECODE_ROWS:
                return "prefill"
        return "decode"

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
