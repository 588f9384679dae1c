"""GPT-J-6B's shape, 2 layers (EleutherAI/gpt-j-6b config.json: n_embd 4096, 16 heads,
rotary_dim 64, n_inner 16384, vocab 50400): parallel attention and MLP from one LayerNorm."""
import torch
from transformers import GPTJConfig, GPTJForCausalLM


def load_model():
    cfg = GPTJConfig(vocab_size=50400, n_embd=4096, n_layer=2, n_head=16, rotary_dim=64, n_inner=16384,
                     n_positions=2048, tie_word_embeddings=False)
    with torch.device("meta"):
        return GPTJForCausalLM(cfg).to(torch.bfloat16).eval()


def load_inputs():
    return (torch.zeros(1, 128, dtype=torch.long),)
