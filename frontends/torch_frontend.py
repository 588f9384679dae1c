"""PyTorch -> StableHLO with every parameter and buffer as a named ``@main`` argument.

Recipe (references/toolchain.md, "StableHLO from PyTorch" and "Full-size export
without weights"):

1. The model may live on the meta device. Each parameter is handed to the exported
   function as a *zero-stride* CPU tensor: one element of storage expanded to the full
   shape and dtype. torch.export only needs shapes, dtypes and strides, so Llama-3-70B
   exports without allocating its weights. Buffers are passed as they are when real;
   meta buffers become zeros (shapes are what the analysis needs; build the model on
   CPU when numerics matter).
2. A wrapper's ``forward(*params, *buffers, *inputs)`` calls
   ``torch.func.functional_call(model, {fqn: tensor}, inputs)``. The model is kept out
   of the wrapper's registered submodules so torch.export does not lift its state; the
   argument order is the names list, which maps ``%argN`` to FQNs exactly as
   ``named_parameters()`` / ``named_buffers()`` give them.
3. ``torch.export.export`` (non-strict), then ``torch_mlir.fx.export_and_import`` with
   ``output_type=STABLEHLO, func_name="main"`` and torch-mlir's decomposition table
   merged with ours (``shard_opt.frontends.rewrites``).
4. The module text is re-parsed with jaxlib (the IR the core uses) and every argument
   gets ``{shard_opt.name = "<fqn>", shard_opt.kind = "<kind>"}`` so a module written
   back out (``-o``) and read again keeps its names (``mlir_frontend`` reads them).

Load scripts: ``load_model()`` returns an ``nn.Module`` (any device; meta is fine) and
``load_inputs()`` a tuple (or list) of tensors, passed positionally and named after
``forward``'s parameters (``input0``... when unknown). A single tensor, or a dict of
tensors (what tt-forge-models loaders often return from a tokenizer), is accepted too;
dict entries are passed by keyword under their keys. Floating inputs are cast to the
chosen dtype. Inputs are planned as ``load_inputs()`` returns them; for Hugging Face
text models ``use_cache=False`` is passed, and ``--batch``/``--seq-len`` resize the token
inputs (``hf.adapt_prefill``, which records it in ``meta["inputs_resized"]``); decode
builds its own inputs (``hf.decode_program``), by default for the script's batch and a
cache of its sequence length. ``--layers N`` cuts the largest
``nn.ModuleList`` of identical blocks to its first N (and the config's layer count).
The script's own code (its import, ``load_model``, ``load_inputs``, ``ModelLoader()``,
and the model's forward while it is traced) runs with stdout sent to stderr, at the
Python and the file-descriptor level (``stdout_to_stderr``): stdout carries the module.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import tempfile
import time

import torch
from torch import nn

from shard_opt.errors import UserError
from shard_opt.frontends.torch_trace import (
    TORCH_TO_MLIR, TorchProgram, _first_line, find_repeated_blocks, lean_tracing, stdout_to_stderr, torch_dtype,
    trace_program,
)
from shard_opt.lowered import Argument, LoweredModel, scored_whole

def whole_per_two_blocks(model: nn.Module, found=None) -> float | None:
    """The whole model's size over its 2-block copy's, counted in leaf modules (a proxy for
    the ops each lowers to); None when the model has no repeated blocks (``found``: its
    ``find_repeated_blocks``, when the caller has it). Kept in the model's meta;
    ``shard_opt.lowered.scored_whole`` reads it."""
    found = found or find_repeated_blocks(model)
    if found is None:
        return None

    def leaves(m: nn.Module) -> int:
        return sum(1 for x in m.modules() if next(x.children(), None) is None)

    total, block, count = leaves(model), leaves(found[1][0]), len(found[1])
    two = total - (count - 2) * block
    return round(total / two, 3) if two > 0 else None


def truncate_layers(model: nn.Module, layers: int, where: str) -> tuple[int, int]:
    """Keep ``layers`` repeated blocks; returns (kept, total)."""
    found = find_repeated_blocks(model)
    if found is None:
        raise UserError(
            f"{where}: --layers {layers} given but the model has no list of repeated blocks "
            f"(an nn.ModuleList of identical modules); drop --layers"
        )
    path, ml = found
    total = len(ml)
    if layers < 1 or layers > total:
        raise UserError(f"{where}: --layers {layers} is out of range; '{path}' holds {total} blocks (use 1..{total})")
    parent_path, _, attr = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, attr, nn.ModuleList(list(ml)[:layers]))
    cfg = getattr(model, "config", None)
    if cfg is not None:
        for key in ("num_hidden_layers", "n_layer", "num_layers"):
            try:
                if getattr(cfg, key, None) == total:
                    setattr(cfg, key, layers)
            except Exception:  # frozen configs (diffusers) keep their value; harmless
                pass
        lt = getattr(cfg, "layer_types", None)
        if isinstance(lt, list) and len(lt) == total:
            try:
                cfg.layer_types = lt[:layers]
            except Exception:
                pass
    return layers, total


def cast_model(model: nn.Module, dtype: torch.dtype) -> None:
    """Cast floating parameters and buffers to ``dtype`` (free on the meta device).

    Honours ``_keep_in_fp32_modules`` (transformers and diffusers models list modules
    that ``from_pretrained(torch_dtype=...)`` keeps in float32, e.g. Wan's ``rope``,
    ``time_embedder``, norms), so byte counts match what a user's pipeline loads.
    ``nn.Module.to`` is called directly: diffusers' override only adds a warning.
    """
    nn.Module.to(model, dtype)
    keep = getattr(model, "_keep_in_fp32_modules", None) or []
    if dtype != torch.float32 and keep:
        for path, sub in model.named_modules():
            if any(k in path.split(".") for k in keep):
                nn.Module.to(sub, torch.float32)
        for path, p in model.named_parameters():
            if any(k in path.split(".") for k in keep) and p.dtype != torch.float32 and p.is_floating_point():
                p.data = p.data.to(torch.float32)


def count_layers(model: nn.Module) -> int | None:
    found = find_repeated_blocks(model)
    return len(found[1]) if found else None


# ---------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------

@contextlib.contextmanager
def _capture_stderr():
    """Capture fd 2 (MLIR prints diagnostics there, not into the exception)."""
    holder = {"text": ""}
    try:
        fd = os.dup(2)
    except OSError:
        yield holder
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield holder
        finally:
            os.dup2(fd, 2)
            os.close(fd)
            tmp.seek(0)
            holder["text"] = tmp.read().decode(errors="replace")


_LEGALIZE = re.compile(r"failed to legalize operation '([^']+)'")
# aten ops torch-mlir 20261001 is known not to lower to StableHLO (references/toolchain.md)
_KNOWN_BAD = ("upsample_nearest", "_upsample_nearest_exact", "histc", "nonzero", "bincount")


def _graph_culprit(ep) -> tuple[str, str] | None:
    """(aten op, module path) of the first op in the graph known not to lower."""
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        if any(k in name for k in _KNOWN_BAD):
            stack = node.meta.get("nn_module_stack") or {}
            path = ""
            if stack:
                path = list(stack.values())[-1][0]
                path = re.sub(r"^(L\['self'\]\.)?", "", str(path))
            return name, path
    return None


def _signature_names(model: nn.Module) -> list[str]:
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def input_names_for(model: nn.Module, n: int) -> list[str]:
    """forward's parameter names for ``n`` positional inputs (``input0``... otherwise)."""
    sig = _signature_names(model)
    names = [sig[i] if i < len(sig) else f"input{i}" for i in range(n)]
    return names if len(set(names)) == n else [f"input{i}" for i in range(n)]


