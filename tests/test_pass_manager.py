"""Pass registry, pipeline parsing and the passes on a real module (real Shardy)."""

import os

import pytest

from shard_opt import ir
from shard_opt.errors import PassError, UserError
from shard_opt.pass_manager import MlirPass, PassContext, PassManager, list_passes, parse_pipeline
from shard_opt.passes.add_mesh import AddMesh
from shard_opt.passes.apply_shardings import ApplyShardings, parse_shardings_option
from shard_opt.sharding import Mesh, TensorSharding

MLP = """
func.func @main(%w1: tensor<256x64xf32>, %w2: tensor<64x256xf32>, %x: tensor<128x64xf32>) -> tensor<128x64xf32> {
  %0 = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
  %1 = stablehlo.tanh %0 : tensor<128x256xf32>
  %2 = stablehlo.dot_general %1, %w2, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
  return %2 : tensor<128x64xf32>
}
"""


def run(pipeline, shardings=None, mesh="2x4"):
    module = ir.parse(MLP)
    ctx = PassContext(mesh=Mesh.parse(mesh), shardings=shardings or {})
    PassManager(parse_pipeline(pipeline), ctx).run(module)
    return module, ctx


def test_pipeline_options_map_onto_fields():
    passes = parse_pipeline("builtin.module(add-mesh{shape=1x8 axes=x,y}, apply-shardings{replicate-outputs=false})")
    assert passes == [AddMesh(shape="1x8", axes="x,y"), ApplyShardings(replicate_outputs=False)]
    assert passes[0].pipeline_text() == "add-mesh{shape=1x8 axes=x,y}"


def test_shardy_passes_run_by_name():
    (p,) = parse_pipeline("sdy-basic-propagate")
    assert isinstance(p, MlirPass) and p.name == "sdy-basic-propagate"


@pytest.mark.parametrize("bad, msg", [
    ("no-such-pass", "unknown pass"),
    ("add-mesh{colour=red}", "unknown option 'colour'"),
    ("apply-shardings{replicate-outputs=maybe}", "not a valid bool"),
    ("add-mesh{shape}", "needs key=value"),
])
def test_bad_pipelines_are_user_errors(bad, msg):
    with pytest.raises(UserError, match=msg):
        parse_pipeline(bad)


def test_list_passes_has_the_core_passes():
    names = [n for n, _ in list_passes()]
    for n in ("add-mesh", "apply-shardings", "shardy-propagate", "collect-collectives"):
        assert n in names


def test_column_then_row_gives_one_all_reduce():
    shardings = parse_shardings_option("0:model/-,1:-/model")
    assert shardings[0] == TensorSharding.of([["model"], []])
    _, ctx = run("add-mesh, apply-shardings, shardy-propagate, collect-collectives", shardings)
    (c,) = ctx.facts.collectives
    assert (c.kind, c.axes, c.global_shape, c.group_size) == ("all_reduce", ("model",), (128, 64), 4)
    assert c.bytes_per_device == 128 * 64 * 4
    assert c.producer == "stablehlo.dot_general"


def test_facts_match_the_printed_ir():
    """Whatever Shardy prints is what collect-collectives reports: count and kinds agree."""
    shardings = {0: TensorSharding.of([[], ["model"]]), 2: TensorSharding.of([["batch"], []])}
    module, ctx = run("add-mesh, apply-shardings, shardy-propagate, collect-collectives", shardings)
    text = ir.print_module(module)
    printed = [ln.split("sdy.")[1].split(" ")[0] for ln in text.splitlines()
               if "= sdy." in ln and "sdy.constant" not in ln]
    assert printed == [c.kind for c in ctx.facts.collectives]
    assert printed  # this layout needs communication
    assert f"shard_opt.ccl_count = {len(printed)}" in text


def test_per_device_flops_shrink_with_the_split():
    _, rep = run("add-mesh, apply-shardings, shardy-propagate, collect-collectives")
    _, col = run("add-mesh, apply-shardings, shardy-propagate, collect-collectives",
                 parse_shardings_option("0:model/-,1:-/model"))
    full = sum(o.flops for o in rep.facts.ops if o.name == "stablehlo.dot_general")
    split = sum(o.flops for o in col.facts.ops if o.name == "stablehlo.dot_general")
    assert full == 2 * (2 * 128 * 64 * 256)
    assert split * 4 == full


def test_failing_pipeline_writes_a_repro():
    module = ir.parse(MLP)
    bad = {0: TensorSharding.of([["nope"], []])}  # an axis the mesh does not have
    ctx = PassContext(mesh=Mesh.parse("2x4"), shardings=bad)
    with pytest.raises(PassError, match='unknown axis name: "nope"') as e:
        PassManager(parse_pipeline("add-mesh, apply-shardings, shardy-propagate"), ctx).run(module)
    assert "sdy-user-priority-propagate" in str(e.value)  # the command that reproduces it
    with open(e.value.repro_path) as f:
        assert '"nope"' in f.read()


def test_apply_shardings_rejects_missing_argument():
    with pytest.raises(UserError, match="no argument 7"):
        run("add-mesh, apply-shardings{shardings=7:model/-}")


