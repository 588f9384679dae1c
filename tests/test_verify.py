"""shard_opt.verify: numerics of a plan on virtual CPU devices, and XLA's collectives vs Shardy's.

Real XLA throughout (jaxlib's CPU backend with 8 virtual devices); nothing is mocked.
"""

import os

# Must happen before jax initialises its backends (once per process); conftest should
# set it too, for test orders where another module starts jax first.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()


import pytest

from shard_opt import ir
from shard_opt.errors import UserError
from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline
from shard_opt.sharding import Mesh, TensorSharding
from shard_opt.verify import (
    compare_collectives, parse_hlo_collectives, verify_numerics, xla_collectives,
)

# torch-mlir output of a 2-layer MLP (args: fc1.weight [256,64], fc2.weight [64,256], x [4,32,64]).
MLP = """module {
  func.func @main(%arg0: tensor<256x64xf32>, %arg1: tensor<64x256xf32>, %arg2: tensor<4x32x64xf32>) -> tensor<4x32x64xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<4x32x256xf32>
    %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<256x64xf32>) -> tensor<64x256xf32>
    %1 = stablehlo.reshape %arg2 : (tensor<4x32x64xf32>) -> tensor<128x64xf32>
    %2 = stablehlo.dot_general %1, %0, contracting_dims = [1] x [0] : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
    %3 = stablehlo.reshape %2 : (tensor<128x256xf32>) -> tensor<4x32x256xf32>
    %4 = stablehlo.maximum %3, %cst : tensor<4x32x256xf32>
    %5 = stablehlo.transpose %arg1, dims = [1, 0] : (tensor<64x256xf32>) -> tensor<256x64xf32>
    %6 = stablehlo.reshape %4 : (tensor<4x32x256xf32>) -> tensor<128x256xf32>
    %7 = stablehlo.dot_general %6, %5, contracting_dims = [1] x [0] : (tensor<128x256xf32>, tensor<256x64xf32>) -> tensor<128x64xf32>
    %8 = stablehlo.reshape %7 : (tensor<128x64xf32>) -> tensor<4x32x64xf32>
    return %8 : tensor<4x32x64xf32>
  }
}
"""

COLUMN_ROW = {0: TensorSharding.of([["model"], []]), 1: TensorSharding.of([[], ["model"]])}


def plan(text: str, mesh: str, shardings: dict):
    """(annotated text, Shardy's collectives) for a plan, through the project's passes."""
    module = ir.parse(text)
    ctx = PassContext(mesh=Mesh.parse(mesh), shardings=shardings)
    PassManager(parse_pipeline("builtin.module(add-mesh, apply-shardings)"), ctx).run(module)
    annotated = ir.print_module(module)
    PassManager(parse_pipeline("builtin.module(shardy-propagate, collect-collectives)"), ctx).run(module)
    return annotated, ctx.facts.collectives, ir.print_module(module)


def test_mlp_column_row_plan_verifies_on_8_devices_and_xla_agrees():
    annotated, shardy, _ = plan(MLP, "2x4", COLUMN_ROW)

    result = verify_numerics(annotated, num_devices=8)
    assert result.passed, result.summary()
    assert (result.rtol, result.atol) == (1e-4, 1e-5)  # f32
    assert result.max_rel_err < 1e-5
    assert 0 < result.max_abs_err  # the sharded sums really ran in another order

    assert [c.kind for c in shardy] == ["all_reduce"]
    xla = xla_collectives(annotated, 8)
    assert [(x["kind"], x["bytes_per_device"], x["group_size"]) for x in xla] == [("all_reduce", 128 * 64 * 4, 4)]
    cmp = compare_collectives(shardy, xla)
    assert cmp.agrees and len(cmp.matched) == 1 and not cmp.differences, cmp.report()


def test_unreduced_argument_is_caught():
    # The same plan, but x is declared unreduced over "model": each device's copy would
    # be a partial sum, so XLA all-reduces it first and the result is 4x too large.
    annotated, _, _ = plan(MLP, "2x4", COLUMN_ROW)
    wrong = annotated.replace(
        "%arg2: tensor<4x32x64xf32>",
        '%arg2: tensor<4x32x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}, {}], unreduced={"model"}>}',
    )
    assert wrong != annotated
    result = verify_numerics(wrong, num_devices=8)
    assert not result.passed
    assert result.max_rel_err > 0.5
    assert result.outputs[0].bad_elements > 0
    assert "FAIL" in result.summary()
    # XLA shows the extra all-reduce of the argument that Shardy's plan did not have.
    assert [x["kind"] for x in xla_collectives(wrong, 8)].count("all_reduce") == 2


