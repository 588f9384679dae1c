"""A deployment's arithmetic: KV cache per token, users that fit, the sampling tail, and how
prefill and decode steps become TTFT, TPOT and tokens/s (``shard-opt --serve``).

Everything here takes the figures of priced phase plans (a step time, bytes per chip) and
combines them; nothing is priced twice. ``shard_opt.serve`` gathers the figures and picks
the deployment. Sources: references/serving.md; docs/costmodel.md section 5a holds the
formulas.

**KV cache.** Bytes per token of context, for the whole model (every replica holds one copy)::

    kv_bytes_per_token = 2 (K and V) x layers x kv_heads x head_dim x bytes per element

Per chip it is divided as the decode plan shards the cache arguments (a KV-head split is at
most the KV heads: a mesh axis larger than that replicates them; a batch split divides the
users), so ``kv_local_bytes_per_token`` is read off the plan's cache arguments, never
assumed. Tokens that fit on a replica::

    tokens = (usable DRAM per chip - weights per chip - activations per chip) / kv_local_bytes_per_token

and users that fit = tokens // context (references/serving.md "What limits users").

**The sampling tail** (per decode step, references/serving.md "Prefill and decode"):
``gather``: the decode module returns the logits whole, so a vocab-split LM head pays an
all_gather of ``[batch, vocab]`` (already priced in the decode plan), then every chip runs
top-k over the whole vocabulary. ``topk``: tt-xla's ``tenstorrent.topk`` composite on the
vocab-split logits (tt-xla PR 5004, tt-mlir PR 8601): each chip runs top-k over its own
``vocab / split``, all_gathers the k candidates (values and indices), and merges them.
Both run ``ttnn.topk`` (``topk_us``), chunked as tt-xla's sampler chunks it.

**Steady state** (a closed loop of ``u`` users per replica, each asking for ``osl`` tokens
after an ``isl``-token prompt, as tt-inference-server's benchmark client does at fixed
concurrency: every user sends its next request when its last one ends). The prefill of a
prompt yields its first token (one prompt at a time, batch 1); ``osl - 1`` decode steps
follow. Colocated (prefill and decode on the same chips, prefills first, as vLLM schedules
them): the users start together, so they finish together and come back together -- each
round is a wave of ``u`` prefills, then the decode steps of all::

    cycle = u x prefill + (osl - 1) x decode
    TTFT  = (u + 1) / 2 x prefill                       (the mean over the wave: user k waits k prefills)
    TPOT  = decode + (u - 1) / 2 x prefill / (osl - 1)  (the mean user's first token comes before
                                                         the later users' prefills)

Disaggregated (prefill on its own sub-mesh, the KV cache handed over, decode on the other):
a user's round is its prefill, the handover and its decode steps, so the users spread out
by a prefill each and the prefill half serves them as they come, unless it cannot keep up::

    cycle = max(prefill + handover + (osl - 1) x decode, u x prefill)
    TTFT  = cycle - (osl - 1) x decode                 (at least prefill + handover)
    TPOT  = decode

and for both: tokens/s per replica = u x osl / cycle; tokens/s/user = 1 / TPOT
(tt-inference-server's definition); tokens/s = replicas x tokens/s per replica.

These are the figures under load (the record's ``ttft_ms`` / ``tpot_ms``: what the benchmark
client sees). Each phase alone is the record's ``prefill.ttft_ms`` (one prompt on an idle
replica: the prefill step, plus the handover disaggregated) and ``decode.tpot_ms`` (the
decode step with its sampling tail): what tt-metal's PERF.md reports as TTFT and 1 / t/s/u,
and what ``benchmarks/bench_serve.py`` holds against its rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shard_opt.facts import Collective, ModuleFacts

# ---- the KV cache ----------------------------------------------------------------------


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, element_bytes: float) -> float:
    """Bytes of K and V one token of context takes, all layers (references/serving.md)."""
    return 2.0 * layers * kv_heads * head_dim * element_bytes


def kv_heads_per_chip(kv_heads: int, split: int) -> float:
    """KV heads one chip holds when the heads are split ``split`` ways: ``kv_heads / min(split,
    kv_heads)``; a split larger than the heads replicates them (at least one whole head)."""
    return kv_heads / min(max(1, split), kv_heads)


@dataclass(frozen=True)
class Fit:
    """What fits on one chip of a replica: ``tokens`` of context (users x context) and users."""

    free_bytes: float  # usable DRAM per chip - weights - activations
    tokens: int
    users: int


def fit(usable_bytes: float, weights_bytes: float, activation_bytes: float, kv_local_per_token: float,
        context: int) -> Fit:
    """Tokens and users (of ``context`` tokens each) whose KV cache fits beside the weights and
    the activations, on every chip of a replica."""
    free = usable_bytes - weights_bytes - activation_bytes
    if free <= 0 or kv_local_per_token <= 0:
        return Fit(free, 0 if free <= 0 else 1 << 62, 0 if free <= 0 else 1 << 62)
    tokens = int(free // kv_local_per_token)
    return Fit(free, tokens, tokens // max(1, context))


# ---- ttnn.topk, the sampling kernel ------------------------------------------------------

# ttnn.topk's multi-core factory runs only for a power-of-two width in [8192, 65535); other
# widths fall to the single-core factory, "roughly two orders of magnitude slower" (tt-metal
# issue 53108). tt-xla's sampler splits the vocabulary into power-of-two chunks of at most
# 32768 so every chunk runs multi-core (tt-xla PR 4334: "~0.18ms/chunk" against ~30 ms for a
# sort), and tt-mlir's sharded top-k pads each shard to a power of two for the same reason
# (tt-xla issue 4494; PR 5004). So a row of width w runs as ceil(w / 32768) chunks of the
# next power of two at or above 8192.
TOPK_CHUNK = 32768
TOPK_MIN_MULTICORE = 8192


@dataclass(frozen=True)
class TopkFit:
    """``ttnn.topk`` time for one tile row of 32 users (batch <= 32; each further 32 users
    another row, priced linearly: unconfirmed), k = 32.

    ``multicore_us(w) = base_us + per_elem_us * w`` through two measured widths;
    ``single_core_us(w) = single_elem_us * w``."""

    base_us: float
    per_elem_us: float
    single_elem_us: float
    source: str


def _line(w1: float, t1: float, w2: float, t2: float) -> tuple[float, float]:
    slope = (t2 - t1) / (w2 - w1)
    return t1 - slope * w1, slope


# Blackhole: tt-metal issue 53108 ("ttnn.topk summed over the shards of one decode step,
# padding included, k=32, batch 32"; a 1x1 mesh: a p150, as the same author's issue 52928
# ran): multi-core 8 x 16384 = 1135 us and 4 x 32768 = 766 us; single-core 2 x 64128 =
# 20385 us (0.159 us per element of width; 4 x 32064 = 20392 us says the same). Checked
# against tt-metal issue 44953 (BH 1x4, width 65536 single-core, batch 32: 10.1 ms; this
# model: 10.4 ms).
_BH_BASE, _BH_SLOPE = _line(16384, 1135 / 8, 32768, 766 / 4)
BLACKHOLE_TOPK = TopkFit(_BH_BASE, _BH_SLOPE, 20385 / 2 / 64128, "tt-metal issue 53108")

# Wormhole: tt-metal PR 38509 (GPT-OSS-120B on a WH Galaxy 4x8, 8-way vocab split, batch
# padded to 32): the sampling step took ~14 ms at a 25152-wide shard (single-core: 0.557 us
# per element) and ~0.4 ms once padded to 32768 (multi-core). One multi-core point only: the
# Blackhole line scaled to pass through it (the width dependence on Wormhole is unconfirmed);
# the 0.4 ms is the whole sampling step, so the kernel is taken at most that.
_WH_SCALE = 400.0 / (_BH_BASE + _BH_SLOPE * 32768)
WORMHOLE_TOPK = TopkFit(_BH_BASE * _WH_SCALE, _BH_SLOPE * _WH_SCALE, 14000.0 / 25152,
                        "tt-metal PR 38509 (Wormhole points), tt-metal issue 53108 (width dependence)")

TOPK = {"blackhole": BLACKHOLE_TOPK, "wormhole": WORMHOLE_TOPK}
TOPK_K = 32  # candidates per row: the k both measurements ran (tt-metal TTSampling's max_top_k)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def topk_chunks(width: int) -> tuple[int, int]:
    """(chunks, padded chunk width) a row of ``width`` logits runs as (``TOPK_CHUNK``)."""
    chunks = max(1, math.ceil(width / TOPK_CHUNK))
    return chunks, max(TOPK_MIN_MULTICORE, _pow2_at_least(math.ceil(width / chunks)))


def topk_us(arch: str, width: int, rows: int, *, chunked: bool = True) -> float:
    """Kernel time of ``ttnn.topk`` over ``rows`` users' rows of ``width`` values (k = 32):
    chunked as tt-xla's sampler and tt-mlir's sharded top-k run it (``chunked``), else one
    call at the width as it is (single-core unless a power of two in [8192, 65535))."""
    fit_ = TOPK[arch]
    tiles = max(1, math.ceil(rows / 32))
    if chunked:
        n, w = topk_chunks(width)
        return tiles * n * (fit_.base_us + fit_.per_elem_us * w)
    if width >= TOPK_MIN_MULTICORE and width < 65535 and width == _pow2_at_least(width):
        return tiles * (fit_.base_us + fit_.per_elem_us * width)
    return tiles * fit_.single_elem_us * width


# ---- the sampling tail ---------------------------------------------------------------


@dataclass(frozen=True)
class TailOption:
    """One way to run the LM head's sampling per decode step, its time and its parts (us)."""

    name: str  # "gather" or "topk"
    total_us: float
    parts: dict
    available: bool = True
    why: str = ""

    def to_json(self) -> dict:
        out = {"name": self.name, "total_us": round(self.total_us, 3) if math.isfinite(self.total_us) else None,
               "parts": {k: round(v, 3) for k, v in self.parts.items()}}
        if not self.available:
            out["available"] = False
        if self.why:
            out["why"] = self.why
        return out


