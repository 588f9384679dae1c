"""Frontends: zoo, load scripts, .mlir, JAX, rewrites, architecture map (issue 3).

Everything here lowers for real (torch.export + torch-mlir, jax.jit(...).lower) and runs
real Shardy propagation; models are tiny or truncated with --layers.
"""

from __future__ import annotations

import math
import os
import sys
import textwrap

import numpy as np
import pytest
import torch

from shard_opt import ir
from shard_opt.errors import UserError
from shard_opt.frontends import load, list_models
from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline
from shard_opt.sharding import TensorSharding

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
PIPELINE = "builtin.module(add-mesh{shape=2x4}, apply-shardings, shardy-propagate, collect-collectives)"


def collectives(lowered, plan: dict[str, list]) -> list[tuple]:
    """Run the standard pipeline with ``plan`` (argument name -> dims); the collectives as
    sorted ``(kind, axes, elements of the global tensor, bytes per device)``.

    Element counts, not shapes: torch-mlir flattens ``[b, s, h]`` to ``[b*s, h]`` around
    matmuls where JAX keeps 3-D, and that is not a difference in what is communicated.
    """
    by_name = {a.name: a.index for a in lowered.arguments}
    missing = set(plan) - set(by_name)
    assert not missing, missing
    ctx = PassContext(arguments=lowered.arguments)
    ctx.shardings = {by_name[n]: TensorSharding.of(d) for n, d in plan.items()}
    module = ir.parse(lowered.text)
    PassManager(parse_pipeline(PIPELINE), ctx).run(module)
    return sorted((c.kind, c.axes, math.prod(c.global_shape), c.bytes_per_device) for c in ctx.facts.collectives)


# --------------------------------------------------------------------------------------
# zoo
# --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llama2():
    return load("zoo:llama-3-8b", layers=2)


def test_zoo_llama_3_8b_names_every_argument_by_fqn(llama2):
    from transformers import LlamaConfig, LlamaForCausalLM

    from shard_opt.frontends.zoo import LLAMA_3_8B

    cfg = LlamaConfig(**LLAMA_3_8B)
    cfg.num_hidden_layers = 2
    with torch.device("meta"):
        ref = LlamaForCausalLM(cfg)
    params = [(n, tuple(p.shape)) for n, p in ref.named_parameters()]
    buffers = [n for n, _ in ref.named_buffers()]
    args = llama2.arguments
    assert [(a.name, a.shape) for a in args[: len(params)]] == params
    assert [a.name for a in args[len(params): len(params) + len(buffers)]] == buffers
    assert args[-1].name == "input_ids" and args[-1].shape == (1, 128) and args[-1].dtype == "i64"
    kinds = [a.kind for a in args]
    assert kinds == ["param"] * len(params) + ["buffer"] * len(buffers) + ["input"]
    assert all(a.dtype == "bf16" for a in args if a.kind == "param")
    q = next(a for a in args if a.name == "model.layers.1.self_attn.q_proj.weight")
    assert q.shape == (4096, 4096) and q.module_class == "Linear" and q.layer == 1
    assert next(a for a in args if a.name == "model.layers.0.mlp.down_proj.weight").shape == (4096, 14336)
    # the module itself: @main's argument types agree, names are attributes on it
    module = ir.parse(llama2.text)
    func = ir.main_func(module)
    types = [ir.tensor_type(t) for t in func.attributes["function_type"].value.inputs]
    assert [t[0] for t in types] == [a.shape for a in args]
    assert [t[1] for t in types] == [a.dtype for a in args]
    assert 'shard_opt.name = "model.layers.1.mlp.up_proj.weight"' in llama2.text
    assert llama2.num_layers == 2 and llama2.meta["total_layers"] == 32
    assert llama2.meta["param_count"] == sum(math.prod(s) for _, s in params)


