"""Rewrites applied to a PyTorch model before torch-mlir lowers it: one table.

torch-mlir 20261001 cannot lower some ops PyTorch models use (references/toolchain.md,
"Ops torch-mlir 20261001 cannot lower"), and Hugging Face's mixture-of-experts layers
do not export at all. Users' scripts say ``interpolate`` and ``MixtralSparseMoeBlock``,
so the frontend rewrites them here instead of asking the user to.

Two kinds of entries:

* ``DECOMPOSITIONS``: ATen op -> a function in simpler ATen ops. They run through
  ``ExportedProgram.run_decompositions`` together with torch-mlir's own table (ours
  win), so they apply however the script called the op (``F.interpolate``,
  ``nn.Upsample``, a subclass such as diffusers' ``WanUpsample``).
* ``MODULE_REWRITES``: (predicate on a module, replacement ``forward``). The
  replacement is set on the instance for the duration of the export, so parameter
  names (FQNs) do not change: a plan found on the rewritten graph applies to the
  user's model as written.

Every entry says what it fixes and why in ``REWRITE_TABLE`` (shown by ``--describe``).

After lowering, ``after_lowering`` cleans torch-mlir's StableHLO text before anything
else sees it (every module shard-opt hands to XLA or emits comes from it):

* ``inline_resources``: ``dense_resource<NAME>`` constants (torch-mlir's literals of
  more than one element, with their bytes in a ``{-# dialect_resources ... #-}`` blob
  at the end of the text) become plain ``dense<...>`` attributes. XLA's StableHLO
  import rejects them ("UNIMPLEMENTED: Only dense elements attr are supported"), and
  tt-mlir's ElementTypeNormalization cannot retype them (it skips
  DenseResourceElementsAttr, tt-mlir issue 2847).
* ``narrow_f64``: every ``f64`` type, constant and op becomes ``f32`` (Tenstorrent
  chips have no f64; tt-mlir does the same narrowing later, see the function).
* ``arith_to_stablehlo_constants``: torch-mlir's ``arith.constant`` of a tensor becomes
  the same ``stablehlo.constant``: the module must be pure StableHLO + sdy, which is what
  tt-xla hands tt-mlir and what the Tenstorrent PJRT plugin accepts (it refuses a module
  with an ``arith.constant``: "Failed to serialize StableHLO with mixed dialects ...
  unstable op: arith.constant", references/ttmlir_offline.md).
* ``empty_to_zeros``: a ``tensor.empty`` (``torch.empty_like``, then filled) becomes a
  zero ``stablehlo.constant``, for the same reason.
"""

from __future__ import annotations

import contextlib
import math
import re
import types
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from shard_opt import ir


@dataclass(frozen=True)
class RewriteEntry:
    """One row of the rewrite table.

    Attributes:
      target: the op or module the rewrite replaces.
      replacement: what it becomes.
      why: the failure it avoids (with its source).
    """

    target: str
    replacement: str
    why: str


# ---------------------------------------------------------------------------------
# ATen decompositions
# ---------------------------------------------------------------------------------

