"""Bundled architectures at full size, built from config objects (no weights).

Each entry builds the real ``transformers`` / ``diffusers`` class from the values of the
published ``config.json`` (the Hugging Face model id is cited per entry), on the meta
device, and lowers it through the PyTorch frontend: parameters never get storage, so
``zoo:llama-3-70b`` analyses 70B parameters without allocating them.

Inputs: text models take ``input_ids`` of ``[batch, seq_len]`` (prefill) or one token
plus a KV cache of ``seq_len`` (decode, causal LMs only; see ``shard_opt.frontends.hf``).
ViT takes ``pixel_values [batch, 3, 224, 224]``. The Wan models take a 480x832,
81-frame video's latents: ``[batch, 16, 21, 60, 104]`` for the DiT (32760 tokens after
the 1x2x2 patch), and one latent frame ``[batch, 16, 1, 60, 104]`` for the VAE decoder
(diffusers' ``AutoencoderKLWan._decode`` runs the decoder one latent frame at a time);
``--seq-len`` does not apply to them.

torch is imported when a model is built, not with this module: a run whose lowered
modules all come from the cache (``frontends/cache.py``) never imports it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from shard_opt.errors import UserError
from shard_opt.lowered import LoweredModel, PendingModel, predict_arguments, scored_whole


@dataclass(frozen=True)
class ZooEntry:
    name: str
    source: str  # Hugging Face model id or "shard-opt" for hand-written models
    summary: str
    build: Callable  # (layers) -> nn.Module, on the meta device
    inputs: str  # "tokens", "image", "wan-dit", "wan-vae", "hidden"
    causal_lm: bool = False
    hidden: int = 0  # feature size for "hidden" inputs
    repeated: bool = True  # has repeated blocks: the search also lowers 1- and 2-block copies (unless scored whole)


def _on_meta(fn):
    def build(layers):
        import torch

        with torch.device("meta"):
            return fn(layers)
    return build


def _rope(theta, **extra):
    return {"rope_type": extra.pop("rope_type", "default"), "rope_theta": theta, **extra}


# --- Llama family -------------------------------------------------------------------

def _llama(values):
    def fn(layers):
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(**values)
        if layers is not None:
            cfg.num_hidden_layers = layers
        return LlamaForCausalLM(cfg)
    return _on_meta(fn)


# meta-llama/Meta-Llama-3-8B config.json
LLAMA_3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                  rms_norm_eps=1e-5, rope_parameters=_rope(500000.0), tie_word_embeddings=False,
                  hidden_act="silu", bos_token_id=128000, eos_token_id=128001)
# meta-llama/Meta-Llama-3-70B config.json
LLAMA_3_70B = dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                   num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=8192,
                   rms_norm_eps=1e-5, rope_parameters=_rope(500000.0), tie_word_embeddings=False,
                   hidden_act="silu", bos_token_id=128000, eos_token_id=128001)
# meta-llama/Llama-3.2-1B config.json
LLAMA_3_2_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                    rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu",
                    rope_parameters=_rope(500000.0, rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0, original_max_position_embeddings=8192),
                    bos_token_id=128000, eos_token_id=128001)


# mistralai/Mixtral-8x7B-v0.1 config.json
MIXTRAL_8X7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768,
                    rms_norm_eps=1e-5, rope_parameters=_rope(1e6), num_local_experts=8,
                    num_experts_per_tok=2, sliding_window=None, tie_word_embeddings=False,
                    router_aux_loss_coef=0.02, hidden_act="silu")


def _mixtral(layers):
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(**MIXTRAL_8X7B)
    if layers is not None:
        cfg.num_hidden_layers = layers
    return MixtralForCausalLM(cfg)


# Qwen/Qwen2.5-7B config.json
QWEN2_5_7B = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                  num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=131072,
                  rms_norm_eps=1e-6, rope_parameters=_rope(1e6), tie_word_embeddings=False,
                  use_sliding_window=False, hidden_act="silu", bos_token_id=151643, eos_token_id=151643)


def _qwen(layers):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(**QWEN2_5_7B)
    if layers is not None:
        cfg.num_hidden_layers = layers
    return Qwen2ForCausalLM(cfg)


# openai-community/gpt2-xl config.json
GPT2_XL = dict(vocab_size=50257, n_positions=1024, n_embd=1600, n_layer=48, n_head=25,
               activation_function="gelu_new", layer_norm_epsilon=1e-5, n_inner=None)


def _gpt2(layers):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(**GPT2_XL)
    if layers is not None:
        cfg.n_layer = layers
    return GPT2LMHeadModel(cfg)


# google-bert/bert-large-uncased config.json
BERT_LARGE = dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096, hidden_act="gelu", max_position_embeddings=512,
                  type_vocab_size=2, layer_norm_eps=1e-12)


def _bert(layers):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(**BERT_LARGE)
    if layers is not None:
        cfg.num_hidden_layers = layers
    return BertModel(cfg, add_pooling_layer=True)


# google/vit-large-patch16-224 config.json
VIT_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                 hidden_act="gelu", image_size=224, patch_size=16, num_channels=3, qkv_bias=True,
                 layer_norm_eps=1e-12)


def _vit(layers):
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(**VIT_LARGE, num_labels=1000)
    if layers is not None:
        cfg.num_hidden_layers = layers
    return ViTForImageClassification(cfg)


# Wan-AI/Wan2.1-T2V-1.3B-Diffusers transformer/config.json
WAN_DIT_1_3B = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                    out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30,
                    cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None,
                    added_kv_proj_dim=None, rope_max_seq_len=1024)
# Wan-AI/Wan2.1-T2V-14B-Diffusers transformer/config.json
WAN_DIT_14B = dict(WAN_DIT_1_3B, num_attention_heads=40, ffn_dim=13824, num_layers=40)


def _wan_dit(values):
    def fn(layers):
        from diffusers import WanTransformer3DModel

        v = dict(values)
        if layers is not None:
            v["num_layers"] = layers
        return WanTransformer3DModel(**v)
    return fn


# Wan-AI/Wan2.1-T2V-1.3B-Diffusers vae/config.json (the same VAE serves the 14B model)
WAN_VAE = dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
               temperal_downsample=[False, True, True], dropout=0.0)


def _wan_vae_decoder_class():
    """``WanVAEDecoder``, defined on first use (it subclasses ``torch.nn.Module``)."""
    from torch import nn

    class WanVAEDecoder(nn.Module):
        """``AutoencoderKLWan``'s decode path for one latent frame: ``post_quant_conv`` then ``decoder``.

        Holds the VAE's own submodules under their own names, so parameter FQNs are the
        VAE's (``decoder.up_blocks.0...``); the encoder is left out.
        """

        def __init__(self, vae):
            super().__init__()
            self.post_quant_conv = vae.post_quant_conv
            self.decoder = vae.decoder

        def forward(self, z):
            return self.decoder(self.post_quant_conv(z)).clamp(-1.0, 1.0)

    WanVAEDecoder.__module__ = __name__
    WanVAEDecoder.__qualname__ = "WanVAEDecoder"
    globals()["WanVAEDecoder"] = WanVAEDecoder
    return WanVAEDecoder


def __getattr__(name: str):
    # ``from shard_opt.frontends.zoo import WanVAEDecoder`` without torch at import time
    if name == "WanVAEDecoder":
        return _wan_vae_decoder_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _wan_vae(layers):
    from diffusers import AutoencoderKLWan

    decoder = globals().get("WanVAEDecoder") or _wan_vae_decoder_class()
    return decoder(AutoencoderKLWan(**WAN_VAE))


# --- Hand-written ---------------------------------------------------------------------

def _mlp(layers):
    from shard_opt.frontends.models import MLP

    return MLP(1024, 4096)


def _block(layers):
    from shard_opt.frontends.models import TransformerBlock

    return TransformerBlock(1024, 8, 4096)


_ENTRIES = [
    ZooEntry("llama-3-8b", "meta-llama/Meta-Llama-3-8B", "Llama 3 8B (GQA 32/8 heads, 32 layers)",
             _llama(LLAMA_3_8B), "tokens", causal_lm=True),
    ZooEntry("llama-3-70b", "meta-llama/Meta-Llama-3-70B", "Llama 3 70B (GQA 64/8 heads, 80 layers)",
             _llama(LLAMA_3_70B), "tokens", causal_lm=True),
    ZooEntry("llama-3.2-1b", "meta-llama/Llama-3.2-1B", "Llama 3.2 1B (tied embeddings, 16 layers)",
             _llama(LLAMA_3_2_1B), "tokens", causal_lm=True),
    ZooEntry("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1",
             "Mixtral 8x7B MoE (8 experts, top-2; lowered densely, see rewrites)", _on_meta(_mixtral),
             "tokens", causal_lm=True),
    ZooEntry("qwen2.5-7b", "Qwen/Qwen2.5-7B", "Qwen2.5 7B (GQA 28/4 heads, qkv bias)", _on_meta(_qwen),
             "tokens", causal_lm=True),
    ZooEntry("gpt2-xl", "openai-community/gpt2-xl", "GPT-2 XL 1.5B (25 heads, fused c_attn)",
             _on_meta(_gpt2), "tokens", causal_lm=True),
    ZooEntry("bert-large", "google-bert/bert-large-uncased", "BERT large encoder (24 layers)",
             _on_meta(_bert), "tokens"),
    ZooEntry("vit-large", "google/vit-large-patch16-224", "ViT-L/16 image classifier, 224x224",
             _on_meta(_vit), "image"),
    ZooEntry("wan-dit", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "Wan 2.1 T2V 1.3B DiT (30 blocks), 480x832x81",
             _on_meta(_wan_dit(WAN_DIT_1_3B)), "wan-dit"),
    ZooEntry("wan-dit-14b", "Wan-AI/Wan2.1-T2V-14B-Diffusers", "Wan 2.1 T2V 14B DiT (40 blocks), 480x832x81",
             _on_meta(_wan_dit(WAN_DIT_14B)), "wan-dit"),
    ZooEntry("wan-vae", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "Wan 2.1 VAE decoder, one latent frame -> 480x832",
             _on_meta(_wan_vae), "wan-vae"),
    ZooEntry("mlp", "shard-opt", "2-layer MLP 1024 -> 4096 -> 1024 (the bundled example)", _on_meta(_mlp),
             "hidden", hidden=1024, repeated=False),
    ZooEntry("transformer-block", "shard-opt",
             "one Llama-style block, hidden 1024, 8 heads, MLP 4096 (the bundled example)", _on_meta(_block),
             "hidden", hidden=1024, repeated=False),
]
ZOO = {e.name: e for e in _ENTRIES}


def list_models() -> list[str]:
    return list(ZOO)


def get(name: str) -> ZooEntry:
    if name not in ZOO:
        raise UserError(f"zoo:{name}: unknown zoo model; known: {', '.join(ZOO)}")
    return ZOO[name]


def _inputs(entry: ZooEntry, model, batch: int, seq_len: int):
    """(tensors, names) of a zoo model's prefill inputs (meta device)."""
    import torch

    meta = dict(device="meta")
    if entry.inputs == "tokens":
        return [torch.zeros((batch, seq_len), dtype=torch.long)], ["input_ids"]
    if entry.inputs == "image":
        return [torch.empty((batch, 3, 224, 224), **meta)], ["pixel_values"]
    if entry.inputs == "hidden":
        return [torch.empty((batch, seq_len, entry.hidden), **meta)], ["x"]
    if entry.inputs == "wan-dit":
        # 480x832, 81 frames -> latents [16, (81-1)/4+1, 480/8, 832/8]; umT5 text: 512 x 4096
        return ([torch.empty((batch, 16, 21, 60, 104), **meta), torch.zeros((batch,), dtype=torch.long),
                 torch.empty((batch, 512, 4096), **meta)],
                ["hidden_states", "timestep", "encoder_hidden_states"])
    if entry.inputs == "wan-vae":
        return [torch.empty((batch, 16, 1, 60, 104), **meta)], ["z"]
    raise AssertionError(entry.inputs)


