"""Falcon-7B at full width, on the meta device (no download, no weights), with the
tt-forge-models Falcon loader's shard spec for its falcon-7b-instruct variant.

Config: tiiuae/falcon-7b config.json (hidden 4544, 32 layers, 71 query heads and one
shared K/V head of 64 (multi-query), parallel attention and MLP, no biases, vocab 65024,
tied embeddings).

Spec (tt-forge-models ``falcon/pytorch/loader.py``, ``ModelLoader.load_shard_spec``,
``FALCON_7B_INSTRUCT`` branch, quoted as written): the MLP pair only,
``mlp.dense_h_to_4h ("model", None)``, ``mlp.dense_4h_to_h (None, "model")``; the fused
query_key_value and attention's dense stay replicated (71 heads split no mesh axis).
Mesh (``get_mesh_config``): 71 heads do not divide 8, so ``(2, 4)`` on 8 devices; issue
32's runs give ``--mesh 1x8`` explicitly, where the spec is the same MLP pair.

    shard-opt benchmarks/families/falcon7b.py --mesh 1x8 --layers 2 --spec benchmarks/families/falcon7b.py
"""

import torch
from transformers import FalconConfig, FalconForCausalLM

# tiiuae/falcon-7b config.json
FALCON_7B = dict(vocab_size=65024, hidden_size=4544, num_hidden_layers=32, num_attention_heads=71,
                 multi_query=True, parallel_attn=True, new_decoder_architecture=False, bias=False, alibi=False,
                 layer_norm_epsilon=1e-5, bos_token_id=11, eos_token_id=11)

SEQ_LEN = 128


def load_model():
    with torch.device("meta"):
        return FalconForCausalLM(FalconConfig(**FALCON_7B)).eval()


def load_inputs():
    return (torch.zeros((1, SEQ_LEN), dtype=torch.long),)


def get_mesh_config(num_devices):
    # tt-forge-models falcon/pytorch/loader.py, ModelLoader.get_mesh_config: (1, N) when the
    # heads divide N, else (2, N // 2)
    if FALCON_7B["num_attention_heads"] % num_devices == 0:
        return (1, num_devices), ("batch", "model")
    return (2, num_devices // 2), ("batch", "model")


def load_shard_spec(model):
    # tt-forge-models falcon/pytorch/loader.py, ModelLoader.load_shard_spec (FALCON_7B_INSTRUCT)
    shard_specs = {}
    for layer in model.transformer.h:
        shard_specs[layer.mlp.dense_h_to_4h.weight] = ("model", None)
        shard_specs[layer.mlp.dense_4h_to_h.weight] = (None, "model")
    return shard_specs