MANUAL = """module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @main(%arg0: tensor<16x32xf32>, %arg1: tensor<32x8xf32>) -> tensor<16x8xf32> {
    %0 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{}, {"model"}]>, <@mesh, [{"model"}, {}]>] out_shardings=[<@mesh, [{}, {}]>] manual_axes={"batch", "model"} (%arg2: tensor<16x8xf32>, %arg3: tensor<8x8xf32>) {
      %1 = stablehlo.dot_general %arg2, %arg3, contracting_dims = [1] x [0] : (tensor<16x8xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
      REDUCE
      sdy.return %2 : tensor<16x8xf32>
    } : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
    return %0 : tensor<16x8xf32>
  }
}
"""
PSUM = """%2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<16x8xf32>) -> tensor<16x8xf32>"""
DOT = """module {
  func.func @main(%arg0: tensor<16x32xf32>, %arg1: tensor<32x8xf32>) -> tensor<16x8xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
    return %0 : tensor<16x8xf32>
  }
}
"""
TANH = """module {
  func.func @main(%arg0: tensor<16x32xf32>) -> tensor<16x32xf32> {
    %0 = stablehlo.tanh %arg0 : tensor<16x32xf32>
    return %0 : tensor<16x32xf32>
  }
}
"""


def test_per_device_code_missing_its_all_reduce_fails_against_a_reference():
    right = MANUAL.replace("REDUCE", PSUM)
    wrong = MANUAL.replace("REDUCE", "%2 = stablehlo.add %1, %1 : tensor<16x8xf32>")
    assert verify_numerics(right, num_devices=8, reference=DOT).passed
    bad = verify_numerics(wrong, num_devices=8, reference=DOT)
    assert not bad.passed and bad.max_rel_err > 0.1, bad.summary()
    with pytest.raises(UserError, match="reference"):  # per-device code cannot be stripped
        verify_numerics(right, num_devices=8)


def test_bf16_plan_is_checked_widened_to_f32():
    annotated, shardy, _ = plan(MLP.replace("f32", "bf16"), "2x4", COLUMN_ROW)
    result = verify_numerics(annotated, num_devices=8)
    assert result.passed, result.summary()
    assert (result.rtol, result.atol) == (1e-4, 1e-5) and result.reference == "f32"  # checked widened to f32
    # XLA's CPU backend all-reduces bf16 partial sums in f32: the same tensor, twice the bytes.
    cmp = compare_collectives(shardy, xla_collectives(annotated, 8))
    assert cmp.agrees and len(cmp.matched) == 1, cmp.report()
    assert "reduces bf16 in f32" in cmp.matched[0].note


def test_propagated_module_strips_to_the_same_program():
    annotated, _, propagated = plan(MLP, "2x4", COLUMN_ROW)
    stripped = ir.strip_sharding(propagated)
    assert "sdy." not in stripped
    assert ir.strip_sharding(annotated).count("stablehlo.dot_general") == stripped.count("stablehlo.dot_general") == 2
    # Shardy's explicit collectives are identities on the global value.
    assert verify_numerics(annotated, num_devices=8, reference=stripped).max_abs_err < 1e-3
    # The propagated module itself runs too (its ops keep Shardy's shardings).
    assert verify_numerics(propagated, num_devices=8).passed
    assert [x["kind"] for x in xla_collectives(propagated, 8)] == ["all_reduce"]


def test_xla_lowering_differences_are_explained():
    # reduce_scatter: split contraction, result left split -> XLA CPU: all-reduce + dynamic-slice.
    module = ir.parse(DOT)
    ctx = PassContext(mesh=Mesh.parse("2x4"), shardings={0: TensorSharding.of([[], ["model"]]),
                                                         1: TensorSharding.of([["model"], []])},
                      result_shardings={0: TensorSharding.of([["model"], []])})
    PassManager(parse_pipeline("builtin.module(add-mesh, apply-shardings)"), ctx).run(module)
    annotated = ir.print_module(module)
    PassManager(parse_pipeline("builtin.module(shardy-propagate, collect-collectives)"), ctx).run(module)
    assert [c.kind for c in ctx.facts.collectives] == ["reduce_scatter"]
    assert verify_numerics(annotated, num_devices=8).passed  # a split output is checked piece by piece
    cmp = compare_collectives(ctx.facts.collectives, xla_collectives(annotated, 8))
    assert cmp.agrees and "dynamic-slice" in cmp.differences[0].reason, cmp.report()

    # A two-axis all_gather: XLA gathers one axis at a time.
    annotated, shardy, _ = plan(TANH, "2x4", {0: TensorSharding.of([["batch"], ["model"]])})
    assert [(c.kind, c.group_size) for c in shardy] == [("all_gather", 8)]
    cmp = compare_collectives(shardy, xla_collectives(annotated, 8))
    assert cmp.agrees and "one mesh axis at a time" in cmp.differences[0].reason, cmp.report()


