"""The user's own plan: a loader's load_shard_spec / get_mesh_config, or --spec (baseline loader-spec)."""

from __future__ import annotations

import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC_SCRIPT = os.path.join(ROOT, "examples", "llama_spec_load.py")
LLAMA = os.path.join(ROOT, "examples", "llama_load.py")
MLP = os.path.join(ROOT, "examples", "mlp.mlir")


def run(run_cli, tmp_path, *args):
    plan_path = tmp_path / "plan.json"
    code, _, err = run_cli(*args, "--plan-json", plan_path, "-o", os.devnull)
    assert code == 0, err
    return json.loads(plan_path.read_text()), err


def spec_run_1x4(run_cli, tmp_path):
    """(plan, emitted script, stderr) of ``shard-opt examples/llama_spec_load.py --mesh 1x4
    --emit-torch``: one run per test run, read here and by tests/test_cli.py (the script)."""
    from conftest import shared_once

    def make():
        plan_path, script = tmp_path / "spec-plan.json", tmp_path / "spec-sharded.py"
        code, _, err = run_cli(SPEC_SCRIPT, "--mesh", "1x4", "--plan-json", plan_path, "--emit-torch", script,
                               "-o", os.devnull)
        assert code == 0, err
        return json.loads(plan_path.read_text()), script.read_text(), err

    return shared_once("examples/llama_spec_load.py --mesh 1x4 --plan-json --emit-torch", make)[0]


def test_a_loader_spec_is_a_baseline_compared_component_by_component(run_cli, tmp_path):
    plan, _, err = spec_run_1x4(run_cli, tmp_path)
    base = plan["baselines"]["loader-spec"]
    assert base["source"] == "loader" and base["mesh"] == [1, 4] and not base["unmatched"]
    assert base["arguments"]["model.layers.*.self_attn.q_proj.weight"] == [["model"], []]
    assert base["arguments"]["model.layers.*.mlp.down_proj.weight"] == [[], ["model"]]
    # 4 query heads over 2 KV heads split 4 ways: K/V cannot split (half a head each), and
    # replicated they leave 1 query head per device beside 2 KV heads, which tt-mlir's SDPA
    # refuses (tt-mlir 8861): the spec is priced as written and infinite within the rules
    assert base["breaks"] == ["heads"] and base["total_us"] is None
    assert plan["cost"]["total_us"] <= base["as_written"]["total_us"]
    assert "loader-spec" not in err  # no speed-up is claimed against a spec priced infinite
    rows = {r["component"]: r for r in plan["loader_comparison"]}
    q = rows["model.layers.*.self_attn.q_proj.weight"]
    assert q["expert"] == [["model"], []] and q["delta_us"] >= 0 and "us" in q["reason"]
    # priced whole (2 layers): the spec's collectives by component, counted as its ccl_count
    assert "layer_collectives" not in base and len(base["collectives"]) == base["ccl_count"]
    down = [c for c in base["collectives"] if c["component"] == "model.layers.1.mlp.down_proj"]
    assert [c["kind"] for c in down] == ["all_reduce"]  # the row-parallel down_proj's partial sums


def test_evaluate_prices_the_loader_spec_alone(run_cli, tmp_path):
    plan, _ = run(run_cli, tmp_path, SPEC_SCRIPT, "--mesh", "1x4", "--evaluate")
    assert "shard spec" in plan["strategy"]
    shardings = {a["name"]: a["sharding"] for a in plan["arguments"]}
    assert shardings["model.layers.0.self_attn.o_proj.weight"] == [[], ["model"]]
    assert shardings["model.embed_tokens.weight"] == [[], []]
    assert plan["baselines"]["loader-spec"]["total_us"] == plan["cost"]["total_us"]
    # the loader wrote its spec for (1, 8) when asked for 8 devices; priced on the mesh given
    plan, _ = run(run_cli, tmp_path, SPEC_SCRIPT, "--mesh", "2x4", "--evaluate")
    assert any("get_mesh_config(8) gives 1x8" in n for n in plan.get("notes", []))


def test_a_spec_file_reports_names_that_match_nothing(run_cli, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"spec": {
        "model.layers.0.mlp.up_proj.weight": ["model", None],
        "model.layers.0.mlp.nope.weight": ["model", None],          # no such tensor
        "model.layers.0.self_attn.q_proj.weight": [None, "data"],   # no such mesh axis
    }}))
    plan, _ = run(run_cli, tmp_path, LLAMA, "--mesh", "1x8", "--spec", spec, "--evaluate")
    base = plan["baselines"]["loader-spec"]
    assert "model.layers.0.mlp.nope.weight" in base["unmatched"]
    assert any("axis data is not a mesh axis" in u for u in base["unmatched"])
    shardings = {a["name"]: a["sharding"] for a in plan["arguments"]}
    assert shardings["model.layers.0.mlp.up_proj.weight"] == [["model"], []]
    assert shardings["model.layers.0.self_attn.q_proj.weight"] == [[], []]


