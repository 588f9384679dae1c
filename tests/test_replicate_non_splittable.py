"""tt-mlir's ReplicateNonSplittableValuesPass as shard-opt mirrors it
(passes/replicate_non_splittable.py): which values it replicates, and the collectives
that follow in ``shardy-propagate``."""

import os

from shard_opt import ir
from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline
from shard_opt.passes.replicate_non_splittable import replicate_non_splittable
from shard_opt.sharding import TensorSharding

EXPERTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "modules",
                       "experts_split_halves.mlir")
MESH = 'sdy.mesh @mesh = <["batch"=2, "model"=4]>'
SPLIT1 = '#sdy.sharding_per_value<[<@mesh, [{}, {"model"}]>]>'
SPLIT0 = '#sdy.sharding_per_value<[<@mesh, [{"model"}, {}]>]>'


def _shardings_after(body: str) -> dict[str, str]:
    module = ir.parse(f"module {{\n  {MESH}\n  func.func @main(%arg0: tensor<8x32xf32>) -> tensor<8x32xf32> {{\n"
                      f"{body}\n    return %arg0 : tensor<8x32xf32>\n  }}\n}}")
    n = replicate_non_splittable(module)
    out = {"changed": n}
    ops = [op for op in ir.ops_in(module.operation) if "sdy.sharding" in op.attributes]
    for i, op in enumerate(ops):  # %0, %1, ... in the order written
        out[f"%{i}"] = TensorSharding.parse(str(op.attributes["sdy.sharding"])).body()
    return out


def test_a_slice_that_narrows_a_split_dim_is_replicated_and_the_others_are_kept():
    got = _shardings_after(f"""
    %0 = stablehlo.slice %arg0 [0:8, 0:16] {{sdy.sharding = {SPLIT1}}} : (tensor<8x32xf32>) -> tensor<8x16xf32>
    %1 = stablehlo.slice %arg0 [0:8, 0:32:2] {{sdy.sharding = {SPLIT1}}} : (tensor<8x32xf32>) -> tensor<8x16xf32>
    %2 = stablehlo.slice %arg0 [0:4, 0:32] {{sdy.sharding = {SPLIT1}}} : (tensor<8x32xf32>) -> tensor<4x32xf32>
    %3 = stablehlo.slice %arg0 [0:8, 1:32:16] {{sdy.sharding = {SPLIT1}}} : (tensor<8x32xf32>) -> tensor<8x2xf32>""")
    assert got["%0"] == "<@mesh, [{}, {}]>"  # [0:16] of a dim split 4 ways: offsets do not line up
    assert got["%1"] == '<@mesh, [{}, {"model"}]>'  # [::2]: every shard takes the same phase
    assert got["%2"] == '<@mesh, [{}, {"model"}]>'  # the narrowed dim is not the split one
    assert got["%3"] == "<@mesh, [{}, {}]>"  # stride 16 does not divide the shard width 8
    assert got["changed"] == 2


def test_iota_on_its_split_dim_and_constants_whose_shards_differ_are_replicated():
    periodic = "[" + ", ".join(["[" + ", ".join(["1.0, 2.0"] * 16) + "]"] * 8) + "]"  # 8x32, period 2 on dim 1
    ramp = "[" + ", ".join("[" + ", ".join(f"{float(c)}" for c in range(32)) + "]" for _ in range(8)) + "]"
    got = _shardings_after(f"""
    %0 = stablehlo.iota dim = 1 {{sdy.sharding = {SPLIT1}}} : tensor<8x32xi32>
    %1 = stablehlo.iota dim = 1 {{sdy.sharding = {SPLIT0}}} : tensor<8x32xi32>
    %2 = stablehlo.constant {{sdy.sharding = {SPLIT1}}} dense<{periodic}> : tensor<8x32xf32>
    %3 = stablehlo.constant {{sdy.sharding = {SPLIT1}}} dense<{ramp}> : tensor<8x32xf32>
    %4 = stablehlo.constant {{sdy.sharding = {SPLIT1}}} dense<3.0> : tensor<8x32xf32>""")
    assert got["%0"] == "<@mesh, [{}, {}]>"  # 0..31 split on its iota dim
    assert got["%1"] == '<@mesh, [{"model"}, {}]>'  # split across rows, each row the same 0..31
    assert got["%2"] == '<@mesh, [{}, {"model"}]>'  # every shard holds the same values
    assert got["%3"] == "<@mesh, [{}, {}]>"  # a ramp: every shard differs
    assert got["%4"] == '<@mesh, [{}, {"model"}]>'  # a splat
    assert got["changed"] == 2


def test_a_split_half_of_a_fused_projection_is_gathered_as_tt_mlir_does():
    """Mixtral's experts in small (tests/fixtures/modules/experts_split_halves.mlir).
    Shardy alone keeps the gate|up halves split on `batch` (a local slice each); tt-mlir
    replicates them, so the experts' dim is gathered first (what tt-mlir compiled for
    Mixtral 8x7B 2x4: benchmarks/results.md). The test fails without the mirror."""
    with open(EXPERTS) as f:
        text = f.read()
    module = ir.parse(text)
    ctx = PassContext()
    PassManager(parse_pipeline("shardy-propagate{guard-moved-dims=false}, collect-collectives"), ctx).run(module)
    kinds = sorted((c.kind, c.axes) for c in ctx.facts.collectives)
    assert kinds.count(("all_gather", ("model",))) == 2, kinds  # each half's experts' dim gathered
    # Shardy's own pipeline (no mirror) slices the halves locally and gathers nothing
    module = ir.parse(text)
    ctx = PassContext()
    PassManager(parse_pipeline("shardy-propagate{pipeline=sdy guard-moved-dims=false}, collect-collectives"),
                ctx).run(module)
    assert ("all_gather", ("model",)) not in [(c.kind, c.axes) for c in ctx.facts.collectives]