def attention_shape(model) -> dict | None:
    """Query heads, KV heads and head dim of a Hugging Face model's config (the search
    explains its KV layout with them: grouped-query attention, references section 5)."""
    from shard_opt.frontends.hf import text_config

    try:
        cfg = text_config(model)
    except Exception:
        return None
    heads = getattr(cfg, "num_attention_heads", None) if cfg is not None else None
    if not isinstance(heads, int):
        return None
    from shard_opt.frontends.hf import kv_heads_of

    kv = kv_heads_of(cfg)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return {"heads": heads, "kv_heads": kv, "head_dim": head_dim}


def _owner_class(model: nn.Module, fqn: str) -> str:
    owner = fqn.rpartition(".")[0]
    try:
        return type(model.get_submodule(owner) if owner else model).__name__
    except AttributeError:
        return type(model).__name__


def lower_program(prog: TorchProgram, *, name: str, dtype: str = "bf16", where: str | None = None,
                  source: str = "pytorch", script_path: str | None = None,
                  describe: bool = True) -> LoweredModel:
    """Lower a ``TorchProgram`` to a ``LoweredModel`` (see the module docstring)."""
    from torch_mlir import fx
    from torch_mlir.compiler_utils import OutputType
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    from shard_opt.frontends import rewrites
    from shard_opt.frontends.mlir_frontend import annotate_arguments

    where = where or name
    tdt = torch_dtype(dtype)
    model = prog.model
    model.eval()
    cast_model(model, tdt)

    with lean_tracing():
        tr, flops = trace_program(prog, where=where, dtype=tdt, count_flops=describe)

    fired: set = set()
    table = dict(get_decomposition_table())
    table.update(rewrites.decompositions(fired))
    t0 = time.perf_counter()
    with _capture_stderr() as err, lean_tracing():
        try:
            module = fx.export_and_import(tr.ep, output_type=OutputType.STABLEHLO, func_name="main",
                                          decomposition_table=table)
            failure = None
        except Exception as e:  # TorchMlirCompilerError and kin
            failure = e
    if failure is not None:
        raise _lowering_error(where, failure, err["text"], tr.ep, table) from None
    text = str(module)
    del module
    # plain dense constants, no f64 (rewrites.after_lowering): what XLA and tt-mlir take
    text, lowering_rewrites = rewrites.after_lowering(text, where=where)
    t_lower = time.perf_counter() - t0

    def element(t) -> str:  # the module's element type: f64 is narrowed to f32
        dt = TORCH_TO_MLIR.get(t.dtype, str(t.dtype))
        return "f32" if dt == "f64" else dt

    arguments = []
    for n, p in tr.params:
        arguments.append(Argument(len(arguments), n, "param", tuple(p.shape), element(p), _owner_class(model, n)))
    for n, b in tr.buffers:
        arguments.append(Argument(len(arguments), n, "buffer", tuple(b.shape), element(b), _owner_class(model, n)))
    for n, x, k in zip(prog.input_names, tr.inputs, tr.kinds):
        arguments.append(Argument(len(arguments), n, k, tuple(x.shape), element(x), None))
    text = annotate_arguments(text, arguments, where=where)

    meta = dict(prog.meta)
    meta.update({
        "dtype": dtype, "export_seconds": round(tr.seconds, 3), "lower_seconds": round(t_lower, 3),
        "rewrites": [f"{p} ({c})" for p, c in tr.rewritten],
        "decompositions": sorted(fired),
        "lowering_rewrites": lowering_rewrites,
        "total_layers": prog.total_layers,
        "param_count": sum(p.numel() for _, p in tr.params),
        "inputs": {n: list(x.shape) for n, x in zip(prog.input_names, tr.inputs)},
    })
    attention = attention_shape(model)
    if attention:
        meta["attention"] = attention
    arch = None
    if describe:
        from shard_opt.frontends.describe import architecture

        arch = architecture(model, tr.inputs, flops=flops)
        arch["rewrites"] = meta["rewrites"] + [f"{op} (decomposed)" for op in meta["decompositions"]]
        meta["flops"] = arch["flops"]
    return LoweredModel(name=name, text=text, arguments=arguments, source=source, script_path=script_path,
                        num_layers=prog.num_layers, architecture=arch, meta=meta)


