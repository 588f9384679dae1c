"""Llama 3.1 8B with the tt-forge-models Llama prefill loader's "megatron" strategy.

Model: meta-llama/Llama-3.1-8B-Instruct (variant ``3.1_8B_Instruct`` of
``ModelLoaderPrefill`` in tt-forge-models ``llama/causal_lm/pytorch/loader.py``; the
same architecture as meta-llama/Llama-3.1-8B), full size, on the meta device.

Spec (``ModelLoaderPrefill.load_shard_spec(model, strategy="megatron")``): pure 1-D
Megatron -- q/k/v/gate/up ``("model", None)``, o/down ``(None, "model")``, lm_head
``("model", None)``; the embedding and the norms are not listed (replicated). The
tt-xla test harness selects the strategy from the test's metadata; here it is this
script's default, so ``load_shard_spec(model)`` returns the megatron spec. Mesh:
``(1, N)``.

    shard-opt benchmarks/experts/llama31_8b_megatron.py --mesh 1x8 --plan-json plan.json
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from _configs import LLAMA_3_1_8B

MAX_LENGTH = 128  # the loader's LLMModelConfig(max_length=128)


class ModelLoader:
    """tt-forge-models-style prefill loader for meta-llama/Llama-3.1-8B-Instruct (no weights)."""

    def __init__(self, variant=None):
        self._variant = variant or "3.1_8B_Instruct"
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
        # (1, N) for every variant but 70B/405B.
        return (1, num_devices), ("batch", "model")

    def load_shard_spec(self, model, strategy="megatron", batch_axis="batch"):
        # tt-forge-models llama/causal_lm/pytorch/loader.py,
        # ModelLoaderPrefill.load_shard_spec, the strategy == "megatron" branch.
        if strategy != "megatron":
            raise ValueError(f"this script carries the megatron strategy only, not {strategy!r}")
        shard_specs = {}
        shard_specs[model.lm_head.weight] = ("model", None)
        for layer in model.model.layers:
            shard_specs[layer.mlp.up_proj.weight] = ("model", None)
            shard_specs[layer.mlp.gate_proj.weight] = ("model", None)
            shard_specs[layer.mlp.down_proj.weight] = (None, "model")

            shard_specs[layer.self_attn.q_proj.weight] = ("model", None)
            shard_specs[layer.self_attn.k_proj.weight] = ("model", None)
            shard_specs[layer.self_attn.v_proj.weight] = ("model", None)
            shard_specs[layer.self_attn.o_proj.weight] = (None, "model")
        return shard_specs
