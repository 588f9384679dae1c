"""Hugging Face specifics: prefill inputs of text models and the decode formulation.

Decode (``--phase decode``) is one new token against a KV cache of ``seq_len``
positions. The cache is handed in as explicit ``@main`` arguments, one key and one
value tensor per layer (``[batch, kv_heads, seq_len, head_dim]``, kind ``cache``),
named ``past_key_values.<layer>.key`` / ``.value`` -- so a plan can shard it as tt-xla's
Llama example does (``(None, "model", None, None)``, references/tenstorrent.md §5).

How the cache reaches the model (checked with transformers 5.24 + torch.export): the
exported forward builds a ``DynamicCache`` from the input tensors
(``DynamicCache(ddp_cache_data=[(k, v), ...], config=...)``) and calls the model with
``cache=`` (``past_key_values=`` in older transformers) and ``use_cache=True``; the
layers append the new token with ``torch.cat`` and attend over ``seq_len + 1``
positions. Only the logits are returned: the updated cache is not a result, so the
module prices the attention over the cache but not a write-back (on device the cache
stays where it is, sharded, so the write-back of one token costs no collective).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from shard_opt.errors import UserError


def hf_config(model: nn.Module):
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "to_dict"):
        return None
    return cfg


def _forward_params(model: nn.Module) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def cache_kwarg(model: nn.Module) -> str | None:
    """Name of forward's KV-cache argument (``cache`` in transformers 5.24)."""
    params = _forward_params(model)
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None


def text_config(model: nn.Module):
    cfg = hf_config(model)
    if cfg is None:
        return None
    try:
        return cfg.get_text_config(decoder=True)
    except Exception:
        return cfg


def kv_heads_of(cfg, *, cache: bool = False) -> int:
    """Key/value heads of a text config: ``num_key_value_heads`` (Llama and most), else
    Falcon's own fields, else ``multi_query`` (one KV head: GPT-BigCode), else
    ``num_kv_heads``, else the query heads.

    Falcon (transformers 5.24 ``modeling_falcon.FalconAttention``) has no
    ``num_key_value_heads``: ``multi_query`` (Falcon-7B) means one KV head, whatever
    ``num_kv_heads`` says (the config sets it to the query heads); the new decoder
    architecture (Falcon-40B/180B) has ``num_kv_heads`` K/V heads, broadcast to every
    query head before attention, so with ``cache=True`` (what the KV cache holds,
    ``layer_past.update`` gets the broadcast tensors) it is the query heads.
    """
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None)
    if kv:
        return int(kv)
    if getattr(cfg, "model_type", None) == "falcon":
        if getattr(cfg, "new_decoder_architecture", False):
            return heads if cache else int(getattr(cfg, "num_kv_heads", None) or heads)
        return 1 if getattr(cfg, "multi_query", False) else int(getattr(cfg, "num_kv_heads", None) or heads)
    if getattr(cfg, "multi_query", False):
        return 1
    return int(getattr(cfg, "num_kv_heads", None) or heads)


def token_inputs(prog) -> tuple[int, int] | None:
    """``(batch, seq_len)`` when the program's inputs are the token ids of a Hugging Face
    text model: every input a 2-D integer tensor of one shape (``input_ids``,
    ``attention_mask``, ``token_type_ids``); None otherwise (images, latents, a plain
    ``nn.Module``)."""
    cfg = text_config(prog.model)
    if cfg is None or getattr(cfg, "vocab_size", None) is None:
        return None
    shapes = {tuple(x.shape) for x in prog.inputs}
    if prog.inputs and len(shapes) == 1 and all(x.dim() == 2 and not x.is_floating_point() for x in prog.inputs):
        b, s = next(iter(shapes))
        return int(b), int(s)
    return None


