"""Grouped-query attention whose 8 KV heads do not divide 32 devices: a valid plan, explained."""

import json
import os
import tempfile

import pytest

from shard_opt import frontends

SCRIPT = os.path.join(os.path.dirname(__file__), "fixtures", "scripts", "gqa_llama.py")
ARGS = [SCRIPT, "--layers", "2", "--mesh", "8x4", "--dtype", "f32"]


def gqa_plan_on_32_devices() -> dict:
    """The plan JSON ``shard-opt`` writes for the 2-layer GQA fixture on 8x4 (``ARGS``): one
    search a test run, read here and by tests/test_safety.py (the rules it lists)."""
    from shard_opt.cli import main

    from conftest import shared_once

    def run() -> str:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "plan.json")
            code = main([*ARGS, "--plan-json", path, "-o", os.path.join(d, "out.mlir"), "--quiet"])
            assert code == 0, f"shard-opt {' '.join(ARGS)} exited {code}"
            with open(path) as f:
                return f.read()

    return json.loads(shared_once(f"gqa_llama plan {ARGS!r}", run)[0])


@pytest.fixture(scope="module")
def plan():
    model = frontends.load(SCRIPT, layers=2, dtype="f32")
    assert model.meta["attention"] == {"heads": 32, "kv_heads": 8, "head_dim": 8}
    return gqa_plan_on_32_devices()


def test_plan_is_valid_on_32_devices(plan):
    sizes = dict(zip(plan["mesh"]["axes"], plan["mesh"]["shape"]))
    assert plan["mesh"]["shape"] == [8, 4]
    for a in plan["arguments"]:
        for dim, axes in zip(a["shape"], a["sharding"]):
            f = 1
            for ax in axes:
                f *= sizes[ax]
            assert dim % f == 0, (a["name"], a["sharding"])
    assert plan["cost"]["total_us"] is not None  # priced: no unsupported collective
    assert all(c["kind"] != "collective_permute" for c in plan["collectives"])


def test_kv_layout_is_explained(plan):
    kv = plan["kv_layout"]
    assert (kv["heads"], kv["kv_heads"]) == (32, 8)
    k = next(a for a in plan["arguments"] if a["name"].endswith("layers.0.self_attn.k_proj.weight"))
    sizes = dict(zip(plan["mesh"]["axes"], plan["mesh"]["shape"]))
    f = 1
    for ax in k["sharding"][0]:
        f *= sizes[ax]
    assert kv["kv_split"] == f
    assert "8 KV heads" in kv["reason"] and kv["reason"] in plan["notes"]
