"""Mixtral 8x7B with the tt-forge-models Mixtral MoE loader's shard spec (expert parallel).

Model: mistralai/Mixtral-8x7B-Instruct-v0.1 (the only variant of tt-forge-models
``mixtral/causal_lm/moe/pytorch/loader.py``; the same architecture as the
mistralai/Mixtral-8x7B-v0.1 config shard-opt's zoo carries), full size, on the meta
device.

transformers 5.24 stores each layer's experts as two stacked parameters on
``MixtralExperts``: ``model.layers.N.mlp.experts.gate_up_proj [8, 28672, 4096]``
(``[E, 2 * intermediate, hidden]``, gate and up packed on dim 1) and
``model.layers.N.mlp.experts.down_proj [8, 4096, 14336]`` (``[E, hidden, intermediate]``);
the router is ``model.layers.N.mlp.gate.weight [8, 4096]``.

Spec (``ModelLoader.load_shard_spec``): attention q/k/v ``("model", "batch")``, o
``("batch", "model")``; both expert stacks ``("model", None, None)`` (whole experts per
device); the router replicated; lm_head ``("model", "batch")``. Mesh
(``get_mesh_config``): ``(4, 8)`` on 32 devices, else ``(1, N)``.

    shard-opt benchmarks/experts/mixtral_8x7b.py --mesh 1x8 --plan-json plan.json
"""

import torch
from transformers import MixtralConfig, MixtralForCausalLM

from shard_opt.frontends.zoo import MIXTRAL_8X7B

MAX_LENGTH = 256  # the loader's LLMModelConfig(max_length=256)


class ModelLoader:
    """tt-forge-models-style loader for mistralai/Mixtral-8x7B-Instruct-v0.1 (no weights)."""

    def __init__(self, variant=None):
        self._variant = variant or "Mixtral-8x7B-Instruct-v0.1"
        self.config = MixtralConfig(**MIXTRAL_8X7B)

    def load_model(self, dtype_override=None):
        with torch.device("meta"):
            model = MixtralForCausalLM(self.config)
        if dtype_override is not None:
            model = model.to(dtype_override)
        return model.eval()

    def load_inputs(self, dtype_override=None, batch_size=1):
        return (torch.zeros((batch_size, MAX_LENGTH), dtype=torch.long),)

    def get_mesh_config(self, num_devices):
        # tt-forge-models mixtral/causal_lm/moe/pytorch/loader.py, ModelLoader.get_mesh_config.
        if num_devices == 32:  # Galaxy
            mesh_shape = (4, 8)
        else:
            mesh_shape = (1, num_devices)
        assert self.config.num_attention_heads % mesh_shape[1] == 0, (
            "Attention heads must be divisible by the model axis size"
        )
        return mesh_shape, ("batch", "model")

    def load_shard_spec(self, model):
        # tt-forge-models mixtral/causal_lm/moe/pytorch/loader.py, ModelLoader.load_shard_spec.
        shard_specs = {}
        for layer in model.model.layers:
            shard_specs[layer.self_attn.q_proj.weight] = ("model", "batch")
            shard_specs[layer.self_attn.k_proj.weight] = ("model", "batch")
            shard_specs[layer.self_attn.v_proj.weight] = ("model", "batch")
            shard_specs[layer.self_attn.o_proj.weight] = ("batch", "model")

            # Whole experts per device (expert parallel); the router (mlp.gate) sees
            # every expert and stays replicated.
            mlp = layer.mlp
            shard_specs[mlp.experts.gate_up_proj] = ("model", None, None)
            shard_specs[mlp.experts.down_proj] = ("model", None, None)
        shard_specs[model.lm_head.weight] = ("model", "batch")
        return shard_specs
