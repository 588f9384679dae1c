"""--emit-lit-test: a lit + FileCheck test that pins the plan's collectives."""

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest

from shard_opt.emit.lit_test import collective_checks, emit_lit_test
from shard_opt.plan import CollectiveRecord as Collective, Plan, PlanSchemaError
from conftest import CHILD_CEILING_S

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MLP = """module {
  func.func @main(%arg0: tensor<8x16xf32>, %arg1: tensor<32x16xf32>, %arg2: tensor<16x32xf32>) -> tensor<8x16xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [1] : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
    %1 = stablehlo.dot_general %0, %arg2, contracting_dims = [1] x [1] : (tensor<8x32xf32>, tensor<16x32xf32>) -> tensor<8x16xf32>
    return %1 : tensor<8x16xf32>
  }
}
"""


def _annotated_and_evaluated():
    """The MLP with Megatron shardings, and what `--evaluate` prints for it (via the passes)."""
    from shard_opt import ir
    from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline
    from shard_opt.build import collective_entry
    from shard_opt.plan import CollectiveRecord as Collective, CostRecord as Cost, MeshRecord
    from shard_opt.sharding import Mesh, TensorSharding

    m = ir.parse(MLP)
    ctx = PassContext(mesh=Mesh.parse("2x4"))
    ctx.shardings = {0: TensorSharding.of([["batch"], []]), 1: TensorSharding.of([["model"], []]),
                     2: TensorSharding.of([[], ["model"]])}
    PassManager(parse_pipeline("add-mesh, apply-shardings"), ctx).run(m)
    annotated = ir.print_module(m)
    PassManager(parse_pipeline("shardy-propagate, collect-collectives"), ctx).run(m)
    cost = Cost(total_us=30.5, compute_us=20.0, ccl_us=10.5, ccl_count=len(ctx.facts.collectives),
                ccl_bytes=sum(c.bytes_per_device for c in ctx.facts.collectives), memory_per_device_bytes=0,
                fits=True)
    plan = Plan(model="mlp", mesh=MeshRecord(shape=[2, 4], axes=["batch", "model"]), cost=cost,
                system="wh-loudbox", arguments=[], baselines={}, search={},
                collectives=[Collective(**collective_entry(c, {}), op_index=c.op_index) for c in ctx.facts.collectives])
    return annotated, ir.print_module(m), plan


@pytest.fixture(scope="module")
def mlp():
    return _annotated_and_evaluated()


def _filecheck(check_text: str, input_text: str, tmp_path) -> subprocess.CompletedProcess:
    checks = tmp_path / "test.mlir"
    checks.write_text(check_text)
    return subprocess.run([sys.executable, "-m", "filecheck", str(checks)], input=input_text,
                          capture_output=True, text=True, timeout=CHILD_CEILING_S)


def test_structure(mlp):
    annotated, _, plan = mlp
    text = emit_lit_test(annotated, plan, run_args="--mesh 2x4")
    lines = text.splitlines()
    assert lines[0] == "// RUN: shard-opt %s --evaluate --mesh 2x4 | FileCheck %s"
    assert "// CHECK-LABEL: func.func @main" in lines
    assert "// CHECK-SAME: shard_opt.ccl_count = 2 : i64" in lines
    kinds = [ln for ln in lines if ln.startswith("// CHECK: sdy.")]
    assert kinds == ["// CHECK: sdy.all_reduce {", "// CHECK: sdy.all_gather ["]
    assert text.rstrip().endswith(annotated.rstrip())
    # --evaluate is not repeated, and re-emitting from a generated test keeps one RUN line.
    again = emit_lit_test(text, plan, run_args="--evaluate --mesh 2x4")
    assert again == text


