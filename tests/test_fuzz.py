"""Fuzz: random StableHLO programs and shardings through propagation and the numerics check.

Every generated program must parse, propagate through Shardy with explicit collectives
(add-mesh, apply-shardings, shardy-propagate, collect-collectives) without crashing,
and compute the same values sharded on the mesh's devices as unsharded
(``verify_numerics``). Where the search driver exists, the program also goes through
the whole search and the winning plan is checked the same way.

The suite draws 6 sharded programs; a longer run (hundreds, any seed) with a table of
results: ``python benchmarks/fuzz_long.py``.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import functools
import math

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import strategies
from shard_opt import ir
from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline
from shard_opt.verify import verify_numerics

FUZZ = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


def propagate(case):
    """(annotated text, pass context after collect-collectives) for a fuzz case."""
    module = ir.parse(case.program.text)
    ctx = PassContext(mesh=case.mesh, shardings=dict(case.shardings), result_shardings=dict(case.result_shardings))
    PassManager(parse_pipeline("builtin.module(add-mesh, apply-shardings)"), ctx).run(module)
    annotated = ir.print_module(module)
    PassManager(parse_pipeline("builtin.module(shardy-propagate, collect-collectives)"), ctx).run(module)
    return annotated, ctx


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.programs())
def test_every_generated_program_parses_and_its_matmul_work_is_counted(program):
    """shard-opt reads each program (ir.parse) and prices the work of its dot_generals
    (analysis.extract_facts, the facts the cost model prices) as the generator counted it
    while drawing the shapes; every argument is read with its shape."""
    from shard_opt.analysis import extract_facts

    facts = extract_facts(ir.parse(program.text))
    assert facts.arg_global_elements == [math.prod(s) for s in program.arg_shapes]
    assert sum(op.flops for op in facts.ops if op.kind == "matmul") == program.matmul_flops


@FUZZ
@given(strategies.sharded_programs())
def test_every_propagated_plan_matches_unsharded(case):
    annotated, ctx = propagate(case)
    assert ctx.facts is not None
    result = verify_numerics(annotated, num_devices=case.mesh.num_devices)
    assert result.passed, f"{case.describe()}\n{result.summary()}\n{annotated}"


@functools.cache
@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],  # no shrinking: a search costs ~1 s
          suppress_health_check=list(HealthCheck))
@given(strategies.programs(max_ops=5, dims=strategies.BIG_DIMS, max_elements=strategies.BIG_MAX_ELEMENTS,
                           max_rank=2))
def test_search_winner_matches_unsharded(program):
    mesh, annotated = strategies.search_plan(program, "2x4")
    result = verify_numerics(annotated, num_devices=mesh.num_devices)
    assert result.passed, f"{result.summary()}\n{annotated}"


BLOCK = """module {
  func.func @main(%arg0: tensor<32x512xf32>, %arg1: tensor<512x2048xf32>, %arg2: tensor<2048x512xf32>) -> tensor<32x512xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<32x512xf32>, tensor<512x2048xf32>) -> tensor<32x2048xf32>
    %1 = stablehlo.tanh %0 : tensor<32x2048xf32>
    %2 = stablehlo.dot_general %1, %arg2, contracting_dims = [1] x [0] : (tensor<32x2048xf32>, tensor<2048x512xf32>) -> tensor<32x512xf32>
    return %2 : tensor<32x512xf32>
  }
}
"""


def test_search_winner_that_splits_weights_matches_unsharded():
    # Big enough that splitting the weights wins (the random programs above are small,
    # so their winners are mostly replicated and check little). 32 rows, one whole tile: at
    # 8 rows (before 2026-12-05) each collective moves a 32-row tile all the same, and the
    # winner splits fc2 by columns only, which is bit-exact and checks no reduction.
    mesh, annotated = strategies.search_plan(strategies.Program(BLOCK, [(32, 512), (512, 2048), (2048, 512)]), "2x4")
    assert '{"' in annotated, "the search should split this block's weights"
    result = verify_numerics(annotated, num_devices=mesh.num_devices)
    assert result.passed, f"{result.summary()}\n{annotated}"
    assert result.max_abs_err > 0  # the split matmuls really ran on several devices
