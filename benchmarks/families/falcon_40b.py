"""Falcon-40B's shape, 2 layers (tiiuae/falcon-40b config.json: hidden 8192, 128 heads, 8 KV
heads, the new decoder architecture: parallel attention and MLP with two LayerNorms, vocab
65024, no bias), a tied embedding."""
import torch
from transformers import FalconConfig, FalconForCausalLM


def load_model():
    cfg = FalconConfig(vocab_size=65024, hidden_size=8192, num_hidden_layers=2, num_attention_heads=128,
                       num_kv_heads=8, new_decoder_architecture=True, parallel_attn=True, bias=False,
                       alibi=False, tie_word_embeddings=True)
    with torch.device("meta"):
        return FalconForCausalLM(cfg).to(torch.bfloat16).eval()


def load_inputs():
    return (torch.zeros(1, 128, dtype=torch.long),)
