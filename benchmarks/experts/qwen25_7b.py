"""Qwen 2.5 7B with the tt-forge-models Qwen 2.5 loader's shard spec.

Model: Qwen/Qwen2.5-7B (variant ``7B`` of tt-forge-models
``qwen_2_5/causal_lm/pytorch/loader.py``), full size, built from shard-opt's zoo config
values on the meta device.

Spec (``ModelLoader.load_shard_spec``): q/k/v/gate/up ``("model", "batch")`` plus the
q/k/v biases ``("model",)``, o/down ``("batch", "model")``, lm_head
``("model", "batch")``; embedding and norms not listed. Mesh (``get_mesh_config``):
``(8, 4)`` on 32 devices; else ``(1, N)`` when the 28 heads divide N, else
``(2, N // 2)`` (8 devices: ``(2, 4)``).

    shard-opt benchmarks/experts/qwen25_7b.py --mesh 2x4 --plan-json plan.json
"""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from shard_opt.frontends.zoo import QWEN2_5_7B

MAX_LENGTH = 128  # the loader's LLMModelConfig(max_length=128)


class ModelLoader:
    """tt-forge-models-style loader for Qwen/Qwen2.5-7B (no weights)."""

    def __init__(self, variant=None):
        self._variant = variant or "7B"
        self.config = Qwen2Config(**QWEN2_5_7B)

    def load_model(self, dtype_override=None):
        with torch.device("meta"):
            model = Qwen2ForCausalLM(self.config)
        if dtype_override is not None:
            model = model.to(dtype_override)
        return model.eval()

    def load_inputs(self, dtype_override=None, batch_size=1):
        return (torch.zeros((batch_size, MAX_LENGTH), dtype=torch.long),)

    def get_mesh_config(self, num_devices):
        # tt-forge-models qwen_2_5/causal_lm/pytorch/loader.py, ModelLoader.get_mesh_config.
        if num_devices == 32:  # Galaxy
            mesh_shape = (8, 4)
        elif self.config.num_attention_heads % num_devices == 0:
            mesh_shape = (1, num_devices)
        elif self.config.num_attention_heads % (num_devices // 2) == 0 and num_devices % 2 == 0:
            mesh_shape = (2, num_devices // 2)
        else:
            raise ValueError(
                f"Cannot evenly distribute {self.config.num_attention_heads} heads across {num_devices} devices"
            )
        return mesh_shape, ("batch", "model")

    def load_shard_spec(self, model):
        # tt-forge-models qwen_2_5/causal_lm/pytorch/loader.py, ModelLoader.load_shard_spec
        # (its embedding entry applies to the Math-72B variant only, not this one).
        shard_specs = {}
        for layer in model.model.layers:
            shard_specs[layer.mlp.up_proj.weight] = ("model", "batch")
            shard_specs[layer.mlp.gate_proj.weight] = ("model", "batch")
            shard_specs[layer.mlp.down_proj.weight] = ("batch", "model")

            shard_specs[layer.self_attn.q_proj.weight] = ("model", "batch")
            shard_specs[layer.self_attn.q_proj.bias] = ("model",)
            shard_specs[layer.self_attn.k_proj.weight] = ("model", "batch")
            shard_specs[layer.self_attn.k_proj.bias] = ("model",)
            shard_specs[layer.self_attn.v_proj.weight] = ("model", "batch")
            shard_specs[layer.self_attn.v_proj.bias] = ("model",)
            shard_specs[layer.self_attn.o_proj.weight] = ("batch", "model")
        shard_specs[model.lm_head.weight] = ("model", "batch")
        return shard_specs
