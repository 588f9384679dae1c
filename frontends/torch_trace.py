"""The torch side of lowering: a model and how to call it (``TorchProgram``), its repeated
blocks, and its trace (``trace_program``: ``torch.export`` with the state as arguments,
FLOPs counted while it traces).

The PyTorch frontend (``torch_frontend``), the architecture map (``describe``) and the
Hugging Face helpers (``hf``) all build on these; nothing here imports them. The recipe
(zero-stride weights, the ``functional_call`` wrapper) is ``torch_frontend``'s docstring.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from shard_opt.errors import UserError

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}
TORCH_TO_MLIR = {
    torch.bfloat16: "bf16", torch.float32: "f32", torch.float16: "f16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "ui8", torch.bool: "i1",
}

# Tensors up to this many elements are materialised as zeros; bigger ones zero-stride.
_SMALL = 1 << 20


def torch_dtype(dtype: str) -> torch.dtype:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise UserError(f"--dtype {dtype!r} is not supported; use one of: {', '.join(DTYPES)}") from None


@dataclass
class TorchProgram:
    """A model plus how to call it: what a load script, the zoo or a wrapper produces.

    Attributes:
      model: the ``nn.Module`` (parameters may be on the meta device).
      inputs: example input tensors, in call order.
      input_names: one name per input (forward's parameter names when known).
      input_kinds: ``input`` or ``cache`` per input.
      keyword: per input, whether it is passed by keyword (its name) or positionally.
      kwargs: constant keyword arguments (``use_cache=False``...).
      forward: ``forward(model, *args, **kwargs)`` to call instead of ``model(...)``.
      total_layers: repeated blocks of the full model (before ``--layers``).
      num_layers: repeated blocks kept.
      meta: extra facts for reports.
    """

    model: nn.Module
    inputs: list
    input_names: list[str]
    input_kinds: list[str] | None = None
    keyword: list[bool] | None = None
    kwargs: dict = field(default_factory=dict)
    forward: Callable | None = None
    total_layers: int | None = None
    num_layers: int | None = None
    meta: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------
# Weightless tensors
# ---------------------------------------------------------------------------------

def zero_stride(shape, dtype) -> torch.Tensor:
    """A CPU tensor of ``shape`` backed by one element (all strides 0)."""
    return torch.zeros((), dtype=dtype).expand(tuple(shape))


def _stand_in(t: torch.Tensor, *, keep_real: bool) -> torch.Tensor:
    if keep_real and t.device.type != "meta":
        return t.detach()
    if t.numel() <= _SMALL:
        return torch.zeros(t.shape, dtype=t.dtype)
    return zero_stride(t.shape, t.dtype)


# ---------------------------------------------------------------------------------
# Repeated blocks (--layers)
# ---------------------------------------------------------------------------------

def _block_signature(m: nn.Module):
    return type(m), tuple((n, tuple(p.shape), p.dtype) for n, p in m.named_parameters())


def find_repeated_blocks(model: nn.Module) -> tuple[str, nn.ModuleList] | None:
    """The ``ModuleList`` of identical blocks holding the most parameters, if any.

    Identical: same class and same parameter names and shapes (a VAE's up-blocks of
    different widths do not qualify).
    """
    best, best_score = None, -1
    for path, m in model.named_modules():
        if not isinstance(m, nn.ModuleList) or len(m) < 2:
            continue
        sig = _block_signature(m[0])
        if not sig[1] or any(_block_signature(c) != sig for c in list(m)[1:]):
            continue
        score = len(m) * sum(p.numel() for p in m[0].parameters())
        if score > best_score:
            best, best_score = (path, m), score
    return best


# ---------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------

@contextlib.contextmanager
def lean_tracing():
    """torch.export and its decompositions without two costs the lowering never reads
    (the StableHLO text is printed without locations):

    - each FX node's Python stack trace (``torch.fx.config.do_not_emit_stack_traces``:
      "avoids the cost of CapturedTraceback.extract() and symbolization for every FX node");
    - the Python source of every intermediate ``GraphModule``, generated and compiled at
      each ``recompile`` (``torch.fx._lazy_graph_module``: made on a module's first call).

    The module text is byte-identical either way (every fixture script and example load
    script: ``benchmarks/lean_tracing.py``; one of them in ``tests/test_frontends.py``); the
    26 lowerings took 13% less CPU, 27.0 -> 23.5 s (per script 0.63-1.09: noisy;
    benchmarks/results.md).
    Both are restored on exit; torch's private lazy module is the one import here that is
    not public API, and is skipped if a torch without it is installed."""
    import torch.fx

    try:
        from torch.fx._lazy_graph_module import _use_lazy_graph_module
    except ImportError:  # not in this torch: every GraphModule compiles its code at once
        lazy = contextlib.nullcontext()
    else:
        lazy = _use_lazy_graph_module(True)
    saved = torch.fx.config.do_not_emit_stack_traces
    torch.fx.config.do_not_emit_stack_traces = True
    try:
        with lazy:
            yield
    finally:
        torch.fx.config.do_not_emit_stack_traces = saved


class _Adapter(nn.Module):
    """Holds the model under ``m`` and calls ``forward(model, ...)`` or the model itself."""

    def __init__(self, model: nn.Module, fn: Callable | None):
        super().__init__()
        self.m = model
        self._fn = fn

    def forward(self, *args, **kwargs):
        if self._fn is None:
            return self.m(*args, **kwargs)
        return self._fn(self.m, *args, **kwargs)


class _Exported(nn.Module):
    """``forward(*state, *inputs)``: functional_call with the state as arguments."""

    def __init__(self, adapter: _Adapter, state_names, n_positional: int, kw_names, kwargs):
        super().__init__()
        object.__setattr__(self, "_adapter", adapter)  # not a registered submodule
        self._state_names = ["m." + n for n in state_names]
        self._n_pos = n_positional
        self._kw_names = list(kw_names)
        self._kwargs = dict(kwargs)

    def forward(self, *flat):
        n = len(self._state_names)
        state = dict(zip(self._state_names, flat[:n]))
        ins = flat[n:]
        args = tuple(ins[: self._n_pos])
        kw = dict(self._kwargs)
        kw.update(zip(self._kw_names, ins[self._n_pos:]))
        out = torch.func.functional_call(self._adapter, state, args, kw)
        leaves = [x for x in torch.utils._pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
        if not leaves:
            raise UserError("the model's forward returned no tensors")
        return tuple(leaves)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0] if text else ""
    return (line[:300] + "...") if len(line) > 300 else line


@dataclass
class Traced:
    """What ``trace_program`` hands the lowering step."""

    ep: object
    params: list
    buffers: list
    inputs: list
    keyword: list
    kinds: list
    rewritten: list
    seconds: float


def trace_program(prog: TorchProgram, *, where: str, dtype: torch.dtype | None = None,
                  count_flops: bool = False) -> tuple[Traced, tuple[dict, int] | None]:
    """torch.export the program with its state as arguments; optionally count FLOPs while tracing.

    Returns the trace and, with ``count_flops``, ``({module path: FLOPs}, total)`` from
    ``FlopCounterMode`` (module paths relative to the model).
    """
    from torch.utils.flop_counter import FlopCounterMode

    from shard_opt.frontends import rewrites

    model = prog.model
    params = list(model.named_parameters())
    buffers = list(model.named_buffers())
    state_names = [n for n, _ in params] + [n for n, _ in buffers]
    state = [zero_stride(p.shape, p.dtype) for _, p in params]
    state += [_stand_in(b, keep_real=True) for _, b in buffers]

    inputs = []
    for i, x in enumerate(prog.inputs):
        if not isinstance(x, torch.Tensor):
            raise UserError(f"{where}: input {i} ({prog.input_names[i]}) is a {type(x).__name__}, not a tensor; "
                            f"load_inputs must return tensors")
        if dtype is not None and x.is_floating_point() and x.dtype != dtype:
            x = x.to(dtype) if x.device.type != "meta" else torch.empty(x.shape, dtype=dtype, device="meta")
        inputs.append(_stand_in(x, keep_real=True))
    keyword = list(prog.keyword or [False] * len(inputs))
    n_pos = sum(1 for k in keyword if not k)
    if keyword != sorted(keyword):
        raise ValueError("positional inputs must come before keyword inputs")
    kinds = list(prog.input_kinds or ["input"] * len(inputs))

    counter = FlopCounterMode(display=False) if count_flops else contextlib.nullcontext()
    t0 = time.perf_counter()
    with rewrites.module_rewrites(model) as rewritten, torch.no_grad():
        wrapper = _Exported(_Adapter(model, prog.forward), state_names, n_pos,
                            prog.input_names[n_pos:], prog.kwargs)
        try:
            with counter, stdout_to_stderr():  # the model's forward is user code too
                ep = torch.export.export(wrapper, tuple(state + inputs), strict=False)
        except UserError:
            raise
        except Exception as e:
            raise UserError(
                f"{where}: torch.export failed: {type(e).__name__}: {_first_line(e)}; make the forward "
                f"traceable (no data-dependent Python control flow) or add a rewrite in "
                f"shard_opt.frontends.rewrites"
            ) from None
    flops = None
    if count_flops:
        flops = flops_by_module(counter)
    traced = Traced(ep, params, buffers, inputs, keyword, kinds, rewritten, time.perf_counter() - t0)
    return traced, flops


# ---------------------------------------------------------------------------------
# FLOPs and stdout
# ---------------------------------------------------------------------------------

_FLOP_ROOT = "_Adapter.m"


def _register_cpu_sdpa() -> None:
    """Count ``aten._scaled_dot_product_flash_attention_for_cpu`` (what SDPA becomes on CPU).

    torch 2.13's flop registry has the CUDA SDPA kernels but not the CPU one, so
    attention scores would count as 0 FLOPs; use the same formula as the others.
    """
    from torch.utils import flop_counter as fc

    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if op is None or op in fc.flop_registry:
        return

    @fc.register_flop_formula(op)
    def _sdpa_cpu(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return fc.sdpa_flop_count(query_shape, key_shape, value_shape)


_register_cpu_sdpa()


def flops_by_module(counter) -> tuple[dict, int]:
    """A finished ``FlopCounterMode`` -> ({module path: FLOPs}, total)."""
    per = {}
    for key, ops in counter.get_flop_counts().items():
        total = int(sum(ops.values()))
        if key == _FLOP_ROOT:
            per[""] = total
        elif key.startswith(_FLOP_ROOT + "."):
            per[key[len(_FLOP_ROOT) + 1:]] = total
    return per, int(counter.get_total_flops())


@contextlib.contextmanager
def stdout_to_stderr():
    """Send everything written to stdout to stderr for the duration of the block.

    shard-opt writes the annotated module on stdout (``shard-opt script.py > out.mlir``),
    so nothing else may: a load script that prints at import or in ``load_inputs()``, a
    forward with a debug print, a C extension or subprocess writing to fd 1 would put
    its text into the module. Both levels are redirected: fd 1 is pointed at fd 2
    (``os.dup2``; restored after) and ``sys.stdout`` at ``sys.stderr``. C stdio buffers
    are flushed before fd 1 is restored, so a buffered ``printf`` lands on stderr too.
    Nesting is fine (the inner block saves and restores the already-redirected fd).
    """
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or None stream: nothing to flush
            pass
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 (a daemon): Python-level redirection only
        saved = None
    if saved is not None:
        try:
            os.dup2(2, 1)
        except OSError:
            os.close(saved)
            saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        if saved is not None:
            _flush_c_stdio()
            os.dup2(saved, 1)
            os.close(saved)


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: write out what C code buffered in its ``stdout`` FILE."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:  # no libc symbol table (unusual platforms): best effort
        pass
