"""CLIP ViT-L/14 text encoder with the tt-forge-models Stable Diffusion 1.5 loader's spec.

Model: transformers' ``CLIPTextModel`` with the openai/clip-vit-large-patch14 text config
(hidden 768, 12 layers, 12 heads, intermediate 3072, vocab 49408, 77 positions; see
``_configs.CLIP_L14_TEXT``), the text encoder of tt-forge-models
``stable_diffusion_1_5/pytorch/loader.py`` (variant ``TextEncoder``). On the meta device.
Input: ``input_ids [1, 77]``. The encoder is wrapped as the loader wraps it
(``CLIPTextEncoderWrapper``: the spec is built from ``model.encoder``); the wrapper
returns ``last_hidden_state``.

Spec (``shard_clip_text_encoder_specs``): per encoder layer q/k/v and fc1
``("model", "batch")``, out_proj and fc2 ``("batch", "model")``; "Layer norms and
embeddings are left replicated", and so are all biases. Mesh (``MESH_SHAPES``):
``(2, 4)`` on 8 devices, ``(8, 4)`` on 32.

transformers 5 dropped ``CLIPTextModel.text_model`` (the layers are at
``CLIPTextModel.encoder.layers``); the loader's ``encoder.text_model.encoder.layers`` is
read here as ``getattr(encoder, "text_model", encoder).encoder.layers``, the same
tensors.

    shard-opt benchmarks/experts/clip_text.py --mesh 2x4 --plan-json plan.json
"""

import torch
from torch import nn
from transformers import CLIPTextConfig, CLIPTextModel

from _configs import CLIP_L14_TEXT

# tt-forge-models stable_diffusion_1_5/pytorch/loader.py: MESH_SHAPES, MESH_NAMES,
# CLIP_MAX_SEQ_LEN
MESH_SHAPES = {32: (8, 4), 8: (2, 4), 4: (1, 4), 2: (1, 2), 1: (1, 1)}
MESH_NAMES = ("batch", "model")
CLIP_MAX_SEQ_LEN = 77


class CLIPTextEncoderWrapper(nn.Module):
    """The text model under ``.encoder``; returns the last hidden state."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids):
        return self.encoder(input_ids=input_ids).last_hidden_state


class ModelLoader:
    """tt-forge-models-style loader for the CLIP ViT-L/14 text encoder (no weights)."""

    def __init__(self, variant=None):
        self._variant = variant or "TextEncoder"
        self.config = CLIPTextConfig(**CLIP_L14_TEXT)

    def load_model(self, dtype_override=None):
        with torch.device("meta"):
            encoder = CLIPTextModel(self.config)
        model = CLIPTextEncoderWrapper(encoder)
        if dtype_override is not None:
            model = model.to(dtype_override)
        return model.eval()

    def load_inputs(self, dtype_override=None, batch_size=1):
        return (torch.zeros((batch_size, CLIP_MAX_SEQ_LEN), dtype=torch.long),)

    def get_mesh_config(self, num_devices):
        # tt-forge-models stable_diffusion_1_5/pytorch/loader.py, ModelLoader.get_mesh_config.
        if num_devices not in MESH_SHAPES:
            raise ValueError(
                f"Unsupported device count: {num_devices}. Expected one of {sorted(MESH_SHAPES)}."
            )
        return MESH_SHAPES[num_devices], MESH_NAMES

    def load_shard_spec(self, model):
        # tt-forge-models stable_diffusion_1_5/pytorch/loader.py,
        # shard_clip_text_encoder_specs(model.encoder).
        encoder = model.encoder
        text_model = getattr(encoder, "text_model", encoder)  # transformers < 5 nests it
        specs = {}
        for layer in text_model.encoder.layers:
            attn = layer.self_attn
            specs[attn.q_proj.weight] = ("model", "batch")
            specs[attn.k_proj.weight] = ("model", "batch")
            specs[attn.v_proj.weight] = ("model", "batch")
            specs[attn.out_proj.weight] = ("batch", "model")

            specs[layer.mlp.fc1.weight] = ("model", "batch")
            specs[layer.mlp.fc2.weight] = ("batch", "model")
        return specs
