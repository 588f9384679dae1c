"""Host and dispatch time per decode step, by execution path: the time a token costs
outside the device kernels and the op-to-op gaps the cost model prices.

It is a property of the software path that runs the model, not of the sharding: the
search does not add it (every candidate pays the same), ``benchmarks/fidelity.py`` adds
it to end-to-end rows and reports device-only and end-to-end ratios side by side
(docs/costmodel.md 4d.1). Each figure is what its source measured for that path, never a
number taken from another model to close a gap.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt.errors import UserError


@dataclass(frozen=True)
class HostPath:
    """One execution path: its host time per decode step (us), what it covers, the source;
    ``op_us``: the time the path spends per device op it runs beyond the kernel and the
    traced gap the cost model prices (0 where not known), and where that figure comes from;
    ``user_us``: the time per decode step each user past the first adds beyond the device
    work the model prices (0 where not known), and where that comes from."""

    name: str
    host_us: float
    covers: str
    source: str
    op_us: float = 0.0
    op_source: str = ""
    user_us: float = 0.0
    user_source: str = ""


# vLLM offline over the demo, Galaxy Llama-3.3-70B PERF.md (benchmarks/fidelity.py VLLM_OVER_DEMO).
VLLM_OVER_DEMO_US = (14.92 - 14.28) * 1e3
# tt_transformers' time per user past the first per decode step (benchmarks/fidelity.py
# fit_user_us on the N150 batch-32 rows; the run checks this figure against its refit).
FITTED_USER_US = 188.0

HOST_PATHS = {
    p.name: p for p in (
        # The token is sampled and fed back on device, the step is one trace replay:
        # kernels + op-to-op gaps x 80 layers + the LM head tail give 14.05 ms against the
        # measured 14.01 ms (references/measurements.md section 2).
        HostPath("tt-metal-on-device", 0.0,
                 "traced; sampling and the next step's inputs stay on device (Galaxy Llama-70B demo)",
                 "tt-metal models/demos/llama3_70b_galaxy/PERF.md with decoder_perf_targets_6u.json "
                 "(measurements.md section 2)"),
        # tt_transformers' traced decode reads the token back each step: pipelining that
        # read-back removed 0.39 ms per step on Llama-3.2-1B and 3B alike on a T3K ("the
        # fixed per-step host cost is identical between models").
        # op_us: fitted (benchmarks/fidelity.py fit_op_us, least squares on the relative error)
        # to the three N150 decode rows of tt_transformers' PERF.md (Llama 3.2-1B, 3.2-3B,
        # 3.1-8B: single-row fits 13.1, 5.6, 7.7 us; 9.568 before the tile-true compute of
        # 2026-12-05 padded a one-token matmul's row to a tile), with the demo's decode layer counted
        # from its code (23 device ops on 1 chip, 25 on 2 or 8: fidelity.py
        # TT_TRANSFORMERS_OPS_PER_LAYER); checked against the N300, T3K, 70B T3K and tt-xla
        # PR 5073 rows. It is per-op time the kernels do not cover: the traced op-to-op gap
        # (tt-metal llms.md 4.5.4: "below 6us" traced; 0.6-0.87 us in the Galaxy demo) and the
        # small kernels' time above the model's latency + roofline.
        HostPath("tt-metal-traced", 390.0,
                 "traced; the sampled token is read back to the host each step (tt_transformers)",
                 "tt-metal issue 49345 (Stage-2 pipelined readback: -0.39 ms/step, same on 1B and 3B)",
                 op_us=8.846,
                 op_source="fitted to tt-metal models/tt_transformers/PERF.md N150 decode rows (1B, 3B, 8B); "
                           "validated on its N300/T3K rows and tt-xla PR 5073 (benchmarks/fidelity.py)",
                 # user_us: fitted (fidelity.py fit_user_us) to PERF.md's three N150
                 # "Short-Context, Batch-32" rows (1B, 3B, 8B; single-row fits 237, 116, 86 us)
                 # against the model at batch 32 (its device time with 32 users' caches, the
                 # per-op time above); checked against the N300, T3K and 70B T3K batch-32 rows.
                 # The step grows 6-9.5 ms from batch 1 to 32 on every model and system, far
                 # beyond the 32 users' cache reads; what the work is
                 # the sources do not say (host-side sampling of 32 users' logits, all of these
                 # models have the same 128256-token vocabulary, is one reading: unconfirmed).
                 user_us=FITTED_USER_US,
                 user_source="fitted to tt-metal models/tt_transformers/PERF.md N150 batch-32 rows (1B, 3B, 8B); "
                             "validated on its N300/T3K batch-32 rows (benchmarks/fidelity.py); cause not in the "
                             "sources"),
        # tt-xla's LLM benchmark, untraced: the logits come to the host every step for the
        # argmax, the next ids and cache position go back: "transferring the output tensors
        # to host alone adds ~20ms of overhead per decode step" (multichip).
        HostPath("tt-xla-untraced", 20000.0,
                 "untraced; logits to host, argmax on CPU, ids and cache position back (multichip)",
                 "tt-xla issue 3617 (~20 ms per decode step for the output transfer alone)"),
        # What vLLM adds per decode step over tt-metal's own demo, same model, system, batch
        # and lengths: Galaxy Llama-3.3-70B, batch 32, 128 in / 128 out, avg of all decoded
        # tokens: vLLM offline 14.92 ms against the demo's 14.28 ms (server 15.12 ms). Before:
        # ~4 ms, vLLM's CPU work per iteration profiled with viztracer (tt-metal PR 56048
        # review), which its async engine overlaps with the device. tt-xla's plugin adds a
        # device-host round trip of the hidden state between its two decode graphs (tt-xla
        # issue 4824), not quantified: a lower bound there.
        HostPath("vllm", VLLM_OVER_DEMO_US,
                 "what tt-metal's vLLM adds per step over its demo (scheduler, inputs, outputs, not "
                 "hidden by the async engine); a lower bound for tt-xla's plugin (its 2-graph round trip, "
                 "tt-xla issue 4824, is not included)",
                 "tt-metal models/demos/llama3_70b_galaxy/PERF.md (25 July 2025): vLLM offline 14.92 ms - demo "
                 "14.28 ms per token, batch 32"),
        HostPath("none", 0.0, "device time only", "-"),
    )
}


def host_path(name: str) -> HostPath:
    if name not in HOST_PATHS:
        raise UserError(f"unknown execution path {name!r}; use one of {', '.join(HOST_PATHS)}")
    return HOST_PATHS[name]
