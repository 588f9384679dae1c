"""A Qwen3.5-style hybrid text model, 2 layers: one Gated DeltaNet linear-attention layer and
one full gated attention layer with 16 query heads over 4 KV heads (head_dim 128), hidden
2048, vocab 151936 (Qwen's)."""
import torch
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM


def load_model():
    cfg = Qwen3_5TextConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=2,
                            num_attention_heads=16, num_key_value_heads=4, head_dim=128, linear_conv_kernel_dim=4,
                            linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16,
                            linear_num_value_heads=32, layer_types=["linear_attention", "full_attention"],
                            tie_word_embeddings=False)
    with torch.device("meta"):
        return Qwen3_5ForCausalLM(cfg).to(torch.bfloat16).eval()


def load_inputs():
    return (torch.zeros(1, 128, dtype=torch.long),)