def load_zoo(name: str, *, layers: int | None = None, batch: int = 1, seq_len: int = 128,
             phase: str = "prefill", dtype: str = "bf16", describe: bool = True,
             background: bool = False) -> LoweredModel | PendingModel:
    """Build ``zoo:NAME`` on the meta device and lower it (see the module docstring).

    ``background``: when the whole model is not in the cache, lower it in a child process
    while this one lowers the 1- and 2-block copies the search scores, and return a
    ``PendingModel`` standing in for it (``lower_beside``): the same model, in about the
    time of the longer of the two, and the driver starts before it is done."""
    from shard_opt.frontends.cache import cached

    entry = get(name)
    where = f"zoo:{name}"
    if phase not in ("prefill", "decode"):
        raise UserError(f"--phase {phase!r}: use prefill or decode")
    if phase == "decode" and not entry.causal_lm:
        raise UserError(f"{where}: --phase decode needs a causal language model; {name} is not one "
                        f"(use --phase prefill)")
    parts = dict(name=name, layers=layers, batch=batch, seq_len=seq_len, phase=phase, dtype=dtype,
                 describe=describe)
    copies: dict[int, LoweredModel] = {}

    def with_layers(k: int) -> LoweredModel:
        # once per run: structure_of and the layered scorer both ask for the 1-layer copy
        if k not in copies:
            copies[k] = load_zoo(name, layers=k, batch=batch, seq_len=seq_len, phase=phase, dtype=dtype,
                                 describe=describe)
        return copies[k]

    def attach(model: LoweredModel) -> None:
        if model.num_layers and not scored_whole(model.meta):  # repeated blocks worth short copies
            model.with_layers = with_layers

    def build() -> LoweredModel:
        return cached(parts, lambda: _lower_zoo(entry, where, **parts))

    if background and layers is None and entry.repeated:
        pending = lower_beside(parts, with_layers, build, attach, whole=lambda: _scored_whole(entry))
        if pending is not None:
            return pending
        from shard_opt import parallel

        parallel.start()  # a full-size search follows: the workers import jax while the cache is read
    lowered = build()
    attach(lowered)
    return lowered


