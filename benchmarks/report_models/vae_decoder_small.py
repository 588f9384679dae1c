"""A VAE decoder, small: diffusers' ``AutoencoderKL`` (the Stable Diffusion VAE's
architecture) at channels (128, 256, 512), one ResNet block per stage, 32 norm groups, and only
its decode path (``post_quant_conv`` then ``decoder``) on a 4x32x32 latent, built on the
meta device. The report of its plan on ``--mesh 2x4`` is one of the two read for issue 34
(a VAE decoder 2x4)."""

import torch
from diffusers import AutoencoderKL
from torch import nn

CONFIG = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 3,
              up_block_types=("UpDecoderBlock2D",) * 3, block_out_channels=(128, 256, 512), layers_per_block=1,
              latent_channels=4, norm_num_groups=32, sample_size=64)


class Decoder(nn.Module):
    """``AutoencoderKL._decode``'s path: ``post_quant_conv`` then ``decoder``."""

    def __init__(self, vae):
        super().__init__()
        self.post_quant_conv = vae.post_quant_conv
        self.decoder = vae.decoder

    def forward(self, z):
        return self.decoder(self.post_quant_conv(z))


def load_model():
    with torch.device("meta"):
        return Decoder(AutoencoderKL(**CONFIG)).eval()


def load_inputs():
    return (torch.zeros(1, 4, 32, 32),)
