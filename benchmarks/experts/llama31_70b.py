"""Llama 3.1 70B with the tt-forge-models Llama loader's default spec on its 2-D mesh.

Model: meta-llama/Llama-3.1-70B (variant ``3.1_70B`` of tt-forge-models
``llama/causal_lm/pytorch/loader.py``, which names it meta-llama/Meta-Llama-3.1-70B),
full size (80 layers, 70.6B parameters), on the meta device.

Spec (``ModelLoader.load_shard_spec``): q/k/v/gate/up ``("model", "batch")``, o/down
``("batch", "model")``, ``embed_tokens (None, "batch")``, ``lm_head ("model", "batch")``,
norms ``("batch",)``. Mesh (``get_mesh_config``): ``(4, 8)`` on 32 devices (Galaxy),
``(2, N // 2)`` otherwise, so every weight is split on both axes (tt-xla issue 3230
calls this "FSDP-like").

    shard-opt benchmarks/experts/llama31_70b.py --mesh 2x4 --plan-json plan.json
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from _configs import LLAMA_3_1_70B

MAX_LENGTH = 128  # the loader's LLMModelConfig(max_length=128)


class ModelLoader:
    """tt-forge-models-style loader for meta-llama/Llama-3.1-70B (no weights)."""

    def __init__(self, variant=None):
        self._variant = variant or "3.1_70B"
        self.config = LlamaConfig(**LLAMA_3_1_70B)

    def load_model(self, dtype_override=None):
        with torch.device("meta"):
            model = LlamaForCausalLM(self.config)
        if dtype_override is not None:
            model = model.to(dtype_override)
        return model.eval()

    def load_inputs(self, dtype_override=None, batch_size=1):
        return (torch.zeros((batch_size, MAX_LENGTH), dtype=torch.long),)

    def get_mesh_config(self, num_devices):
        # tt-forge-models llama/causal_lm/pytorch/loader.py, ModelLoader.get_mesh_config,
        # the 70B/405B branch.
        if num_devices == 32:  # Galaxy
            mesh_shape = (4, 8)
        else:  # wh/bh llmbox
            mesh_shape = (2, num_devices // 2)
        return mesh_shape, ("batch", "model")

    def load_shard_spec(self, model):
        # tt-forge-models llama/causal_lm/pytorch/loader.py, ModelLoader.load_shard_spec.
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
