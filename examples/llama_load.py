"""A tt-forge-models-style load script: a 2-layer small Llama built from a LlamaConfig.

shard-opt (and later features that rewrite this script to add ``mark_sharding``) call
``ModelLoader().load_model()`` and ``ModelLoader().load_inputs()``, the method names of
tt-forge-models' ``ModelLoader``. Random weights, no download:

    shard-opt examples/llama_load.py --mesh 1x4
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = dict(
    vocab_size=1024,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)


class ModelLoader:
    """Small Llama (hidden 256, 4 heads, 2 KV heads, intermediate 512, vocab 1024)."""

    def __init__(self, variant=None):
        self.variant = variant
        self.config = LlamaConfig(**CONFIG)

    def load_model(self, dtype_override=None):
        torch.manual_seed(0)
        model = LlamaForCausalLM(self.config)
        if dtype_override is not None:
            model = model.to(dtype_override)
        return model.eval()

    def load_inputs(self, dtype_override=None, batch_size=1, seq_len=128):  # shard-opt plans these inputs
        torch.manual_seed(1)
        input_ids = torch.randint(0, self.config.vocab_size, (batch_size, seq_len))
        return (input_ids,)