def dispatch_gap_us(cost_model, system) -> float:
    """The op-to-op gap a device op pays under ``cost_model`` (``TenstorrentModel``'s
    ``dispatch`` on the system's compute profile); 0 for a model without one."""
    profile = getattr(cost_model, "compute_profile", None)
    dispatch = getattr(cost_model, "dispatch", None)
    if profile is None or dispatch is None:
        return 0.0
    return system.compute_profile(profile).dispatch_us.get(dispatch, 0.0)


def sampling_tail(*, arch: str, vocab: int, batch: int, vocab_split: int, vocab_axes: tuple[str, ...],
                  logits_gather_us: float, mesh_shape: tuple[int, ...], mesh_axes: tuple[str, ...],
                  system, cost_model) -> list[TailOption]:
    """The two tails of a decode step (module docstring): ``gather`` keeps the decode plan's
    own logits all_gather (``logits_gather_us``, 0 when the head is not vocab-split) and runs
    top-k over the whole vocabulary on each chip; ``topk`` (only with a vocab-split head)
    runs top-k over the chip's share, all_gathers ``TOPK_K`` candidates per user (values bf16
    and indices, 16-bit: tt-metal PR 25359) on the head's vocab axes and merges the
    ``vocab_split x TOPK_K`` of them (one more top-k, single-core). Collectives are priced by
    ``cost_model`` like any other; each kernel pays the op-to-op gap."""
    gap = dispatch_gap_us(cost_model, system)
    full = topk_us(arch, vocab, batch) + gap * topk_chunks(vocab)[0]
    gather = TailOption("gather", logits_gather_us + full,
                        {"logits_all_gather_us": logits_gather_us, "topk_us": full})
    if vocab_split <= 1:
        return [gather, TailOption("topk", math.inf, {}, available=False,
                                   why="the decode plan does not split the LM head on the vocabulary")]
    local_w = math.ceil(vocab / vocab_split)
    local = topk_us(arch, local_w, batch) + gap * topk_chunks(local_w)[0]
    facts = ModuleFacts(mesh_shape=tuple(mesh_shape), mesh_axes=tuple(mesh_axes))
    cand = 0.0
    for dtype, nbytes in (("bf16", 2), ("i16", 2)):
        c = Collective(kind="all_gather", axes=tuple(vocab_axes), global_shape=(batch, vocab_split * TOPK_K),
                       dtype=dtype, in_local_shape=(batch, TOPK_K), out_local_shape=(batch, vocab_split * TOPK_K),
                       bytes_per_device=batch * TOPK_K * nbytes, group_size=vocab_split)
        cand += cost_model.collective_us(c, facts, system)
    merge = topk_us(arch, vocab_split * TOPK_K, batch, chunked=False) + gap
    return [gather, TailOption("topk", local + cand + merge,
                               {"local_topk_us": local, "candidates_all_gather_us": cand, "merge_topk_us": merge})]