def _scored_whole(entry: ZooEntry) -> bool:
    """Whether ``entry``'s model is scored whole (``shard_opt.lowered.scored_whole``), from its
    meta-device build (milliseconds once torch and the model's library are imported)."""
    from shard_opt.frontends.torch_frontend import find_repeated_blocks, whole_per_two_blocks

    model = entry.build(None)
    found = find_repeated_blocks(model)
    return found is not None and scored_whole({"whole_per_two_blocks": whole_per_two_blocks(model, found),
                                               "total_layers": len(found[1])})


def lower_beside(parts: dict, short, build, attach, whole=lambda: False) -> PendingModel | None:
    """``load_zoo(**parts)`` lowered by a child process while ``short(1)`` and ``short(2)``
    lower the 1- and 2-block copies here: a ``PendingModel`` whose provisional arguments
    are predicted from the copies (``predict_arguments``), so the driver starts the work
    that needs only them before the child is done. None when that cannot help (the model
    is in the cache; one job only, ``SHARD_OPT_JOBS=1``; or ``whole()``: the model is scored
    whole, with no copies to lower meanwhile, and the child is stopped). The child reads and writes the
    same cache (none when it is off) and its cache statistics are added to this
    process's; when it fails, ``build()`` lowers the model here (and reports any error).
    ``attach(model)`` finishes the model either way (its ``with_layers``)."""
    import pickle
    import subprocess
    import sys

    from shard_opt import parallel, timing
    from shard_opt.frontends import cache

    root = cache.cache_dir()
    if parallel.jobs() <= 1 or (root and os.path.exists(cache.entry_path(parts, root))):
        return None
    env = dict(os.environ, **({} if root else {cache.ENV: "off"}))
    env.pop(timing.ENV, None)
    child = subprocess.Popen(
        [sys.executable, "-c", "from shard_opt.frontends.zoo import _lower_child; _lower_child()", repr(parts)],
        stdout=subprocess.PIPE, env=env)
    provisional = None
    try:
        if whole():
            # scored whole: no short copies to lower here, so nothing to do beside the
            # child, which is still importing: the caller lowers the model itself
            child.kill()
            child.wait()
            return None
        copies = [short(1), short(2)]
    except UserError:
        copies = None  # no repeated blocks after all, or too few: only the child's model
    except BaseException:
        child.kill()
        child.wait()
        raise
    if copies is not None:
        arguments = predict_arguments(copies[0].arguments, copies[1].arguments,
                                      copies[0].meta.get("total_layers") or 0)
        if arguments is not None:
            provisional = LoweredModel(copies[0].name, "", arguments, source="zoo",
                                       num_layers=copies[0].meta.get("total_layers"))
            attach(provisional)
    parallel.start()  # the workers import jax while the child lowers

    def finish() -> LoweredModel:
        with timing.phase("lower"):
            try:
                data = child.stdout.read()
                child.wait()
            except BaseException:
                child.kill()
                child.wait()
                raise
            try:
                status, model, stats = pickle.loads(data)
            except Exception:  # noqa: BLE001 - a child that died says nothing readable
                status = "died"
            if status == "ok":
                for key, n in stats.items():
                    cache.stats[key] = cache.stats.get(key, 0) + n
            else:
                model = build()
            attach(model)
            return model

    return PendingModel(provisional, finish)


