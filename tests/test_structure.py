"""Megatron from the dataflow, not from names (shard_opt.structure, baselines.megatron_shardings)."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest

from shard_opt import frontends
from shard_opt.baselines import megatron_pairs, megatron_shardings
from shard_opt.driver import Options, optimize
from shard_opt.frontends.mlir_frontend import annotate_arguments
from shard_opt.lowered import LoweredModel
from shard_opt.sharding import Mesh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA = os.path.join(ROOT, "examples", "llama_load.py")


def renamed(model: LoweredModel) -> LoweredModel:
    """The same module with every parameter renamed ``blocks.<layer>.<letter>.w`` (the layer
    index kept, every module name gone): nothing a name table could recognise."""
    letters: dict[str, str] = {}
    args = []
    for a in model.arguments:
        if a.kind in ("param", "buffer"):
            letter = letters.setdefault(a.role, chr(ord("a") + len(letters)))
            name = f"blocks.{a.layer}.{letter}.w" if a.layer is not None else f"top.{letter}.w"
        else:
            name = a.name
        args.append(dataclasses.replace(a, name=name))
    text = annotate_arguments(model.text, args, where=model.name)
    return LoweredModel(model.name, text, args, source="mlir", num_layers=model.num_layers, meta=dict(model.meta))


@pytest.fixture(scope="module")
def llama():
    return frontends.load(LLAMA)


def test_renamed_model_gets_the_same_megatron_baseline_and_plan():
    # one block: what a name table would recognise is the same in every block, and the two
    # searches cost half the 2-block model's
    llama = frontends.load(LLAMA, layers=1)
    other = renamed(llama)
    assert not any(re.search(r"proj|attn|mlp|head", a.name) for a in other.arguments if a.kind == "param")
    mesh = Mesh.parse("1x2")  # 4 heads, 2 KV heads: every projection splits
    base, ren = megatron_shardings(llama, mesh), megatron_shardings(other, mesh)
    assert base and base == ren
    names = {a.index: a.name for a in llama.arguments}
    split = {names[i].split("layers.0.")[-1] for i in base if "layers.0." in names[i]}
    assert {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"} <= split
    opts = Options(meshes=[mesh], progress=False)
    a, b = optimize(llama, opts).plan, optimize(other, opts).plan
    assert [x["sharding"] for x in a["arguments"]] == [x["sharding"] for x in b["arguments"]]
    assert a["cost"] == b["cost"]
    assert a["baselines"]["megatron"]["total_us"] == b["baselines"]["megatron"]["total_us"]


def test_pairs_are_reported_by_role(llama):
    pairs = megatron_pairs(llama)
    assert {"kind": "attention", "column": ["model.layers.*.self_attn.q_proj.weight",
                                            "model.layers.*.self_attn.k_proj.weight",
                                            "model.layers.*.self_attn.v_proj.weight"],
            "row": ["model.layers.*.self_attn.o_proj.weight"], "column_dims": [0, 0, 0], "row_dims": [1]} in pairs
    assert {"kind": "mlp", "column": ["model.layers.*.mlp.gate_proj.weight", "model.layers.*.mlp.up_proj.weight"],
            "row": ["model.layers.*.mlp.down_proj.weight"], "column_dims": [0, 0], "row_dims": [1]} in pairs
    assert {"kind": "head", "column": ["lm_head.weight"], "row": [], "column_dims": [0], "row_dims": []} in pairs


def test_few_kv_heads_stay_replicated(llama):
    # 2 KV heads on the 4 devices of "model": a device would hold half a head
    mesh = Mesh.parse("2x4")
    split = {a.name for a in llama.arguments if a.index in megatron_shardings(llama, mesh)}
    assert "model.layers.0.self_attn.q_proj.weight" in split
    assert "model.layers.0.self_attn.k_proj.weight" not in split
    assert "model.layers.0.self_attn.o_proj.weight" in split
    two = megatron_shardings(llama, Mesh.parse("1x2"))  # 2 KV heads on 2 devices: one each
    assert any(llama.arguments[i].name == "model.layers.0.self_attn.k_proj.weight" for i in two)


def test_decode_finds_the_pairs_prefill_finds(llama):
    # decode's scores carry the KV cache's heads beside k_proj's: the cache splits with
    # its column, it is no unsplit tensor that would end q, k -> o
    decode = frontends.load(LLAMA, phase="decode")
    assert megatron_pairs(decode) == megatron_pairs(llama)


def test_a_batch_of_two_finds_the_pairs_and_heads_a_batch_of_one_finds(llama):
    # torch-mlir folds [batch, heads] into one dim for attention's matmuls; read folded,
    # a batch of 2 left the heads dim carrying nothing after attention: no attention
    # pair, no KV heads (a K/V split the heads rule never saw), q_proj's units the batch
    from shard_opt.structure import structure_of

    two = frontends.load(LLAMA, batch=2)
    assert megatron_pairs(two) == megatron_pairs(llama)
    units = {two.arguments[i].name: n for (i, d), n in structure_of(two).units.items() if d == 0}
    assert units["model.layers.0.self_attn.q_proj.weight"] == 4
    assert units["model.layers.0.self_attn.k_proj.weight"] == 2
    assert units["model.layers.0.self_attn.v_proj.weight"] == 2
    assert "model.layers.0.self_attn.k_proj.weight" not in {
        two.arguments[i].name for i in megatron_shardings(two, Mesh.parse("2x4"))}


@pytest.mark.parametrize("zoo, kinds", [
    ("bert-large", {"attention", "mlp"}),
    ("gpt2-xl", {"attention", "mlp", "head"}),
    ("mixtral-8x7b", {"attention", "experts", "head"}),
])
def test_zoo_pairs_are_found_structurally(zoo, kinds):
    model = frontends.load(f"zoo:{zoo}", layers=1)
    assert {p["kind"] for p in megatron_pairs(model)} == kinds


# ---- pairs read from the graph alone: a bare module, a bias after the head, a norm or a
# residual add between two projections, convolutions -----------------------------------

SCRIPTS = os.path.join(ROOT, "tests", "fixtures", "scripts")


def _plan(run_cli, tmp_path, model, mesh, *extra):
    import json

    path = tmp_path / f"plan-{mesh}.json"
    code, _, err = run_cli(model, "--mesh", mesh, "--plan-json", path, "-o", tmp_path / "out.mlir", *extra)
    assert code == 0, err
    return json.loads(path.read_text()), err


def _jax_mlp_text(bias: bool = False) -> str:
    """A two-matmul MLP exported from JAX without argument names: ``x[8,128,1024]``,
    ``w1[4096,1024]``, ``w2[1024,4096]`` (f32); jax writes ``relu`` as a private ``@relu``."""
    import jax
    import jax.numpy as jnp

    def mlp(x, w1, w2, *b):
        h = jnp.einsum("bsd,fd->bsf", x, w1) + (b[0] if b else 0)
        return jnp.einsum("bsf,df->bsd", jax.nn.relu(h), w2) + (b[1] if b else 0)

    shapes = [(8, 128, 1024), (4096, 1024), (1024, 4096)] + ([(4096,), (1024,)] if bias else [])
    text = jax.jit(mlp).lower(*(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes)).as_text()
    assert "shard_opt." not in text and "loc(" not in text
    return text


def test_a_bare_jax_mlp_has_its_weights_and_pair_found_from_the_graph(run_cli, tmp_path):
    from shard_opt.frontends.mlir_frontend import load_mlir_text

    src = tmp_path / "mlp.mlir"
    src.write_text(_jax_mlp_text())
    # x @ w1: both arguments, but only x's batch and token dims reach the result; w2 is
    # contracted against relu(...), a computed activation
    kinds = [a.kind for a in load_mlir_text(src.read_text(), name="mlp", where="mlp").arguments]
    assert kinds == ["input", "param", "param"]
    pair = [{"kind": "mlp", "column": ["%arg1"], "row": ["%arg2"], "column_dims": [0], "row_dims": [1]}]
    for mesh in ("2x4", "1x8"):
        plan, err = _plan(run_cli, tmp_path, src, mesh, "--parallelism", "tensor")
        assert "nothing to split" not in err
        assert plan["pairs"] == pair
        mega = plan["baselines"]["megatron"]
        assert mega["arguments"] == {"%arg1": [["model"], []], "%arg2": [[], ["model"]]}
        assert plan["cost"]["total_us"] <= min(mega["total_us"], plan["baselines"]["replicated"]["total_us"])
    # on a line of 8 the pair pays for its all_reduce (on 2x4's 4-chip axis, at 1024
    # tokens in f32, the all_reduce costs more than the matmuls it splits save)
    assert mega["total_us"] < plan["baselines"]["replicated"]["total_us"]
    assert plan["strategy"].startswith("tensor parallel")


def test_a_bare_jax_mlp_with_biases():
    from shard_opt.frontends.mlir_frontend import load_mlir_text

    lm = load_mlir_text(_jax_mlp_text(bias=True), name="mlp", where="mlp")
    assert [(a.kind, a.shape) for a in lm.arguments] == [
        ("input", (8, 128, 1024)), ("param", (4096, 1024)), ("param", (1024, 4096)), ("param", (4096,)),
        ("param", (1024,))]
    assert megatron_pairs(lm) == [{"kind": "mlp", "column": ["%arg1"], "row": ["%arg2"], "column_dims": [0],
                                   "row_dims": [1]}]


def test_gptj_lm_head_with_a_bias_is_an_output_head(run_cli, tmp_path):
    # GPT-J: parallel attention + MLP, and lm_head(x) + bias is what the model returns
    # GPT-J's 50400-word head split 8 ways gathers 6300-wide logit pieces, not whole 32-wide tiles:
    # the tile rule is allowed here, so Megatron is priced (the structure is what is tested)
    plan, _ = _plan(run_cli, tmp_path, os.path.join(SCRIPTS, "gptj_block.py"), "1x8", "--allow", "tile-columns")
    mega = plan["baselines"]["megatron"]
    assert plan["pairs"] == [
        {"kind": "attention", "column": ["transformer.h.*.attn.q_proj.weight", "transformer.h.*.attn.k_proj.weight",
                                         "transformer.h.*.attn.v_proj.weight"],
         "row": ["transformer.h.*.attn.out_proj.weight"], "column_dims": [0, 0, 0], "row_dims": [1]},
        {"kind": "mlp", "column": ["transformer.h.*.mlp.fc_in.weight"], "row": ["transformer.h.*.mlp.fc_out.weight"],
         "column_dims": [0], "row_dims": [1]},
        {"kind": "head", "column": ["lm_head.weight"], "row": [], "column_dims": [0], "row_dims": []}]
    assert mega["arguments"]["lm_head.weight"] == [["model"], []]
    assert mega["total_us"] < plan["baselines"]["replicated"]["total_us"]
    assert plan["cost"]["total_us"] <= mega["total_us"]


def test_a_residual_add_and_a_norm_end_a_pair(run_cli, tmp_path):
    # renamed pre-norm block: b's output reaches c and g only through x + b(...) and a
    # LayerNorm, so b pairs with neither; c, g -> e is the MLP's pair. a packs q|k|v as
    # [3, heads, head_dim]: a plain split of its dim 0 would cut across q, k and v, so
    # it is no column (b then has no partner)
    plan, _ = _plan(run_cli, tmp_path, os.path.join(SCRIPTS, "renamed_swiglu.py"), "1x8")
    mega = plan["baselines"]["megatron"]
    assert plan["pairs"] == [{"kind": "mlp", "column": ["c.weight", "g.weight"], "row": ["e.weight"],
                              "column_dims": [0, 0], "row_dims": [1]}]
    assert mega["arguments"] == {"c.weight": [["model"], []], "g.weight": [["model"], []], "e.weight": [[], ["model"]]}
    assert mega["total_us"] < plan["baselines"]["replicated"]["total_us"]
    # a LayerNorm alone between two projections ends the pair too; the last one, its
    # result returned through its bias add, is an output head
    ln = frontends.load(os.path.join(SCRIPTS, "layernorm_mlp.py"))
    assert megatron_pairs(ln) == [{"kind": "head", "column": ["out.weight"], "row": [], "column_dims": [0],
                                   "row_dims": []}]


def test_a_res_block_pairs_its_convolutions_across_a_group_norm(run_cli, tmp_path):
    # diffusers' ResnetBlock2D: GroupNorm(32) reduces within groups of channels, so
    # conv1's output channels reach conv2's input channels: column -> row, one all_reduce
    plan, _ = _plan(run_cli, tmp_path, os.path.join(SCRIPTS, "unet_resblock.py"), "1x8")
    mega = plan["baselines"]["megatron"]
    assert plan["pairs"] == [{"kind": "conv", "column": ["resnet.conv1.weight"], "row": ["resnet.conv2.weight"],
                              "column_dims": [0], "row_dims": [1]}]
    assert mega["arguments"] == {"resnet.conv1.weight": [["model"], [], [], []],
                                 "resnet.conv2.weight": [[], ["model"], [], []]}
    assert mega["total_us"] < plan["baselines"]["replicated"]["total_us"]
