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
from shard_opt.lowered import Argument, LoweredModel
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


def test_renamed_model_gets_the_same_megatron_baseline_and_plan(llama):
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
            "row": ["model.layers.*.self_attn.o_proj.weight"]} in pairs
    assert {"kind": "mlp", "column": ["model.layers.*.mlp.gate_proj.weight", "model.layers.*.mlp.up_proj.weight"],
            "row": ["model.layers.*.mlp.down_proj.weight"]} in pairs
    assert {"kind": "head", "column": ["lm_head.weight"], "row": []} in pairs


def test_few_kv_heads_stay_replicated(llama):
    # 2 KV heads on the 4 devices of "model": a device would hold half a head
    mesh = Mesh.parse("2x4")
    split = {a.name for a in llama.arguments if a.index in megatron_shardings(llama, mesh)}
    assert "model.layers.0.self_attn.q_proj.weight" in split
    assert "model.layers.0.self_attn.k_proj.weight" not in split
    assert "model.layers.0.self_attn.o_proj.weight" in split
    two = megatron_shardings(llama, Mesh.parse("1x2"))  # 2 KV heads on 2 devices: one each
    assert any(llama.arguments[i].name == "model.layers.0.self_attn.k_proj.weight" for i in two)


@pytest.mark.parametrize("zoo, kinds", [
    ("bert-large", {"attention", "mlp"}),
    ("gpt2-xl", {"attention", "mlp", "head"}),
    ("mixtral-8x7b", {"attention", "experts", "head"}),
])
def test_zoo_pairs_are_found_structurally(zoo, kinds):
    model = frontends.load(f"zoo:{zoo}", layers=1)
    assert {p["kind"] for p in megatron_pairs(model)} == kinds
