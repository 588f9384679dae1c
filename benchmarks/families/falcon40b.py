"""Falcon-40B at full width, on the meta device (no download, no weights), with a spec of
the experts' shape.

Config: tiiuae/falcon-40b config.json (hidden 8192, 60 layers, 128 query heads in 8 K/V
groups (new decoder architecture: one fused query_key_value of (128 + 2 x 8) x 64 rows),
parallel attention and MLP, MLP 4 x 8192, no biases, vocab 65024); the LM head is tied to
the word embeddings as transformers' FalconConfig builds it from those values.

Spec: tt-forge-models has no Falcon-40B loader (its ``falcon/pytorch/loader.py`` covers
Falcon3 and 7B-instruct). This is the experts' 1-D Megatron shape as the Llama loader's
``"megatron"`` strategy writes it (column ``("model", None)``, row ``(None, "model")``,
``lm_head ("model", None)``), applied to Falcon's modules: the fused query_key_value and
dense_h_to_4h column-parallel, dense and dense_4h_to_h row-parallel, the tied LM head split
on its vocabulary (65024 / 8 = 8128 per device, 254 tiles). Mesh ``(1, N)``.

    shard-opt benchmarks/families/falcon40b.py --mesh 1x8 --layers 2 --spec benchmarks/families/falcon40b.py
"""

import torch
from transformers import FalconConfig, FalconForCausalLM

# tiiuae/falcon-40b config.json
FALCON_40B = dict(vocab_size=65024, hidden_size=8192, num_hidden_layers=60, num_attention_heads=128, num_kv_heads=8,
                  new_decoder_architecture=True, parallel_attn=True, bias=False, alibi=False,
                  layer_norm_epsilon=1e-5, bos_token_id=11, eos_token_id=11)

SEQ_LEN = 128


def load_model():
    with torch.device("meta"):
        return FalconForCausalLM(FalconConfig(**FALCON_40B)).eval()


def load_inputs():
    return (torch.zeros((1, SEQ_LEN), dtype=torch.long),)


def get_mesh_config(num_devices):
    return (1, num_devices), ("batch", "model")


def load_shard_spec(model):
    # the Llama loader's "megatron" strategy (tt-forge-models llama/causal_lm/pytorch/loader.py), on Falcon's modules
    shard_specs = {}
    for layer in model.transformer.h:
        shard_specs[layer.self_attention.query_key_value.weight] = ("model", None)
        shard_specs[layer.self_attention.dense.weight] = (None, "model")
        shard_specs[layer.mlp.dense_h_to_4h.weight] = ("model", None)
        shard_specs[layer.mlp.dense_4h_to_h.weight] = (None, "model")
    shard_specs[model.lm_head.weight] = ("model", None)
    return shard_specs