def test_zoo_llama_megatron_plan_gives_two_all_reduces_per_layer(llama2):
    col = [["model"], []]
    row = [[], ["model"]]
    plan = {}
    for i in range(2):
        p = f"model.layers.{i}."
        for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[p + n + ".weight"] = col
        for n in ("self_attn.o_proj", "mlp.down_proj"):
            plan[p + n + ".weight"] = row
    colls = collectives(llama2, plan)
    assert [c[0] for c in colls] == ["all_reduce"] * 4
    # the partial sums are [1, 128, 4096] bf16 activations: 1 MiB per device each
    assert all(c[2] == 128 * 4096 and c[3] == 128 * 4096 * 2 for c in colls)


def test_with_layers_relowers_with_k_blocks(llama2):
    one = llama2.with_layers(1)
    assert one.num_layers == 1 and one.meta["total_layers"] == 32
    assert len([a for a in one.arguments if a.kind == "param"]) == 3 + 9
    assert {a.layer for a in one.arguments} == {None, 0}


def test_zoo_decode_has_a_shardable_kv_cache():
    lm = load("zoo:llama-3-8b", layers=1, phase="decode", seq_len=64)
    cache = [a for a in lm.arguments if a.kind == "cache"]
    assert [a.name for a in cache] == ["past_key_values.0.key", "past_key_values.0.value"]
    assert all(a.shape == (1, 8, 64, 128) and a.dtype == "bf16" for a in cache)
    ids = next(a for a in lm.arguments if a.name == "input_ids")
    assert ids.shape == (1, 1) and ids.kind == "input"
    # the logits cover the one new token
    module = ir.parse(lm.text)  # kept: its ops live only as long as it does
    func = ir.main_func(module)
    assert ir.tensor_type(func.attributes["function_type"].value.results[0])[0] == (1, 1, 128256)
    # tt-xla's Llama plan: Megatron weights, KV cache split on heads (references/tenstorrent.md §5)
    p = "model.layers.0."
    plan = {p + n + ".weight": [["model"], []] for n in ("self_attn.q_proj", "self_attn.k_proj",
                                                         "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")}
    plan.update({p + n + ".weight": [[], ["model"]] for n in ("self_attn.o_proj", "mlp.down_proj")})
    plan.update({a.name: [[], ["model"], [], []] for a in cache})
    colls = collectives(lm, plan)
    # heads stay split from the projections through the cache: only the two row-parallel sums
    assert [c[0] for c in colls] == ["all_reduce", "all_reduce"]
    assert all(c[2] == 4096 and c[3] == 4096 * 2 for c in colls)


def test_zoo_lists_the_required_models():
    required = {"llama-3-8b", "llama-3-70b", "llama-3.2-1b", "mixtral-8x7b", "qwen2.5-7b", "gpt2-xl",
                "bert-large", "vit-large", "mlp", "transformer-block", "wan-dit", "wan-vae"}
    assert required <= set(list_models())


def test_unknown_zoo_name_lists_known_ones():
    with pytest.raises(UserError) as e:
        load("zoo:llama-9")
    msg = str(e.value)
    assert "zoo:llama-9" in msg and "llama-3-8b" in msg and "wan-vae" in msg and "\n" not in msg


def test_mixtral_experts_are_one_stacked_shardable_weight():
    lm = load("zoo:mixtral-8x7b", layers=1, seq_len=32)
    gate_up = next(a for a in lm.arguments if a.name == "model.layers.0.mlp.experts.gate_up_proj")
    down = next(a for a in lm.arguments if a.name == "model.layers.0.mlp.experts.down_proj")
    assert gate_up.shape == (8, 2 * 14336, 4096) and down.shape == (8, 4096, 14336)
    assert lm.meta["rewrites"] == ["model.layers.0.mlp.experts (MixtralExperts)"]
    # expert parallelism: split the expert dim 4 ways; the combine sums over experts once
    plan = {gate_up.name: [["model"], [], []], down.name: [["model"], [], []]}
    colls = collectives(lm, plan)
    assert [c[0] for c in colls] == ["all_reduce"]
    assert colls[0][2] == 32 * 4096 and colls[0][3] == 32 * 4096 * 2


