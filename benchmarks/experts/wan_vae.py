"""Wan VAE decoder with tt-xla's hand-written channel spec (``shard_vae_decoder_specs``).

Model: the decode path of diffusers' ``AutoencoderKLWan`` for one latent frame --
``post_quant_conv`` then ``decoder``, as shard-opt's ``zoo:wan-vae`` builds it
(``WanVAEDecoder``) -- with shard-opt's ``WAN_VAE`` config
(Wan-AI/Wan2.1-T2V-1.3B-Diffusers vae/config.json; the Wan 2.1 VAE, z_dim 16, that
tt-xla's wan14b test loads from the A14B repository). Input ``z [1, 16, 1, 60, 104]``
(one 480x832 latent frame). Full size, on the meta device.

Spec: tt-xla ``tests/torch/models/wan14b/shared.py``, ``shard_vae_decoder_specs`` and
``_megatron_pair_specs``: in every ``WanResidualBlock`` of ``decoder.mid_block.resnets``
and ``decoder.up_blocks[i].resnets``, ``conv1.weight (ax, None, None, None, None)``,
``conv1.bias (ax,)``, ``norm2.gamma (ax, None, None, None)``,
``conv2.weight (None, ax, None, None, None)``, where ``ax`` is the mesh axis with the
most devices (``_pick_axis``: "batch" on ``(8, 4)``, "model" elsewhere). Everything
else replicated (post_quant_conv, conv_in, conv_out, norm_out, the mid-block
attention, the upsamplers, conv2.bias, norm1, conv_shortcut). Mesh
(``_MESH_SHAPES``): ``(2, 4)`` on 8 devices, ``(8, 4)`` on 32.

tt-xla's spec function takes the mesh (``shard_vae_decoder_specs(vae, mesh)``);
``load_shard_spec(model)`` does not, so this loader remembers the mesh of its last
``get_mesh_config`` call (the tt-xla harness builds the mesh before it asks for the
spec) and picks the axis from it; without one it picks "model", the choice on every
device count but 32.

    shard-opt benchmarks/experts/wan_vae.py --mesh 2x4 --plan-json plan.json
"""

import torch
from diffusers import AutoencoderKLWan
from diffusers.models.autoencoders.autoencoder_kl_wan import WanResidualBlock

from shard_opt.frontends.zoo import WAN_VAE, WanVAEDecoder

# tt-xla tests/torch/models/wan14b/shared.py: _MESH_SHAPES
_MESH_SHAPES = {32: (8, 4), 8: (2, 4), 4: (1, 4), 2: (1, 2), 1: (1, 1)}
MESH_NAMES = ("batch", "model")


class ModelLoader:
    """tt-xla wan14b-style loader for the Wan VAE decoder (no weights)."""

    def __init__(self, variant=None):
        self._variant = variant or "vae-decoder"
        self._mesh_shape = None

    def load_model(self, dtype_override=None):
        with torch.device("meta"):
            model = WanVAEDecoder(AutoencoderKLWan(**WAN_VAE))
        if dtype_override is not None:
            model = model.to(dtype_override)
        return model.eval()

    def load_inputs(self, dtype_override=None, batch_size=1):
        dtype = dtype_override or torch.bfloat16
        return (torch.empty((batch_size, 16, 1, 60, 104), dtype=dtype, device="meta"),)

    def get_mesh_config(self, num_devices):
        # tt-xla tests/torch/models/wan14b/shared.py, wan22_mesh.
        if num_devices not in _MESH_SHAPES:
            raise ValueError(f"Unsupported device count: {num_devices}. Expected one of {sorted(_MESH_SHAPES)}.")
        self._mesh_shape = _MESH_SHAPES[num_devices]
        return self._mesh_shape, MESH_NAMES

    def load_shard_spec(self, model):
        # tt-xla tests/torch/models/wan14b/shared.py, shard_vae_decoder_specs.
        axis = _pick_axis(self._mesh_shape)
        specs = {}
        decoder = model.decoder
        for block in decoder.mid_block.resnets:  # the mid-block attention stays replicated
            specs.update(_megatron_pair_specs(block, axis))
        for up_block in decoder.up_blocks:  # the upsamplers stay replicated
            for block in up_block.resnets:
                assert isinstance(block, WanResidualBlock)
                specs.update(_megatron_pair_specs(block, axis))
        return specs


def _pick_axis(mesh_shape):
    # tt-xla tests/torch/models/wan14b/shared.py, _pick_axis: the axis with the most
    # devices (the first on a tie).
    if mesh_shape is None:
        return "model"
    sizes = dict(zip(MESH_NAMES, mesh_shape))
    return max(sizes, key=sizes.get)


def _megatron_pair_specs(block, axis):
    # tt-xla tests/torch/models/wan14b/shared.py, _megatron_pair_specs. Conv3d weights
    # are [C_out, C_in, kD, kH, kW]; WanRMS_norm's gamma is [dim, 1, 1, 1].
    return {
        block.conv1.weight: (axis, None, None, None, None),  # column-parallel: C_out
        block.conv1.bias: (axis,),
        block.norm2.gamma: (axis, None, None, None),
        block.conv2.weight: (None, axis, None, None, None),  # row-parallel: C_in
    }
