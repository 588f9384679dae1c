"""A loader's activation spec (load_activation_shard_spec, --spec "activations") priced in the
loader-spec baseline with its weight spec (issue 24 item 5)."""

from __future__ import annotations

import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SP = os.path.join(ROOT, "tests", "fixtures", "scripts", "sp_dit_block.py")


def run(run_cli, tmp_path, *args, name="plan.json", out=os.devnull):
    plan_path = tmp_path / name
    code, _, err = run_cli(*args, "--plan-json", plan_path, "-o", out, "--no-cache")
    assert code == 0, err
    return json.loads(plan_path.read_text()), err


@pytest.fixture(scope="module")
def weights_only(tmp_path_factory) -> str:
    """The fixture without its load_activation_shard_spec (the weight spec alone): one file
    for the module's tests (a load script is lowered once per path and arguments)."""
    text = open(SP).read().replace("def load_activation_shard_spec(", "def _unused_activation_spec(")
    path = tmp_path_factory.mktemp("sp") / "sp_weights_only.py"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """``shard-opt sp_dit_block.py --mesh 2x4 --evaluate`` (the loader's weight and activation
    specs priced as written): (the plan JSON, the ``-o`` module's path), one run for the
    three tests that read it."""
    from shard_opt.cli import main

    d = tmp_path_factory.mktemp("sp-evaluated")
    plan_path, out = d / "plan.json", d / "out.mlir"
    code = main([SP, "--mesh", "2x4", "--evaluate", "--plan-json", str(plan_path), "-o", str(out), "--no-cache"])
    assert code == 0, f"shard-opt {SP} --mesh 2x4 --evaluate exited {code}"
    return json.loads(plan_path.read_text()), out


def test_the_activation_spec_is_priced_and_differs_from_the_weight_spec_alone(run_cli, tmp_path, weights_only):
    plan, err = run(run_cli, tmp_path, SP, "--mesh", "2x4")
    base = plan["baselines"]["loader-spec"]
    # the back-to-back pair at proj_in (replicated, then L on "batch"), the gather at proj_out
    assert base["activations"] == {"proj_in": [[[], [], []], [[], ["batch"], []]], "proj_out": [[[], [], []]]}
    kinds = [(c["kind"], c["axes"]) for c in base["collectives"]]
    assert ("all_gather", ["batch"]) in kinds  # the tokens gathered at proj_out: what SP implies
    assert ("all_reduce", ["model"]) in kinds  # the row-parallel down's partial sums, as before
    # a module with no weight names no value shard-opt can find: said, not dropped
    assert any(u.startswith("blocks.0.act (activation spec") for u in base["unmatched"])
    assert "blocks.0.act" in err
    alone, _ = run(run_cli, tmp_path, weights_only, "--mesh", "2x4", name="alone.json")
    w = alone["baselines"]["loader-spec"]
    assert "activations" not in w
    assert not any(c["axes"] == ["batch"] for c in w["collectives"])  # "batch" idle without it
    assert w["total_us"] != base["total_us"] and w["ccl_count"] != base["ccl_count"]


def test_evaluate_prices_the_activation_spec_too(run_cli, tmp_path, weights_only, evaluated):
    plan, _ = evaluated
    assert any(c["kind"] == "all_gather" and c["axes"] == ["batch"] for c in plan["collectives"])
    assert plan["baselines"]["loader-spec"]["activations"]["proj_out"] == [[[], [], []]]
    alone, _ = run(run_cli, tmp_path, weights_only, "--mesh", "2x4", "--evaluate", name="alone.json")
    assert alone["cost"]["total_us"] != plan["cost"]["total_us"]


def test_a_json_spec_names_intermediates_by_op_and_shapes(run_cli, tmp_path, weights_only):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "spec": {"blocks.*.up.weight": ["model", None], "blocks.*.down.weight": [None, "model"]},
        "activations": {"stablehlo.reshape 256x128->1x256x128": {"then": [[None, None, None], [None, "batch", None]]},
                        "proj_out": [None, None, None],
                        "stablehlo.transpose 1x2x3->3x2x1": [None, None, None]},  # no such op
    }))
    plan, _ = run(run_cli, tmp_path, weights_only, "--mesh", "2x4", "--spec", spec, "--evaluate")
    base = plan["baselines"]["loader-spec"]
    assert any(u.startswith("stablehlo.transpose 1x2x3->3x2x1") for u in base["unmatched"])
    assert any(c["axes"] == ["batch"] for c in plan["collectives"])


