"""Weight formats: which matmul weights the device stores as block floats (``--weight-dtype``).

tt-xla's ``experimental_weight_dtype`` ("bfp_bf8", "bfp_bf4") converts the weight operand
of every matmul / linear whose value comes from a parameter (tt-mlir pass
``ttnn-weight-dtype-conversion``, ``lib/Dialect/TTNN/Transforms/TTNNWeightDtypeConversion.cpp``);
embeddings, convolutions and the KV cache keep their type. Per tensor,
``tt_torch.weight_dtype.apply_weight_dtype_overrides(model, {glob: dtype})`` overrides it
(tt-xla ``python_package/tt_torch/weight_dtype.py``; tt-xla's Llama-3.1-70B test keeps
bfp8 and puts the MLP's gate/up at bfp4). tt-metal's models run "bfp4 MLP and bfp8
attention" (tt-metal ``models/tt_transformers/PERF.md``).

``--weight-dtype bfp8,mlp=bfp4``: a default, then ``ROLE=DTYPE`` rules, later ones
winning. A role is ``attention`` (the q/k/v projections that feed an attention and the
projection of its output, found from the graph), ``mlp`` (the other matmul weights of
repeated layers), or an fnmatch glob on parameter names (``*.mlp.down_proj.weight``).
With const-eval on (tt-xla's default) only the converted copy lives on the device, so
a block-float weight takes its format's bytes in DRAM too.

The KV cache is not a weight: it keeps its type unless ``cache=bfp8`` says otherwise
(``--weight-dtype bfp8,cache=bfp8``). tt-metal's models keep it in bfp8 with the weights
(the Galaxy Llama-70B demo: "w2/wo/KV bfp8", references/measurements.md section 2); tt-xla
stores it so only when its vLLM plugin is given ``experimental_kv_cache_dtype="bfp_bf8"``
(tt-xla ``integrations/vllm_plugin/vllm_tt/platform.py``; ``bfp_bf4`` raises
NotImplementedError in ``model_runner.py``), so bfp8 is the one cache format. Every
argument of kind ``cache`` is then read, written and held at bfp8's bytes.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from shard_opt import ir, kernels
from shard_opt.dataflow import Graph
from shard_opt.errors import UserError

WEIGHT_DTYPES = ("bf16", "bfp8", "bfp4")
ROLES = ("attention", "mlp")
CACHE_ROLE = "cache"  # --weight-dtype ...,cache=bfp8: the KV cache's storage, not a weight rule
CACHE_DTYPES = ("bf16", "bfp8")
TT_XLA_NAMES = {"bf16": "bf16", "bfp8": "bfp_bf8", "bfp4": "bfp_bf4"}  # experimental_weight_dtype values


@dataclass(frozen=True)
class WeightFormats:
    """A default weight format and per-role / per-name rules."""

    default: str = "bf16"
    rules: tuple[tuple[str, str], ...] = ()
    cache: str = "bf16"  # the KV cache's storage (``cache=bfp8``); bf16 keeps its type

    @staticmethod
    def parse(text: str | None) -> "WeightFormats":
        """``bfp8`` or ``bfp8,mlp=bfp4,*.lm_head.weight=bf16``."""
        if not text:
            return WeightFormats()
        default, rules, cache = "bf16", [], "bf16"
        for i, part in enumerate(p.strip() for p in text.split(",")):
            role, eq, dtype = part.rpartition("=")
            if not eq:
                role, dtype = "", part
            if dtype not in WEIGHT_DTYPES:
                raise UserError(f"--weight-dtype {text!r}: {dtype!r} is not a weight format; use one of "
                                f"{', '.join(WEIGHT_DTYPES)} (optionally ROLE=DTYPE, ROLE: {', '.join(ROLES)} or a "
                                f"parameter-name glob)")
            if role == CACHE_ROLE:
                if dtype not in CACHE_DTYPES:
                    raise UserError(f"--weight-dtype {text!r}: the KV cache can be stored as "
                                    f"{' or '.join(CACHE_DTYPES)}, not {dtype} (tt-xla's experimental_kv_cache_dtype "
                                    f"has no bfp_bf4)")
                cache = dtype
            elif not role:
                if i:
                    raise UserError(f"--weight-dtype {text!r}: the default format comes first "
                                    f"(e.g. bfp8,mlp=bfp4)")
                default = dtype
            else:
                rules.append((role, dtype))
        return WeightFormats(default, tuple(rules), cache)

    @property
    def is_plain(self) -> bool:
        return self.default == "bf16" and all(d == "bf16" for _, d in self.rules) and self.cache == "bf16"

    def text(self) -> str:
        extra = [f"{CACHE_ROLE}={self.cache}"] if self.cache != "bf16" else []
        return ",".join([self.default] + [f"{r}={d}" for r, d in self.rules] + extra)

    def resolve(self, arguments, roles: dict[int, str]) -> dict[int, str]:
        """Argument index -> block-float format, for the matmul weights ``roles`` names
        (``matmul_weight_roles``) and, with ``cache=bfp8``, every KV-cache argument; those
        left in bf16 are not listed."""
        out = {}
        for a in arguments:
            if self.cache != "bf16" and getattr(a, "kind", None) == "cache":
                out[a.index] = self.cache
                continue
            role = roles.get(a.index)
            if role is None:
                continue
            dtype = self.default
            for pattern, d in self.rules:
                if pattern == role or (pattern not in ROLES and fnmatch.fnmatchcase(a.name, pattern)):
                    dtype = d
            if dtype != "bf16":
                out[a.index] = dtype
        return out

    def unmatched(self, arguments, roles: dict[int, str]) -> list[str]:
        """Rules that name no matmul weight of the model (said to the user)."""
        names = {a.index: a.name for a in arguments}
        out = []
        for pattern, _ in self.rules:
            if pattern in ROLES:
                hit = any(r == pattern for r in roles.values())
            else:
                hit = any(fnmatch.fnmatchcase(names[i], pattern) for i in roles)
            if not hit:
                out.append(pattern)
        return out


def matmul_weight_roles(module, arguments) -> dict[int, str]:
    """Argument index -> ``attention``, ``mlp`` or ``other`` for every parameter a
    ``dot_general`` reads as an operand (through layout ops).

    ``attention``: read by a matmul whose output reaches a fused attention's input, or
    whose input comes from its output, through elementwise and layout ops (q/k/v and o:
    the group ``mark-fusions`` tagged ``sdpa``). ``mlp``: any other such weight of a
    repeated layer. ``other``: the rest (an LM head, a projection outside the layers).
    """
    from shard_opt.passes.mark_fusions import find_groups

    kinds = [a.kind for a in arguments]
    g = Graph.of(module, kinds)
    weights: dict[int, set[int]] = {}  # dot node -> argument indices of its weight operands
    for node in g.nodes:
        if node.name == "stablehlo.dot_general":
            args = {g.values[g.source(o)].arg for o in node.operands if g.is_weight(o)}
            if args:
                weights[node.index] = args
    attention: set[int] = set()
    for label, members in find_groups(g):
        if kernels.of_label(label) is not kernels.SDPA:
            continue
        for n in members:
            for v in g.nodes[n].operands:
                if g.values[v].producer not in members and not g.is_constant(v):
                    attention |= _dot_weights_before(g, v, weights)
        exits = [r for n in members for r in g.nodes[n].results
                 if any(u not in members for u in g.values[r].users)]
        for v in exits:
            attention |= _dot_weights_after(g, v, weights)
    layer_of = {a.index: a.layer for a in arguments}
    out = {}
    for args in weights.values():
        for i in args:
            out[i] = "attention" if i in attention else ("mlp" if layer_of.get(i) is not None else "other")
    return out


_THROUGH = ("stablehlo.reshape", "stablehlo.transpose", "stablehlo.convert", "stablehlo.broadcast_in_dim",
            "stablehlo.multiply", "stablehlo.add", "stablehlo.subtract", "stablehlo.negate", "stablehlo.slice",
            "stablehlo.concatenate", "stablehlo.select", "stablehlo.divide")  # not through a norm


def _dot_weights_before(g: Graph, v: int, weights: dict) -> set[int]:
    """Weights of the matmuls ``v`` is computed from (rotary embeddings, norms on the way)."""
    out, seen, stack = set(), set(), [(v, 0)]
    while stack:
        x, depth = stack.pop()
        p = g.producer(x)
        if p is None or x in seen or depth > 24:
            continue
        seen.add(x)
        if p.index in weights:
            out |= weights[p.index]
        elif p.name in _THROUGH:
            stack.extend((o, depth + 1) for o in p.operands if not g.is_weight(o))
    return out


def _dot_weights_after(g: Graph, v: int, weights: dict) -> set[int]:
    """Weights of the first matmuls that read ``v`` (through layout ops)."""
    out, seen, stack = set(), set(), [(v, 0)]
    while stack:
        x, depth = stack.pop()
        if x in seen or depth > 8:
            continue
        seen.add(x)
        for u in g.values[x].users:
            node = g.nodes[u]
            if u in weights:
                out |= weights[u]
            elif node.name in _THROUGH[:4]:
                stack.extend((r, depth + 1) for r in node.results)
    return out


def weight_roles_of(model) -> dict[int, str]:
    """``matmul_weight_roles`` of a ``LoweredModel``'s module."""
    return matmul_weight_roles(ir.parse(model.text, filename=model.name), model.arguments)