def test_a_split_that_does_not_divide_is_replicated_and_said(run_cli, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"fc1.bias": ["model"], "fc1.weight": ["model", None],
                                "fc2.weight": [None, "model"], "x": ["model", None, None]}))
    plan, _ = run(run_cli, tmp_path, MLP, "--mesh", "1x8", "--spec", spec, "--evaluate")
    (bad,) = plan["baselines"]["loader-spec"]["not_dividing"]  # x's 4 sequences on 8 devices
    assert bad == {"name": "x", "dim": 0, "size": 4, "axes": ["model"]}
    shardings = {a["name"]: a["sharding"] for a in plan["arguments"]}
    assert shardings["x"] == [[], [], []] and shardings["fc1.weight"] == [["model"], []]


def test_a_python_spec_file_for_a_script_without_one(run_cli, tmp_path):
    spec = tmp_path / "spec.py"
    spec.write_text("def load_shard_spec(model):\n"
                    "    return {layer.mlp.up_proj.weight: ('model', None) for layer in model.model.layers}\n")
    plan, _ = run(run_cli, tmp_path, LLAMA, "--mesh", "1x2", "--spec", spec)
    base = plan["baselines"]["loader-spec"]
    assert base["source"] == "spec file" and base["arguments"] == {"model.layers.*.mlp.up_proj.weight": [["model"], []]}


def test_bad_specs_are_one_line_errors(run_cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    code, _, err = run_cli(MLP, "--mesh", "1x8", "--spec", bad, "--evaluate")
    assert code == 1 and err.count("\n") == 1 and "--spec" in err
    py = tmp_path / "spec.py"
    py.write_text("def load_shard_spec(model):\n    return {}\n")
    code, _, err = run_cli(MLP, "--mesh", "1x8", "--spec", py, "--evaluate")
    assert code == 1 and "Python spec needs the PyTorch model" in err


def test_a_spec_entry_that_does_nothing_is_a_warning(run_cli, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('{"fc1.weight": ["model"], "no.such.weight": [null, "model"]}')
    code, _, err = run_cli(MLP, "--mesh", "1x8", "--spec", spec, "-o",
                           tmp_path / "out.mlir")
    assert code == 0, err
    (line,) = [ln for ln in err.splitlines() if "WARNING" in ln]
    assert "2 shard-spec entries matched nothing" in line
    assert "fc1.weight (a spec of 1 dims for a 2-dim tensor)" in line and "no.such.weight" in line


REFUSING_LOADER = '''"""A loader that, like tt-forge-models' GPT-OSS and Flux loaders, supports some device
counts only: get_mesh_config raises for the others."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 64)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class ModelLoader:
    def load_model(self):
        torch.manual_seed(0)
        return Net()

    def load_inputs(self):
        return (torch.randn(4, 32, 64),)

    def get_mesh_config(self, num_devices):
        if num_devices not in (4, 8):
            raise ValueError(f"num_devices {num_devices} is not supported")
        return (1, num_devices)

    def load_shard_spec(self, model):
        return {model.fc1.weight: ("model", None), model.fc2.weight: (None, "model")}
'''


def test_a_device_count_the_loader_refuses_is_not_offered_not_an_error(run_cli, tmp_path):
    script = tmp_path / "refusing.py"
    script.write_text(REFUSING_LOADER)
    # a count it supports: its spec is the loader-spec baseline, as always
    plan, err = run(run_cli, tmp_path, script, "--mesh", "1x4")
    base = plan["baselines"]["loader-spec"]
    assert base["mesh"] == [1, 4] and base["arguments"]["fc1.weight"] == [["model"], []]
    # a count it refuses: no loader-spec baseline on that mesh, a plan all the same, and why
    plan, err = run(run_cli, tmp_path, script, "--mesh", "1x2")
    assert "loader-spec" not in plan["baselines"]
    (note,) = [n for n in plan.get("notes", []) if "get_mesh_config(2)" in n]
    assert "ValueError: num_devices 2 is not supported" in note and "not offered" in note
    assert "error" not in err
    # --evaluate on a refused count prices the module as it is (replicated) and says why
    plan, _ = run(run_cli, tmp_path, script, "--mesh", "1x2", "--evaluate")
    assert "loader-spec" not in plan["baselines"]
    assert any("get_mesh_config(2)" in n for n in plan.get("notes", []))
