"""``--verify-numerics`` draws integer inputs inside the tables they index.

With every token id 0, every row of an embedding lookup is the same row, so a plan that
permutes rows (tokens) computes the same numbers and passes. Real torch-mlir lowering and
XLA on 8 virtual CPU devices; models of a few thousand parameters.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import numpy as np
import pytest
import torch
from torch import nn

from shard_opt import ir
from shard_opt.frontends.torch_frontend import TorchProgram, lower_program
from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline
from shard_opt.sharding import Mesh, TensorSharding
from shard_opt.verify import _signature, index_bounds, numpy_dtype, random_inputs, verify_numerics


class Tokens(nn.Module):
    """Token and position embeddings, and an integer mask that indexes nothing."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 16)
        self.pos = nn.Embedding(8, 16)
        self.lin = nn.Linear(16, 16)

    def forward(self, input_ids, position_ids, mask):
        h = self.emb(input_ids) + self.pos(position_ids)
        return self.lin(h) * mask.unsqueeze(-1).to(h.dtype)


class Lookup(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 16)
        self.lin = nn.Linear(16, 16)

    def forward(self, input_ids):
        return self.lin(self.emb(input_ids))


def _lower(model, inputs, names, forward=None) -> str:
    torch.manual_seed(0)
    prog = TorchProgram(model, list(inputs), list(names), forward=forward)
    return lower_program(prog, name="tokens", dtype="f32", describe=False).text


def _annotate(text: str, mesh: str, shardings: dict) -> str:
    module = ir.parse(text)
    ctx = PassContext(mesh=Mesh.parse(mesh), shardings=shardings)
    PassManager(parse_pipeline("builtin.module(add-mesh, apply-shardings)"), ctx).run(module)
    return ir.print_module(module)


def test_token_and_position_ids_are_drawn_within_their_tables():
    torch.manual_seed(0)
    ids = torch.zeros(2, 8, dtype=torch.long)
    pos = torch.arange(8).expand(2, 8)
    mask = torch.ones(2, 8, dtype=torch.long)
    text = _lower(Tokens(), (ids, pos, mask), ("input_ids", "position_ids", "mask"))
    arg_types, _, _ = _signature(text)
    # arguments: emb.weight, pos.weight, lin.weight, lin.bias, input_ids, position_ids, mask
    assert [t[1] for t in arg_types[4:]] == ["i64"] * 3
    assert index_bounds(text) == {4: 64, 5: 8}  # the mask reaches no gather

    drawn = random_inputs(arg_types, 0, index_bounds(text))
    ids_drawn, pos_drawn, mask_drawn = drawn[4:]
    assert ids_drawn.dtype == np.int64 and ids_drawn.shape == (2, 8)
    assert len(np.unique(ids_drawn)) > 1 and ids_drawn.min() >= 0 and ids_drawn.max() < 64
    assert len(np.unique(pos_drawn)) > 1 and pos_drawn.min() >= 0 and pos_drawn.max() < 8
    assert not mask_drawn.any()  # no table: 0, as before
    # seeded, and the floats do not depend on the integer draws
    again = random_inputs(arg_types, 0, index_bounds(text))
    assert all(np.array_equal(a, b) for a, b in zip(drawn, again))
    plain = random_inputs(arg_types, 0)
    assert all(np.array_equal(a, b) for a, b in zip(drawn[:4], plain[:4]))
    assert not np.array_equal(random_inputs(arg_types, 1, index_bounds(text))[4], ids_drawn)


