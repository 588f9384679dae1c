"""Price what tt-mlir and TTNN execute: what an op reads and writes, fused kernels as one
op, one reshard per value (shard_opt.analysis, passes/mark_fusions.py,
passes/shardy_propagate.py)."""

from __future__ import annotations

import json
import os

import pytest

from shard_opt import costmodel, ir
from shard_opt.analysis import extract_facts
from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "pricing")


def evaluate(run_cli, tmp_path, source, *flags):
    plan_path = tmp_path / "plan.json"
    code, _, err = run_cli(source, "--evaluate", "--plan-json", plan_path, "-o", os.devnull, *flags)
    assert code == 0, err
    return json.loads(plan_path.read_text())


def facts_of(text: str, pipeline: str = "add-mesh{shape=1x8}, mark-fusions, shardy-propagate, collect-collectives"):
    ctx = PassContext()
    PassManager(parse_pipeline(f"builtin.module({pipeline})"), ctx).run(ir.parse(text))
    return ctx.facts


def test_a_one_token_lookup_reads_one_row(run_cli, tmp_path):
    # Llama-3's 128256 x 4096 bf16 table, one token, replicated on 1x8: the gather reads
    # one 8 KiB row (tt-mlir's ttir.embedding), not the 1 GiB table
    plan = evaluate(run_cli, tmp_path, os.path.join(FIXTURES, "embedding_lookup.mlir"), "--mesh", "1x8")
    assert plan["cost"]["total_us"] < 10
    with open(os.path.join(FIXTURES, "embedding_lookup.mlir")) as f:
        facts = facts_of(f.read())
    (gather,) = [o for o in facts.ops if o.name == "stablehlo.gather"]
    assert gather.bytes_out == 4096 * 2
    assert gather.bytes_in == 4096 * 2 + 8  # the row and the i64 index


def test_attention_is_one_flash_kernel(run_cli, tmp_path):
    # 12 heads x 32,760 tokens x head dim 128, bf16, replicated on 1x8: the 12 x 32760^2
    # score matrix (51 GB in f32) is never written; the fused op reads q, k, v and writes
    # the output
    plan = evaluate(run_cli, tmp_path, os.path.join(FIXTURES, "attention.py"), "--mesh", "1x8")
    cost = plan["cost"]
    assert cost["fits"] and cost["memory_per_device_bytes"] < 2**30
    flops = 4 * 12 * 32760 * 32760 * 128
    system = costmodel.get_system("wh-loudbox")
    flop_bound_us = flops / (system.peak_tflops["LoFi"] * 1e6)
    assert flop_bound_us < cost["total_us"] < 400_000


ATTENTION = """module {
  func.func @main(%q: tensor<1x4x64x32xbf16>, %k: tensor<1x4x64x32xbf16>, %v: tensor<1x4x64x32xbf16>) -> tensor<1x4x64x32xbf16> {
    %neg = stablehlo.constant dense<0xFF80> : tensor<bf16>
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<bf16>
    %s = stablehlo.dot_general %q, %k, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3] : (tensor<1x4x64x32xbf16>, tensor<1x4x64x32xbf16>) -> tensor<1x4x64x64xbf16>
    %m = stablehlo.reduce(%s init: %neg) applies stablehlo.maximum across dimensions = [3] : (tensor<1x4x64x64xbf16>, tensor<bf16>) -> tensor<1x4x64xbf16>
    %mb = stablehlo.broadcast_in_dim %m, dims = [0, 1, 2] : (tensor<1x4x64xbf16>) -> tensor<1x4x64x64xbf16>
    %d = stablehlo.subtract %s, %mb : tensor<1x4x64x64xbf16>
    %e = stablehlo.exponential %d : tensor<1x4x64x64xbf16>
    %t = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [3] : (tensor<1x4x64x64xbf16>, tensor<bf16>) -> tensor<1x4x64xbf16>
    %tb = stablehlo.broadcast_in_dim %t, dims = [0, 1, 2] : (tensor<1x4x64xbf16>) -> tensor<1x4x64x64xbf16>
    %p = stablehlo.divide %e, %tb : tensor<1x4x64x64xbf16>
    %o = stablehlo.dot_general %p, %v, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<1x4x64x64xbf16>, tensor<1x4x64x32xbf16>) -> tensor<1x4x64x32xbf16>
    return %o : tensor<1x4x64x32xbf16>
  }
}"""


