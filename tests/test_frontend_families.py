"""Frontend gaps on common families (issue 23, item 7): multi-query Falcon's KV cache,
GPT-OSS's experts, Qwen3.5's hybrid linear attention in decode.

Real transformers 5.24 models at tiny sizes (tests/fixtures/scripts), real torch.export
and torch-mlir; the experts rewrite is checked against transformers' own eager loop.
"""

import os

import pytest
import torch

from shard_opt.frontends import load
from shard_opt.frontends.hf import kv_heads_of

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "fixtures", "scripts")


def test_falcon_kv_heads_from_its_own_config_fields():
    from transformers import FalconConfig

    mqa = FalconConfig(num_attention_heads=8, multi_query=True, new_decoder_architecture=False)
    assert not hasattr(mqa, "num_key_value_heads") and mqa.num_kv_heads == 8  # the trap
    assert kv_heads_of(mqa) == 1 and kv_heads_of(mqa, cache=True) == 1
    mha = FalconConfig(num_attention_heads=8, multi_query=False, new_decoder_architecture=False)
    assert kv_heads_of(mha, cache=True) == 8
    # Falcon-40B's layout: 2 K/V heads, broadcast to the 8 query heads before the cache
    gqa = FalconConfig(num_attention_heads=8, num_kv_heads=2, new_decoder_architecture=True)
    assert kv_heads_of(gqa) == 2 and kv_heads_of(gqa, cache=True) == 8


def test_multi_query_falcon_decode_lowers_with_one_kv_head():
    lm = load(os.path.join(SCRIPTS, "falcon_tiny.py"), phase="decode", seq_len=16)
    cache = [a for a in lm.arguments if a.kind == "cache"]
    assert len(cache) == 2 * 4
    assert all(a.shape == (1, 1, 16, 32) for a in cache), [a.shape for a in cache]  # 1 KV head, head_dim 32
    assert lm.meta["phase"] == "decode"


def _tiny_gpt_oss_experts():
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    cfg = GptOssConfig(hidden_size=32, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2)
    cfg._experts_implementation = "eager"  # transformers' reference loop
    torch.manual_seed(0)
    experts = GptOssExperts(cfg)
    for p in experts.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return experts


def test_gpt_oss_experts_rewrite_matches_transformers_eager_loop():
    from shard_opt.frontends.rewrites import _dense_hf_experts_forward, _is_hf_experts, _is_stacked_experts

    experts = _tiny_gpt_oss_experts()
    assert _is_hf_experts(experts) and not _is_stacked_experts(experts)  # [E, H, 2I]: not Mixtral's layout
    torch.manual_seed(1)
    x = torch.randn(10, 32)
    idx = torch.stack([torch.randperm(4)[:2] for _ in range(10)])
    w = torch.softmax(torch.randn(10, 2), dim=-1)
    want = experts(x, idx, w)
    got = _dense_hf_experts_forward(experts, x, idx, w)
    assert want.abs().max() > 0.1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_gpt_oss_lowers_with_its_experts_as_shardable_dims():
    lm = load(os.path.join(SCRIPTS, "gpt_oss_tiny.py"))
    shapes = {a.name: a.shape for a in lm.arguments}
    assert shapes["model.layers.0.mlp.experts.gate_up_proj"] == (4, 256, 512)
    assert shapes["model.layers.0.mlp.experts.down_proj_bias"] == (4, 256)
    assert "model.layers.0.mlp.experts (GptOssExperts)" in lm.meta["rewrites"]


def test_hybrid_linear_attention_decode_fails_before_lowering(run_cli, tmp_path):
    out = tmp_path / "q.mlir"
    code, stdout, err = run_cli(os.path.join(SCRIPTS, "qwen3_5_tiny.py"), "--phase", "decode", "--mesh", "1x8",
                                "-o", out)
    assert code == 1 and not out.exists()
    lines = [ln for ln in err.splitlines() if ln.startswith("shard-opt: error:")]
    assert len(lines) == 1, err
    assert "linear_attention layers (1 of 2: layer 0)" in lines[0] and "--phase prefill" in lines[0]
    assert "torch.export" not in err  # refused before lowering