def test_sub_axis_collective_counts_only_its_devices():
    """A gather over the sub-axis "model":(2)2 involves 2 devices, not the 4 of "model"."""
    text = """module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}) -> (tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model":(1)2}, {}]>}) {
    return %arg0 : tensor<8x16xf32>
  }
}"""
    module = ir.parse(text)
    ctx = PassContext()
    PassManager(parse_pipeline("shardy-propagate, collect-collectives"), ctx).run(module)
    (c,) = ctx.facts.collectives
    assert c.kind == "all_gather" and c.axes == ("model",)
    assert c.group_size == 2
    assert c.in_local_shape == (2, 16) and c.out_local_shape == (4, 16)


def test_collectives_inside_called_functions_count_at_each_call():
    """JAX lowers helpers to private functions: their collectives count once per call."""
    text = """module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @main(%w1: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %x: tensor<128x256xf32>) -> (tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = func.call @proj(%x, %w1) : (tensor<128x256xf32>, tensor<256x64xf32>) -> tensor<128x64xf32>
    %1 = func.call @proj(%x, %w1) : (tensor<128x256xf32>, tensor<256x64xf32>) -> tensor<128x64xf32>
    %2 = stablehlo.add %0, %1 : tensor<128x64xf32>
    return %2 : tensor<128x64xf32>
  }
  func.func private @proj(%a: tensor<128x256xf32>, %b: tensor<256x64xf32>) -> tensor<128x64xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<128x256xf32>, tensor<256x64xf32>) -> tensor<128x64xf32>
    return %0 : tensor<128x64xf32>
  }
}"""
    # Shardy's own pipeline keeps the call: the callee's all_reduce counts at each call site
    module = ir.parse(text)
    ctx = PassContext()
    PassManager(parse_pipeline("shardy-propagate{pipeline=sdy}, collect-collectives"), ctx).run(module)
    printed = ir.print_module(module)
    callee = printed[printed.index("func.func private @proj"):]
    assert callee.count("sdy.all_reduce {\"model\"}") == 1  # one all_reduce, in the callee
    assert [(c.kind, c.axes) for c in ctx.facts.collectives] == [("all_reduce", ("model",))] * 2
    dots = [o for o in ctx.facts.ops if o.name == "stablehlo.dot_general"]
    assert len(dots) == 2 and dots[0].flops == 2 * 128 * 64 * 256 // 4  # local K = 256 / 4
    # tt-mlir's pipeline inlines first (its inliner), and its cse then keeps one of the two
    # identical call sites' dot and all_reduce
    module = ir.parse(text)
    ctx = PassContext()
    PassManager(parse_pipeline("shardy-propagate, collect-collectives"), ctx).run(module)
    printed = ir.print_module(module)
    assert "@proj" not in printed and printed.count("sdy.all_reduce {\"model\"}") == 1
    assert [(c.kind, c.axes) for c in ctx.facts.collectives] == [("all_reduce", ("model",))]
    assert [o.flops for o in ctx.facts.ops if o.name == "stablehlo.dot_general"] == [2 * 128 * 64 * 256 // 4]


def test_failed_pipeline_writes_its_input_as_a_repro():
    text = 'module {\n  func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n    return %arg0 : tensor<4xf32>\n  }\n}\n'
    module = ir.parse(text)
    with pytest.raises(PassError) as info:
        ir.run_pipeline(module, "builtin.module(no-such-pass)", name="t", verify=False)
    with open(info.value.repro_path) as f:
        repro = f.read()
    os.unlink(info.value.repro_path)
    assert ir.print_module(ir.parse(repro)) == ir.print_module(module)
    assert "loc(" in repro  # with debug info, as the repro habit wants


def test_constraint_of_the_wrong_rank_is_a_user_error():
    text = """module {
  sdy.mesh @mesh = <["model"=4]>
  func.func @main(%arg0: tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32> {
    %0 = stablehlo.reshape %arg0 : (tensor<1x8x64xf32>) -> tensor<1x8x4x16xf32>
    return %0 : tensor<1x8x4x16xf32>
  }
}"""
    with pytest.raises(UserError, match="has 2 dims, the reshape's result has 4"):
        PassManager(parse_pipeline("builtin.module(apply-constraints{constraints=1x8x64xf32->1x8x4x16xf32=-/model})"),
                    PassContext()).run(ir.parse(text))


def test_a_python_pass_that_crashes_leaves_a_repro_and_the_command():
    """Any failing pass, Python or MLIR, writes the IR it was given (the passes before it
    replayed on the pipeline's input) and names the command that reproduces it."""
    from dataclasses import dataclass

    from shard_opt.pass_manager import ModulePass

    @dataclass(frozen=True)
    class Boom(ModulePass):
        name = "boom"

        def apply(self, ctx, module):
            raise RuntimeError("the pass broke")

    module = ir.parse(MLP)
    ctx = PassContext(mesh=Mesh.parse("2x4"))
    with pytest.raises(PassError) as e:
        PassManager([AddMesh(), Boom()], ctx).run(module)
    msg = str(e.value)
    assert "pass boom failed: RuntimeError: the pass broke" in msg and "\n" not in msg
    assert f"run: shard-opt {e.value.repro_path} --pass-pipeline='builtin.module(boom)'" in msg
    with open(e.value.repro_path) as f:
        repro = f.read()
    os.unlink(e.value.repro_path)
    assert repro.startswith("// shard-opt: pass boom failed: RuntimeError: the pass broke")
    assert "// RuntimeError: the pass broke" in repro  # the traceback, as comments
    reread = ir.parse(repro)  # the IR right before the failing pass: add-mesh's mesh in it
    assert 'sdy.mesh @mesh = <["batch"=2, "model"=4]>' in ir.print_module(reread)


def test_a_step_failing_inside_shardy_propagate_is_reproduced_by_the_pass():
    """MLIR failing inside shardy-propagate's own pipeline: the repro is the module before
    shardy-propagate, and the command runs shardy-propagate on it (the inner step named)."""
    module = ir.parse(MLP)
    ctx = PassContext(mesh=Mesh.parse("2x4"), shardings={0: TensorSharding.of([["nope"], []])})
    with pytest.raises(PassError) as e:
        PassManager("builtin.module(add-mesh, apply-shardings, shardy-propagate{pipeline=sdy})", ctx).run(module)
    msg = str(e.value)
    assert "pass shardy-propagate failed" in msg and "sdy-propagation-pipeline" in msg
    assert "--pass-pipeline='builtin.module(shardy-propagate{pipeline=sdy})'" in msg
    with open(e.value.repro_path) as f:
        repro = f.read()
    os.unlink(e.value.repro_path)
    assert '"nope"' in repro and "sdy.all_" not in repro  # sharded as given, not yet propagated


def test_pipelines_shard_opt_runs_parse_to_registered_passes():
    """Every pipeline shard-opt runs is text of registered passes (and MLIR's), and
    shardy-propagate's own steps are too (shard_opt.pipelines)."""
    from shard_opt import pipelines
    from shard_opt.passes.shardy_propagate import ShardyPropagate

    texts = [pipelines.prepare("tt-mlir"), pipelines.prepare("sdy"), pipelines.shared("tt-mlir", {"heads"}),
             pipelines.candidate("tt-mlir"), pipelines.candidate("sdy", verify=True, annotate=True),
             pipelines.probe(), pipelines.EXPORT_PREPARE, pipelines.export({"fused-split"}, composites="off"),
             pipelines.script(decouple=True), pipelines.rebuilt("sdy")]
    for p in ("tt-mlir", "sdy"):
        texts.append("builtin.module(" + ", ".join(ShardyPropagate(pipeline=p).steps()) + ")")
    for text in texts:
        passes = parse_pipeline(text)
        assert passes and parse_pipeline("builtin.module(" + ", ".join(x.pipeline_text() for x in passes) + ")") == passes
    assert pipelines.candidate("tt-mlir") == (
        "builtin.module(apply-shardings, apply-constraints, shardy-propagate{guard-opaque-ops=false "
        "guard-moved-dims=false decouple-const-fanout=false verify=false}, collect-collectives{annotate=false})")
    steps = ShardyPropagate().steps()
    assert steps[:3] == ["insert-guards", "inline-calls", "decouple-const-fanout"]
    assert steps.index("replicate-non-splittable") == steps.index("func.func(sdy-sharding-constraint-to-reshard)") + 1
    assert steps[-1] == "merge-collectives"


def test_a_kept_pass_manager_propagates_as_a_fresh_one():
    """On the shared context ``ir.run_pipeline`` keeps the parsed MLIR pass manager and runs
    it again for the next candidate: each candidate comes out as one parsed for it alone
    (on a fresh context nothing is kept) makes it, whatever ran before it; one that fails
    is not kept."""
    pipeline = ("builtin.module(sdy-apply-sharding-constraints, "
                "sdy-user-priority-propagate{conservative-propagation=true}, "
                "func.func(sdy-insert-explicit-reshards{enable-full-version=true}), "
                "func.func(sdy-reshard-to-collectives))")

    def propagated(option, context=None):
        module = ir.parse(MLP, context=context)
        ctx = PassContext(mesh=Mesh.parse("2x4"), shardings=parse_shardings_option(option))
        PassManager(parse_pipeline("add-mesh, apply-shardings"), ctx).run(module)
        ir.run_pipeline(module, pipeline, verify=False, repro=False)
        return ir.print_module(module)

    seen = set()
    for option in ("0:model/-,1:-/model", "0:-/model", "2:batch/-,0:model/-", "0:model/-,1:-/model"):
        kept = propagated(option)
        assert (pipeline, False) in ir._pass_managers
        assert kept == propagated(option, ir.new_context())
        seen.add(kept)
    assert len(seen) == 3  # the candidates differ: each was propagated, not the first one's again
    assert "sdy.all_reduce" in kept
    bad = "builtin.module(no-such-pass)"
    with pytest.raises(PassError):
        ir.run_pipeline(ir.parse(MLP), bad, verify=False, repro=False)
    assert (bad, False) not in ir._pass_managers
