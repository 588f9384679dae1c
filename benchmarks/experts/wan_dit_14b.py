"""Wan 14B video DiT with tt-xla's hand-written weight spec (``shard_dit_specs``).

Model: ``WanTransformer3DModel`` (diffusers 0.42.1) with shard-opt's ``WAN_DIT_14B``
config (Wan-AI/Wan2.1-T2V-14B-Diffusers transformer/config.json; tt-xla's test runs
Wan-AI/Wan2.2-*-A14B-Diffusers, whose transformer is the same 40-block, 40-head,
5120-wide DiT -- the I2V expert differs only in patch_embedding's 36 input channels,
replicated either way). Full size, on the meta device. Inputs are those of shard-opt's
``zoo:wan-dit-14b``: a 480x832, 81-frame video's latents ``[1, 16, 21, 60, 104]``
(32760 tokens after the 1x2x2 patch), a timestep ``[1]`` and umT5 text states
``[1, 512, 4096]``.

Weight spec: tt-xla ``tests/torch/models/wan14b/shared.py``, ``shard_dit_specs`` and
``_shard_block_specs`` (plus ``_megatron_linear_pair_specs``). Tensor parallel on
"model" only: per block attn1/attn2 to_q/k/v ``("model", None)`` + bias ``("model",)``,
norm_q/norm_k ``("model",)``, to_out.0 ``(None, "model")``; ffn net.0.proj column, net.2
row; the condition embedder's time_embedder and text_embedder as Megatron pairs;
patch_embedding, proj_out, time_proj and the scale-shift tables replicated. Mesh
(``_MESH_SHAPES``): ``(2, 4)`` on 8 devices, ``(8, 4)`` on 32.

tt-xla adds sequence parallelism on "batch" with activation constraints
(``apply_dit_sp_activation_sharding``: forward hooks calling
``sharding_constraint_tensor``), described in ``ACTIVATION_SHARDING`` below. Since
2026-12-02 they are priced with the weight spec: ``load_activation_shard_spec`` gives
them in shard-opt's activation-spec form (``shard_opt.activations``; tt-xla's loaders
declare theirs the same way, ``{module: spec}``, tt-xla PR 5512): the block-stack entry
and the two rotary tables are values inside ``forward()`` no module returns, so they are
named by the op that makes them and its shapes (the ``transpose`` of
``flatten(2).transpose(1, 2)``, the rope's final ``reshape``), each with tt-xla's
replicated-then-split pair; ``proj_out``'s output by its module. The tile padding of the
token dim (32760 -> 32768, tt-xla ``monkey_patch.py``) is not applied: 32760 tokens
divide by 2 and by 8 as they are.

    shard-opt benchmarks/experts/wan_dit_14b.py --mesh 2x4 --plan-json plan.json
"""

import torch
from diffusers import WanTransformer3DModel

from shard_opt.frontends.zoo import WAN_DIT_14B

# tt-xla tests/torch/models/wan14b/shared.py: _MESH_SHAPES, TP_AXIS, SP_AXIS
_MESH_SHAPES = {32: (8, 4), 8: (2, 4), 4: (1, 4), 2: (1, 2), 1: (1, 1)}
TP_AXIS = "model"
SP_AXIS = "batch"
_LATENTS = (1, 16, 21, 60, 104)  # a 480x832, 81-frame video's latents

# What tt-xla's apply_dit_sp_activation_sharding(dit, mesh) does, in words and specs
# (sharding_constraint_tensor on intermediates; not expressible by load_shard_spec).
ACTIVATION_SHARDING = [
    {
        "where": "dit.blocks[0] forward pre-hook, on args[0] (hidden_states [B, L, D], after "
                 "patch_embedding(...).flatten(2).transpose(1, 2))",
        "specs": [(None, None, None), (None, SP_AXIS, None)],
        "why": "a back-to-back pair: the replicated anchor stops Shardy back-propagating the L "
               "split through the patchify reshape into a spatial dim; the second constraint "
               "introduces the sequence split, so every block runs on L / |batch| tokens",
    },
    {
        "where": "dit.rope forward hook, on each of its outputs (freqs_cos, freqs_sin), [1, L, 1, 128]",
        "specs": [(None, None, None, None), (None, SP_AXIS, None, None)],
        "why": "the same anchor-then-split pair, so the rotary tables are split on L like the "
               "hidden states (padded to a multiple of |batch| * 32 while still replicated)",
    },
    {
        "where": "dit.proj_out forward hook, on its output [B, L, 64]",
        "specs": [(None, None, None)],
        "why": "gathers L before the unpatchify reshape (a single constraint suffices in this "
               "direction)",
    },
]