def test_compare_reports_a_real_disagreement():
    shardy = [{"kind": "all_reduce", "bytes_per_device": 4096, "group_size": 4, "dtype": "f32"}]
    xla = [{"kind": "all_gather", "hlo_op": "all-gather", "operand_shapes": [("f32", [16, 8])],
            "operand_bytes": [512], "bytes_per_device": 512, "group_size": 4}]
    cmp = compare_collectives(shardy, xla)
    assert not cmp.agrees and len(cmp.unexplained) == 2
    assert "DISAGREE" in cmp.report()


def test_parse_hlo_collective_forms():
    hlo = """
ENTRY %main (p: f32[16,8], q: f32[4,8]) -> f32[16,8] {
  %p = f32[16,8]{1,0} parameter(0)
  %q = f32[4,8]{1,0} parameter(1)
  %ars = f32[16,8]{1,0} all-reduce-start(%p), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%add
  %ard = f32[16,8]{1,0} all-reduce-done(%ars)
  %ags = (f32[4,8]{1,0}, f32[16,8]{1,0}) all-gather-start(%q), channel_id=2, replica_groups=[2,4]<=[8], dimensions={0}, use_global_device_ids=true
  %t = (f32[16,8]{1,0}, f32[4,8]{1,0}) all-reduce(%p, %q), channel_id=3, replica_groups=mesh['axis_0'=2,'axis_1'=4], device_ids=([2,4]T(1,0)) {'axis_0'}, to_apply=%add
  %cp = f32[4,8]{1,0} collective-permute(%q), channel_id=4, source_target_pairs={{0,1},{1,0}}
  ROOT %rs = f32[4,8]{1,0} reduce-scatter(%p), channel_id=5, replica_groups={}, dimensions={0}, to_apply=%add
}
"""
    got = parse_hlo_collectives(hlo, 8)
    assert [(c["hlo_op"], c["group_size"], c["num_groups"], c["bytes_per_device"]) for c in got] == [
        ("all-reduce-start", 4, 2, 512),
        ("all-gather-start", 4, 2, 128),
        ("all-reduce", 2, 4, 640),
        ("collective-permute", 2, 1, 128),
        ("reduce-scatter", 8, 1, 512),
    ]
    assert got[0]["async"] and not got[2]["async"]
    assert got[2]["operand_bytes"] == [512, 128]


def test_mesh_size_must_match_devices():
    annotated, _, _ = plan(MLP, "2x4", COLUMN_ROW)
    with pytest.raises(UserError, match="num_devices"):
        verify_numerics(annotated, num_devices=4)


def test_i64_inputs_reach_xla_at_their_width():
    """Token ids are i64: they must not be narrowed to i32 on the way to the devices."""
    text = """module {
  func.func @main(%ids: tensor<4x32xi64>, %w: tensor<32x8xf32>) -> tensor<4x8xf32> {
    %0 = stablehlo.convert %ids : (tensor<4x32xi64>) -> tensor<4x32xf32>
    %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0] : (tensor<4x32xf32>, tensor<32x8xf32>) -> tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
}"""
    annotated, _, _ = plan(text, "1x2", {1: TensorSharding.of([["model"], []])})
    result = verify_numerics(annotated, num_devices=2)
    assert result.passed, result.summary()


def test_reading_collectives_without_llvm_optimization_changes_no_collective():
    """``xla_collectives`` compiles with ``to_run=False`` (LLVM optimization off, for speed):
    the partitioned HLO's collectives are those of a compile meant to run."""
    annotated, _, _ = plan(MLP, "2x4", COLUMN_ROW)
    text = ir.xla_optimized_hlo
    ran = parse_hlo_collectives(text(ir.xla_compile(annotated, 8)), 8)
    read = parse_hlo_collectives(text(ir.xla_compile(annotated, 8, to_run=False)), 8)
    assert [(c["kind"], c["bytes_per_device"], c["group_size"]) for c in read] == \
        [(c["kind"], c["bytes_per_device"], c["group_size"]) for c in ran] == [("all_reduce", 128 * 64 * 4, 4)]
