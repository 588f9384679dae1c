"""Rule ``tile-aligned`` (shard_opt/rules/tile_aligned.py): a token dimension is split only
into whole 32-row tiles per device (tt-xla PR 5309: a tile-unaligned on-device slice stops
TTNN with "Can only slice tilized tensor"). What it removes from the search, what it finds in
a propagated module, and that the search then never offers the sub-tile split."""

from __future__ import annotations

import os

import pytest

from shard_opt import analysis, frontends, ir, safety
from shard_opt.emit import citations
from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline
from shard_opt.rules import BY_ID, Walk
from shard_opt.rules.tile_aligned import tile_units, token_dims, unaligned_slice
from shard_opt.sharding import Mesh, TensorSharding
from shard_opt.structure import structure_of

GEMMA = os.path.join(os.path.dirname(__file__), "fixtures", "scripts", "gemma2_tiny.py")


@pytest.fixture(scope="module")
def gemma():
    return frontends.load(GEMMA, layers=1, dtype="f32")  # input_ids [1, 128]


def test_units_leave_whole_tiles():
    assert [tile_units(n) for n in (128, 96, 64, 32, 31, 48, 1, 4096)] == [4, 3, 2, 1, 1, 1, 1, 128]


def test_the_sequence_of_token_ids_is_limited_to_whole_tiles(gemma):
    (ids,) = [a for a in gemma.arguments if a.kind == "input"]
    assert ids.shape == (1, 128) and token_dims(ids) == (1,)  # the batch dim is not a tile row here
    limit = safety.limits(gemma, structure_of(gemma))
    assert limit[(ids.index, 1)] == (4, "tile-aligned")
    split = TensorSharding.of([[], ["model"]])
    assert safety.allowed(split, ids, limit, Mesh.parse("1x8")) == "tile-aligned"  # 16 rows per device
    assert safety.allowed(split, ids, limit, Mesh.parse("2x4")) is None  # 32 rows per device
    assert "tile-aligned" not in {r for _, r in safety.limits(gemma, structure_of(gemma), frozenset({"tile-aligned"})).values()}


def test_a_short_or_unaligned_sequence_is_not_split(gemma):
    ids = next(a for a in gemma.arguments if a.kind == "input")
    for n, units in ((48, 1), (40, 1), (256, 8)):
        short = type(ids)(ids.index, ids.name, ids.kind, (1, n), ids.dtype)
        assert BY_ID["tile-aligned"].excludes(type("M", (), {"arguments": [short]})(), None) == (
            {(ids.index, 1): units} if units < n else {})


def _propagated(rows: int, axis_size: int = 8):
    text = f"""
    module {{
      sdy.mesh @mesh = <["batch"=1, "model"={axis_size}]>
      func.func @main(%arg0: tensor<{rows}x256xbf16> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{}}]>}},
          %arg1: tensor<256x256xbf16> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{}}]>}}) -> tensor<{rows}x256xbf16> {{
        %0 = stablehlo.add %arg0, %arg0 : tensor<{rows}x256xbf16>
        %1 = sdy.sharding_constraint %0 <@mesh, [{{"model"}}, {{}}]> : tensor<{rows}x256xbf16>
        %2 = stablehlo.dot_general %1, %arg1, contracting_dims = [1] x [0] : (tensor<{rows}x256xbf16>, tensor<256x256xbf16>) -> tensor<{rows}x256xbf16>
        return %2 : tensor<{rows}x256xbf16>
      }}
    }}"""
    module = ir.parse(text)
    PassManager(parse_pipeline("builtin.module(shardy-propagate)"), PassContext()).run(module)
    return analysis.extract_facts(module)


def test_a_sub_tile_on_device_slice_is_found_in_the_propagated_module():
    """Shardy slices the replicated activation on device (sdy.all_slice, TTNN's mesh_partition):
    128 rows over 8 chips leave 16 per chip, half a tile; 256 rows leave a whole one."""
    sixteen = _propagated(128)
    assert [(c.kind, c.out_local_shape) for c in sixteen.collectives] == [("all_slice", (16, 256))]
    assert "tile-aligned" in sixteen.violations
    whole = _propagated(256)
    assert [(c.kind, c.out_local_shape) for c in whole.collectives] == [("all_slice", (32, 256))]
    assert "tile-aligned" not in whole.violations


def test_slices_are_judged_on_whole_tile_rows_only():
    assert unaligned_slice((128, 256), (16, 256)) and unaligned_slice((1, 96, 64), (1, 48, 64))
    assert not unaligned_slice((128, 256), (32, 256)) and not unaligned_slice((8, 64, 32), (1, 64, 32))
    assert not unaligned_slice((1, 128, 8, 32), (1, 128, 1, 32))  # 8 heads were never whole tiles
    assert not unaligned_slice((128, 256), (128, 32)) and not unaligned_slice((8, 100), (8, 50))  # columns
    assert not unaligned_slice((256,), (32,))  # a vector: not this rule's (tt-mlir keeps it row-major)
    assert BY_ID["tile-aligned"].breaks(Walk(slices=[((128, 256), (16, 256))]))
    assert not BY_ID["tile-aligned"].breaks(Walk())


def test_the_rule_carries_its_citation():
    rule = BY_ID["tile-aligned"]
    assert rule.action == "exclude" and rule.citation == "tt_xla_5309"
    assert "tile-aligned-shards" in citations.CITATIONS[rule.citation].supports
    assert rule.citation in citations.VERIFIED_ELSEWHERE


def test_constraint_sites_keep_their_tokens_in_whole_tiles(gemma):
    """The reshapes that split features into heads ([1, 128, 256] -> [1, 128, 8, 32]) are
    constraint sites the search may split by tokens: not into 16-row shards on 1x8 (Falcon-7B's
    default 1x8 plan did, through its fused QKV's site, once the inputs were limited), into
    32-row ones on 2x4's 4-chip axis."""
    from shard_opt.candidates import PARALLELISM, site_groups

    def token_splits(mesh, allow=frozenset()):
        removed = {}
        groups = site_groups(gemma.text, [Mesh.parse(mesh)], set(PARALLELISM), gemma.arguments, allow=allow,
                             removed=removed)
        return {(g.role, tuple(a.name for a in o.dims[1])) for g in groups for o in g.options
                if len(o.dims) == 4 and o.dims[1]}, removed

    on_8, removed = token_splits("1x8")
    assert not on_8 and removed.get("tile-aligned", 0) > 0
    on_4, _ = token_splits("2x4")
    assert {axes for _, axes in on_4} >= {("model",)}
    allowed, _ = token_splits("1x8", frozenset({"tile-aligned"}))
    assert allowed  # --allow tile-aligned offers them again