def test_passes_on_the_evaluated_module(mlp, tmp_path):
    annotated, evaluated, plan = mlp
    r = _filecheck(emit_lit_test(annotated, plan, run_args="--mesh 2x4"), evaluated, tmp_path)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("old,new", [
    ('// CHECK-SAME: "batch"', '// CHECK-SAME: "model"'),  # wrong axis
    ("// CHECK: sdy.all_gather [", "// CHECK: sdy.all_to_all ["),  # wrong kind
    (": tensor<8x16xf32>", ": tensor<8x32xf32>"),  # wrong shape
    ("shard_opt.ccl_count = 2", "shard_opt.ccl_count = 3"),  # wrong count
])
def test_changing_one_check_line_fails(mlp, tmp_path, old, new):
    annotated, evaluated, plan = mlp
    text = emit_lit_test(annotated, plan, run_args="--mesh 2x4")
    assert old in text
    r = _filecheck(text.replace(old, new, 1), evaluated, tmp_path)
    assert r.returncode != 0


def test_an_extra_collective_fails(mlp, tmp_path):
    annotated, evaluated, plan = mlp
    fewer = dataclasses.replace(plan, collectives=plan.collectives[:1])
    r = _filecheck(emit_lit_test(annotated, fewer, run_args="", pin_annotations=False), evaluated, tmp_path)
    assert r.returncode != 0 and "CHECK-NOT" in r.stderr


def test_brackets_filecheck_would_read_are_literal():
    lines = collective_checks(Collective(kind="all_reduce", axes=["x[[0]]"], shape=[4], dtype="f32",
                                         bytes_per_device=16, component="(model inputs)"))
    assert '// CHECK-SAME{LITERAL}: "x[[0]]"' in lines
    assert "// CHECK-SAME: : tensor<4xf32>" in lines


def test_representative_block_plans_are_refused(mlp):
    annotated, _, plan = mlp
    p = dataclasses.replace(plan, collectives=[dataclasses.replace(plan.collectives[0], count=32)])
    with pytest.raises(ValueError):
        emit_lit_test(annotated, p, run_args="")


def test_generated_test_passes_under_lit_and_a_changed_check_fails(mlp, tmp_path):
    annotated, _, plan = mlp
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(os.path.join(ROOT, "lit_tests", "lit.cfg.py"), suite / "lit.cfg.py")
    good = emit_lit_test(annotated, plan, run_args="--mesh 2x4")
    (suite / "good.mlir").write_text(good)
    lit = shutil.which("lit", path=os.path.dirname(sys.executable))
    assert lit, "lit is not installed beside this Python (pip install -e . installs it)"
    r = subprocess.run([lit, str(suite / "good.mlir"), "-q"], capture_output=True, text=True, timeout=CHILD_CEILING_S)
    assert r.returncode == 0, r.stdout + r.stderr
    (suite / "bad.mlir").write_text(good.replace('// CHECK-SAME: "batch"', '// CHECK-SAME: "model"'))
    r = subprocess.run([lit, str(suite / "bad.mlir"), "-q"], capture_output=True, text=True, timeout=CHILD_CEILING_S)
    assert r.returncode != 0


def test_committed_lit_fixture_matches_the_emitter(mlp):
    """lit_tests/emit/mlp-megatron-2x4.mlir is this emitter's output for the same module."""
    path = os.path.join(ROOT, "lit_tests", "emit", "mlp-megatron-2x4.mlir")
    with open(path) as f:
        committed = f.read()
    checks = [ln for ln in committed.splitlines() if ln.startswith("// CHECK")]
    annotated, _, plan = mlp
    generated = [ln for ln in emit_lit_test(annotated, plan, run_args="--mesh 2x4").splitlines()
                 if ln.startswith("// CHECK")]
    assert checks == generated


def test_a_plan_json_of_another_version_is_refused(mlp):
    annotated, _, plan = mlp
    data = plan.to_json()
    assert emit_lit_test(annotated, data, run_args="") == emit_lit_test(annotated, plan, run_args="")
    with pytest.raises(PlanSchemaError, match="schema_version 0"):
        emit_lit_test(annotated, {**data, "schema_version": 0}, run_args="")
