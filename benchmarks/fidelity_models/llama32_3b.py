"""Llama 3.2 3B at full size, on the meta device (no weights): the model of PERF.md's
Llama3.2-3B rows, which shard-opt's zoo does not carry. ``benchmarks/fidelity.py``
lowers it with ``--layers 1`` / ``2`` and ``--phase decode``.

Config: meta-llama/Llama-3.2-3B config.json (hidden 3072, MLP 8192, 28 layers, 24
query heads and 8 KV heads of 128, tied embeddings, llama3 RoPE scaling, factor 32),
written out with the same keys as the zoo's Llama 3.2 1B entry
(``shard_opt.frontends.zoo.LLAMA_3_2_1B``).

    shard-opt benchmarks/fidelity_models/llama32_3b.py --mesh 1x8 --phase decode --layers 2
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from shard_opt.frontends.zoo import LLAMA_3_2_1B

# meta-llama/Llama-3.2-3B config.json: the values that differ from Llama-3.2-1B's
LLAMA_3_2_3B = dict(LLAMA_3_2_1B, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                    num_attention_heads=24, num_key_value_heads=8, head_dim=128)


def load_model():
    with torch.device("meta"):
        return LlamaForCausalLM(LlamaConfig(**LLAMA_3_2_3B)).eval()


def load_inputs():
    return (torch.zeros((1, 128), dtype=torch.long),)