def test_fused_attention_reads_qkv_and_writes_its_output_once():
    facts = facts_of(ATTENTION)
    (op,) = facts.ops
    qkv = 3 * 4 * 64 * 32 * 2
    assert (op.kind, op.bytes_in, op.bytes_out) == ("sdpa", qkv, qkv // 3)
    assert op.flops >= 4 * 4 * 64 * 64 * 32
    # without the fusion every score-sized op reads and writes 4 x 64 x 64 values
    unfused = facts_of(ATTENTION, "add-mesh{shape=1x8}, shardy-propagate, collect-collectives")
    assert len(unfused.ops) > 5 and sum(o.bytes_in for o in unfused.ops) > 3 * op.bytes_in


def test_in_place_updates_and_slices_price_what_they_touch():
    text = """module {
  func.func @main(%cache: tensor<1x8x128x64xbf16> {shard_opt.kind = "cache"}, %new: tensor<1x8x1x64xbf16>,
                  %table: tensor<1024x64xbf16>, %i: tensor<i32>) -> (tensor<1x8x129x64xbf16>, tensor<1x8x128x64xbf16>, tensor<16x64xbf16>, tensor<1x8x16x64xbf16>) {
    %0 = stablehlo.concatenate %cache, %new, dim = 2 : (tensor<1x8x128x64xbf16>, tensor<1x8x1x64xbf16>) -> tensor<1x8x129x64xbf16>
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %cache, %new, %c0, %c0, %i, %c0 : (tensor<1x8x128x64xbf16>, tensor<1x8x1x64xbf16>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x8x128x64xbf16>
    %2 = stablehlo.dynamic_slice %table, %i, %c0, sizes = [16, 64] : (tensor<1024x64xbf16>, tensor<i32>, tensor<i32>) -> tensor<16x64xbf16>
    %3 = stablehlo.slice %cache [0:1, 0:8, 0:16, 0:64] : (tensor<1x8x128x64xbf16>) -> tensor<1x8x16x64xbf16>
    return %0, %1, %2, %3 : tensor<1x8x129x64xbf16>, tensor<1x8x128x64xbf16>, tensor<16x64xbf16>, tensor<1x8x16x64xbf16>
  }
}"""
    module = ir.parse(text)
    facts = extract_facts(module, ["cache", "input", "input", "input"])
    by = {o.name: o for o in facts.ops}
    row = 8 * 64 * 2
    assert by["stablehlo.concatenate"].bytes_out == row  # the cache append writes the new rows only
    assert by["stablehlo.dynamic_update_slice"].bytes_out == row
    assert by["stablehlo.dynamic_slice"].bytes_in == 16 * 64 * 2 + 4  # its rows and one index (the other a constant)
    assert by["stablehlo.slice"].bytes_in == by["stablehlo.slice"].bytes_out == 8 * 16 * 64 * 2


def test_a_norm_reads_its_input_once():
    text = """module {
  func.func @main(%x: tensor<128x4096xbf16>, %w: tensor<4096xbf16> {shard_opt.kind = "param"}) -> tensor<128x4096xbf16> {
    %two = stablehlo.constant dense<2.000000e+00> : tensor<128x4096xf32>
    %n = stablehlo.constant dense<4.096000e+03> : tensor<128x1xf32>
    %eps = stablehlo.constant dense<9.99999974E-6> : tensor<128x1xf32>
    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %xf = stablehlo.convert %x : (tensor<128x4096xbf16>) -> tensor<128x4096xf32>
    %sq = stablehlo.power %xf, %two : tensor<128x4096xf32>
    %s = stablehlo.reduce(%sq init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<128x4096xf32>, tensor<f32>) -> tensor<128xf32>
    %s2 = stablehlo.reshape %s : (tensor<128xf32>) -> tensor<128x1xf32>
    %mean = stablehlo.divide %s2, %n : tensor<128x1xf32>
    %a = stablehlo.add %mean, %eps : tensor<128x1xf32>
    %r = stablehlo.rsqrt %a : tensor<128x1xf32>
    %rb = stablehlo.broadcast_in_dim %r, dims = [0, 1] : (tensor<128x1xf32>) -> tensor<128x4096xf32>
    %y = stablehlo.multiply %xf, %rb : tensor<128x4096xf32>
    %yb = stablehlo.convert %y : (tensor<128x4096xf32>) -> tensor<128x4096xbf16>
    %wb = stablehlo.broadcast_in_dim %w, dims = [1] : (tensor<4096xbf16>) -> tensor<128x4096xbf16>
    %out = stablehlo.multiply %wb, %yb : tensor<128x4096xbf16>
    return %out : tensor<128x4096xbf16>
  }
}"""
    (op,) = facts_of(text).ops
    x = 128 * 4096 * 2
    assert (op.kind, op.bytes_in, op.bytes_out) == ("norm", x + 4096 * 2, x)


THREE_CONSUMERS = """module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @main(%x: tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %w1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %w2: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %w3: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) -> (tensor<128x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, tensor<128x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, tensor<128x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) {
    %0 = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %x, %w2, contracting_dims = [1] x [0] : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
    %2 = stablehlo.dot_general %x, %w3, contracting_dims = [1] x [0] : (tensor<128x64xf32>, tensor<64x256xf32>) -> tensor<128x256xf32>
    return %0, %1, %2 : tensor<128x256xf32>, tensor<128x256xf32>, tensor<128x256xf32>
  }
}"""


@pytest.mark.parametrize("pipeline, gathers", [("tt-mlir", 1), ("sdy", 3)])
def test_a_value_is_resharded_once_for_all_its_consumers(pipeline, gathers):
    facts = facts_of(THREE_CONSUMERS, f"shardy-propagate{{pipeline={pipeline}}}, collect-collectives")
    assert [c.kind for c in facts.collectives] == ["all_gather"] * gathers