def test_a_plan_that_reverses_the_tokens_fails():
    ids = torch.zeros(2, 8, dtype=torch.long)
    text = _lower(Lookup(), (ids,), ("input_ids",))
    # the same model with the token (sequence) dim of its output reversed: what a plan
    # that put the rows back in the wrong order would compute
    flipped = _lower(Lookup(), (ids,), ("input_ids",), forward=lambda m, x: torch.flip(m(x), dims=[1]))
    assert "stablehlo.reverse" in flipped
    # arguments: emb.weight, lin.weight, lin.bias, input_ids; a column split of lin.weight
    # and the ids split over the tokens
    annotated = _annotate(text, "1x8", {1: TensorSharding.of([["model"], []]),
                                        3: TensorSharding.of([[], ["model"]])})

    assert verify_numerics(annotated, num_devices=8).passed  # the right order
    wrong = verify_numerics(annotated, num_devices=8, reference=flipped)
    assert not wrong.passed, wrong.summary()
    assert wrong.max_rel_err > 0.1

    # With every id 0 (the old inputs) all tokens are the same row: the reversal passes.
    arg_types, _, _ = _signature(annotated)
    rng = np.random.default_rng(0)
    zeros = [np.zeros(s, numpy_dtype(d)) if d.startswith("i") else rng.standard_normal(s).astype(numpy_dtype(d))
             for s, d in arg_types]
    assert verify_numerics(annotated, num_devices=8, reference=flipped, inputs=zeros).passed


SLICES = """module {
  func.func @main(%arg0: tensor<10x4xf32>, %arg1: tensor<i32>, %arg2: tensor<6x4xf32>, %arg3: tensor<2xi64>,
                  %arg4: tensor<16x8xf32>, %arg5: tensor<1x4xf32>, %arg6: tensor<i64>, %arg7: tensor<3xi32>) -> (tensor<3x4xf32>, tensor<2x4xf32>, tensor<16x8xf32>, tensor<3x4xf32>) {
    %0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_slice %arg0, %arg1, %0, sizes = [3, 4] : (tensor<10x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
    %2 = stablehlo.convert %arg3 : (tensor<2xi64>) -> tensor<2xi32>
    %3 = "stablehlo.torch_index_select"(%arg2, %2) {dim = 0 : i64, batch_dims = 0 : i64} : (tensor<6x4xf32>, tensor<2xi32>) -> tensor<2x4xf32>
    %4 = stablehlo.constant dense<0> : tensor<i64>
    %5 = stablehlo.dynamic_update_slice %arg4, %arg5, %arg6, %4 : (tensor<16x8xf32>, tensor<1x4xf32>, tensor<i64>, tensor<i64>) -> tensor<16x8xf32>
    %6 = stablehlo.reshape %arg7 : (tensor<3xi32>) -> tensor<3x1xi32>
    %7 = "stablehlo.gather"(%arg0, %6) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 4>}> : (tensor<10x4xf32>, tensor<3x1xi32>) -> tensor<3x4xf32>
    return %1, %3, %5, %7 : tensor<3x4xf32>, tensor<2x4xf32>, tensor<16x8xf32>, tensor<3x4xf32>
  }
}
"""


def test_dynamic_slice_index_select_and_update_slice_bounds():
    # dynamic_slice of 3 rows of 10: starts 0..7; index_select on 6 rows (through a
    # convert); a 1-row update into 16: 0..15; a gather through a reshape: 0..9
    assert index_bounds(SLICES) == {1: 8, 3: 6, 6: 16, 7: 10}
    arg_types, _, _ = _signature(SLICES)
    drawn = random_inputs(arg_types, 0, index_bounds(SLICES))
    for i, bound in ((1, 8), (3, 6), (6, 16), (7, 10)):
        assert 0 <= drawn[i].min() and drawn[i].max() < bound
    assert verify_numerics(SLICES, num_devices=8).passed


@pytest.mark.parametrize("dtype", ["ui8", "i16"])
def test_small_integer_types_stay_in_their_range(dtype):
    text = SLICES.replace("tensor<3xi32>", f"tensor<3x{dtype}>").replace("tensor<3x1xi32>", f"tensor<3x1x{dtype}>")
    arg_types, _, _ = _signature(text)
    drawn = random_inputs(arg_types, 0, index_bounds(text))
    assert drawn[7].dtype == numpy_dtype(dtype) and drawn[7].max() < 10