class ModelLoader:
    """tt-xla wan14b-style loader for the Wan 14B DiT (no weights)."""

    def __init__(self, variant=None):
        self._variant = variant or "T2V-14B"
        self.config = dict(WAN_DIT_14B)

    def load_model(self, dtype_override=None):
        with torch.device("meta"):
            model = WanTransformer3DModel(**self.config)
        if dtype_override is not None:
            model = model.to(dtype_override)
        return model.eval()

    def load_inputs(self, dtype_override=None, batch_size=1):
        dtype = dtype_override or torch.bfloat16
        latents = torch.empty((batch_size, *_LATENTS[1:]), dtype=dtype, device="meta")
        timestep = torch.zeros((batch_size,), dtype=torch.long)
        text = torch.empty((batch_size, 512, 4096), dtype=dtype, device="meta")
        return (latents, timestep, text)

    def get_mesh_config(self, num_devices):
        # tt-xla tests/torch/models/wan14b/shared.py, wan22_mesh.
        if num_devices not in _MESH_SHAPES:
            raise ValueError(f"Unsupported device count: {num_devices}. Expected one of {sorted(_MESH_SHAPES)}.")
        return _MESH_SHAPES[num_devices], ("batch", "model")

    def load_activation_shard_spec(self, model):
        # tt-xla tests/torch/models/wan14b/shared.py, apply_dit_sp_activation_sharding: the
        # same constraints on the same values, named as shard-opt finds them (ACTIVATION_SHARDING)
        cfg = self.config
        d = cfg["num_attention_heads"] * cfg["attention_head_dim"]
        _, _, f, h, w = _LATENTS
        pf, ph, pw = cfg["patch_size"]
        grid = (f // pf, h // ph, w // pw)
        tokens = grid[0] * grid[1] * grid[2]
        head = cfg["attention_head_dim"]
        return {
            # blocks[0] pre-hook on hidden_states, after patch_embedding(...).flatten(2).transpose(1, 2)
            f"stablehlo.transpose 1x{d}x{tokens}->1x{tokens}x{d}": [(None, None, None), (None, SP_AXIS, None)],
            # rope hook on freqs_cos and freqs_sin ([1, L, 1, head_dim], the rope's last reshape)
            f"stablehlo.reshape {'x'.join(map(str, grid))}x{head}->1x{tokens}x1x{head}":
                [(None, None, None, None), (None, SP_AXIS, None, None)],
            # proj_out hook: L gathered before the unpatchify
            model.proj_out: (None, None, None),
        }

    def load_shard_spec(self, model):
        # tt-xla tests/torch/models/wan14b/shared.py, shard_dit_specs.
        dit = model
        specs = {
            dit.patch_embedding.weight: (None, None, None, None, None),
            dit.patch_embedding.bias: (None,),
            dit.proj_out.weight: (None, None),
            dit.proj_out.bias: (None,),
            dit.scale_shift_table: (None, None, None),
        }
        ce = dit.condition_embedder
        specs.update(_megatron_linear_pair_specs(ce.time_embedder.linear_1, ce.time_embedder.linear_2))
        specs[ce.time_proj.weight] = (None, None)
        specs[ce.time_proj.bias] = (None,)
        specs.update(_megatron_linear_pair_specs(ce.text_embedder.linear_1, ce.text_embedder.linear_2))
        for block in dit.blocks:
            specs.update(_shard_block_specs(block))
        return specs


def _megatron_linear_pair_specs(linear_1, linear_2):
    # tt-xla tests/torch/models/wan14b/shared.py, _megatron_linear_pair_specs.
    return {
        linear_1.weight: (TP_AXIS, None),
        linear_1.bias: (TP_AXIS,),
        linear_2.weight: (None, TP_AXIS),
        linear_2.bias: (None,),
    }


def _shard_block_specs(block):
    # tt-xla tests/torch/models/wan14b/shared.py, _shard_block_specs.
    specs = {}
    specs[block.scale_shift_table] = (None, None, None)
    if hasattr(block.norm2, "weight"):  # cross_attn_norm=True: an affine FP32LayerNorm
        specs[block.norm2.weight] = (None,)
        specs[block.norm2.bias] = (None,)
    for attn in (block.attn1, block.attn2):
        specs[attn.to_q.weight] = (TP_AXIS, None)
        specs[attn.to_q.bias] = (TP_AXIS,)
        specs[attn.to_k.weight] = (TP_AXIS, None)
        specs[attn.to_k.bias] = (TP_AXIS,)
        specs[attn.to_v.weight] = (TP_AXIS, None)
        specs[attn.to_v.bias] = (TP_AXIS,)
        specs[attn.norm_q.weight] = (TP_AXIS,)
        specs[attn.norm_k.weight] = (TP_AXIS,)
        specs[attn.to_out[0].weight] = (None, TP_AXIS)
        specs[attn.to_out[0].bias] = (None,)
    specs.update(_megatron_linear_pair_specs(block.ffn.net[0].proj, block.ffn.net[2]))
    return specs