def _lower_child() -> None:
    """The child of ``lower_beside``: lower ``sys.argv[1]``'s parts, pickle the result to
    the original stdout (what the lowering prints goes to stderr)."""
    import ast
    import pickle
    import sys

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from shard_opt.frontends import cache

    try:
        model = load_zoo(**ast.literal_eval(sys.argv[1]))
        model.with_layers = None
        payload = ("ok", model, dict(cache.stats))
    except BaseException as e:  # noqa: BLE001 - the parent lowers it again and reports the error
        payload = ("error", f"{type(e).__name__}: {e}", {})
    pickle.dump(payload, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.close()


def _lower_zoo(entry: ZooEntry, where: str, *, name: str, layers: int | None, batch: int, seq_len: int,
               phase: str, dtype: str, describe: bool) -> LoweredModel:
    from shard_opt.frontends import hf
    from shard_opt.frontends.torch_frontend import (TorchProgram, find_repeated_blocks, lower_program, torch_dtype,
                                                    truncate_layers, whole_per_two_blocks)

    tdt = torch_dtype(dtype)
    full = entry.build(None)
    found = find_repeated_blocks(full)
    total = len(found[1]) if found else None
    share = whole_per_two_blocks(full, found) if found else None
    kept = total
    if layers is not None:
        if total is None:
            raise UserError(f"{where}: --layers {layers} given but {name} has no repeated blocks; drop --layers")
        if layers < 1 or layers > total:
            raise UserError(f"{where}: --layers {layers} is out of range (1..{total})")
        model = entry.build(layers)  # the config's layer count, so config-driven code agrees
        if len(model.get_submodule(found[0])) != layers:  # a builder that ignores the config
            truncate_layers(model, layers, where)
        kept = layers
    else:
        model = full
    del full
    if phase == "decode":
        prog = hf.decode_program(model, batch=batch, seq_len=seq_len, dtype=tdt, where=where)
    else:
        tensors, names = _inputs(entry, model, batch, seq_len)
        prog = TorchProgram(model, tensors, names)
        if entry.inputs == "tokens" and "use_cache" in hf._forward_params(model):
            prog.kwargs["use_cache"] = False
        if entry.inputs == "wan-dit":
            prog.kwargs["return_dict"] = False
    prog.total_layers, prog.num_layers = total, kept
    prog.meta.update({"zoo": name, "hf_id": entry.source, "phase": phase, "batch": batch, "seq_len": seq_len})
    if share is not None:
        prog.meta["whole_per_two_blocks"] = share
    return lower_program(prog, name=name, dtype=dtype, where=where, source="zoo", describe=describe)