def adapt_prefill(prog, *, batch: int | None = None, seq_len: int | None = None) -> None:
    """Prefill of an HF text model: ``use_cache=False``; token inputs as the script gave them,
    or resized when ``--batch`` / ``--seq-len`` ask for another size.

    The planned size goes in ``prog.meta`` (``batch``, ``seq_len``). Resizing replaces the
    token inputs (``token_inputs``) by ``[batch, seq_len]`` (a size not asked for stays
    the script's), zeros (ones for ``attention_mask``), and records ``inputs_resized``:
    ``{"from": [b, s], "to": [b', s'], "flags": "--batch 1", "inputs": [names]}``
    (``shard_opt.frontends.resized_text`` says it in words). Asked
    for inputs that are not token ids, it records ``inputs_not_resized`` (why) instead.
    """
    model = prog.model
    cfg = text_config(model)
    if cfg is not None and "use_cache" in _forward_params(model) and "use_cache" not in prog.kwargs:
        prog.kwargs["use_cache"] = False
    flags = " ".join(f"{f} {v}" for f, v in (("--batch", batch), ("--seq-len", seq_len)) if v is not None)
    tokens = token_inputs(prog)
    if tokens is None:
        if flags:
            prog.meta["inputs_not_resized"] = (
                f"{flags} did nothing: load_inputs() returns no token ids of a Hugging Face text model "
                f"(shapes {', '.join(str(list(x.shape)) for x in prog.inputs) or 'none'}); the plan is for "
                f"those inputs as they are: to plan another size, change load_inputs()")
        return
    want = (tokens[0] if batch is None else batch, tokens[1] if seq_len is None else seq_len)
    prog.meta["batch"], prog.meta["seq_len"] = want
    if want == tokens:
        return
    prog.inputs = [torch.full(want, 1 if n == "attention_mask" else 0, dtype=x.dtype)
                   for n, x in zip(prog.input_names, prog.inputs)]
    prog.meta["inputs_resized"] = {"from": list(tokens), "to": list(want), "flags": flags,
                                   "inputs": list(prog.input_names)}


# transformers' layer types (configuration_utils.ALLOWED_ATTN_LAYER_TYPES) whose decode
# state is not a key/value cache: recurrent layers (Mamba, Gated DeltaNet: Qwen3.5's
# hybrid linear attention), convolution states, and layers that combine attention with one.
_STATE_LAYER_TYPES = ("linear_attention", "mamba", "mamba2", "conv", "hybrid", "hybrid_sliding")


def decode_program(model: nn.Module, *, batch: int, seq_len: int, dtype: torch.dtype, where: str):
    """A ``TorchProgram`` for one decode step of an HF causal LM (see module docstring)."""
    from shard_opt.frontends.torch_trace import TorchProgram

    cfg = text_config(model)
    kw = cache_kwarg(model)
    if cfg is None or kw is None or getattr(cfg, "vocab_size", None) is None:
        raise UserError(
            f"{where}: --phase decode needs a Hugging Face causal LM (a model with .config and a "
            f"forward taking a KV cache); use --phase prefill for this model"
        )
    stateful = [(i, t) for i, t in enumerate(getattr(cfg, "layer_types", None) or []) if t in _STATE_LAYER_TYPES]
    if stateful:
        kinds = sorted({t for _, t in stateful})
        raise UserError(
            f"{where}: --phase decode: {type(model).__name__} has {', '.join(kinds)} layers "
            f"({len(stateful)} of {len(cfg.layer_types)}: layer{'s' if len(stateful) > 1 else ''} "
            f"{', '.join(str(i) for i, _ in stateful)}), which carry a recurrent state rather than a "
            f"key/value cache; shard-opt's decode models a KV cache only: use --phase prefill"
        )
    from transformers import DynamicCache

    n_layers = getattr(cfg, "num_hidden_layers", None) or len(_decoder_layers(model))
    heads = cfg.num_attention_heads
    kv_heads = kv_heads_of(cfg, cache=True)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    ids = torch.zeros((batch, 1), dtype=torch.long)
    inputs, names, kinds = [ids], ["input_ids"], ["input"]
    for i in range(n_layers):
        for part in ("key", "value"):
            inputs.append(torch.empty((batch, kv_heads, seq_len, head_dim), dtype=dtype, device="meta"))
            names.append(f"past_key_values.{i}.{part}")
            kinds.append("cache")

    def forward(m, input_ids, *kv):
        pairs = [(kv[2 * i], kv[2 * i + 1]) for i in range(len(kv) // 2)]
        cache = DynamicCache(ddp_cache_data=pairs, config=m.config)
        out = m(input_ids=input_ids, use_cache=True, **{kw: cache})
        return out.logits if hasattr(out, "logits") else out[0]

    return TorchProgram(model, inputs, names, input_kinds=kinds, forward=forward,
                        meta={"cache_layout": "[batch, kv_heads, seq_len, head_dim] per layer, key and value",
                              "cache_len": seq_len})


def _decoder_layers(model: nn.Module):
    from shard_opt.frontends.torch_trace import find_repeated_blocks

    found = find_repeated_blocks(model)
    if found is None:
        raise UserError("--phase decode: cannot find the model's decoder layers")
    return found[1]
