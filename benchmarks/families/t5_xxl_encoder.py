"""The T5-XXL encoder's shape (google/t5-v1_1-xxl: d_model 4096, 64 heads of 64, d_ff 10240,
gated GELU, vocab 32128), 2 layers: the text encoder of Wan / FLUX pipelines."""
import torch
from transformers import T5Config, T5EncoderModel


def load_model():
    cfg = T5Config(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=2, num_heads=64,
                   feed_forward_proj="gated-gelu", dropout_rate=0.0)
    with torch.device("meta"):
        return T5EncoderModel(cfg).to(torch.bfloat16).eval()


def load_inputs():
    return (torch.zeros(1, 128, dtype=torch.long),)