def _lowering_error(where: str, e: BaseException, stderr: str, ep, table) -> UserError:
    m = _LEGALIZE.search(stderr) or _LEGALIZE.search(str(e))
    diag_op = m.group(1) if m else None
    culprit = None
    try:
        culprit = _graph_culprit(ep.run_decompositions(table))
    except Exception:
        pass
    if culprit:
        op, path = culprit
        loc = f" in module '{path}'" if path else ""
        return UserError(
            f"{where}: torch-mlir cannot lower {op}{loc} to StableHLO"
            + (f" ('failed to legalize {diag_op}')" if diag_op else "")
            + "; rewrite it in the script or add a decomposition to shard_opt.frontends.rewrites"
        )
    if diag_op:
        return UserError(
            f"{where}: torch-mlir cannot lower '{diag_op}' to StableHLO; rewrite the op that "
            f"produces it in the script or add a decomposition to shard_opt.frontends.rewrites"
        )
    return UserError(f"{where}: torch-mlir lowering failed: {type(e).__name__}: {_first_line(e)}")


# ---------------------------------------------------------------------------------
# Load scripts
# ---------------------------------------------------------------------------------

def _run_user(where: str, what: str, fn, *args, **kwargs):
    """Call the user's ``fn`` (stdout sent to stderr); its exceptions become one UserError line."""
    try:
        with stdout_to_stderr():
            return fn(*args, **kwargs)
    except UserError:
        raise
    except SystemExit as e:
        raise UserError(f"{where}: {what} called exit({e.code}); load scripts must return, not exit") from None
    except BaseException as e:  # the user's code: report it, do not crash
        if isinstance(e, KeyboardInterrupt):
            raise
        raise UserError(f"{where}: {what} raised {type(e).__name__}: {_first_line(e)}; fix the script") from None


