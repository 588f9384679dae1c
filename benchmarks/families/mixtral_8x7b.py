"""Mixtral-8x7B's shape, 2 layers (mistralai/Mixtral-8x7B-v0.1 config.json: hidden 4096,
intermediate 14336, 32 heads, 8 KV heads, 8 experts, top-2, vocab 32000)."""
import torch
from transformers import MixtralConfig, MixtralForCausalLM


def load_model():
    cfg = MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                        num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
                        sliding_window=None, tie_word_embeddings=False)
    with torch.device("meta"):
        return MixtralForCausalLM(cfg).to(torch.bfloat16).eval()


def load_inputs():
    return (torch.zeros(1, 128, dtype=torch.long),)
