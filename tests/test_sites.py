"""Constraint sites split only what ``--parallelism`` allows (``candidates.site_groups``).

A constraint on a reshape's result is a sharding like an argument's: under ``tensor``
it may split feature / head dims, never the batch or token dims of an activation
(that is data or sequence parallelism through the back door). Each site dim is
classified by the argument dims it is indexed by (``dataflow.dim_sources``), with the
rule ``candidates.splittable_dims`` applies to arguments.
"""

import json
import textwrap

import pytest

from shard_opt import frontends, ir
from shard_opt.candidates import PARALLELISM, allowed_dims, site_dims, site_groups, splittable_dims
from shard_opt.lowered import Argument
from shard_opt.sharding import Mesh

MLP_SCRIPT = textwrap.dedent("""\
    import torch
    from torch import nn

    BIAS = True

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(1024, 4096, bias=BIAS)
            self.relu = nn.ReLU()
            self.fc2 = nn.Linear(4096, 1024, bias=BIAS)

        def forward(self, x):
            return self.fc2(self.relu(self.fc1(x)))


    def load_model():
        return MLP()


    def load_inputs():
        return (torch.zeros(8, 128, 1024, dtype=torch.float32),)
    """)

# the MLP's two reshapes back to [batch, tokens, features] after each Linear
SITES = ("1024x4096xf32->8x128x4096xf32", "1024x1024xf32->8x128x1024xf32")
MESH = [Mesh.parse("2x4")]


def write_script(directory, bias: bool = True):
    path = directory / "mlp_load.py"
    path.write_text(MLP_SCRIPT.replace("BIAS = True", f"BIAS = {bias}"))
    return path


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    return write_script(tmp_path_factory.mktemp("mlp"))


@pytest.fixture(scope="module")
def mlp(script):
    return frontends.load(str(script), dtype="f32")


def site_shape(site: str) -> list[int]:
    return [int(s) for s in site.split("->")[1].split("x")[:-1]]


# without biases the bug's plan was chosen: a constraint [["model"], [], []] splitting the
# 8 sequences (532.5 us, "tensor parallel"); with them it was offered and priced
@pytest.mark.parametrize("bias", [True, False])
def test_tensor_only_constraints_split_features_and_weights_carry_the_plan(bias, tmp_path, run_cli):
    script = write_script(tmp_path, bias)
    plan_path = tmp_path / "P.json"
    # 1x8: on 2x4 this MLP's 4 MiB activations make every split cost more than it saves
    # once a 2-chip line is priced at its measured rate (replicated wins), and a plan
    # with no constraint would not test the rule
    code, _, err = run_cli(script, "--mesh", "1x8", "--parallelism", "tensor", "--dtype", "f32",
                           "--plan-json", plan_path)
    assert code == 0, err
    plan = json.loads(plan_path.read_text())
    # a constraint may split only the features: the last dim of [batch, tokens, features].
    # The plan's own constraints and every constrained site the search priced and rejected
    # (without biases the plain all_reduce plan has none since the layout ops of each
    # collective are priced, costmodel/ttnn_ops.py; the offered ones are still held to it)
    offered = list(plan.get("constraints") or [])
    offered += [{"site": site, "sharding": sh} for r in plan["search"].get("rejected", [])
                for site, sh in r["arguments_changed"].items() if "->" in site and any(sh)]
    assert offered, "no constraint in the plan or its alternatives: nothing tested"
    for c in offered:
        shape = site_shape(c["site"])
        assert len(c["sharding"]) == len(shape), c
        assert not any(c["sharding"][:-1]), f"a constraint splits batch or tokens under tensor: {c}"
    args = {a["name"]: a for a in plan["arguments"]}
    for a in args.values():
        if a["kind"] == "input":
            assert not any(a["sharding"]), f"input split under tensor: {a}"
    # the weights carry the plan: both matmul weights split, fc2's partial sums reduced once
    assert any(args["fc1.weight"]["sharding"]) and any(args["fc2.weight"]["sharding"])
    kinds = [c["kind"] for c in plan["collectives"]]
    assert kinds.count("all_reduce") + kinds.count("reduce_scatter") == 1, kinds
    assert "all_slice" not in kinds  # no activation sliced after the fact
    assert plan["cost"]["total_us"] <= plan["baselines"]["megatron"]["total_us"]


def test_site_dims_are_batch_token_feature(mlp):
    module = ir.parse(mlp.text)
    classes = site_dims(module, mlp.arguments)
    expected = [{"batch"}, {"token"}, {"feature"}]
    assert {site: [set(c) for c in dims] for site, dims in classes.items()} == {s: expected for s in SITES}
    # without the frontend's arguments the kinds come from the module's shard_opt.kind
    assert site_dims(module) == classes


@pytest.mark.parametrize("parallelism, dims", [
    (["tensor"], [2]), (["data"], [0]), (["sequence"], [1]), (PARALLELISM, [0, 1, 2]),
    (["tensor", "sequence"], [1, 2]),
])
def test_site_options_follow_parallelism(mlp, parallelism, dims):
    groups = site_groups(mlp.text, MESH, set(parallelism), mlp.arguments)
    assert sorted(g.role for g in groups) == sorted(SITES)
    for g in groups:
        assert g.options[0].is_replicated  # option 0: no constraint
        split = {d for o in g.options[1:] for d, axes in enumerate(o.dims) if axes}
        assert split == set(dims), (g.role, parallelism)
    # the driver's call (no arguments): the same groups
    assert site_groups(mlp.text, MESH, set(parallelism)) == groups


