"""The small Llama of llama_load.py with its own shard spec, as tt-forge-models loaders write
them (``load_shard_spec`` keyed by the parameter tensors, ``get_mesh_config`` naming the mesh;
tt-forge-models ``llama/causal_lm/pytorch/loader.py``): column-parallel q/k/v/gate/up on
"model", row-parallel o/down, the LM head column-parallel.

    shard-opt examples/llama_spec_load.py --mesh 1x4              # the spec is a baseline
    shard-opt examples/llama_spec_load.py --mesh 1x4 --evaluate   # price the spec alone
"""

from llama_load import ModelLoader as _SmallLlama


class ModelLoader(_SmallLlama):
    def get_mesh_config(self, num_devices):
        return (1, num_devices)

    def load_shard_spec(self, model):
        spec = {model.lm_head.weight: ("model", None)}
        for layer in model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            for column in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
                spec[column.weight] = ("model", None)
            for row in (attn.o_proj, mlp.down_proj):
                spec[row.weight] = (None, "model")
        return spec
