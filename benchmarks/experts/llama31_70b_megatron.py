"""Llama 3.1 70B with the tt-forge-models Llama prefill loader's "megatron" strategy, 1-D.

Model: meta-llama/Llama-3.1-70B, full size, on the meta device. The "megatron" branch of
``ModelLoaderPrefill.load_shard_spec`` (tt-forge-models
``llama/causal_lm/pytorch/loader.py``) is registered there for the 8B Instruct variant
only; this script applies that same branch to 70B on a ``(1, N)`` mesh -- the 1-D form
of the 70B spec, beside the 2-D form in ``llama31_70b.py``.

Spec: q/k/v/gate/up ``("model", None)``, o/down ``(None, "model")``, lm_head
``("model", None)``; embedding and norms replicated.

    shard-opt benchmarks/experts/llama31_70b_megatron.py --mesh 1x8 --plan-json plan.json
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from _configs import LLAMA_3_1_70B

MAX_LENGTH = 128  # the loader's LLMModelConfig(max_length=128)


class ModelLoader:
    """tt-forge-models-style prefill loader for meta-llama/Llama-3.1-70B, megatron strategy."""

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
        # The 1-D form: all devices on the "model" axis.
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
