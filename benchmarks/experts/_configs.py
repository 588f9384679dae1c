"""Config values of the models the expert load scripts build (no download, no weights).

Models shard-opt's zoo already describes are imported from ``shard_opt.frontends.zoo``;
the others are written out here from their published ``config.json`` (Hugging Face id
cited per entry). The leading underscore keeps this file out of the list of load scripts.
"""

from shard_opt.frontends.zoo import LLAMA_3_8B, LLAMA_3_70B

# Llama 3.1 differs from Llama 3 only in the long-context RoPE and the context length.
# meta-llama/Llama-3.1-8B config.json (and -Instruct: same architecture) "rope_scaling"
_LLAMA_3_1_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

# meta-llama/Llama-3.1-8B config.json
LLAMA_3_1_8B = dict(LLAMA_3_8B, max_position_embeddings=131072, rope_parameters=_LLAMA_3_1_ROPE)
# meta-llama/Llama-3.1-70B config.json (tt-forge-models names it meta-llama/Meta-Llama-3.1-70B)
LLAMA_3_1_70B = dict(LLAMA_3_70B, max_position_embeddings=131072, rope_parameters=_LLAMA_3_1_ROPE)

# google/umt5-xxl config.json (the encoder half; Wan's text_encoder/config.json is the
# same UMT5EncoderModel): d_model 4096, d_ff 10240, 64 heads of 64, 24 layers, vocab 256384.
UMT5_XXL = dict(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_decoder_layers=24,
                num_heads=64, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                feed_forward_proj="gated-gelu", dense_act_fn="gelu_new", is_gated_act=True,
                layer_norm_epsilon=1e-6, dropout_rate=0.1, tie_word_embeddings=False,
                pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)

# openai/clip-vit-large-patch14 config.json, "text_config"
CLIP_L14_TEXT = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                     num_attention_heads=12, max_position_embeddings=77, hidden_act="quick_gelu",
                     layer_norm_eps=1e-5, projection_dim=768, pad_token_id=1, bos_token_id=0,
                     eos_token_id=2)
