"""verify-ir: a TTIR / TTNN dump's CCL ops checked against the plan.

Fixtures in tests/fixtures/ttir/ are hand-written in the op syntax tt-mlir's own tests
and tt-xla dumps print (see the module docstring of shard_opt.emit.verify_ir).
"""

import json
import os

import pytest

from shard_opt.emit.verify_ir import format_result, parse_dump, verify_ir

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "ttir")


def _read(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return f.read()


def _plan(name="llama_2layer_plan.json"):
    return json.loads(_read(name))


@pytest.mark.parametrize("dump", ["llama_2layer_ttir_match.mlir", "llama_2layer_ttnn_match.mlir"])
def test_matching_dump(dump):
    res = verify_ir(_plan(), _read(dump))
    assert res.ok and not res.missing and not res.extra
    assert [p.status for p in res.pairings] == ["match"] * 4 + ["equivalent"]  # the logits gather: one op per axis
    assert res.dump_mesh == [2, 4]
    assert len(res.boundaries) == 1  # the output, not a CCL
    text = format_result(res)
    assert text.splitlines()[1].startswith("MATCH: 5 plan collectives")


def test_missing_all_reduce_is_reported_with_causes():
    res = verify_ir(_plan(), _read("llama_2layer_ttir_missing_all_reduce.mlir"))
    assert not res.ok
    assert [(c["op_index"], c["component"]) for _, c, _ in res.missing] == [(131, "model.layers.1.mlp.down_proj")]
    causes = res.missing[0][2]
    assert any("mark_sharding" in c for c in causes) and any("conservativePropagation" in c for c in causes)
    text = format_result(res)
    assert "MISMATCH" in text and "MISSING #131 all_reduce {model}" in text


def test_reduce_scatter_stands_for_all_reduce_plus_all_slice():
    res = verify_ir(_plan("sp_reduce_scatter_plan.json"), _read("sp_ttir_reduce_scatter.mlir"))
    assert res.ok
    (pairing,) = res.pairings
    assert pairing.status == "equivalent" and pairing.plan == [0, 1]
    assert pairing.dump[0].name == "ttir.reduce_scatter" and "PR 6843" in pairing.note
    assert len(res.boundaries) == 3


def test_decomposed_all_reduce_in_older_ttnn_is_equivalent():
    res = verify_ir(_plan(), _read("llama_2layer_ttnn_decomposed_all_reduce.mlir"))
    assert res.ok
    assert all(p.status == "equivalent" for p in res.pairings)
    assert [d.name for d in res.pairings[0].dump] == ["ttnn.reduce_scatter", "ttnn.all_gather"]


def test_all_to_all_as_point_to_point_ops():
    res = verify_ir(_plan("a2a_plan.json"), _read("a2a_ttnn_point_to_point.mlir"))
    assert res.ok
    (pairing,) = res.pairings
    assert pairing.dump[0].count == 12 and pairing.dump[0].axes == (1,)  # 4*3 pairwise sends along model


def test_const_eval_ccls_are_reported_apart():
    res = verify_ir(_plan(), _read("llama_2layer_ttnn_match.mlir"))
    assert [d.func for d in res.const_eval] == ["main_const_eval_0", "main_const_eval_0"]
    assert "const-eval: 2 CCL ops" in format_result(res)


def test_extra_op_is_reported():
    dump = _read("llama_2layer_ttir_match.mlir")
    anchor = dump.index('        %3 = "ttir.dot_general"')
    extra = ('        %900 = "ttir.all_gather"(%2) <{all_gather_dim = 1 : si32, cluster_axis = 1 : ui32}> : '
             "(tensor<128x1024xbf16>) -> tensor<128x4096xbf16> loc(#loc)\n")
    res = verify_ir(_plan(), dump[:anchor] + extra + dump[anchor:])
    assert not res.ok and not res.missing
    (op, causes), = res.extra
    assert op.name == "ttir.all_gather" and op.axes == (1,)
    assert any("gathered where the plan keeps it split" in c for c in causes)
    assert "EXTRA line" in format_result(res)


def test_mesh_mismatch_is_a_likely_cause():
    dump = _read("llama_2layer_ttir_missing_all_reduce.mlir").replace('<"mesh" = 2x4>', '<"mesh" = 1x8>')
    res = verify_ir(_plan(), dump)
    assert res.dump_mesh == [1, 8]
    assert any("mesh differs" in n for n in res.notes)
    assert any("1x8" in c for c in res.missing[0][2])


def test_size_difference_is_not_a_match():
    dump = _read("llama_2layer_ttir_match.mlir").replace(
        '"ttir.all_reduce"(%7) <{cluster_axis = 1 : ui32, reduce_type = #ttcore.reduce_type<sum>}> : '
        "(tensor<1x128x4096xbf16>)",
        '"ttir.all_reduce"(%7) <{cluster_axis = 1 : ui32, reduce_type = #ttcore.reduce_type<sum>}> : '
        "(tensor<2x128x4096xbf16>)")
    res = verify_ir(_plan(), dump)
    assert not res.ok and res.pairings[0].status == "differs"


def test_parser_reads_multi_line_ops_and_inline_layouts():
    text = """
  func.func @forward(%x: tensor<1x1x256x128xbf16, #full>) -> tensor<1x1x256x512xbf16, #gath> attributes {tt.function_type = "forward_device"} {
    %1 = "ttnn.all_reduce"(%x) <{cluster_axis = 1 : ui32, reduce_type = #ttcore.reduce_type<sum>}>
        : (tensor<1x1x256x128xbf16, #ttnn.ttnn_layout<(d0, d1, d2, d3) -> (d0 * 256 + d1 * 256 + d2, d3), <1x1>, memref<8x4x!ttcore.tile<32x32, bf16>, #dram>, <interleaved>>>) -> tensor<1x1x256x128xbf16, #full>
    %4 = "ttnn.all_gather"(%1) <{cluster_axis = 1 : ui32, all_gather_dim = 3 : si32}>
        : (tensor<1x1x256x128xbf16, #full>) -> tensor<1x1x256x512xbf16, #gath>
    return %4 : tensor<1x1x256x512xbf16, #gath>
  }
"""
    ops, mesh, dialect = parse_dump(text, [1, 4])
    assert dialect == "ttnn" and mesh is None
    assert [(o.kind, o.in_shape, o.in_dtype, o.out_shape, o.axes, o.line) for o in ops] == [
        ("all_reduce", (1, 1, 256, 128), "bf16", (1, 1, 256, 128), (1,), 3),
        ("all_gather", (1, 1, 256, 128), "bf16", (1, 1, 256, 512), (1,), 5),
    ]


def test_device_groups_give_the_mesh_axis():
    text = ('%1 = "ttir.all_to_all"(%arg0) <{concat_dim = 1 : si32, replica_groups = dense<[[0, 4], [1, 5], '
            '[2, 6], [3, 7]]> : tensor<4x2xi64>, split_count = 2 : si32, split_dim = 0 : si32}> : '
            "(tensor<4x8xf32>) -> tensor<2x16xf32>\n"
            '%2 = "ttir.collective_permute"(%1) <{source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>}> : '
            "(tensor<2x16xf32>) -> tensor<2x16xf32>\n")
    ops, _, _ = parse_dump(text, [2, 4])
    assert [(o.kind, o.axes) for o in ops] == [("all_to_all", (0,)), ("collective_permute", (1,))]


def test_empty_dump_says_so():
    res = verify_ir(_plan(), "module {\n}\n")
    assert not res.ok and len(res.missing) == 5
    assert any("no CCL" in n for n in res.notes)


def test_real_ttnn_dump_with_const_eval_and_reordered_collectives_matches():
    """tt-mlir's own TTIR and TTNN for the 1-layer Llama-3-8B 2x4 prefill plan (written by
    ``SHARD_OPT_TT_KEEP=1 shard-opt zoo:llama-3-8b --layers 1 --mesh 2x4 --check``):
    TTNN hoists the three position-id gathers into const-eval functions, lowers the
    all_to_all to 8 point_to_point ops and schedules the all_reduces after the gathers."""
    plan = _plan("llama8b_1layer_2x4_plan.json")
    ttir = verify_ir(plan, _read("llama8b_1layer_2x4_ttir.mlir"))
    assert ttir.ok, format_result(ttir)
    ttnn = verify_ir(plan, _read("llama8b_1layer_2x4_ttnn.mlir"))
    assert ttnn.ok, format_result(ttnn)
    notes = [p.note for p in ttnn.pairings]
    assert sum("const-eval" in n for n in notes) == 3 and len(ttnn.const_eval) == 3
    assert any("8 ttnn.point_to_point" in n for n in notes)
    assert all(p.status != "differs" for p in ttnn.pairings)