def test_dense_experts_rewrite_matches_transformers_numerically():
    from transformers import MixtralConfig, MixtralForCausalLM

    from shard_opt.frontends.rewrites import module_rewrites

    cfg = MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                        num_experts_per_tok=2)
    torch.manual_seed(0)
    model = MixtralForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        ref = model(ids, use_cache=False).logits
        with module_rewrites(model) as rewritten:
            got = model(ids, use_cache=False).logits
        again = model(ids, use_cache=False).logits
    assert rewritten == [("model.layers.0.mlp.experts", "MixtralExperts")]
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(again, ref)  # the rewrite is undone afterwards


def test_bf16_and_f32_byte_counts_follow_dtype():
    lm = load("zoo:mlp", batch=4, seq_len=32, dtype="f32")
    bf = load("zoo:mlp", batch=4, seq_len=32)
    assert {a.dtype for a in lm.arguments} == {"f32"} and {a.dtype for a in bf.arguments} == {"bf16"}
    assert "tensor<4096x1024xbf16>" in bf.text


# --------------------------------------------------------------------------------------
# load scripts
# --------------------------------------------------------------------------------------

def write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


META_SCRIPT = """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    def load_model():
        cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2)
        with torch.device("meta"):
            return LlamaForCausalLM(cfg)

    def load_inputs():
        return (torch.zeros(1, 9, dtype=torch.long),)
"""


def test_meta_device_load_script(tmp_path):
    path = write(tmp_path, "meta_llama.py", META_SCRIPT)
    lm = load(path, seq_len=16, batch=2, layers=2)
    names = [a.name for a in lm.arguments]
    assert names[0] == "model.embed_tokens.weight"
    assert "model.layers.1.mlp.down_proj.weight" in names
    assert "model.layers.2.mlp.down_proj.weight" not in names  # --layers 2 of 3
    # the script's 9 sample tokens become [batch, seq_len]
    assert lm.arguments[-1].name == "input_ids" and lm.arguments[-1].shape == (2, 16)
    assert lm.source == "pytorch" and lm.script_path == path
    assert lm.num_layers == 2 and lm.meta["total_layers"] == 3
    assert lm.architecture["repeated"] == {"path": "model.layers", "count": 2}
    three = lm.with_layers(3)
    assert three.num_layers == 3 and "model.layers.2.mlp.down_proj.weight" in [a.name for a in three.arguments]


