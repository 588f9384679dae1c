"""``shard-opt MODEL --devices N --serve isl=I,osl=O,users=U``: plan the deployment.

A deployment cuts the N chips into identical data-parallel replicas; each replica runs the
prefill of a prompt and the decode steps of its users, on the same chips (``colocated``)
or on two halves of the replica with the KV cache handed over (``disaggregated``). For
every configuration the phases are planned by the same search as any plan
(``driver.optimize``), on the phase's own module: prefill at batch 1 and ``isl`` tokens,
decode at the users of a replica and the KV length the profile implies (``isl + osl``, the
last step's: the whole cache is held, and the step is the output's slowest). The arithmetic that turns phase plans into users, TTFT, TPOT
and tokens/s is ``costmodel.serving``.

Two stages, so a 32-chip search takes seconds:

1. **Screening** (every configuration): ``optimize`` stopped after its search
   (``Options.screen``), on a provisional model built from the 1- and 2-layer copies the
   search scores anyway (no whole-model lowering); the figures are the search's own
   (extrapolated from the copies, as it ranks its candidates). Colocated, the prefill runs
   with the decode plan's weights (the model is loaded once: tt-xla's graphs share its
   ``mark_sharding``), priced by the same scorer.
2. **The chosen configuration** is planned as any plan (``optimize`` on the whole model,
   baselines, the tt-mlir check when on; a colocated prefill is the decode plan's weights
   priced with ``evaluate_existing``, checked as an evaluated plan), and the serving record
   is computed again from those plans: every figure of the record is its phase plans'.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field

from shard_opt import costmodel, timing
from shard_opt.costmodel import serving as arith
from shard_opt.errors import UserError
from shard_opt.facts import dtype_bytes
from shard_opt.sharding import TT_MLIR_SUPPORTED_MESHES, Mesh

# Replica meshes per chip count: tt-xla's standard shapes (references/tenstorrent.md
# section 1; tt-xla torch_multichip_utils.py: 16 -> (1, 16), 64 -> (8, 8), 128 -> (8, 16),
# references/serving.md), the sub-rectangles tt-mlir accepts besides, and the two shapes
# Tenstorrent names that tt-mlir or the hardware refuse (1x32 on a Galaxy, the 16x8 quad
# torus), so the refusal is said with its citation.
SERVE_MESHES = {
    1: ["1x1"], 2: ["1x2"], 4: ["1x4", "2x2"], 8: ["2x4", "1x8"], 16: ["4x4", "2x8", "1x16"],
    32: ["8x4", "4x8", "1x32"], 64: ["8x8", "4x16"], 128: ["8x16", "16x8"],
}
# read at tt-mlir 19c86fca (2026-08-21): 17 shapes, 16x8 and 32x4 not among them
SUPPORTED_MESHES_SOURCE = "tt-mlir include/ttmlir/Dialect/StableHLO/Utils/ShardingUtils.h SupportedMeshes"

# The users a replica batches when the profile says users=0 (as many as fit): the decode
# batch of tt-metal's Galaxy Llama demo and tt-inference-server's max_concurrency per
# data-parallel replica ("128  # 32 * 4" with data_parallel_size 4, workflows/model_specs/
# prod/llm.yaml); max_batch= in the profile changes it.
MAX_BATCH = 32

PROFILE_KEYS = ("isl", "osl", "users", "ttft_ms", "tpot_ms", "max_batch")
MODES = ("colocated", "disaggregated")


@dataclass(frozen=True)
class Profile:
    """``--serve isl=I,osl=O,users=U[,ttft_ms=..,tpot_ms=..,max_batch=..]``."""

    isl: int
    osl: int
    users: int = 0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    max_batch: int = MAX_BATCH

    @property
    def context(self) -> int:
        """The KV length a user reaches (its cache at the last token)."""
        return self.isl + self.osl

    @property
    def decode_len(self) -> int:
        """The KV length decode is planned at: the last step's (``context``), so the plan's
        memory check holds the users' whole cache (the search then keeps only plans whose
        cache fits, splitting it when it must) and its step is the slowest of the output (the
        mean KV length is ``osl / 2`` shorter: TPOT is an upper bound by that much attention)."""
        return self.context

    @property
    def objective(self) -> str:
        """Tokens/s/user at the given users; total tokens/s when the users are as many as fit."""
        return "tokens_per_s_per_user" if self.users else "tokens_per_s"

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in PROFILE_KEYS if getattr(self, k) is not None}

    @staticmethod
    def parse(text: str) -> "Profile":
        """One line for each mistake (what, where, what to do)."""
        usage = "write --serve isl=I,osl=O[,users=U,ttft_ms=T,tpot_ms=T,max_batch=B]"
        values: dict = {}
        for part in filter(None, (p.strip() for p in (text or "").split(","))):
            key, eq, raw = part.partition("=")
            key = key.strip()
            if not eq or key not in PROFILE_KEYS:
                raise UserError(f"--serve {text!r}: {part!r} is not KEY=VALUE with KEY one of "
                                f"{', '.join(PROFILE_KEYS)}; {usage}")
            if key in values:
                raise UserError(f"--serve {text!r}: {key} is given twice; {usage}")
            try:
                v = float(raw) if key.endswith("_ms") else int(raw)
            except ValueError:
                kind = "a number of milliseconds" if key.endswith("_ms") else "a whole number"
                raise UserError(f"--serve {text!r}: {key}={raw!r} is not {kind}; {usage}") from None
            low = 0 if key == "users" else 1
            if (key.endswith("_ms") and not v > 0) or (not key.endswith("_ms") and v < low):
                raise UserError(f"--serve {text!r}: {key}={raw} must be {'above 0' if key.endswith('_ms') else f'at least {low}'}")
            values[key] = v
        missing = [k for k in ("isl", "osl") if k not in values]
        if missing:
            raise UserError(f"--serve {text!r}: {' and '.join(missing)} missing; {usage}")
        return Profile(**values)


def serve_meshes(n: int) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in s.split("x")) for s in SERVE_MESHES.get(n, [])]


def refusal(shape: tuple[int, int], system) -> str | None:
    """Why a replica mesh cannot run, with the citation, or None."""
    spec = "x".join(map(str, shape))
    if tuple(shape) not in TT_MLIR_SUPPORTED_MESHES:
        return f"{spec}: tt-mlir does not compile this mesh ({SUPPORTED_MESHES_SOURCE}; tt-mlir issue 4668)"
    why = (getattr(system, "refused_meshes", None) or {}).get(tuple(shape))
    if why:
        return f"{spec}: {why}"
    return None


# ---------------------------------------------------------------------------------
# Phase figures: what the arithmetic needs from a priced phase plan
# ---------------------------------------------------------------------------------


@dataclass
class PhaseFigures:
    """One phase on one replica mesh, from a screened search or a whole-model plan.

    Bytes are per chip; ``step_us`` the plan's step (``checked_us`` when the tt-mlir check
    priced it); ``kv_*`` and ``logits_*`` only for decode."""

    phase: str
    mesh: tuple[int, ...]
    system: str
    step_us: float
    priced: str  # "screened" (the search's figure, short copies), "whole model", "checked"
    weights_bytes: float
    cache_bytes: float
    activation_bytes: float
    fits: bool
    batch: int = 1
    seq_len: int = 0
    kv_bytes_per_token: float = 0.0  # the whole model's, from the cache arguments
    kv_local_bytes_per_token: float = 0.0  # one chip's share
    kv_sharding: list | None = None  # a cache argument's sharding (per dim, mesh axes)
    vocab: int = 0
    vocab_split: int = 1
    vocab_axes: tuple[str, ...] = ()
    logits_gather_us: float = 0.0
    strategy: str = ""
    arguments: dict = field(default_factory=dict)  # role -> sharding, the split ones
    by_role: dict = field(default_factory=dict)  # role -> TensorSharding of the weights (screened)
    others: dict = field(default_factory=dict)  # role -> TensorSharding of the KV cache and inputs (screened)
    outcome: object = None  # the driver's Outcome (the chosen configuration's phases)
    fallback: str | None = None  # the search's memory fallback, in words (the fastest plan did not fit)

    def summary(self) -> dict:
        out = {"mesh": "x".join(map(str, self.mesh)), "system": self.system, "strategy": self.strategy,
               "arguments": self.arguments, "step_us": _r(self.step_us), "priced": self.priced,
               "batch": self.batch, "seq_len": self.seq_len}
        return out


def _r(x, nd=3):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else round(float(x), nd)


def logits_shape(text: str) -> tuple[int, ...] | None:
    """The first result of ``@main`` (a causal LM's logits), from the module text."""
    at = (text or "").find("@main(")
    if at < 0:
        return None
    depth, i = 0, at + len("@main")
    while i < len(text):
        ch = text[i]
        depth += ch == "("
        depth -= ch == ")"
        i += 1
        if depth == 0:
            break
    m = re.match(r"\s*->\s*\(?\s*tensor<([^>]*)>", text[i:i + 400])
    if not m:
        return None
    dims = m.group(1).split("x")[:-1]
    return tuple(int(d) for d in dims) if dims and all(d.isdigit() for d in dims) else None


def head_argument(arguments, vocab: int):
    """The LM head's weight: a 2-D parameter with the vocabulary as its first dim (the
    ``lm_head``, else a tied embedding)."""
    cands = [a for a in arguments if a.kind == "param" and len(a.shape) == 2 and a.shape[0] == vocab]
    named = [a for a in cands if "head" in a.name]
    return (named or cands or [None])[0]


def _kv_global_bytes(arguments, storage: dict) -> float:
    return math.fsum(math.prod(a.shape) * dtype_bytes(storage.get(a.index) or a.dtype)
                     for a in arguments if a.kind == "cache")


def figures_of_screen(phase: str, mesh: Mesh, system_name: str, scorer, shardings_of, score) -> PhaseFigures:
    """A screened plan's figures: its ``score`` (the search's) and, from the facts of its
    1- and 2-layer copies extrapolated as the score is, the bytes per chip by kind and the
    decode module's logits all_gather. ``shardings_of(evaluator)`` gives the plan on that
    evaluator's model: (argument shardings, constraints)."""
    from shard_opt.evaluate import LayeredEvaluator

    layered = isinstance(scorer, LayeredEvaluator)
    evs = [scorer.e1, scorer.e2] if layered else [scorer]
    facts, plans = [], []
    for e in evs:
        sh, cons = shardings_of(e)
        facts.append(e.facts_of(sh, cons))
        plans.append(sh)

    def lin(vals):
        return vals[0] if len(vals) == 1 else vals[0] + (scorer.layers - 1) * (vals[1] - vals[0])

    def kind_bytes(f, kinds):
        return sum(b for b, k in zip(f.arg_local_bytes, f.arg_kinds) if k in kinds)

    weights = lin([kind_bytes(f, ("param", "buffer")) for f in facts])
    cache = lin([kind_bytes(f, ("cache",)) for f in facts])
    kv_global = lin([_kv_global_bytes(e.model.arguments, e.storage) for e in evs])
    model = evs[0].model
    batch, seq = int(model.meta.get("batch") or 1), int(model.meta.get("seq_len") or 0)
    fig = PhaseFigures(phase, tuple(mesh.shape), system_name, score.total_us, "screened", weights, cache,
                       max(0.0, score.memory_bytes - weights - cache), bool(score.fits), batch, seq)
    e, f, sh = evs[0], facts[0], plans[0]
    from shard_opt.build import strategy_text

    fig.strategy = strategy_text(model, sh)
    fig.arguments = {a.role: sh[a.index].axis_names() for a in model.arguments
                     if a.index in sh and not sh[a.index].is_replicated and a.kind in ("param", "buffer")}
    fig.by_role = {a.role: sh[a.index] for a in model.arguments
                   if a.index in sh and a.kind in ("param", "buffer")}
    fig.others = {a.role: sh[a.index] for a in model.arguments if a.index in sh and a.kind in ("cache", "input")}
    if phase == "decode":
        tokens = max(1, batch * seq)
        fig.kv_bytes_per_token = kv_global / tokens
        fig.kv_local_bytes_per_token = cache / tokens
        kv = next((a for a in model.arguments if a.kind == "cache"), None)
        fig.kv_sharding = sh[kv.index].axis_names() if kv is not None and kv.index in sh else None
        shape = logits_shape(model.text)
        if shape:
            fig.vocab = shape[-1]
            head = head_argument(model.arguments, fig.vocab)
            if head is not None and head.index in sh:
                s = sh[head.index]
                fig.vocab_split = s.split_factor(0, mesh)
                fig.vocab_axes = tuple(a.name for a in s.dims[0])
            times = e.cost_model.price(f, e.system).collective_us
            fig.logits_gather_us = math.fsum(t for c, t in zip(f.collectives, times)
                                             if c.kind == "all_gather" and tuple(c.global_shape) == shape)
    return fig


def figures_of_plan(phase: str, outcome, system_name: str) -> PhaseFigures:
    """A whole-model plan's figures, read off the plan: its cost (``checked_us`` when the
    tt-mlir check priced it) and its arguments (bytes per chip from each argument's shape,
    split and storage), its logits all_gather among its collectives."""
    plan, model = outcome.plan, outcome.model
    sizes = dict(zip(plan.mesh.axes, plan.mesh.shape))
    by_kind: dict[str, float] = {}
    kv_global = 0.0
    for a in plan.arguments:
        local = math.prod(-(-s // math.prod(sizes.get(x, 1) for x in axes)) for s, axes in zip(a.shape, a.sharding.axis_names()))
        nbytes = local * dtype_bytes(a.storage or a.dtype)
        by_kind[a.kind] = by_kind.get(a.kind, 0.0) + nbytes
        if a.kind == "cache":
            kv_global += math.prod(a.shape) * dtype_bytes(a.storage or a.dtype)
    weights = by_kind.get("param", 0.0) + by_kind.get("buffer", 0.0)
    cache = by_kind.get("cache", 0.0)
    cost = plan.cost
    checked = cost.checked_us is not None
    step = cost.checked_us if checked else cost.total_us
    batch, seq = int(plan.batch or 1), int(plan.seq_len or 0)
    fig = PhaseFigures(phase, tuple(plan.mesh.shape), system_name, step, "checked" if checked else "whole model",
                       weights, cache, max(0.0, cost.memory_per_device_bytes - weights - cache), bool(cost.fits),
                       batch, seq, outcome=outcome)
    fig.strategy = plan.strategy or ""
    fig.fallback = plan.memory_fallback_reason
    fig.arguments = {}
    for a in plan.arguments:
        if a.kind in ("param", "buffer") and not a.sharding.is_replicated:
            role = next((m.role for m in model.arguments if m.name == a.name), a.name)
            fig.arguments.setdefault(role, a.sharding.axis_names())
    if phase == "decode":
        tokens = max(1, batch * seq)
        fig.kv_bytes_per_token = kv_global / tokens
        fig.kv_local_bytes_per_token = cache / tokens
        kv = next((a for a in plan.arguments if a.kind == "cache"), None)
        fig.kv_sharding = kv.sharding.axis_names() if kv is not None else None
        shape = logits_shape(model.text)
        if shape:
            fig.vocab = shape[-1]
            head = head_argument(model.arguments, fig.vocab)
            rec = next((a for a in plan.arguments if head is not None and a.name == head.name), None)
            names = rec.sharding.axis_names() if rec is not None else []
            if names and names[0]:
                fig.vocab_axes = tuple(names[0])
                fig.vocab_split = math.prod(sizes.get(x, 1) for x in fig.vocab_axes)
            fig.logits_gather_us = math.fsum((c.time_us or 0.0) * (c.count or 1) for c in plan.collectives
                                             if c.kind == "all_gather" and tuple(c.shape) == shape)
    return fig


# ---------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------


@dataclass
class Config:
    """One way to deploy: ``replicas`` copies of a replica of ``chips`` chips, prefill and
    decode on ``prefill_mesh`` / ``decode_mesh`` (the same mesh when colocated)."""

    mode: str
    replica_mesh: tuple[int, int]
    prefill_mesh: tuple[int, int]
    decode_mesh: tuple[int, int]
    replicas: int
    users_per_replica: int = 0
    refused: str | None = None
    cut: tuple[int, int] = (0, 0)  # disaggregated: (chip pairs across the cut, links per pair)
    layout: str = ""  # colocated: whose weight layout both phases run ("decode" or "prefill")
    prefill: PhaseFigures | None = None
    decode: PhaseFigures | None = None
    figures: dict = field(default_factory=dict)  # the arithmetic's results (record_figures)

    @property
    def chips(self) -> int:
        return math.prod(self.replica_mesh)

    @property
    def label(self) -> str:
        r = f"{self.replicas}x " if self.replicas > 1 else ""
        if self.mode == "colocated":
            return f"{r}{_spec(self.replica_mesh)}"
        return f"{r}{_spec(self.replica_mesh)} (prefill {_spec(self.prefill_mesh)} | decode {_spec(self.decode_mesh)})"


def _spec(shape) -> str:
    return "x".join(map(str, shape))


def _halves(shape: tuple[int, int], system) -> tuple[tuple[int, int], int, int] | None:
    """The two halves a disaggregated replica is cut into (prefill, decode), the chip pairs
    across the cut and the links of each pair; None when no half is a supported mesh."""
    a, b = shape
    wiring = system.links_for(shape)
    if a >= 2 and a % 2 == 0:
        half, pairs, links = (a // 2, b), b, wiring[0].links
    elif b >= 2 and b % 2 == 0:
        half, pairs, links = (1, b // 2) if a == 1 else (a, b // 2), a, wiring[1].links
    else:
        return None
    if half not in TT_MLIR_SUPPORTED_MESHES:
        return None
    return half, pairs, links


def configurations(devices: int, system, profile: Profile, host=None) -> list[Config]:
    """Every configuration of ``devices`` chips of ``system`` (the refused ones with why);
    ``host``: the system of one host of a multi-host ``system`` (``multihost.HOST_SYSTEM``)."""
    from shard_opt.costmodel.multihost import replica_system

    out = []
    for n in sorted(SERVE_MESHES, reverse=True):
        if n > devices or devices % n:
            continue
        most = devices // n
        replicas = min(most, profile.users) if profile.users else most
        for shape in serve_meshes(n):
            why = refusal(shape, system)
            if why is None and replica_system(system, shape) is None:
                why = (f"{_spec(shape)}: not a part of {system.name}'s {_spec(system.default_mesh)} mesh "
                       f"(a replica runs on a sub-rectangle of its chips)")
            out.append(Config("colocated", shape, shape, shape, replicas, refused=why))
            if n >= 2:
                sub = replica_system(system, shape, host) if why is None else None
                cut = _halves(shape, sub) if sub is not None else None
                if why is None and cut is None:
                    continue
                half = cut[0] if cut else shape
                out.append(Config("disaggregated", shape, half, half, replicas, refused=why,
                                  cut=(cut[1], cut[2]) if cut else (0, 0)))
    return out


# ---------------------------------------------------------------------------------
# The search over configurations
# ---------------------------------------------------------------------------------


@dataclass
class Request:
    """What the command line asked for (``cli._serve``)."""

    source: str  # the INPUT
    devices: int
    system: str | None
    profile: Profile
    options: object  # driver.Options for every phase (the user's cost model, weights, rules)
    axes: tuple[str, ...] = ("batch", "model")
    layers: int | None = None
    dtype: str = "bf16"
    spec: str | None = None
    stream: object = None
    quiet: bool = False


class Deployer:
    """Screens every configuration of ``request``, then plans the chosen one (module docstring)."""

    def __init__(self, request: Request):
        self.req = request
        self.profile = request.profile
        self.stream = request.stream or sys.stderr
        name = request.system or costmodel.default_system_for_mesh((1, request.devices))
        self.system = costmodel.get_system(name)
        if request.devices > self.system.chips:
            raise UserError(f"--devices {request.devices}: {self.system.name} has {self.system.chips} chips; "
                            f"pass at most that, or another --system (shard-opt --list-systems)")
        from shard_opt.costmodel.multihost import HOST_SYSTEM

        host = HOST_SYSTEM.get(self.system.name)
        self.host = costmodel.get_system(host) if host else None
        self.cm = costmodel.get_cost_model(request.options.cost_model,
                                           allow_collective_permute=request.options.allow_collective_permute)
        self.models: dict[tuple, object] = {}
        self.screens: dict[tuple, object] = {}
        self.seconds: dict[str, float] = {}

    # ---- models and systems --------------------------------------------------------

    def say(self, text: str) -> None:
        if not self.req.quiet:
            self.stream.write(f"shard-opt: serve: {text}\n")

    def replica(self, shape) -> tuple[str, object]:
        """The registered preset a replica of ``shape`` runs on (``multihost.replica_system``)."""
        from shard_opt.costmodel.multihost import replica_system

        sub = replica_system(self.system, tuple(shape), self.host)
        if sub.name not in {s.name for s in costmodel.list_systems()}:
            costmodel.register_system(sub)
        return sub.name, sub

    def provisional(self, phase: str, batch: int, seq_len: int):
        """The model the screening searches: its 1- and 2-layer copies and their arguments
        (no whole-model lowering); the model itself when it is scored whole."""
        key = (phase, batch, seq_len)
        if key in self.models:
            return self.models[key]
        from shard_opt import frontends
        from shard_opt.lowered import LoweredModel, scored_whole

        kw = dict(batch=batch, seq_len=seq_len, phase=phase, dtype=self.req.dtype, spec=self.req.spec)
        with timing.phase("lower"):
            if self.req.layers is not None and self.req.layers <= 2:
                model = frontends.load(self.req.source, layers=self.req.layers, **kw)
            else:
                one = frontends.load(self.req.source, layers=1, **kw)
                total = self.req.layers or one.meta.get("total_layers") or 1
                if total <= 2 or scored_whole(one.meta):
                    model = frontends.load(self.req.source, layers=self.req.layers, **kw)
                else:
                    two = frontends.load(self.req.source, layers=2, **kw)
                    copies = {1: one, 2: two}
                    meta = dict(one.meta, total_layers=total)
                    model = LoweredModel(one.name, "", list(two.arguments), source=one.source,
                                         script_path=one.script_path, num_layers=total, meta=meta)
                    model.with_layers = copies.__getitem__
        if hasattr(model, "resolve"):
            model = model.resolve()
        self.models[key] = model
        return model

    def options(self, shape, system_name: str, **kw):
        m = Mesh(tuple(shape), self.req.axes)
        kw = {"progress": False, **kw}
        return dataclasses.replace(self.req.options, meshes=[m], system=system_name, **kw), m

    def screen(self, phase: str, shape, batch: int, seq_len: int) -> PhaseFigures | str:
        """The screened plan of one phase on one mesh, or why there is none."""
        key = (phase, tuple(shape), batch, seq_len)
        if key in self.screens:
            return self.screens[key]
        from shard_opt.driver import optimize
        from shard_opt.evaluate import constraints_for, shardings_for

        name, _ = self.replica(shape)
        model = self.provisional(phase, batch, seq_len)
        # the search's own warnings (a memory fallback) are kept in the figures, not printed
        opts, mesh = self.options(shape, name, screen=True, baselines=False, check=False, stream=io.StringIO())
        t0 = time.perf_counter()
        try:
            with timing.phase("serve.screen"):
                s = optimize(model, opts)
                fig = figures_of_screen(
                    phase, mesh, name, s.scorer,
                    lambda e: (shardings_for(e.model, s.groups, s.assignment), constraints_for(s.groups, s.assignment)),
                    s.score)
                fig.fallback = s.fallback
                s.scorer.persist()  # what Shardy made of each candidate, for the next run (shard_opt.factcache)
        except UserError as e:
            fig = " ".join(str(e).split())
        self.seconds[str(key)] = round(time.perf_counter() - t0, 3)
        self.screens[key] = fig
        return fig

    def with_weights(self, phase: str, shape, batch: int, seq_len: int, weights: PhaseFigures,
                     others: dict | None = None) -> PhaseFigures | str:
        """A colocated phase run with the other phase's weights (the model is loaded once:
        tt-xla's prefill and decode graphs share its ``mark_sharding``), priced on this phase's
        module by the search's scorer; ``others``: the KV cache's and inputs' shardings (a
        decode keeps those its own search chose)."""
        from shard_opt.evaluate import shardings_by_role
        from shard_opt.search import make_scorer

        name, system = self.replica(shape)
        model = self.provisional(phase, batch, seq_len)
        _, mesh = self.options(shape, name)
        by_role = {**(others or {}), **weights.by_role}
        try:
            with timing.phase("serve.screen"):
                scorer = make_scorer(model, mesh, system, self.cm, **self.req.options.setting())
                score = scorer.score_by_role(by_role)
                if score.unsafe or not math.isfinite(score.total_us):
                    why = f"breaks the {', '.join(score.unsafe)} rule" if score.unsafe else "cannot be priced"
                    return (f"the {weights.phase} plan's weights on the {phase} module {why} "
                            f"(shard_opt.safety)")
                fig = figures_of_screen(phase, mesh, name, scorer,
                                        lambda e: (shardings_by_role(e.model, by_role), {}), score)
                scorer.persist()
        except UserError as e:
            return " ".join(str(e).split())
        return fig

    # ---- one configuration ---------------------------------------------------------

    def price(self, c: Config) -> None:
        """Screen ``c``'s phases and fill its figures (or ``refused``)."""
        p = self.profile
        if c.refused:
            return
        lower = self.weights_floor(c.decode_mesh)
        if lower is not None:
            c.refused = lower
            return
        if p.users:
            users = math.ceil(p.users / c.replicas)
            dec = self.screen("decode", c.decode_mesh, users, p.decode_len)
        else:
            users, dec = self.as_many_as_fit(c)
        if isinstance(dec, str):
            c.refused = f"decode: {dec}"
            return
        if c.mode == "colocated":
            self.colocated(c, users, dec)
            return
        pre = self.screen("prefill", c.prefill_mesh, 1, p.isl)
        if isinstance(pre, str):
            c.refused = f"prefill: {pre}"
            return
        self.settle(c, users, pre, dec)

    def settle(self, c: Config, users: int, pre: PhaseFigures, dec: PhaseFigures) -> None:
        """Give ``c`` its phases and the arithmetic's figures (or why it is refused)."""
        for fig in (pre, dec):
            if not math.isfinite(fig.step_us):
                c.refused = f"{fig.phase}: no plan on {_spec(fig.mesh)} can be priced (tt-mlir cannot lower it)"
                return
        c.users_per_replica, c.prefill, c.decode = users, pre, dec
        c.figures = self.figures(c)
        c.refused = c.figures.get("refused")

    def colocated(self, c: Config, users: int, dec: PhaseFigures) -> None:
        """Both phases on the replica's chips run one weight layout: the decode plan's (the
        prefill priced with it) or the prefill plan's (the decode priced with it, keeping its
        own KV cache layout). The better under the limits and the objective is kept; what the
        other gave (or why it could not serve) goes in the limits."""
        p, mesh = self.profile, c.decode_mesh
        pre = self.with_weights("prefill", mesh, 1, p.isl, dec)
        if not isinstance(pre, str) and not p.users:  # the prefill's activations share the chips too
            most = self.fit(c, dec, pre).users
            if 1 <= most < users:
                users, dec = most, self.screen("decode", mesh, most, p.decode_len)
                pre = dec if isinstance(dec, str) else self.with_weights("prefill", mesh, 1, p.isl, dec)
        own = self.screen("prefill", mesh, 1, p.isl)
        other = own if isinstance(own, str) else dec if isinstance(dec, str) else \
            self.with_weights("decode", mesh, users, p.decode_len, own, others=dec.others)
        settled, why = [], []
        for layout, pre_f, dec_f in (("decode", pre, dec), ("prefill", own, other)):
            bad = next((f for f in (pre_f, dec_f) if isinstance(f, str)), None)
            if bad is None:
                x = dataclasses.replace(c, layout=layout)
                self.settle(x, users, pre_f, dec_f)
                bad = x.refused
            if bad is None:
                settled.append(x)
            else:
                why.append(f"the {layout} plan's weights: {bad}")
        if not settled:
            c.refused = "; ".join(why)
            return
        best = max(settled, key=self.rank)
        for f in dataclasses.fields(Config):
            setattr(c, f.name, getattr(best, f.name))
        key = p.objective
        why += [f"the {x.layout} plan's weights give {x.figures[key]} {key}" for x in settled if x is not best]
        c.figures["limits"] = c.figures["limits"] + [f"weight layout: the {c.layout} plan's, for both phases; {w}"
                                                     for w in why]

    def rank(self, c: Config) -> tuple:
        """Within the limits first, then the objective."""
        return (not c.figures.get("violates"), c.figures[self.profile.objective])

    def as_many_as_fit(self, c: Config) -> tuple[int, PhaseFigures | str]:
        """users=0: the users whose KV cache fits (at most ``max_batch``). One user first, for
        the bytes per chip; then the count that fits with the activations taken to grow in
        proportion to the batch (an upper bound); then, if the activations of that batch left
        room for more, the count that fits beside them, kept when it still fits."""
        p = self.profile
        one = self.screen("decode", c.decode_mesh, 1, p.decode_len)
        if isinstance(one, str):
            return 1, one
        usable = self.replica(c.decode_mesh)[1].usable_dram_bytes
        per_user = one.activation_bytes + one.kv_local_bytes_per_token * p.context
        users = min(p.max_batch, int((usable - one.weights_bytes) // per_user)) if per_user > 0 else p.max_batch
        if users <= 1:
            return 1, one
        dec = self.screen("decode", c.decode_mesh, users, p.decode_len)
        if isinstance(dec, str):
            return users, dec
        more = min(p.max_batch, self.fit(c, dec, None).users)
        if more > users:
            bigger = self.screen("decode", c.decode_mesh, more, p.decode_len)
            if not isinstance(bigger, str) and self.fit(c, bigger, None).users >= more:
                return more, bigger
        return users, dec

    def weights_floor(self, shape) -> str | None:
        """A replica mesh whose chips cannot hold the weights even split evenly: refused
        before any search (the weights' bytes at their smallest format, divided by the chips)."""
        model = self.provisional("prefill", 1, self.profile.isl)
        total = self._weight_bytes(model)
        n = math.prod(shape)
        usable = self.replica(shape)[1].usable_dram_bytes
        if total / n > usable:
            return (f"{_spec(shape)}: the weights alone need {total / n / 2**30:.1f} GiB per chip split evenly over "
                    f"{n} chips; {usable / 2**30:.1f} GiB is usable")
        return None

    def _weight_bytes(self, model) -> float:
        fmts = [self.req.options.weights.default] + [d for _, d in self.req.options.weights.rules]
        smallest = min(dtype_bytes(f) for f in fmts)

        def arg_bytes(a):
            return math.prod(a.shape) * min(dtype_bytes(a.dtype), smallest if len(a.shape) >= 2 else 9)

        if model.with_layers is not None and (model.num_layers or 0) > 2:
            one, two = model.with_layers(1), model.with_layers(2)
            b1 = sum(arg_bytes(a) for a in one.arguments if a.kind in ("param", "buffer"))
            b2 = sum(arg_bytes(a) for a in two.arguments if a.kind in ("param", "buffer"))
            return b1 + (model.num_layers - 1) * (b2 - b1)
        return sum(arg_bytes(a) for a in model.arguments if a.kind in ("param", "buffer"))

    def fit(self, c: Config, dec: PhaseFigures, pre: PhaseFigures | None) -> arith.Fit:
        """Users of ``context`` tokens that fit on a replica's decode chips (colocated: beside
        the larger of the two phases' activations; the weights are shared)."""
        act = dec.activation_bytes
        if pre is not None and c.mode == "colocated":
            act = max(act, pre.activation_bytes)
        usable = self.replica(c.decode_mesh)[1].usable_dram_bytes
        return arith.fit(usable, dec.weights_bytes, act, dec.kv_local_bytes_per_token, self.profile.context)

    def figures(self, c: Config) -> dict:
        """The arithmetic on ``c``'s phase figures: the record's numbers (docs/plan.md "serving")."""
        p, pre, dec = self.profile, c.prefill, c.decode
        name, system = self.replica(c.decode_mesh)
        tails = arith.sampling_tail(arch=system.arch, vocab=dec.vocab or 1, batch=dec.batch,
                                    vocab_split=dec.vocab_split, vocab_axes=dec.vocab_axes,
                                    logits_gather_us=dec.logits_gather_us, mesh_shape=dec.mesh,
                                    mesh_axes=self.req.axes, system=system, cost_model=self.cm)
        tail = min((t for t in tails if t.available), key=lambda t: t.total_us)
        decode_us = dec.step_us - dec.logits_gather_us + tail.total_us
        handover = None
        handover_ms = 0.0
        if c.mode == "disaggregated":
            nbytes = p.isl * dec.kv_bytes_per_token
            pairs, links = c.cut
            us = arith.handover_us(system, nbytes, pairs, links)
            handover_ms = us / 1e3
            handover = {"bytes_per_user": int(nbytes), "pairs": pairs, "links_per_pair": links,
                        "time_ms": _r(handover_ms, 4),
                        "layout": {"prefill_kv_projections": _kv_projections(pre.arguments),
                                   "decode_cache": dec.kv_sharding,
                                   "order": "K heads then V heads per layer, each chip's heads to the decode chip "
                                            "holding them (tt-metal PR 42568 / 52292 contract)"}}
        rates = arith.steady_state(disaggregated=c.mode == "disaggregated", users=c.users_per_replica, osl=p.osl,
                                   prefill_ms=pre.step_us / 1e3, decode_ms=decode_us / 1e3, handover_ms=handover_ms)
        fitted = self.fit(c, dec, pre)
        chips_used = c.replicas * c.chips
        act = max(dec.activation_bytes, pre.activation_bytes) if c.mode == "colocated" else dec.activation_bytes
        kv_held = dec.kv_local_bytes_per_token * c.users_per_replica * p.context
        out = {
            "users": c.users_per_replica * c.replicas if not p.users else p.users,
            "users_per_replica": c.users_per_replica,
            "max_users_per_replica": fitted.users, "max_users": fitted.users * c.replicas,
            "max_tokens_per_replica": fitted.tokens,
            "ttft_ms": _r(rates.ttft_ms, 4), "tpot_ms": _r(rates.tpot_ms, 4),
            "tokens_per_s_per_user": _r(rates.tokens_per_s_per_user, 3),
            "tokens_per_s": _r(rates.tokens_per_s_per_replica * c.replicas, 3),
            "tokens_per_s_per_chip": _r(rates.tokens_per_s_per_replica * c.replicas / chips_used, 4),
            "cycle_ms": _r(rates.cycle_ms, 4), "prefill_bound": rates.prefill_bound,
            "devices_used": chips_used,
            "prefill_ttft_ms": _r(pre.step_us / 1e3 + handover_ms, 4), "decode_tpot_ms": _r(decode_us / 1e3, 4),
            "decode_step_us": _r(decode_us), "tail": {"chosen": tail.name, "replaces_us": _r(dec.logits_gather_us),
                                                     "options": [t.to_json() for t in tails]},
            "prefill_interleave_ms": _r(rates.tpot_ms - decode_us / 1e3, 4) if c.mode == "colocated" else 0.0,
            "kv_handover": handover,
            "memory_per_chip": {"usable": int(system.usable_dram_bytes), "weights": int(dec.weights_bytes),
                                "activations": int(act), "kv_cache": int(kv_held),
                                "free": int(system.usable_dram_bytes - dec.weights_bytes - act - kv_held)},
        }
        limits = []
        if fitted.users < c.users_per_replica:
            out["refused"] = (f"{c.users_per_replica} users of {p.context} tokens per replica do not fit: "
                              f"{fitted.users} do ({_gib(fitted.free_bytes)} per chip for the KV cache after "
                              f"{_gib(dec.weights_bytes)} weights and {_gib(act)} activations, "
                              f"{dec.kv_local_bytes_per_token:.0f} B per token per chip)")
        if not pre.fits:
            out["refused"] = f"the prefill of {p.isl} tokens does not fit on {_spec(c.prefill_mesh)}"
        limits.append(f"memory: {fitted.users} users of {p.context} tokens fit per replica "
                      f"({_gib(fitted.free_bytes)} per chip free for the KV cache after {_gib(dec.weights_bytes)} "
                      f"weights and {_gib(act)} activations; {dec.kv_local_bytes_per_token:.0f} B per token per chip)")
        if not p.users and c.users_per_replica >= p.max_batch:
            limits.append(f"batch: {p.max_batch} users per replica (max_batch; more would fit)")
        if p.users and c.replicas * c.chips < self.req.devices:
            limits.append(f"replicas: {c.replicas} for {p.users} user{'s' if p.users != 1 else ''}: "
                          f"{self.req.devices - chips_used} of the {self.req.devices} chips stay idle")
        for key, limit in (("ttft_ms", p.ttft_ms), ("tpot_ms", p.tpot_ms)):
            if limit is not None:
                got = out[key]
                ok = got is not None and got <= limit
                limits.append(f"{key}: {got} ms {'within' if ok else 'over'} the limit of {limit} ms")
                if not ok:
                    out["violates"] = out.get("violates", []) + [key]
        for fig in (pre, dec):
            if fig.fallback:
                limits.append(f"memory fallback ({fig.phase} on {_spec(fig.mesh)}): {fig.fallback}")
        if rates.prefill_bound:
            limits.append("prefill-bound: the prefill half cannot feed the decode half; users wait for it")
        out["limits"] = limits
        return out

    # ---- the whole search --------------------------------------------------------

    def search(self) -> list[Config]:
        configs = configurations(self.req.devices, self.system, self.profile, self.host)
        todo = [c for c in configs if not c.refused]
        self.say(f"{len(configs)} configurations of {self.req.devices} chips on {self.system.name} "
                 f"({len(configs) - len(todo)} refused before planning); isl {self.profile.isl}, osl "
                 f"{self.profile.osl}, users {self.profile.users or 'as many as fit'}")
        for c in todo:
            self.price(c)
            if c.refused:
                self.say(f"{c.mode} {c.label}: refused: {c.refused}")
            else:
                f = c.figures
                self.say(f"{c.mode} {c.label}: {c.users_per_replica} users/replica, TTFT {f['ttft_ms']:.2f} ms, "
                         f"TPOT {f['tpot_ms']:.2f} ms, {f['tokens_per_s_per_user']:.2f} t/s/u, "
                         f"{f['tokens_per_s']:.1f} t/s")
        return configs

    def choose(self, configs: list[Config]) -> Config:
        key = self.profile.objective
        ok = [c for c in configs if not c.refused and not c.figures.get("violates")]
        if not ok:
            priced = [c for c in configs if not c.refused]
            if priced:
                why = "; ".join(f"{c.label} ({c.mode}): {', '.join(c.figures['violates'])}" for c in priced[:4])
                raise UserError(f"--serve: no configuration meets the limits ({why}); relax ttft_ms / tpot_ms or "
                                f"use more devices")
            why = "; ".join(f"{c.label} ({c.mode}): {c.refused}" for c in configs[:3])
            raise UserError(f"--serve: no configuration of {self.req.devices} chips can serve this model ({why}); "
                            f"use more devices, smaller --weight-dtype or fewer users / a shorter context")
        # the objective, then tokens/s per chip (fewer chips for the same tokens/s; so the chosen
        # one is on the frontier), then colocated (the simpler deployment)
        return max(ok, key=lambda c: (c.figures[key], c.figures["tokens_per_s_per_chip"], c.mode == "colocated"))


def _gib(nbytes: float) -> str:
    """Bytes for a sentence: GiB with two decimals, smaller amounts in MiB or KiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= scale or unit == "KiB":
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes:.0f} B"


def _kv_projections(arguments: dict) -> dict:
    """The prefill plan's K/V projection shardings (how its KV heads come out)."""
    return {r: s for r, s in arguments.items() if re.search(r"(^|\.)(k_proj|v_proj|key|value|wk|wv)\b", r)}


# ---------------------------------------------------------------------------------
# The chosen configuration, planned in full
# ---------------------------------------------------------------------------------


@dataclass
class Deployment:
    """What ``deploy`` returns: the chosen configuration, its phases' outcomes and the record."""

    config: Config
    prefill: object  # driver.Outcome
    decode: object
    record: dict
    configs: list[Config]


def deploy(req: Request) -> Deployment:
    """Screen every configuration, plan the chosen one in full, and build the record."""
    t0 = time.perf_counter()
    d = Deployer(req)
    configs = d.search()
    chosen = d.choose(configs)
    t1 = time.perf_counter()
    d.say(f"chose {chosen.mode} {chosen.label} ({d.profile.objective} {chosen.figures[d.profile.objective]}); "
          f"planning its phases on the whole model")
    pre_out, dec_out = plan_phases(d, chosen)
    screened = dataclasses.replace(chosen)
    chosen.decode = figures_of_plan("decode", dec_out, d.replica(chosen.decode_mesh)[0])
    chosen.prefill = figures_of_plan("prefill", pre_out, d.replica(chosen.prefill_mesh)[0])
    chosen.figures = d.figures(chosen)
    record = build_record(d, chosen, configs, screened)
    record["seconds"] = {"screening": round(t1 - t0, 3), "chosen": round(time.perf_counter() - t1, 3),
                         "screens": len(d.screens)}
    return Deployment(chosen, pre_out, dec_out, record, configs)


def plan_phases(d: Deployer, c: Config):
    """The chosen configuration's phases as plans, each by ``optimize`` on the whole model on
    its own (sub-)mesh; colocated, the phase whose weights both run is planned so and the
    other is that plan's weights priced on its module (``evaluate_existing``, checked as an
    evaluated plan), a decode keeping the KV cache layout its own search chose."""
    from shard_opt import frontends
    from shard_opt.driver import evaluate_existing, optimize

    p, req = d.profile, d.req
    kw = dict(layers=req.layers, dtype=req.dtype, spec=req.spec)

    def load(phase, batch, seq_len, background):
        screened = d.models.get((phase, batch, seq_len))
        if screened is not None and screened.text:  # the screening had the whole model: no second lowering
            model = screened
        else:
            with timing.phase("lower"):
                model = frontends.load(req.source, phase=phase, batch=batch, seq_len=seq_len, background=background,
                                       **kw)
        return model.resolve() if not background and hasattr(model, "resolve") else model

    shapes = {"decode": (c.decode_mesh, c.users_per_replica, p.decode_len), "prefill": (c.prefill_mesh, 1, p.isl)}

    def opts_of(phase):
        name, _ = d.replica(shapes[phase][0])
        return d.options(shapes[phase][0], name, progress=not req.quiet)[0]

    if c.mode == "disaggregated":
        return (optimize(load("prefill", 1, p.isl, True), opts_of("prefill")),
                optimize(load("decode", c.users_per_replica, p.decode_len, True), opts_of("decode")))
    lead = c.layout or "decode"
    follow = "prefill" if lead == "decode" else "decode"
    first = optimize(load(lead, *shapes[lead][1:], True), opts_of(lead))
    model = load(follow, *shapes[follow][1:], False)
    others = c.decode.others if follow == "decode" and c.decode is not None else {}
    model.meta["shard_spec"] = shared_weights_spec(first, others)
    second = evaluate_existing(model, opts_of(follow))
    shared = dataclasses.replace(second.parts.explanation, strategy=(
        f"the {lead} plan's weights (one copy of the model serves both phases): {first.plan.strategy}"))
    second = dataclasses.replace(second, parts=dataclasses.replace(second.parts, explanation=shared))
    return (first, second) if lead == "prefill" else (second, first)


def shared_weights_spec(outcome, others: dict | None = None) -> dict:
    """A plan's weight shardings as a spec (``frontends.shard_spec`` form), so the other
    colocated phase is priced with the weights this plan lays out; ``others``: role ->
    sharding of the KV cache and inputs (the screened decode's own), written by role."""
    spec = {}
    for a in outcome.plan.arguments:
        if a.kind in ("param", "buffer"):
            spec[a.name] = [list(d) if d else None for d in a.sharding.axis_names()]
    for role, sh in (others or {}).items():
        spec[role] = [list(d) if d else None for d in sh.axis_names()]
    phase = outcome.plan.phase or "model"
    where = f"the {phase} plan ({_spec(outcome.plan.mesh.shape)}, batch {outcome.plan.batch})"
    return {"source": "serve", "where": where, "by_devices": {"*": {"mesh": list(outcome.plan.mesh.shape),
                                                                   "spec": spec, "unmatched": []}}}


def frontier(entries: list[dict]) -> list[int]:
    """The configurations no other beats on both axes of the deployment chart (tokens/s/user
    and tokens/s per chip): the indices of the priced entries within the limits that no such
    entry matches or betters on both and betters on one. Refused and over-the-limit entries
    are not on it (they cannot be deployed), though they are drawn."""
    pts = [(i, e["tokens_per_s_per_user"], e["tokens_per_s_per_chip"]) for i, e in enumerate(entries)
           if not e.get("refused") and not e.get("violates") and e.get("tokens_per_s_per_user") is not None
           and e.get("tokens_per_s_per_chip") is not None]
    return [i for i, u, c in pts
            if not any(u2 >= u and c2 >= c and (u2, c2) != (u, c) for j, u2, c2 in pts if j != i)]


def build_record(d: Deployer, c: Config, configs: list[Config], screened: Config) -> dict:
    """The plan JSON's ``serving`` record (docs/plan.md)."""
    p, f = d.profile, c.figures
    key = p.objective

    def phase(fig: PhaseFigures, extra: dict) -> dict:
        return {**fig.summary(), **extra}

    lead = c.layout or "decode"
    own, shared = "own search", f"the {lead} plan's weights"
    pre = phase(c.prefill, {"ttft_ms": f["prefill_ttft_ms"], "tt_mlir": phase_verdict(c.prefill),
                            "layout": own if c.mode == "disaggregated" or lead == "prefill" else shared})
    dec = phase(c.decode, {"tt_mlir": phase_verdict(c.decode),
                           "layout": own if c.mode == "disaggregated" or lead == "decode" else shared,
                           "kv_len": c.decode.seq_len, "step_with_tail_us": f["decode_step_us"], "tail": f["tail"],
                           "prefill_interleave_ms": f["prefill_interleave_ms"], "tpot_ms": f["decode_tpot_ms"],
                           "cache_sharding": c.decode.kv_sharding})
    entries = []
    best = screened.figures[key]  # like with like: every configuration's screened figure
    for x in configs:
        e = {"mode": x.mode, "replicas": x.replicas, "replica_mesh": _spec(x.replica_mesh),
             "prefill_mesh": _spec(x.prefill_mesh), "decode_mesh": _spec(x.decode_mesh),
             "chosen": x is c}
        if x.refused:
            e["refused"] = x.refused
        elif x.figures:
            g = x.figures if x is not c else screened.figures
            e.update({k: g[k] for k in ("users_per_replica", "ttft_ms", "tpot_ms", "tokens_per_s_per_user",
                                         "tokens_per_s", "tokens_per_s_per_chip", "devices_used")})
            e["priced"] = "screened"
            if g.get("violates"):
                e["violates"] = g["violates"]
            if g.get(key) and best:
                e["vs_chosen"] = _r(g[key] / best, 4)
        entries.append(e)
    for i in frontier(entries):
        entries[i]["frontier"] = True
    return {
        "profile": p.to_json(), "objective": key, "devices": d.req.devices, "system": d.system.name,
        "mode": c.mode, "replicas": c.replicas, "replica_mesh": _spec(c.replica_mesh),
        "devices_used": f["devices_used"],
        "prefill": pre, "decode": dec, "kv_handover": f["kv_handover"],
        "users": f["users"], "users_per_replica": f["users_per_replica"],
        "max_users": f["max_users"], "max_users_per_replica": f["max_users_per_replica"],
        "context": p.context, "kv_bytes_per_token": _r(c.decode.kv_bytes_per_token),
        "kv_bytes_per_token_per_chip": _r(c.decode.kv_local_bytes_per_token),
        "memory_per_chip": f["memory_per_chip"],
        "ttft_ms": f["ttft_ms"], "tpot_ms": f["tpot_ms"],
        "tokens_per_s_per_user": f["tokens_per_s_per_user"], "tokens_per_s": f["tokens_per_s"],
        "tokens_per_s_per_chip": f["tokens_per_s_per_chip"],
        "limits": f["limits"], "links": links_record(d, c), "configurations": entries,
    }


NOT_CHECKED = "not checked (the tt-mlir check is off: --no-check, or SHARD_OPT_CHECK=0 without --check)"


def phase_verdict(fig: PhaseFigures) -> dict:
    """The tt-mlir check's verdict on a phase's plan, as the plan carries it
    (``checks.tt_mlir.verdict``: ``shard_opt.verdict``, the same words as every output), or
    that the check did not run."""
    plan = fig.outcome.plan if fig.outcome is not None else None
    chk = ((getattr(plan, "checks", None) or {}).get("tt_mlir")) or {}
    v = chk.get("verdict")
    if v is not None:
        return json.loads(json.dumps(v, default=dict))
    return {"checked": False, "deliverable": False, "words": NOT_CHECKED}


def links_record(d: Deployer, c: Config) -> dict:
    """How the chosen replica's chips are wired: each mesh axis of the prefill and decode
    meshes with its topology and links (the system preset's, from tt-metal's mesh graph
    descriptors for a multi-host system: ``costmodel.multihost``), the preset each runs on
    and where its figures come from."""
    def axes(shape) -> tuple[str, list[dict]]:
        name, system = d.replica(shape)
        return name, [{"axis": a, "size": n, "topology": w.topology, "links": w.links}
                      for a, n, w in zip(d.req.axes, shape, system.links_for(tuple(shape)))]

    pre_name, pre_axes = axes(c.prefill_mesh)
    dec_name, dec_axes = axes(c.decode_mesh)
    return {"system": d.system.name, "hosts": d.system.chips // d.host.chips if d.host is not None else 1,
            "prefill": {"system": pre_name, "axes": pre_axes}, "decode": {"system": dec_name, "axes": dec_axes},
            "sources": list(d.system.sources)}
