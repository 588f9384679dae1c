"""Rule one-axis-contraction: a dim that moves between mesh axes on its way into a matmul is
found and reported (tt-forge-models PR 857: 2-D alternating specs, an axis swap Shardy writes
as a collective_permute or computes at PCC 0.093)."""
from __future__ import annotations

import json
import os

from shard_opt.rules import BY_ID, REPORTED

from conftest import EXAMPLES


def _evaluate(run_cli, tmp_path, spec):
    path, plan_path = tmp_path / "spec.json", tmp_path / "plan.json"
    path.write_text(json.dumps(spec))
    code, _, err = run_cli(os.path.join(EXAMPLES, "mlp.mlir"), "--mesh", "2x4", "--spec", path, "--evaluate",
                           "--no-check", "--plan-json", plan_path, "-o", tmp_path / "out.mlir", "--quiet")
    assert code == 0, err
    return json.loads(plan_path.read_text())


def test_an_axis_swap_into_a_contraction_is_reported(run_cli, tmp_path):
    # fc1 column-parallel on "model", fc2 row-parallel on "batch": the 4096 features move
    # from model to batch on their way into fc2's contraction
    plan = _evaluate(run_cli, tmp_path, {"fc1.weight": ["model", None], "fc1.bias": ["model"],
                                         "fc2.weight": [None, "batch"]})
    rows = {r["rule"]: r for r in plan["safety"]}
    assert rows["one-axis-contraction"]["plan_breaks"] and rows["one-axis-contraction"]["action"] == "report"
    assert "one-axis-contraction" in REPORTED and BY_ID["one-axis-contraction"].citation == "tt_forge_models_one_axis"
    # the same pair on one axis: nothing to report
    plan = _evaluate(run_cli, tmp_path, {"fc1.weight": ["model", None], "fc1.bias": ["model"],
                                         "fc2.weight": [None, "model"]})
    assert not {r["rule"]: r["plan_breaks"] for r in plan["safety"]}["one-axis-contraction"]
    assert plan["cost"]["total_us"] is not None  # a reported rule is never priced infinite