def test_model_loader_class_and_example_script():
    path = os.path.join(EXAMPLES, "llama_load.py")
    lm = load(path)  # as the CLI and tests/test_weights.py load it (one lowering per test run)
    assert [a.name for a in lm.arguments if a.kind == "param"][:2] == [
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"]
    assert next(a for a in lm.arguments if a.name.endswith("k_proj.weight")).shape == (128, 256)
    assert lm.arguments[-1].name == "input_ids" and lm.num_layers == 2


def test_load_script_decode_phase():
    lm = load(os.path.join(EXAMPLES, "llama_load.py"), phase="decode", seq_len=16, batch=2)
    cache = [a for a in lm.arguments if a.kind == "cache"]
    assert [a.name for a in cache] == [f"past_key_values.{i}.{kv}" for i in range(2) for kv in ("key", "value")]
    assert all(a.shape == (2, 2, 16, 64) and a.dtype == "bf16" for a in cache)  # 2 KV heads, head_dim 64
    assert next(a for a in lm.arguments if a.name == "input_ids").shape == (2, 1)
    assert lm.meta["phase"] == "decode"


def test_lean_tracing_lowers_to_the_same_text_and_restores_torch(tmp_path, monkeypatch):
    """The lowering without FX stack traces and with lazily compiled GraphModules
    (``torch_trace.lean_tracing``) is byte-identical to the plain one (the harness over every
    fixture script: benchmarks/lean_tracing.py), and torch's setting is back after it, also
    when the traced code raises."""
    import contextlib
    import shutil

    import torch.fx

    from shard_opt.frontends import torch_frontend as tf
    from shard_opt.frontends.torch_trace import lean_tracing

    src = os.path.join(ROOT, "tests", "fixtures", "scripts", "tiny_mixtral.py")
    texts = {}
    for how in ("lean", "plain"):  # a copy each: the suite's memo keys a lowering by its script's path
        os.makedirs(tmp_path / how)
        path = shutil.copy(src, str(tmp_path / how / "tiny_mixtral.py"))
        if how == "plain":
            monkeypatch.setattr(tf, "lean_tracing", contextlib.nullcontext)
        texts[how] = load(path).text
    assert "stablehlo.dot_general" in texts["lean"] and texts["lean"] == texts["plain"]

    before = torch.fx.config.do_not_emit_stack_traces
    with lean_tracing():
        assert torch.fx.config.do_not_emit_stack_traces is True
    assert torch.fx.config.do_not_emit_stack_traces == before
    with pytest.raises(RuntimeError), lean_tracing():
        raise RuntimeError("the model's forward failed")
    assert torch.fx.config.do_not_emit_stack_traces == before


def test_script_that_raises_names_script_and_exception(tmp_path):
    path = write(tmp_path, "broken.py", """
        def load_model():
            raise ValueError("checkpoint path not set")

        def load_inputs():
            return ()
    """)
    with pytest.raises(UserError) as e:
        load(path)
    msg = str(e.value)
    assert path in msg and "load_model()" in msg and "ValueError: checkpoint path not set" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("body, expect", [
    ("x = 1\n", "neither load_model()/load_inputs() nor a ModelLoader"),
    ("import torch\ndef load_model():\n    return 3\ndef load_inputs():\n    return (torch.zeros(1),)\n",
     "returned int, not a torch.nn.Module"),
    ("import torch\ndef load_model():\n    return torch.nn.Linear(2, 2)\ndef load_inputs():\n    return ['hi']\n",
     "load_inputs returned list of str, not a tuple of tensors"),
    ("import nonexistent_module_xyz\n", "ModuleNotFoundError"),
])
def test_script_contract_errors(tmp_path, body, expect):
    path = write(tmp_path, "s.py", body)
    with pytest.raises(UserError) as e:
        load(path)
    assert expect in str(e.value) and path in str(e.value)


def test_missing_inputs_are_user_errors(tmp_path):
    for bad in (str(tmp_path / "nope.py"), str(tmp_path / "nope.mlir")):
        with pytest.raises(UserError, match="no such"):
            load(bad)
    with pytest.raises(UserError, match="unknown input type"):
        load(write(tmp_path, "model.onnx", "x"))
    with pytest.raises(UserError, match="--layers"):
        load(os.path.join(EXAMPLES, "mlp.mlir"), layers=2)


def test_op_torch_mlir_cannot_lower_is_named(tmp_path):
    path = write(tmp_path, "hist.py", """
        import torch

        class Hist(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(8, 8)

            def forward(self, x):
                return torch.histc(self.proj(x), bins=4, min=0, max=1)

        def load_model():
            return Hist()

        def load_inputs():
            return (torch.zeros(4, 8),)
    """)
    with pytest.raises(UserError) as e:
        load(path)
    msg = str(e.value)
    assert path in msg and "histc" in msg and "shard_opt.frontends.rewrites" in msg


def test_interpolate_is_rewritten_and_lowers(tmp_path):
    path = write(tmp_path, "up.py", """
        import torch
        import torch.nn.functional as F

        class Up(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

            def forward(self, x):
                return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))

        def load_model():
            return Up()

        def load_inputs():
            return (torch.zeros(1, 4, 8, 8),)
    """)
    lm = load(path, dtype="f32")
    assert "tensor<1x4x16x16xf32>" in lm.text
    assert "gather" not in lm.text  # broadcast + reshape, not an index gather
    assert lm.meta["decompositions"] == ["aten.upsample_nearest2d.vec"]
    assert "aten.upsample_nearest2d.vec (decomposed)" in lm.architecture["rewrites"]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("shape, kw", [
    ((1, 2, 3, 5), {"scale_factor": 2.0}),
    ((1, 2, 3, 5), {"scale_factor": (2.0, 3.0)}),
    ((1, 2, 2, 3, 4), {"scale_factor": (1.0, 2.0, 2.0)}),
    ((1, 2, 4, 6), {"size": (6, 9)}),
])
def test_upsample_decomposition_matches_interpolate(mode, shape, kw):
    from shard_opt.frontends.rewrites import decompositions

    torch.manual_seed(0)
    x = torch.randn(shape)
    ref = torch.nn.functional.interpolate(x, mode=mode, **kw)
    ep = torch.export.export(_Interp(mode, kw), (x,))
    got = ep.run_decompositions(decompositions()).module()(x)
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


class _Interp(torch.nn.Module):
    def __init__(self, mode, kw):
        super().__init__()
        self.mode, self.kw = mode, kw

    def forward(self, x):
        return torch.nn.functional.interpolate(x, mode=self.mode, **self.kw)


def test_strided_slice_scatter_decomposition_matches_torch():
    from shard_opt.frontends.rewrites import _slice_scatter

    torch.manual_seed(0)
    for shape, dim, start, end, step in [((2, 8), 1, 0, None, 2), ((2, 8), 1, 1, None, 2),
                                         ((2, 9), 1, 1, 8, 3), ((3, 10, 4), 1, 2, 9, 3), ((5, 4), 0, -4, None, 2)]:
        x = torch.randn(shape)
        n = len(range(shape[dim])[slice(start, end, step)])
        src_shape = list(shape)
        src_shape[dim] = n
        src = torch.randn(src_shape)
        ref = torch.slice_scatter(x, src, dim, start, end, step)
        assert torch.equal(_slice_scatter(x, src, dim, start, end, step), ref), (shape, dim, start, end, step)


def test_wan_vae_decoder_small_config_lowers(tmp_path):
    """The Wan VAE decoder (causal 3D convs, nearest-exact upsampling) through the frontend."""
    path = write(tmp_path, "wan_vae.py", """
        import torch
        from diffusers import AutoencoderKLWan
        from shard_opt.frontends.zoo import WanVAEDecoder

        def load_model():
            with torch.device("meta"):
                vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 2], num_res_blocks=1,
                                       attn_scales=[], temperal_downsample=[False])
            return WanVAEDecoder(vae)

        def load_inputs():
            return (torch.zeros(1, 4, 1, 4, 4),)
    """)
    lm = load(path)
    module = ir.parse(lm.text)  # kept: its ops live only as long as it does
    func = ir.main_func(module)
    assert ir.tensor_type(func.attributes["function_type"].value.results[0])[0] == (1, 3, 1, 8, 8)
    assert "aten._upsample_nearest_exact2d.vec" in lm.meta["decompositions"]
    assert lm.arguments[0].name.startswith("post_quant_conv.")
    assert any(a.name.startswith("decoder.up_blocks.0.") for a in lm.arguments)


def test_wan_dit_small_config_lowers_with_strided_rotary(tmp_path):
    """Wan's rotary embedding writes ``out[..., 0::2]``: a strided slice_scatter that
    torch-mlir cannot lower (std::bad_alloc) unless rewritten."""
    path = write(tmp_path, "wan_dit.py", """
        import torch
        from diffusers import WanTransformer3DModel

        def load_model():
            with torch.device("meta"):
                return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16,
                                             in_channels=4, out_channels=4, text_dim=32, freq_dim=16, ffn_dim=64,
                                             num_layers=2, rope_max_seq_len=64)

        def load_inputs():
            return (torch.zeros(1, 4, 2, 4, 4), torch.zeros(1, dtype=torch.long), torch.zeros(1, 8, 32))
    """)
    lm = load(path, layers=1)
    assert "aten.slice_scatter.default" in lm.meta["decompositions"]
    assert [a.name for a in lm.arguments if a.kind == "input"] == ["hidden_states", "timestep",
                                                                   "encoder_hidden_states"]
    assert lm.num_layers == 1 and lm.meta["total_layers"] == 2
    # diffusers keeps these in float32 under a bf16 load (_keep_in_fp32_modules)
    dtypes = {a.name: a.dtype for a in lm.arguments}
    assert dtypes["blocks.0.scale_shift_table"] == "f32" and dtypes["blocks.0.attn1.to_q.weight"] == "bf16"


# --------------------------------------------------------------------------------------
# .mlir input and the name attributes
# --------------------------------------------------------------------------------------

def test_mlir_example_round_trips_names_and_shardy_accepts_them():
    lm = load(os.path.join(EXAMPLES, "mlp.mlir"))
    assert [(a.name, a.kind, a.shape) for a in lm.arguments] == [
        ("fc1.weight", "param", (4096, 1024)), ("fc1.bias", "param", (4096,)),
        ("fc2.weight", "param", (1024, 4096)), ("fc2.bias", "param", (1024,)), ("x", "input", (4, 32, 1024))]
    assert lm.source == "mlir" and lm.name == "mlp"
    plan = {"fc1.weight": [["model"], []], "fc1.bias": [["model"]], "fc2.weight": [[], ["model"]]}
    assert collectives(lm, plan) == [("all_reduce", ("model",), 4 * 32 * 1024, 4 * 32 * 1024 * 4)]
    # the names survive propagation: the annotated output keeps them
    module = ir.parse(lm.text)
    ctx = PassContext(arguments=lm.arguments)
    PassManager(parse_pipeline("builtin.module(add-mesh{shape=2x4}, shardy-propagate)"), ctx).run(module)
    assert 'shard_opt.name = "fc2.weight"' in ir.print_module(module)
    from shard_opt.frontends.mlir_frontend import strip_annotations

    bare = strip_annotations(lm.text)
    assert "shard_opt." not in bare and "tensor<4096x1024xf32>" in bare


def test_mlir_from_stdin_without_names(monkeypatch):
    import io

    text = textwrap.dedent("""
        func.func @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16x4xf32>) -> tensor<8x4xf32> {
          %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
          return %0 : tensor<8x4xf32>
        }
    """)
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    lm = load("-")
    assert [(a.name, a.kind, a.dtype) for a in lm.arguments] == [("%arg0", "input", "f32"), ("%arg1", "input", "f32")]
    monkeypatch.setattr(sys, "stdin", io.StringIO("func.func @main( garbage"))
    with pytest.raises(UserError, match="cannot parse"):
        load("-")


def test_examples_are_up_to_date(tmp_path):
    """examples/*.mlir are what gen_examples.py produces now (the frontend is deterministic)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_examples", os.path.join(EXAMPLES, "gen_examples.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for file in gen.EXAMPLES:
        with open(os.path.join(EXAMPLES, file)) as f:
            assert f.read() == gen.render(file), f"{file} is stale: run python examples/gen_examples.py"


def test_transformer_block_example_megatron():
    lm = load(os.path.join(EXAMPLES, "transformer_block.mlir"))
    assert lm.arguments[9].name == "self_attn.inv_freq" and lm.arguments[9].kind == "buffer"
    colls = collectives(lm, MEGATRON_BLOCK)
    assert colls == [("all_reduce", ("model",), 128 * 1024, 128 * 1024 * 4)] * 2


# --------------------------------------------------------------------------------------
# JAX twins: same model, same weight layout, same collectives under the same plan
# --------------------------------------------------------------------------------------

MEGATRON_BLOCK = {
    "self_attn.q_proj.weight": [["model"], []], "self_attn.k_proj.weight": [["model"], []],
    "self_attn.v_proj.weight": [["model"], []], "self_attn.o_proj.weight": [[], ["model"]],
    "mlp.gate_proj.weight": [["model"], []], "mlp.up_proj.weight": [["model"], []],
    "mlp.down_proj.weight": [[], ["model"]],
}


def jax_mlp(params, x):
    import jax.numpy as jnp

    h = jnp.maximum(x @ params["fc1"]["weight"].T + params["fc1"]["bias"], 0)
    return h @ params["fc2"]["weight"].T + params["fc2"]["bias"]


def jax_block(params, x):
    """frontends/models.py TransformerBlock in JAX ([out, in] weights, same names)."""
    import jax
    import jax.numpy as jnp

    def lin(p, h):
        return h @ p["weight"].T

    def rms(p, h):
        return h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-5) * p["weight"]

    def rot(t):
        t1, t2 = jnp.split(t, 2, axis=-1)
        return jnp.concatenate([-t2, t1], axis=-1)

    b, s, d = x.shape
    heads = 8
    hd = d // heads
    a = params["self_attn"]
    h = rms(params["input_layernorm"], x)
    q, k, v = (lin(a[n], h).reshape(b, s, heads, hd).transpose(0, 2, 1, 3) for n in ("q_proj", "k_proj", "v_proj"))
    freqs = jnp.arange(s, dtype=jnp.float32)[:, None] * a["inv_freq"][None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    cos, sin = jnp.cos(emb), jnp.sin(emb)
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
    scores = scores + jnp.triu(jnp.full((s, s), -jnp.inf, dtype=scores.dtype), 1)
    out = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    x = x + lin(a["o_proj"], out)
    m = params["mlp"]
    h = rms(params["post_attention_layernorm"], x)
    return x + lin(m["down_proj"], jax.nn.silu(lin(m["gate_proj"], h)) * lin(m["up_proj"], h))


def _nest(flat: dict) -> dict:
    out = {}
    for name, value in flat.items():
        node = out
        *parents, leaf = name.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


@pytest.mark.parametrize("model_name, jax_fn, batch, plan", [
    ("mlp", jax_mlp, 4, {"fc1.weight": [["model"], []], "fc1.bias": [["model"]], "fc2.weight": [[], ["model"]]}),
    ("mlp", jax_mlp, 4, {"fc1.weight": [[], ["model"]], "x": [["batch"], [], ["model"]]}),
    ("transformer-block", jax_block, 1, MEGATRON_BLOCK),
    ("transformer-block", jax_block, 1, {"self_attn.q_proj.weight": [[], ["model"]],
                                         "mlp.up_proj.weight": [["model"], []]}),
])
def test_pytorch_and_jax_twin_give_the_same_collectives(model_name, jax_fn, batch, plan):
    import jax
    import jax.numpy as jnp

    from shard_opt.frontends.jax_frontend import lower_jax

    torch_lm = load(f"zoo:{model_name}", batch=batch, seq_len=32, dtype="f32")
    state = {a.name: jax.ShapeDtypeStruct(a.shape, jnp.float32) for a in torch_lm.arguments if a.kind != "input"}
    x_arg = next(a for a in torch_lm.arguments if a.kind == "input")
    jax_lm = lower_jax(jax_fn, _nest(state), jax.ShapeDtypeStruct(x_arg.shape, jnp.float32), name=model_name)
    assert {a.name for a in jax_lm.arguments} == {"params." + n for n in state} | {"x"}
    assert {a.kind for a in jax_lm.arguments if a.name.startswith("params.")} == {"param"}
    jax_plan = {("params." + n if n != "x" else n): d for n, d in plan.items()}
    got_torch = collectives(torch_lm, plan)
    got_jax = collectives(jax_lm, jax_plan)
    assert got_torch, "the plan should cost something"
    assert got_torch == got_jax

    # and they are twins numerically (same weights, CPU)
    torch.manual_seed(0)
    model = _cpu_model(model_name)
    x = torch.randn(x_arg.shape)
    with torch.no_grad():
        ref = model(x).numpy()
    params = _nest({n: jnp.asarray(t.detach().numpy()) for n, t in
                    list(model.named_parameters()) + list(model.named_buffers())})
    np.testing.assert_allclose(np.asarray(jax_fn(params, jnp.asarray(x.numpy()))), ref, rtol=2e-4, atol=2e-5)


def _cpu_model(name):
    from shard_opt.frontends.models import MLP, TransformerBlock

    return MLP(1024, 4096) if name == "mlp" else TransformerBlock(1024, 8, 4096)


def test_jax_names_from_locations_and_kinds():
    import jax
    import jax.numpy as jnp

    from shard_opt.frontends.jax_frontend import lower_jax
    from shard_opt.frontends.mlir_frontend import load_mlir_text

    f32 = jnp.float32
    params = {"fc1": {"weight": jax.ShapeDtypeStruct((256, 64), f32), "bias": jax.ShapeDtypeStruct((256,), f32)},
              "fc2": {"weight": jax.ShapeDtypeStruct((64, 256), f32), "bias": jax.ShapeDtypeStruct((64,), f32)}}
    x = jax.ShapeDtypeStruct((4, 32, 64), f32)
    # jax's own text with debug info: names come from the argument locations
    text = jax.jit(jax_mlp).lower(params, x).as_text(debug_info=True)
    lm = load_mlir_text(text, name="jax", where="jax")
    assert [(a.name, a.kind) for a in lm.arguments] == [
        ("params.fc1.bias", "param"), ("params.fc1.weight", "param"),
        ("params.fc2.bias", "param"), ("params.fc2.weight", "param"), ("x", "input")]
    # Flax-style variables: leaves under 'params' are params, the rest inputs
    def apply(variables, x):
        return jax_mlp(variables["params"], x) * variables["scale"]

    lm = lower_jax(apply, {"params": params, "scale": jax.ShapeDtypeStruct((), f32)}, x)
    kinds = {a.name: a.kind for a in lm.arguments}
    assert kinds["variables.params.fc2.weight"] == "param" and kinds["variables.scale"] == "input"
    assert kinds["x"] == "input"
    assert "func.func public @main" in lm.text


def test_jax_shardings_are_dropped_unless_kept():
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    from shard_opt.frontends.jax_frontend import lower_jax

    mesh = jax.make_mesh((1,), ("model",))
    w = jax.ShapeDtypeStruct((256, 64), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec("model", None)))
    x = jax.ShapeDtypeStruct((4, 64), jnp.float32)

    def f(params, x):
        return x @ params["w"].T

    plain = lower_jax(f, {"w": w}, x)
    assert "sdy." not in plain.text
    kept = lower_jax(f, {"w": w}, x, keep_shardings=True)
    assert "sdy.mesh @mesh" in kept.text and '[{"model"}, {}]' in kept.text


# --------------------------------------------------------------------------------------
# architecture map
# --------------------------------------------------------------------------------------

def test_architecture_of_a_plain_module():
    from shard_opt.frontends.describe import architecture
    from shard_opt.frontends.models import MLP

    arch = architecture(MLP(64, 256), (torch.zeros(2, 8, 64),))
    assert arch["flops"] == 2 * (2 * 16 * 64 * 256) and arch["param_count"] == 64 * 256 * 2 + 256 + 64
    assert arch["repeated"] is None and arch["flops_error"] is None


def test_architecture_flops_and_format(llama2):
    from shard_opt.frontends.describe import format_architecture

    lm = load("zoo:mlp", batch=4, seq_len=32)
    arch = lm.architecture
    mods = {m["path"]: m for m in arch["modules"]}
    tokens = 4 * 32
    assert mods["fc1"]["flops"] == 2 * tokens * 1024 * 4096 and mods["fc2"]["flops"] == 2 * tokens * 4096 * 1024
    assert arch["flops"] == mods["fc1"]["flops"] + mods["fc2"]["flops"]
    assert mods["fc1"]["params"] == {"weight": [[4096, 1024], "bf16"], "bias": [[4096], "bf16"]}

    block = load("zoo:transformer-block", seq_len=32).architecture
    bm = {m["path"]: m for m in block["modules"]}
    attn_scores = 2 * 2 * 8 * 32 * 32 * 128  # QK^T and PV, 8 heads of 128
    assert bm["self_attn"]["flops"] == 4 * 2 * 32 * 1024 * 1024 + attn_scores

    llama = llama2.architecture
    text = format_architecture(llama)
    assert "model.layers.0..1 (LlamaDecoderLayer x2" in text
    assert "q_proj (Linear)" in text and "4096x4096 bf16" in text
    lm_mods = {m["path"]: m for m in llama["modules"]}
    # SDPA is counted (torch's registry lacks the CPU kernel; describe registers it)
    sdpa = lm_mods["model.layers.0.self_attn"]["flops"] - sum(
        lm_mods[f"model.layers.0.self_attn.{p}"]["flops"] for p in ("q_proj", "k_proj", "v_proj", "o_proj"))
    assert sdpa == 2 * 2 * 32 * 128 * 128 * 128  # QK^T and PV: 32 heads, 128 tokens, head_dim 128
