"""Llama 3.1 8B with the tt-forge-models Llama loader's default shard spec.

Model: meta-llama/Llama-3.1-8B (variant ``3.1_8B`` of tt-forge-models
``llama/causal_lm/pytorch/loader.py``), full size, built from its config values on the
meta device: no download, no weights.

Spec (``ModelLoader.load_shard_spec``, quoted as the loader writes it): the "7-matmul
std" pattern -- q/k/v/gate/up ``("model", "batch")``, o/down ``("batch", "model")`` --
plus ``embed_tokens (None, "batch")``, ``lm_head ("model", "batch")`` and every RMSNorm
``("batch",)``. Mesh (``ModelLoader.get_mesh_config``): ``(1, N)`` for this variant (only
the 70B/405B variants get a 2-D mesh), so the "batch" entries name a size-1 axis.

    shard-opt benchmarks/experts/llama31_8b.py --mesh 1x8 --plan-json plan.json
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from _configs import LLAMA_3_1_8B

MAX_LENGTH = 128  # the loader's LLMModelConfig(max_length=128)


class ModelLoader:
    """tt-forge-models-style loader for meta-llama/Llama-3.1-8B (no weights)."""

    def __init__(self, variant=None):
        self._variant = variant or "3.1_8B"
        self.config = LlamaConfig(**LLAMA_3_1_8B)

    def load_model(self, dtype_override=None):
        with torch.device("meta"):
            model = LlamaForCausalLM(self.config)
        if dtype_override is not None:
            model = model.to(dtype_override)
        return model.eval()

    def load_inputs(self, dtype_override=None, batch_size=1):
        return (torch.zeros((batch_size, MAX_LENGTH), dtype=torch.long),)

    def get_mesh_config(self, num_devices):
        # tt-forge-models llama/causal_lm/pytorch/loader.py, ModelLoader.get_mesh_config:
        # the 70B/405B variants get (4, 8) on 32 devices or (2, N // 2); every other
        # variant, this one included, (1, N).
        return (1, num_devices), ("batch", "model")

    def load_shard_spec(self, model):
        # tt-forge-models llama/causal_lm/pytorch/loader.py, ModelLoader.load_shard_spec
        # (the default spec for the 3.0/3.1/3.3 variants).
        shard_specs = {}
        shard_specs[model.model.embed_tokens.weight] = (None, "batch")
        shard_specs[model.lm_head.weight] = ("model", "batch")
        shard_specs[model.model.norm.weight] = ("batch",)
        for layer in model.model.layers:
            shard_specs[layer.mlp.up_proj.weight] = ("model", "batch")
            shard_specs[layer.mlp.gate_proj.weight] = ("model", "batch")
            shard_specs[layer.mlp.down_proj.weight] = ("batch", "model")

            shard_specs[layer.self_attn.q_proj.weight] = ("model", "batch")
            shard_specs[layer.self_attn.k_proj.weight] = ("model", "batch")
            shard_specs[layer.self_attn.v_proj.weight] = ("model", "batch")
            shard_specs[layer.self_attn.o_proj.weight] = ("batch", "model")
            shard_specs[layer.input_layernorm.weight] = ("batch",)
            shard_specs[layer.post_attention_layernorm.weight] = ("batch",)
        return shard_specs
