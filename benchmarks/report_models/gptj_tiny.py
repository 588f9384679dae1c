"""A GPT-J-shaped causal LM, small: Hugging Face's ``GPTJForCausalLM`` from a ``GPTJConfig``
at 2 layers, hidden 1024, 16 heads (head_dim 64, rotary_dim 64 as GPT-J 6B's), MLP 4096,
vocab 8192, built on the meta device (shard-opt plans from shapes). The report of its plan
on ``--mesh 1x8`` is one of the two read for issue 34 (GPT-J 1x8)."""

import torch
from transformers import GPTJConfig, GPTJForCausalLM

CONFIG = dict(vocab_size=8192, n_positions=256, n_embd=1024, n_layer=2, n_head=16, rotary_dim=64, n_inner=4096,
              activation_function="gelu_new", tie_word_embeddings=False, bos_token_id=0,
              eos_token_id=0)


def load_model():
    with torch.device("meta"):
        return GPTJForCausalLM(GPTJConfig(**CONFIG)).eval()


def load_inputs():
    return (torch.zeros(1, 128, dtype=torch.long),)
