"""GPT-OSS-20B at full width, on the meta device (no download, no weights), with the
tt-forge-models GPT-OSS loader's shard spec.

Config: openai/gpt-oss-20b config.json (hidden 2880, 24 layers alternating sliding (128)
and full attention, 64 query heads and 8 KV heads of 64, attention biases and sinks, 32
experts of 2880 with 4 per token, vocab 201088, untied LM head, YaRN RoPE x32 on 4096).

Spec (tt-forge-models ``gpt_oss/pytorch/loader.py``, ``ModelLoader.load_shard_spec``, quoted
as written): q/k/v ``("model", None)``, o_proj ``(None, "model")``, sinks and router
replicated, the experts' ``gate_up_proj`` / ``down_proj`` and their biases split on the
expert dim ``("model", ...)``; ``lm_head`` replicated (tt-xla issue 3484: "GPT-OSS-20B Hang
during lm_head sharding"). Mesh (``get_mesh_config``): ``(1, N)``.

    shard-opt benchmarks/families/gpt_oss_20b.py --mesh 1x8 --layers 2 --phase decode --spec benchmarks/families/gpt_oss_20b.py
"""

import torch
from transformers import GptOssConfig, GptOssForCausalLM

# openai/gpt-oss-20b config.json
GPT_OSS_20B = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
                   num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32,
                   num_experts_per_tok=4, sliding_window=128, max_position_embeddings=131072, rope_theta=150000.0,
                   rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                 "truncate": False, "original_max_position_embeddings": 4096},
                   rms_norm_eps=1e-5, attention_bias=True, swiglu_limit=7.0, tie_word_embeddings=False)

SEQ_LEN = 128


def load_model():
    with torch.device("meta"):
        return GptOssForCausalLM(GptOssConfig(**GPT_OSS_20B)).eval()


def load_inputs():
    return (torch.zeros((1, SEQ_LEN), dtype=torch.long),)


def get_mesh_config(num_devices):
    # tt-forge-models gpt_oss/pytorch/loader.py, ModelLoader.get_mesh_config
    return (1, num_devices), ("batch", "model")


def load_shard_spec(model):
    # tt-forge-models gpt_oss/pytorch/loader.py, ModelLoader.load_shard_spec
    shard_specs = {}
    for layer in model.model.layers:
        shard_specs[layer.self_attn.q_proj.weight] = ("model", None)
        shard_specs[layer.self_attn.k_proj.weight] = ("model", None)
        shard_specs[layer.self_attn.v_proj.weight] = ("model", None)
        shard_specs[layer.self_attn.o_proj.weight] = (None, "model")
        shard_specs[layer.self_attn.sinks] = (None,)
        shard_specs[layer.mlp.router.weight] = (None, None)
        shard_specs[layer.mlp.experts.gate_up_proj] = ("model", None, None)
        shard_specs[layer.mlp.experts.gate_up_proj_bias] = ("model", None)
        shard_specs[layer.mlp.experts.down_proj] = ("model", None, None)
        shard_specs[layer.mlp.experts.down_proj_bias] = ("model", None)
    return shard_specs