def test_data_offers_the_batch_dim_not_the_features(mlp):
    groups = site_groups(mlp.text, MESH, {"data"}, mlp.arguments)
    options = {tuple(map(tuple, o.axis_names())) for g in groups for o in g.options[1:]}
    assert ((("batch",), (), ())) in options
    assert all(not o[2] for o in options)


def _module(body: str, args: str, result: str) -> str:
    return f"module {{\n  func.func @main({args}) -> {result} {{\n{textwrap.indent(body, '    ')}\n  }}\n}}\n"


def test_dim_indexed_by_nothing_is_not_offered():
    # heads x head_dim: the heads carry the input's features, head_dim nothing known
    text = _module(
        "%0 = stablehlo.reshape %arg0 : (tensor<2x8x64xf32>) -> tensor<2x8x4x16xf32>\n"
        "return %0 : tensor<2x8x4x16xf32>",
        '%arg0: tensor<2x8x64xf32> {shard_opt.kind = "input"}', "tensor<2x8x4x16xf32>")
    (classes,) = site_dims(ir.parse(text)).values()
    assert [set(c) for c in classes] == [{"batch"}, {"token"}, {"feature"}, set()]
    assert allowed_dims(classes, set(PARALLELISM)) == [0, 1, 2]
    assert allowed_dims(classes, {"tensor"}) == [2]
    mesh = [Mesh.parse("1x4")]
    (g,) = site_groups(text, mesh, {"tensor"})
    assert [o.axis_names() for o in g.options[1:]] == [[[], [], ["model"], []]]


def test_split_that_does_not_undo_a_merge_is_conservative():
    # [8, 128] merged to 1024 tokens, split back as [4, 256]: the major part carries both
    # batch and tokens (dim_sources' rule), so only data + sequence together may split it
    text = _module(
        "%0 = stablehlo.reshape %arg0 : (tensor<8x128x64xf32>) -> tensor<1024x64xf32>\n"
        "%1 = stablehlo.add %0, %0 : tensor<1024x64xf32>\n"
        "%2 = stablehlo.reshape %1 : (tensor<1024x64xf32>) -> tensor<4x256x64xf32>\n"
        "return %2 : tensor<4x256x64xf32>",
        '%arg0: tensor<8x128x64xf32> {shard_opt.kind = "input"}', "tensor<4x256x64xf32>")
    (classes,) = site_dims(ir.parse(text)).values()
    assert [set(c) for c in classes] == [{"batch", "token"}, set(), {"feature"}]
    assert allowed_dims(classes, {"data"}) == []
    assert allowed_dims(classes, {"data", "sequence"}) == [0]
    assert allowed_dims(classes, {"tensor"}) == [2]


def test_weight_dims_are_features():
    # a projection's output reshaped into heads: heads from the weight's output features
    text = _module(
        "%0 = stablehlo.dot_general %arg1, %arg0, contracting_dims = [2] x [1] : "
        "(tensor<2x8x64xf32>, tensor<32x64xf32>) -> tensor<2x8x32xf32>\n"
        "%1 = stablehlo.reshape %0 : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>\n"
        "return %1 : tensor<2x8x4x8xf32>",
        '%arg0: tensor<32x64xf32> {shard_opt.kind = "param"}, %arg1: tensor<2x8x64xf32> {shard_opt.kind = "input"}',
        "tensor<2x8x4x8xf32>")
    (classes,) = site_dims(ir.parse(text)).values()
    assert [set(c) for c in classes] == [{"batch"}, {"token"}, {"feature"}, set()]
    # the kinds given by the caller win over the module's (here: the weight taken as an input)
    args = [Argument(0, "w", "input", (32, 64), "f32"), Argument(1, "x", "input", (2, 8, 64), "f32")]
    (classes,) = site_dims(ir.parse(text), args).values()
    assert classes[2] == {"batch"}  # an input's dim 0: not a feature, so never split under tensor


def arg(kind, shape, dtype="f32"):
    return Argument(0, "a", kind, tuple(shape), dtype)


@pytest.mark.parametrize("a, parallelism, dims", [
    (arg("param", [4096, 1024]), {"tensor"}, [0, 1]),
    (arg("param", [4096, 1024]), {"data", "sequence"}, []),
    (arg("param", [4096]), {"tensor"}, []),  # 1-D: follows its consumer
    (arg("input", [8, 128, 1024]), {"tensor"}, []),  # tensor splits weights only
    (arg("input", [8, 128, 1024]), {"data"}, [0]),
    (arg("input", [8, 128, 1024]), {"sequence"}, [1]),
    (arg("input", [8, 128], "i64"), {"sequence"}, [1]),  # token ids
    (arg("input", [8, 1024]), {"sequence"}, []),  # [batch, features]: no token dim
    (arg("cache", [8, 8, 128, 64]), {"tensor"}, [1, 3]),  # heads, head_dim
    (arg("cache", [8, 8, 128, 64]), {"sequence"}, [2]),
    (arg("cache", [8, 8, 128, 64]), {"data"}, [0]),
])
def test_argument_dims_follow_the_same_rule(a, parallelism, dims):
    assert splittable_dims(a, parallelism) == dims


def test_conv_kernel_splits_on_channels_only():
    assert splittable_dims(arg("param", [64, 32, 3, 3]), {"tensor"}, conv_weight=True) == [0, 1]
