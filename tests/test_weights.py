"""--weight-dtype: block-float matmul weights (bytes, fidelity, memory, the emitted script)."""

from __future__ import annotations

import json
import os

import pytest

from shard_opt import costmodel, frontends
from shard_opt.errors import UserError
from shard_opt.evaluate import Evaluator
from shard_opt.facts import dtype_bytes
from shard_opt.sharding import Mesh
from shard_opt.weights import WeightFormats, weight_roles_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA = os.path.join(ROOT, "examples", "llama_load.py")


@pytest.fixture(scope="module")
def llama():
    return frontends.load(LLAMA)


def test_block_float_bytes_follow_the_tile_layout():
    # tt-metal tile_size(): 1024 mantissas + 64 shared exponents per 32x32 tile
    assert dtype_bytes("bfp8") * 1024 == 1088 and dtype_bytes("bfp4") * 1024 == 576


def test_parse_and_errors():
    w = WeightFormats.parse("bfp8,mlp=bfp4,*.lm_head.weight=bf16")
    assert (w.default, w.rules) == ("bfp8", (("mlp", "bfp4"), ("*.lm_head.weight", "bf16")))
    assert WeightFormats.parse(None).is_plain and WeightFormats.parse("bf16").is_plain
    for bad in ("bfp3", "mlp=bfp4,bfp8", "mlp=fp8"):
        with pytest.raises(UserError):
            WeightFormats.parse(bad)


def test_roles_come_from_the_graph(llama):
    roles = weight_roles_of(llama)
    by_name = {a.name: roles.get(a.index) for a in llama.arguments}
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert by_name[f"model.layers.0.self_attn.{proj}.weight"] == "attention"
    for proj in ("gate_proj", "up_proj", "down_proj"):
        assert by_name[f"model.layers.1.mlp.{proj}.weight"] == "mlp"
    assert by_name["lm_head.weight"] == "other"
    assert by_name["model.embed_tokens.weight"] is None  # a gather, not a matmul: tt-mlir keeps it
    assert by_name["model.norm.weight"] is None


def test_block_float_weights_are_read_and_stored_at_their_size():
    llama = frontends.load(LLAMA, batch=4, seq_len=1024)  # enough tokens for the matmuls to be math-bound
    mesh = Mesh.parse("1x1")
    system = costmodel.get_system("n150")
    model = costmodel.get_cost_model("tenstorrent-tuned")
    runs = {}
    for spec in ("bf16", "bfp8", "bfp8,mlp=bfp4"):
        ev = Evaluator(llama, mesh, system, model, weights=WeightFormats.parse(spec))
        runs[spec] = ev.run({})
    storage = runs["bfp8,mlp=bfp4"].storage
    names = {a.index: a.name for a in llama.arguments}
    assert {names[i].rsplit(".", 2)[-2] for i, f in storage.items() if f == "bfp4"} == {"gate_proj", "up_proj",
                                                                                       "down_proj"}
    assert all(f == "bfp8" for i, f in storage.items() if "self_attn" in names[i] or names[i] == "lm_head.weight")
    params = {k: sum(b for b, kind in zip(r.facts.arg_local_bytes, r.facts.arg_kinds) if kind == "param")
              for k, r in runs.items()}
    matmul = sum(a.shape[0] * a.shape[1] for a in llama.arguments if a.index in storage)
    assert params["bf16"] - params["bfp8"] == pytest.approx(matmul * (2 - 1088 / 1024), rel=1e-6)
    assert params["bfp8,mlp=bfp4"] < params["bfp8"]
    # the matmuls read less, and (tuned) run at a lower fidelity: the step is faster
    assert runs["bfp8,mlp=bfp4"].cost.total_us < runs["bfp8"].cost.total_us < runs["bf16"].cost.total_us


# One run, read by the two tests below: block-float weights on the small Llama, with a rule
# (*.experts.*) that names no weight of it (a Llama has no experts).
WEIGHT_DTYPE = "bfp8,mlp=bfp4,*.experts.*=bfp4"


@pytest.fixture(scope="module")
def bfp_run(tmp_path_factory):
    """(the emitted script, the plan) of ``shard-opt LLAMA --mesh 1x2 --weight-dtype WEIGHT_DTYPE``."""
    from shard_opt.cli import main

    d = tmp_path_factory.mktemp("weights")
    out, plan_path = d / "sharded.py", d / "plan.json"
    code = main([LLAMA, "--mesh", "1x2", "--weight-dtype", WEIGHT_DTYPE, "--emit-torch", str(out),
                 "--plan-json", str(plan_path), "-o", os.devnull])
    assert code == 0
    return out.read_text(), json.loads(plan_path.read_text())


def test_the_emitted_script_sets_tt_xla_weight_options(bfp_run):
    text, plan = bfp_run
    assert ('torch_xla.set_custom_compile_options({"experimental_weight_dtype": "bfp_bf8", "enable_trace": "true"})'
            in text)
    assert '"model.layers.*.mlp.gate_proj.weight": "bfp_bf4"' in text
    assert "apply_weight_dtype_overrides(model, SHARD_OPT_WEIGHT_DTYPES)" in text
    assert plan["weight_dtype"] == WEIGHT_DTYPE
    assert {a.get("storage") for a in plan["arguments"] if "mlp.up_proj" in a["name"]} == {"bfp4"}


def test_a_rule_that_names_nothing_is_said(bfp_run):
    _, plan = bfp_run
    assert any("*.experts.*" in n for n in plan.get("notes", []))
