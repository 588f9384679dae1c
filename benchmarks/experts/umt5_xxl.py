"""umT5-XXL text encoder with tt-xla's hand-written Megatron spec (``shard_umt5_specs``).

Model: transformers' ``UMT5EncoderModel`` with the google/umt5-xxl config values (d_model
4096, d_ff 10240, 64 heads of 64, 24 layers, vocab 256384, gated-gelu; see
``_configs.UMT5_XXL``) -- the text encoder tt-xla's wan14b test loads from
Wan-AI/Wan2.2-I2V-A14B-Diffusers ``text_encoder``. Full size (5.7B parameters), on the
meta device. Input: ``input_ids [1, 512]`` (Wan's text length). The encoder is wrapped
as tt-xla's test wraps it (``UMT5Wrapper``: the spec function is applied to
``model.encoder``); the wrapper returns ``last_hidden_state``.

Spec: tt-xla ``tests/torch/models/wan14b/shared.py``, ``shard_umt5_specs``: per block
q/k/v/wi_0/wi_1 ``("model", None)``, o/wo ``(None, "model")``, and each layer's own
``relative_attention_bias.weight [32 buckets, 64 heads]`` ``(None, "model")`` (its
head dim split like q/k/v); embedding and norms replicated. Mesh (``_MESH_SHAPES``):
``(2, 4)`` on 8 devices, ``(8, 4)`` on 32 -- only "model" (4) is used.

    shard-opt benchmarks/experts/umt5_xxl.py --mesh 2x4 --plan-json plan.json
"""

import torch
from torch import nn
from transformers import UMT5Config, UMT5EncoderModel

from _configs import UMT5_XXL

# tt-xla tests/torch/models/wan14b/shared.py: _MESH_SHAPES, TP_AXIS
_MESH_SHAPES = {32: (8, 4), 8: (2, 4), 4: (1, 4), 2: (1, 2), 1: (1, 1)}
TP_AXIS = "model"
TEXT_LEN = 512  # Wan's umT5 prompt length


class UMT5Wrapper(nn.Module):
    """The encoder under ``.encoder``; returns the last hidden state."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids):
        return self.encoder(input_ids=input_ids).last_hidden_state


class ModelLoader:
    """tt-xla wan14b-style loader for the umT5-XXL encoder (no weights)."""

    def __init__(self, variant=None):
        self._variant = variant or "umt5-xxl"
        self.config = UMT5Config(**UMT5_XXL)

    def load_model(self, dtype_override=None):
        with torch.device("meta"):
            encoder = UMT5EncoderModel(self.config)
        model = UMT5Wrapper(encoder)
        if dtype_override is not None:
            model = model.to(dtype_override)
        return model.eval()

    def load_inputs(self, dtype_override=None, batch_size=1):
        return (torch.zeros((batch_size, TEXT_LEN), dtype=torch.long),)

    def get_mesh_config(self, num_devices):
        # tt-xla tests/torch/models/wan14b/shared.py, wan22_mesh.
        if num_devices not in _MESH_SHAPES:
            raise ValueError(f"Unsupported device count: {num_devices}. Expected one of {sorted(_MESH_SHAPES)}.")
        return _MESH_SHAPES[num_devices], ("batch", "model")

    def load_shard_spec(self, model):
        # tt-xla tests/torch/models/wan14b/shared.py, shard_umt5_specs(model.encoder).
        encoder = model.encoder
        col = (TP_AXIS, None)  # column-parallel: the output dim (heads / d_ff)
        row = (None, TP_AXIS)  # row-parallel: the input dim, all_reduce after
        specs = {}
        for block in encoder.encoder.block:
            sa = block.layer[0].SelfAttention
            specs[sa.q.weight] = col
            specs[sa.k.weight] = col
            specs[sa.v.weight] = col
            specs[sa.o.weight] = row
            if hasattr(sa, "relative_attention_bias"):  # [num_buckets, num_heads]: split the heads
                specs[sa.relative_attention_bias.weight] = row
            ffn = block.layer[1].DenseReluDense
            specs[ffn.wi_0.weight] = col
            specs[ffn.wi_1.weight] = col
            specs[ffn.wo.weight] = row
        return specs
