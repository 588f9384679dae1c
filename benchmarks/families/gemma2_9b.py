"""Gemma-2-9B at full width, on the meta device (no download, no weights), with the
tt-forge-models Gemma loader's shard spec.

Config: google/gemma-2-9b config.json (hidden 3584, MLP 14336, 42 layers, 16 query heads
and 8 KV heads of 256, vocab 256000, tied embeddings, sliding window 4096 on alternate
layers, attention logit soft-cap 50, final soft-cap 30, query_pre_attn_scalar 256).

Spec (tt-forge-models ``gemma/pytorch/loader.py``, ``ModelLoader.load_shard_spec`` for the
2-9B / 2-27B / 1.1-7B variants, quoted as written): the "7-matmul std" pattern,
q/k/v/gate/up ``("model", "batch")``, o/down ``("batch", "model")``; nothing else listed
(embedding, norms and the tied LM head replicated). Mesh (``get_mesh_config``): ``(1, N)``.

    shard-opt benchmarks/families/gemma2_9b.py --mesh 1x8 --layers 2 --spec benchmarks/families/gemma2_9b.py
"""

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

# google/gemma-2-9b config.json
GEMMA_2_9B = dict(vocab_size=256000, hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=256, hidden_activation="gelu_pytorch_tanh",
                  max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0, attn_logit_softcapping=50.0,
                  final_logit_softcapping=30.0, query_pre_attn_scalar=256, sliding_window=4096,
                  tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1)

SEQ_LEN = 128  # the prefill length of issue 32's families (a multiple of 32 per device on 1x4, not on 1x8)


def load_model():
    with torch.device("meta"):
        return Gemma2ForCausalLM(Gemma2Config(**GEMMA_2_9B)).eval()


def load_inputs():
    return (torch.zeros((1, SEQ_LEN), dtype=torch.long),)


def get_mesh_config(num_devices):
    # tt-forge-models gemma/pytorch/loader.py, ModelLoader.get_mesh_config: (1, N)
    return (1, num_devices), ("batch", "model")


def load_shard_spec(model):
    # tt-forge-models gemma/pytorch/loader.py, ModelLoader.load_shard_spec (GEMMA_2_9B_IT)
    shard_specs = {}
    for layer in model.model.layers:
        shard_specs[layer.mlp.up_proj.weight] = ("model", "batch")
        shard_specs[layer.mlp.gate_proj.weight] = ("model", "batch")
        shard_specs[layer.mlp.down_proj.weight] = ("batch", "model")
        shard_specs[layer.self_attn.q_proj.weight] = ("model", "batch")
        shard_specs[layer.self_attn.k_proj.weight] = ("model", "batch")
        shard_specs[layer.self_attn.v_proj.weight] = ("model", "batch")
        shard_specs[layer.self_attn.o_proj.weight] = ("batch", "model")
    return shard_specs
