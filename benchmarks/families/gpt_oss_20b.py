"""GPT-OSS-20B's shape, 2 layers (openai/gpt-oss-20b config.json: hidden 2880, 64 heads of 64,
8 KV heads, 32 experts, top-4, expert width 2880, sliding window 128 alternating with full
attention, vocab 201088)."""
import torch
from transformers import GptOssConfig, GptOssForCausalLM


def load_model():
    cfg = GptOssConfig(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=2,
                       num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32,
                       num_experts_per_tok=4, sliding_window=128, max_position_embeddings=4096)
    with torch.device("meta"):
        return GptOssForCausalLM(cfg).to(torch.bfloat16).eval()


def load_inputs():
    return (torch.zeros(1, 128, dtype=torch.long),)
