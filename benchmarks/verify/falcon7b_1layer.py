"""Load script: Falcon-7B's width (tiiuae/falcon-7b config.json: hidden 4544, 71 heads,
multi-query, parallel attention, vocab 65024), 1 layer, on the meta device: the shape issue
23 saw "Shardy and XLA DISAGREE" on."""
import torch
from transformers import FalconConfig, FalconForCausalLM


def load_model():
    cfg = FalconConfig(vocab_size=65024, hidden_size=4544, num_hidden_layers=1, num_attention_heads=71,
                       multi_query=True, parallel_attn=True, new_decoder_architecture=False, bias=False)
    with torch.device("meta"):
        return FalconForCausalLM(cfg)


def load_inputs():
    return (torch.zeros(1, 128, dtype=torch.long),)