def test_the_dit_bill_counts_collectives_by_kind_and_skips_slices():
    import sys

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import bench_experts

    def c(kind, axes, n):
        return {"kind": kind, "axes": axes, "bytes_per_device": n}

    layer = [c("all_gather", ["batch"], 800), c("all_gather", ["batch"], 800), c("all_reduce", ["model"], 1000),
             c("all_reduce", ["model"], 10), c("all_slice", ["batch"], 1000)]
    text = bench_experts.bill_text(layer)
    assert text.startswith("3 big + 1 small")  # the all_slice moves nothing: not a CCL
    assert "all_gather@batch x2" in text and "small: all_reduce@model x1" in text
    expert = {"collectives": [{**x, "layer": 0} for x in layer] + [{**layer[2], "layer": 1}]}
    assert "expert 3 big + 1 small" in bench_experts.dit_bill({"layer_collectives": layer}, expert)


def test_evaluate_of_an_evaluated_modules_output_prices_it_the_same(run_cli, tmp_path, evaluated):
    """Issue 24: ``--evaluate`` of the ``-o`` module an ``--evaluate`` run wrote (the
    propagated module: its collectives explicit, the activation spec's constraints spent
    into them) gives the same cost, collectives and module. It used to propagate the module
    again, and Shardy re-inserted the all_reduce of each partial sum (282.6 -> 336.7 us,
    5 -> 7 collectives)."""
    first, out = evaluated
    again = tmp_path / "again.mlir"
    assert "sdy.all_reduce" in out.read_text()  # the written module is the partitioned one
    second, _ = run(run_cli, tmp_path, out, "--mesh", "2x4", "--evaluate", name="second.json", out=again)

    def bill(plan):
        return sorted((c["kind"], c["axes"], c["shape"], c["bytes_per_device"]) for c in plan["collectives"])

    assert sum(c["kind"] == "all_reduce" for c in first["collectives"]) == 2  # one per block's row-parallel down
    assert bill(second) == bill(first)
    assert second["cost"] == first["cost"]
    assert again.read_text() == out.read_text()
    assert any("priced as written" in n for n in second["notes"])
    # a search from it would partition it again: refused in one line
    code, _, err = run_cli(out, "--mesh", "2x4", "-o", os.devnull, "--no-cache")
    assert code == 1 and "collectives are already explicit" in err and "Traceback" not in err


def _residual_splits(text: str) -> set[str]:
    """The shardings of the [1, 256, 128] adds (the blocks' residual connections and
    proj_in's bias add) in a propagated module, read from its text, not from the rule."""
    import re

    return {m for line in text.splitlines() if "stablehlo.add" in line and "tensor<1x256x128x" in line
            for m in re.findall(r"sharding_per_value<\[<@mesh, (\[[^>]*\])>", line)}


def test_residual_stream_flags_a_hidden_split_stream_not_a_sequence_split_one(run_cli, tmp_path, weights_only,
                                                                             evaluated):
    """The recorded limit (expert_specs.md, compiler limit 1) is a residual stream split on
    its hidden features on the axis row-parallel layers reduce over. The loader's sequence
    parallelism splits the stream's tokens on "batch": not flagged. The same stack with its
    stream constrained onto "model" on hidden (the down projections' all_reduces become
    reduce_scatters): flagged."""
    seq, seq_out = evaluated
    hid_out = tmp_path / "hid.mlir"
    assert '[{}, {"batch"}, {}]' in _residual_splits(seq_out.read_text())
    assert not any('"model"' in s for s in _residual_splits(seq_out.read_text()))
    assert {r["rule"]: r["plan_breaks"] for r in seq["safety"]}["residual-stream"] is False
    spec = tmp_path / "hidden.json"
    spec.write_text(json.dumps({
        "spec": {"blocks.*.up.weight": ["model", None], "blocks.*.up.bias": ["model"],
                 "blocks.*.down.weight": [None, "model"]},
        "activations": {"proj_in": {"then": [[None, None, None], [None, None, "model"]]}}}))
    hid, _ = run(run_cli, tmp_path, weights_only, "--mesh", "2x4", "--evaluate", "--spec", spec,
                 name="hid.json", out=hid_out)
    assert '[{}, {}, {"model"}]' in _residual_splits(hid_out.read_text())
    assert ("reduce_scatter", ["model"]) in [(c["kind"], c["axes"]) for c in hid["collectives"]]
    assert {r["rule"]: r["plan_breaks"] for r in hid["safety"]}["residual-stream"] is True