def _import_script(path: str):
    import importlib.util
    import sys

    name = "shard_opt_user_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    script_dir = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, script_dir)
    try:
        _run_user(path, "importing the script", spec.loader.exec_module, mod)
    finally:
        try:
            sys.path.remove(script_dir)
        except ValueError:
            pass
    return mod


def _loader_from(mod, path: str):
    """(load_model, load_inputs, the loader: ModelLoader instance or the module) from a script module."""
    if callable(getattr(mod, "load_model", None)) and callable(getattr(mod, "load_inputs", None)):
        return mod.load_model, mod.load_inputs, mod
    cls = getattr(mod, "ModelLoader", None)
    if isinstance(cls, type):
        if not (callable(getattr(cls, "load_model", None)) and callable(getattr(cls, "load_inputs", None))):
            raise UserError(f"{path}: ModelLoader has no load_model/load_inputs methods; define both")
        try:
            sig = inspect.signature(cls)
            needs = [p for p in sig.parameters.values()
                     if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        except (TypeError, ValueError):
            needs = []
        if needs and needs[0].name == "variant":
            obj = _run_user(path, "ModelLoader(variant=None)", cls, variant=None)
        elif needs:
            raise UserError(f"{path}: ModelLoader() needs arguments ({', '.join(p.name for p in needs)}); "
                            f"give them defaults")
        else:
            obj = _run_user(path, "ModelLoader()", cls)
        return obj.load_model, obj.load_inputs, obj
    raise UserError(f"{path}: defines neither load_model()/load_inputs() nor a ModelLoader class; "
                    f"add them (load_model returns an nn.Module, load_inputs a tuple of tensors)")


def _normalise_inputs(raw, model: nn.Module, path: str):
    """(tensors, names, keyword flags) from what load_inputs returned."""
    if isinstance(raw, torch.Tensor):
        raw = (raw,)
    if isinstance(raw, dict) or (hasattr(raw, "keys") and hasattr(raw, "__getitem__") and not isinstance(raw, (list, tuple))):
        items = [(k, raw[k]) for k in raw.keys()]
        bad = [k for k, v in items if not isinstance(v, torch.Tensor)]
        if bad or not items:
            raise UserError(f"{path}: load_inputs returned a dict whose values are not all tensors "
                            f"({', '.join(map(str, bad)) or 'empty'}); return a tuple of tensors")
        return [v for _, v in items], [str(k) for k, _ in items], [True] * len(items)
    if isinstance(raw, (list, tuple)) and raw and all(isinstance(x, torch.Tensor) for x in raw):
        return list(raw), input_names_for(model, len(raw)), [False] * len(raw)
    got = type(raw).__name__
    if isinstance(raw, (list, tuple)):
        got = f"{got} of " + ", ".join(sorted({type(x).__name__ for x in raw}) or {"nothing"})
    raise UserError(f"{path}: load_inputs returned {got}, not a tuple of tensors; return e.g. (input_ids,)")


def load_script(path: str, *, layers: int | None = None, batch: int | None = None, seq_len: int | None = None,
                phase: str = "prefill", dtype: str = "bf16", spec: str | None = None) -> LoweredModel:
    """Load a ``load_model``/``load_inputs`` (or ``ModelLoader``) script and lower it.

    The loader's ``load_shard_spec`` (and ``get_mesh_config``), or the ``spec`` file,
    is captured into ``meta["shard_spec"]`` (``frontends/shard_spec.py``)."""
    from shard_opt.frontends import hf, shard_spec

    if not os.path.isfile(path):
        raise UserError(f"{path}: no such load script; check the path")
    torch_dtype(dtype)
    mod = _import_script(path)
    load_model, load_inputs, loader = _loader_from(mod, path)
    model = _run_user(path, "load_model()", load_model)
    if not isinstance(model, nn.Module):
        raise UserError(f"{path}: load_model() returned {type(model).__name__}, not a torch.nn.Module; "
                        f"return the model")
    raw = _run_user(path, "load_inputs()", load_inputs)
    tensors, names, keyword = _normalise_inputs(raw, model, path)

    total = count_layers(model)
    kept = total
    share = whole_per_two_blocks(model) if total else None  # of the whole model, before --layers
    if layers is not None:
        kept, total = truncate_layers(model, layers, path)
    if spec is not None:
        user_spec = shard_spec.load_spec_file(spec, model, run_user=_run_user)
    else:
        functions = shard_spec.loader_functions(loader)
        user_spec = (shard_spec.capture(model, functions, where=path, source="loader", run_user=_run_user,
                                        activation_fn=shard_spec.activation_function(loader))
                     if functions else None)

    stem = os.path.splitext(os.path.basename(path))[0]
    if phase == "decode":
        # one new token per sequence of the script's prompt, against a cache of its length
        tokens = hf.token_inputs(TorchProgram(model, tensors, names)) or (1, 128)
        b, s = tokens[0] if batch is None else batch, tokens[1] if seq_len is None else seq_len
        prog = hf.decode_program(model, batch=b, seq_len=s, dtype=torch_dtype(dtype), where=path)
        prog.meta.update({"batch": b, "seq_len": s})
    elif phase == "prefill":
        prog = TorchProgram(model, tensors, names, keyword=keyword)
        hf.adapt_prefill(prog, batch=batch, seq_len=seq_len)  # sets batch/seq_len for token inputs
    else:
        raise UserError(f"--phase {phase!r}: use prefill or decode")
    prog.total_layers, prog.num_layers = total, kept
    prog.meta["phase"] = phase
    if share is not None:
        prog.meta["whole_per_two_blocks"] = share
    lowered = lower_program(prog, name=stem, dtype=dtype, where=path, source="pytorch", script_path=os.path.abspath(path))
    if user_spec is not None:
        lowered.meta["shard_spec"] = user_spec
    # what --emit-torch wraps (shard_opt.emit.torch_script.emit_target)
    lowered.meta["loader"] = "functions" if loader is mod else "ModelLoader"

    copies: dict[int, LoweredModel] = {}

    def with_layers(k: int) -> LoweredModel:
        # once per run: structure_of and the layered scorer both ask for the 1-layer copy
        if k not in copies:
            copies[k] = load_script(path, layers=k, batch=batch, seq_len=seq_len, phase=phase, dtype=dtype,
                                    spec=spec)
        return copies[k]

    if total and not scored_whole(lowered.meta):  # shard_opt.lowered
        lowered.with_layers = with_layers
    return lowered