# ---- the KV handover between sub-meshes ------------------------------------------------


def handover_us(system, nbytes: float, pairs: int, links: int) -> float:
    """Moving one prompt's KV cache (``nbytes``) from the prefill sub-mesh to the decode
    sub-mesh across the ``pairs`` neighbouring chip pairs of their boundary, ``links`` links
    each: one point-to-point transfer per pair, in parallel, each at the fabric's
    point-to-point startup, one hop and its share of the bytes at the point-to-point link
    efficiency (``Fabric.p2p_startup_us`` / ``p2p_efficiency``: derived from the all_to_all
    fit, no point-to-point measurement exists; docs/costmodel.md 1.4)."""
    if nbytes <= 0:
        return 0.0
    f = system.fabric
    rate = f.p2p_efficiency * f.line_rate_gbps * max(1, links) * 1e3  # bytes per us
    return f.p2p_startup_us + f.hop_latency_us + nbytes / max(1, pairs) / rate


# ---- steady state --------------------------------------------------------------------


@dataclass(frozen=True)
class Rates:
    """A replica's steady state (module docstring), times in ms."""

    cycle_ms: float
    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_user: float
    tokens_per_s_per_replica: float
    prefill_bound: bool = False


def steady_state(*, disaggregated: bool, users: int, osl: int, prefill_ms: float, decode_ms: float,
                 handover_ms: float = 0.0) -> Rates:
    """The steady state of ``users`` users on one replica (module docstring)."""
    u, steps = max(1, users), max(0, osl - 1)
    if disaggregated:
        own = prefill_ms + handover_ms + steps * decode_ms
        cycle = max(own, u * prefill_ms)
        ttft = cycle - steps * decode_ms
        tpot = decode_ms
        bound = u * prefill_ms > own
    else:
        cycle = steps * decode_ms + u * prefill_ms
        ttft = (u + 1) / 2 * prefill_ms
        tpot = decode_ms + ((u - 1) / 2 * prefill_ms / steps if steps else 0.0)
        bound = False
    return Rates(cycle, ttft, tpot, 1000.0 / tpot if tpot > 0 else math.inf,
                 1000.0 * u * osl / cycle if cycle > 0 else math.inf, bound)