def _integer_scales(in_sizes, output_size, scale_factors):
    """Per spatial dim, the integer upsampling factor, or None if one is not integral."""
    if output_size is not None:
        out = list(output_size)
    else:
        out = [math.floor(s * f) for s, f in zip(in_sizes, scale_factors)]
    scales = []
    for i, o in zip(in_sizes, out):
        if i == 0 or o % i:
            return None, out
        scales.append(o // i)
    return scales, out


def _upsample_nearest(x, output_size, scale_factors, exact: bool):
    """Nearest (or nearest-exact) upsampling as broadcast + reshape.

    For an integer factor ``s`` both modes pick source index ``i // s``
    (nearest: ``floor(i / s)``; nearest-exact: ``floor((i + 0.5) / s)``, equal for
    integer ``s``), which is ``x.unsqueeze(d + 1).expand(..., s, ...).reshape``. A
    non-integer factor falls back to index_select with constant indices (a gather).
    """
    spatial = x.shape[2:]
    scales, out = _integer_scales(spatial, output_size, scale_factors)
    if scales is not None:
        y = x
        for d, s in enumerate(scales):
            if s == 1:
                continue
            dim = 2 + d
            y = y.unsqueeze(dim + 1)
            shape = list(y.shape)
            shape[dim + 1] = s
            y = y.expand(shape)
            merged = list(y.shape[:dim]) + [y.shape[dim] * s] + list(y.shape[dim + 2:])
            y = y.reshape(merged)
        return y
    y = x
    offset = 0.5 if exact else 0.0
    for d, (i, o) in enumerate(zip(spatial, out)):
        # torch/_decomp's _compute_upsample_nearest_indices: float32 arange, truncate
        scale = i / (i * scale_factors[d]) if scale_factors is not None else i / o
        idx = ((torch.arange(o, dtype=torch.float32) + offset) * scale).to(torch.int64).clamp(max=i - 1)
        y = torch.index_select(y, 2 + d, idx)
    return y


def _make_upsample(rank: int, exact: bool, variant: str):
    def vec(x, output_size, scale_factors):
        sf = list(scale_factors) if scale_factors is not None else None
        if sf is not None and len(sf) == 1 and rank > 1:
            sf = sf * rank
        return _upsample_nearest(x, output_size, sf, exact)

    def default(x, output_size, *scales):
        sf = [s for s in scales if s is not None] or None
        if sf is not None and len(sf) != rank:
            sf = None
        return _upsample_nearest(x, None if sf else output_size, sf, exact)

    return vec if variant == "vec" else default


def _slice_scatter(inp, src, dim=0, start=None, end=None, step=1):
    """``slice_scatter`` with ``step > 1`` as narrow + unflatten + cat (no scatter).

    torch-mlir 20261001 aborts with ``std::bad_alloc`` lowering a strided
    ``slice_scatter`` (seen here on diffusers' Wan rotary embedding,
    ``out[..., 0::2] = ...``). The strided positions ``start + step * i`` are slot 0 of
    an ``[M, step]`` view of the covered range: put ``src`` there, keep the other slots,
    splice the range back. ``step == 1`` is left to torch-mlir (it lowers).
    """
    if step == 1:
        return NotImplemented
    dim = dim % inp.dim()
    n = inp.shape[dim]
    start = 0 if start is None else (start + n if start < 0 else start)
    start = max(0, min(start, n))
    m = src.shape[dim]
    if m == 0:
        return inp.clone()
    span = m * step
    avail = n - start
    region = inp.narrow(dim, start, min(span, avail))
    if span > avail:  # pad the tail so the range reshapes to [m, step]
        pad_shape = list(inp.shape)
        pad_shape[dim] = span - avail
        region = torch.cat([region, inp.new_zeros(pad_shape)], dim=dim)
    shape = list(region.shape)
    grid = region.reshape(shape[:dim] + [m, step] + shape[dim + 1:])
    grid = torch.cat([src.unsqueeze(dim + 1), grid.narrow(dim + 1, 1, step - 1)], dim=dim + 1)
    region = grid.reshape(shape).narrow(dim, 0, min(span, avail))
    parts = []
    if start > 0:
        parts.append(inp.narrow(dim, 0, start))
    parts.append(region)
    tail = n - start - region.shape[dim]
    if tail > 0:
        parts.append(inp.narrow(dim, n - tail, tail))
    return torch.cat(parts, dim=dim) if len(parts) > 1 else parts[0]


def decompositions(fired: set | None = None) -> dict:
    """ATen op -> decomposition, to merge over torch-mlir's table.

    ``fired``: if given, the name of every op a decomposition actually rewrote is added
    to it (so reports can say which rewrites a model needed).
    """
    aten = torch.ops.aten
    table = {aten.slice_scatter.default: _slice_scatter}
    for rank in (1, 2, 3):
        for exact, base in ((False, f"upsample_nearest{rank}d"), (True, f"_upsample_nearest_exact{rank}d")):
            packet = getattr(aten, base, None)
            if packet is None:
                continue
            for variant in ("vec", "default"):
                op = getattr(packet, variant, None)
                if op is not None:
                    table[op] = _make_upsample(rank, exact, variant)
    if fired is not None:
        table = {op: _recording(op, fn, fired) for op, fn in table.items()}
    return table


def _recording(op, fn, fired: set):
    def run(*args, **kwargs):
        out = fn(*args, **kwargs)
        if out is not NotImplemented:
            fired.add(str(op))
        return out
    return run


# ---------------------------------------------------------------------------------
# Module rewrites
# ---------------------------------------------------------------------------------

def _is_stacked_experts(m: torch.nn.Module) -> bool:
    """transformers 5.x expert containers: ``gate_up_proj`` [E, 2I, H], ``down_proj`` [E, H, I].

    Mixtral, Qwen2-MoE, Qwen3-MoE and others share this interface
    (``forward(hidden_states, top_k_index, top_k_weights)``).
    """
    gu = m._parameters.get("gate_up_proj") if hasattr(m, "_parameters") else None
    dn = m._parameters.get("down_proj") if hasattr(m, "_parameters") else None
    return (
        gu is not None and dn is not None and gu.dim() == 3 and dn.dim() == 3
        and gu.shape[0] == dn.shape[0] and gu.shape[2] == dn.shape[1] and gu.shape[1] == 2 * dn.shape[2]
    )


def _dense_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """All experts on all tokens, combined with dense routing weights.

    Static shapes (no data-dependent loop, no ``histc``), so torch.export and
    torch-mlir accept it; the expert dim ``E`` of ``gate_up_proj`` / ``down_proj``
    stays a tensor dim, so expert parallelism is a sharding of dim 0. The result
    equals the sparse formulation (non-selected experts get weight 0); the matmul
    FLOPs are ``E / top_k`` times the sparse model's (recorded in the model's meta).
    """
    num_experts = self.gate_up_proj.shape[0]
    one_hot = F.one_hot(top_k_index, num_classes=num_experts).to(top_k_weights.dtype)  # [T, k, E]
    routing = (one_hot * top_k_weights.unsqueeze(-1)).sum(dim=1)  # [T, E]
    gate_up = torch.einsum("th,eoh->teo", hidden_states, self.gate_up_proj)
    gate, up = gate_up.chunk(2, dim=-1)
    inner = self.act_fn(gate) * up  # [T, E, I]
    out = torch.einsum("tei,ehi->teh", inner, self.down_proj)  # [T, E, H]
    return torch.einsum("teh,te->th", out, routing.to(out.dtype))


def _is_hf_experts(m: torch.nn.Module) -> bool:
    """Other layouts of transformers 5.x' experts (``@use_experts_implementation``, which sets
    ``is_transposed``, ``is_concatenated``, ``has_bias``, ``has_gate``, ``has_post_expert_norm``
    on the module): GPT-OSS's ``gate_up_proj`` [E, H, 2I] (transposed) with biases and an
    interleaved gate/up (its own ``_apply_gate``), and kin. Not matched with a post-expert
    norm (``module_rewrites`` names it as unsupported instead)."""
    if not all(hasattr(m, a) for a in ("is_transposed", "has_bias", "has_gate", "_apply_gate")):
        return False
    params = getattr(m, "_parameters", {})
    up = params.get("gate_up_proj" if m.has_gate else "up_proj")
    dn = params.get("down_proj")
    if up is None or dn is None or up.dim() != 3 or dn.dim() != 3 or up.shape[0] != dn.shape[0]:
        return False
    if m.has_bias and (params.get(("gate_up_proj" if m.has_gate else "up_proj") + "_bias") is None
                       or params.get("down_proj_bias") is None):
        return False
    return not getattr(m, "has_post_expert_norm", False)


def _dense_hf_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """``_dense_experts_forward`` for the layouts ``_is_hf_experts`` matches: the module's
    own flags say whether the weights are transposed ([E, H, out] instead of [E, out, H])
    and carry biases; its ``_apply_gate`` splits and gates the projection (GPT-OSS's
    interleaved, clamped SwiGLU, or transformers' default chunk + ``act_fn``)."""
    num_experts = self.down_proj.shape[0]
    one_hot = F.one_hot(top_k_index, num_classes=num_experts).to(top_k_weights.dtype)  # [T, k, E]
    routing = (one_hot * top_k_weights.unsqueeze(-1)).sum(dim=1)  # [T, E]
    name = "gate_up_proj" if self.has_gate else "up_proj"
    proj = torch.einsum("th,eho->teo" if self.is_transposed else "th,eoh->teo", hidden_states, getattr(self, name))
    if self.has_bias:
        proj = proj + getattr(self, name + "_bias").unsqueeze(0)
    inner = self._apply_gate(proj) if self.has_gate else self.act_fn(proj)  # [T, E, I]
    out = torch.einsum("tei,eih->teh" if self.is_transposed else "tei,ehi->teh", inner, self.down_proj)
    if self.has_bias:
        out = out + self.down_proj_bias.unsqueeze(0)
    return torch.einsum("teh,te->th", out, routing.to(out.dtype))


MODULE_REWRITES: list[tuple[Callable[[torch.nn.Module], bool], Callable]] = [
    (_is_stacked_experts, _dense_experts_forward),
    (_is_hf_experts, _dense_hf_experts_forward),
]

REWRITE_TABLE = [
    RewriteEntry(
        "aten.upsample_nearest{1,2,3}d, aten._upsample_nearest_exact{1,2,3}d "
        "(F.interpolate / nn.Upsample, mode nearest or nearest-exact)",
        "unsqueeze + expand + reshape per spatial dim (integer factors); index_select otherwise",
        "torch-mlir 20261001 fails with 'failed to legalize torch.constant.float' on "
        "upsample_nearest2d (references/toolchain.md); nearest-exact otherwise becomes a gather",
    ),
    RewriteEntry(
        "aten.slice_scatter with step > 1 (x[..., 0::2] = y)",
        "narrow + reshape to [M, step] + cat (src in slot 0) + cat back",
        "torch-mlir 20261001 aborts with std::bad_alloc on a strided slice_scatter "
        "(diffusers Wan rotary embedding; seen here)",
    ),
    RewriteEntry(
        "transformers stacked experts (MixtralExperts and kin: gate_up_proj [E,2I,H], down_proj [E,H,I])",
        "dense formulation: all experts on all tokens, one-hot routing weights, einsums",
        "HF routes through aten.histc (torch-mlir cannot legalize it) or a data-dependent "
        "loop torch.export rejects (references/toolchain.md); dense keeps E as a shardable dim",
    ),
    RewriteEntry(
        "transformers experts of other layouts (GptOssExperts and kin: @use_experts_implementation "
        "flags, e.g. gate_up_proj [E,H,2I] transposed, biases, interleaved clamped SwiGLU)",
        "the same dense formulation, reading the module's is_transposed / has_bias / has_gate flags "
        "and gating with its own _apply_gate",
        "transformers' default experts path (grouped_mm) fails torch.export on meta weights "
        "('Invalid strides/sizes, got (0, 0, 0)', seen here with GPT-OSS); the eager loop is data-dependent",
    ),
]


@contextlib.contextmanager
def module_rewrites(model: torch.nn.Module):
    """Apply ``MODULE_REWRITES`` to ``model``'s submodules for the duration of the block.

    Yields the list of ``(path, module class)`` that were rewritten.
    """
    patched = []
    for path, m in model.named_modules():
        if getattr(m, "has_post_expert_norm", False) is True and hasattr(m, "down_proj"):
            from shard_opt.errors import UserError

            raise UserError(
                f"{path or 'model'} ({type(m).__name__}): experts with a norm after each expert "
                f"(has_post_expert_norm) are not supported by shard-opt's mixture-of-experts rewrite, "
                f"and transformers' own experts path does not export; report the model")
        for pred, fwd in MODULE_REWRITES:
            if pred(m):
                had = "forward" in m.__dict__
                old = m.__dict__.get("forward")
                m.forward = types.MethodType(fwd, m)
                patched.append((m, had, old, path))
                break
    try:
        yield [(p, type(m).__name__) for m, _, _, p in patched]
    finally:
        for m, had, old, _ in patched:
            if had:
                m.forward = old
            else:
                del m.__dict__["forward"]


# ---------------------------------------------------------------------------------
# After lowering: torch-mlir's StableHLO text
# ---------------------------------------------------------------------------------

_RESOURCE_SECTION = re.compile(r"\{-#(.*?)#-\}", re.S)
_RESOURCE_ENTRY = re.compile(r'([A-Za-z_][\w.$\-]*|"(?:[^"\\]|\\.)*")\s*:\s*"(0x[0-9A-Fa-f]*|[^"]*)"')
_RESOURCE_REF = re.compile(r'^dense_resource<([^>]+)>')
_CONSTANT_OPS = ("arith.constant", "stablehlo.constant", "sdy.constant", "chlo.constant")


def resource_blobs(text: str) -> dict[str, str]:
    """``{name: hex text}`` of the ``dialect_resources`` section(s) at the end of ``text``."""
    blobs = {}
    for section in _RESOURCE_SECTION.findall(text):
        for name, value in _RESOURCE_ENTRY.findall(section):
            blobs[name.strip('"')] = value
    return blobs


def _blob_array(name: str, hex_text: str | None, tensor_type, where: str) -> np.ndarray:
    """The elements of blob ``name`` as a numpy array ``DenseElementsAttr.get`` takes.

    A builtin resource blob is printed as ``"0x"`` + 4 bytes of alignment (little-endian
    uint32, a power of two: torch-mlir's is the numpy dtype's alignment) + the raw
    little-endian element bytes, one byte per ``i1``. The element count and width check
    the split: the data must be exactly ``numel * bytes``.
    """
    if hex_text is None:
        raise RuntimeError(f"{where}: torch-mlir's module references dense_resource<{name}> but its "
                           f"dialect_resources section has no blob of that name (a torch-mlir bug: the "
                           f"constant's value is unknown, so the module cannot be used)")
    if not hex_text.startswith("0x"):
        raise RuntimeError(f"{where}: dense_resource<{name}> holds {hex_text[:20]!r}, not hex data "
                           f"(an elided blob?); lower the model again without eliding resources")
    raw = bytes.fromhex(hex_text[2:])
    elem = tensor_type.element_type
    width = getattr(elem, "width", None)
    if width not in (1, 8, 16, 32, 64):
        raise RuntimeError(f"{where}: dense_resource<{name}> of type {tensor_type}: element type {elem} "
                           f"is not an integer or float type shard-opt can inline")
    nbytes = 1 if width == 1 else width // 8
    numel = int(np.prod(tensor_type.shape)) if tensor_type.shape else 1
    align = int.from_bytes(raw[:4], "little") if len(raw) >= 4 else 0
    data = raw[4:]
    if align == 0 or align & (align - 1) or len(data) != numel * nbytes:
        raise RuntimeError(f"{where}: dense_resource<{name}> blob has {len(raw)} bytes (alignment "
                           f"{align}); a {tensor_type} needs 4 + {numel} x {nbytes}")
    shape = tuple(tensor_type.shape)
    if width == 1:
        return (np.frombuffer(data, np.uint8) != 0).reshape(shape)
    return np.frombuffer(data, np.dtype(f"<u{nbytes}")).reshape(shape)


def inline_resources(module, blobs: dict[str, str], *, where: str) -> int:
    """Replace every ``dense_resource`` attribute of an op by the equal ``dense`` one; returns how many.

    jaxlib's MLIR bindings can make resource attributes but not read their bytes back,
    so the bytes come from the module text (``resource_blobs``) and the new attribute
    is built with ``DenseElementsAttr.get`` (which picks the printed form: a splat, a
    list, or ``"0x..."`` hex of the same little-endian bytes). Unreferenced blobs are
    not printed, so the resource section disappears with the last reference.
    """
    irm = ir.ir()
    count = 0
    with module.context, irm.Location.unknown():
        for op in ir.walk_ops(module.operation):
            attrs = op.operation.attributes
            for i in range(len(attrs)):
                named = attrs[i]
                m = _RESOURCE_REF.match(str(named.attr))
                if not m:
                    continue
                ttype = irm.RankedTensorType(named.attr.type)
                name = m.group(1).strip('"')
                array = _blob_array(name, blobs.get(name), ttype, where)
                # equal elements come back as a splat (dense<7> : tensor<1x8xi64>)
                op.operation.attributes[named.name] = irm.DenseElementsAttr.get(
                    array, type=ttype.element_type, shape=list(ttype.shape))
                count += 1
    return count


def _narrowed(t):
    """``t`` with an ``f64`` element (or scalar) type as ``f32``; None if there is no f64."""
    irm = ir.ir()
    if isinstance(t, irm.F64Type):
        return irm.F32Type.get()
    if isinstance(t, irm.RankedTensorType) and isinstance(t.element_type, irm.F64Type):
        return irm.RankedTensorType.get(list(t.shape), irm.F32Type.get(), t.encoding)
    return None


def _to_f32(values):
    """f64 values as f32; finite ones beyond f32's range become its largest finite value
    (an f64 ``finfo.min`` mask fill stays a very negative number, not -inf, which turns
    ``-inf * 0`` and all-masked softmax rows into NaN); inf and NaN stay."""
    a = np.asarray(values, dtype=np.float64)
    big = float(np.finfo(np.float32).max)
    a = np.where(np.isfinite(a), np.clip(a, -big, big), a)
    return a.astype(np.float32)


def arith_to_stablehlo_constants(module) -> int:
    """Replace each tensor-typed ``arith.constant`` by a ``stablehlo.constant`` of the same
    value; returns how many. A scalar (non-tensor) ``arith.constant`` is left: StableHLO
    has no scalar constant, and torch-mlir's StableHLO output uses tensors only."""
    irm = ir.ir()
    count = 0
    with module.context, irm.Location.unknown():
        for op in [o.operation for o in ir.walk_ops(module.operation)]:
            if op.name != "arith.constant" or not isinstance(op.results[0].type, irm.RankedTensorType):
                continue
            new = irm.Operation.create("stablehlo.constant", results=[op.results[0].type],
                                       attributes={"value": op.attributes["value"]}, loc=op.location,
                                       ip=irm.InsertionPoint(op))
            op.results[0].replace_all_uses_with(new.results[0])
            op.erase()
            count += 1
    return count


def empty_to_zeros(module) -> int:
    """Replace each ``tensor.empty`` by a zero ``stablehlo.constant`` of its type; returns how
    many. torch-mlir lowers ``torch.empty`` / ``empty_like`` (a buffer the program then fills,
    as diffusers' rotary embedding does with ``out[..., 0::2] = ...``) to ``tensor.empty``;
    its contents are undefined, so zeros are one valid value, and the module stays pure
    StableHLO: tt-mlir stops at "failed to legalize operation 'tensor.empty'" and XLA's
    import refuses it too (the Wan 2.2 DiT expert module, issue #24's check)."""
    irm = ir.ir()
    count = 0
    with module.context, irm.Location.unknown():
        for op in [o.operation for o in ir.walk_ops(module.operation)]:
            if op.name != "tensor.empty" or op.operands:  # a dynamic size: nothing to build a constant of
                continue
            t = op.results[0].type
            e = t.element_type
            zero = irm.FloatAttr.get(e, 0.0) if isinstance(e, irm.FloatType) else irm.IntegerAttr.get(e, 0)
            new = irm.Operation.create("stablehlo.constant", results=[t],
                                       attributes={"value": irm.DenseElementsAttr.get_splat(t, zero)},
                                       loc=op.location, ip=irm.InsertionPoint(op))
            op.results[0].replace_all_uses_with(new.results[0])
            op.erase()
            count += 1
    return count


def narrow_f64(module, *, where: str) -> int:
    """Retype every ``f64`` value, constant and function signature to ``f32``; returns how many values.

    Tenstorrent hardware has no f64. tt-mlir narrows it too, after shard-opt's part is
    done: tenstorrent/tt-mlir ``include/ttmlir/Dialect/TTCore/IR/TTCoreOpsTypes.h``,
    ``elementTypeToDataTypeImpl`` ("Treat f64 as f32": float widths 32 and 64 both map
    to ``DataType::Float32``), applied to every ranked tensor by the TTIR pass in
    ``lib/Dialect/TTIR/Transforms/ElementTypeNormalization.cpp`` (``ElementTypeConverter``;
    its ``ConstantOpAttrRewriter::rebuildFloatAttr`` converts f64 constants to f32). Doing
    it here means the module shard-opt prices, verifies and emits is the one the device
    runs: LayerNorm statistics that torch-mlir's decompositions compute in f64 (and its
    ``dense<1.0e-05> : tensor<1xf64>`` literals) are f32 sums, 4 bytes an element.

    ``i64`` stays. A literal beyond f32's range is clamped to it (``_to_f32``; tt-mlir's
    ``static_cast<float>`` would make it inf). A ``stablehlo.convert`` to or from f64
    that becomes f32 -> f32 is dropped (torch-mlir's own f32 -> f32 converts are left as
    they are). The module is verified afterwards; any f64 left (in a type this does not
    know) is an error.
    """
    irm = ir.ir()
    f32 = irm.F32Type.get
    count = 0
    with module.context, irm.Location.unknown():
        ops = list(ir.walk_ops(module.operation))
        # converts to or from f64: the ones narrowing turns into f32 -> f32
        f64_converts = [op.operation for op in ops if op.operation.name == "stablehlo.convert" and any(
            _narrowed(v.type) is not None for v in list(op.operation.operands) + list(op.operation.results))]
        for op in ops:
            o = op.operation
            for region in o.regions:
                for block in region.blocks:
                    for arg in block.arguments:
                        t = _narrowed(arg.type)
                        if t is not None:
                            arg.set_type(t)
                            count += 1
            for r in o.results:
                t = _narrowed(r.type)
                if t is not None:
                    r.set_type(t)
                    count += 1
            if o.name == "func.func":
                ftype = irm.FunctionType(irm.TypeAttr(o.attributes["function_type"]).value)
                ins = [_narrowed(t) or t for t in ftype.inputs]
                outs = [_narrowed(t) or t for t in ftype.results]
                o.attributes["function_type"] = irm.TypeAttr.get(irm.FunctionType.get(ins, outs))
            if o.name in _CONSTANT_OPS and "value" in o.attributes:
                value = o.attributes["value"]
                if isinstance(value, irm.DenseElementsAttr) and isinstance(value.type.element_type, irm.F64Type):
                    ttype = _narrowed(value.type)
                    if value.is_splat:
                        scalar = float(_to_f32(irm.FloatAttr(value.get_splat_value()).value))
                        new = irm.DenseElementsAttr.get_splat(ttype, irm.FloatAttr.get(f32(), scalar))
                    else:
                        new = irm.DenseElementsAttr.get(_to_f32(np.asarray(value)), type=f32(),
                                                        shape=list(ttype.shape))
                    o.attributes["value"] = new
                elif isinstance(value, irm.FloatAttr) and isinstance(value.type, irm.F64Type):
                    o.attributes["value"] = irm.FloatAttr.get(f32(), float(_to_f32(value.value)))
        for o in f64_converts:
            if o.operands[0].type == o.results[0].type:
                o.results[0].replace_all_uses_with(o.operands[0])
                o.erase()
        for op in ir.walk_ops(module.operation):
            o = op.operation
            types = [v.type for v in o.results] + [v.type for v in o.operands]
            if any(_narrowed(t) is not None for t in types):
                raise RuntimeError(f"{where}: {o.name} still has an f64 value after narrowing f64 to f32")
        try:
            ok = module.operation.verify()
        except Exception as e:
            ok, why = False, " ".join(str(e).split())[:300]
        else:
            why = ""
        if not ok:
            raise RuntimeError(f"{where}: the module does not verify after narrowing f64 to f32: {why}")
    return count


def after_lowering(text: str, *, where: str) -> tuple[str, list[str]]:
    """torch-mlir's module text, cleaned (see the module docstring); and what was done.

    Returns the new text and one note per rewrite that fired (for the model's meta).
    """
    if "dense_resource<" not in text and "f64" not in text and "arith.constant" not in text and \
            "tensor.empty" not in text:
        return text, []
    # A fresh context: MLIR uniques resource names per context, so in the shared one a
    # second module's blob "x" would be renamed "x_1" and no longer match the text's key.
    module = ir.parse(text, filename=where, context=ir.new_context())
    notes = []
    inlined = inline_resources(module, resource_blobs(text), where=where) if "dense_resource<" in text else 0
    if inlined:
        notes.append(f"dense_resource -> dense ({inlined} constants)")
    narrowed = narrow_f64(module, where=where) if "f64" in text else 0
    if narrowed:
        notes.append(f"f64 -> f32 ({narrowed} values)")
    converted = arith_to_stablehlo_constants(module) if "arith.constant" in text else 0
    if converted:
        notes.append(f"arith.constant -> stablehlo.constant ({converted} constants)")
    emptied = empty_to_zeros(module) if "tensor.empty" in text else 0
    if emptied:
        notes.append(f"tensor.empty -> zero stablehlo.constant ({emptied} buffers)")
    out = ir.print_module(module)
    if "dense_resource<" in out:
        raise RuntimeError(f"{where}: a dense_resource attribute is left after inlining (nested in another "
                           f"attribute?); XLA cannot import it")
    return out, notes
