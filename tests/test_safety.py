"""Compiler-safety rules (shard_opt.safety): found in the propagated module and priced
infinite, or excluded from the search; listed in the plan; --allow turns each off."""

from __future__ import annotations

import json
import math
import os
import re

import pytest

from shard_opt import costmodel, frontends, safety
from shard_opt.candidates import PARALLELISM, make_groups
from shard_opt.evaluate import Evaluator
from shard_opt.passes.apply_constraints import find_sites
from shard_opt import ir
from shard_opt.sharding import Mesh, TensorSharding
from shard_opt.structure import structure_of

from conftest import EXAMPLES

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "scripts")
RESIDUAL = os.path.join(FIXTURES, "residual_mlp.py")
GQA = os.path.join(FIXTURES, "gqa_llama.py")
MESH = Mesh.parse("1x8")


def _evaluator(model, allow=frozenset()):
    system = costmodel.get_system(costmodel.default_system_for_mesh(MESH.shape))
    return Evaluator(model, MESH, system, costmodel.get_cost_model("tenstorrent"), allow=allow)


def _megatron_with_output_constraint(model):
    """Every fc column-parallel, every out row-parallel, and the reshape after each out
    split on its features: out's partial sums are reduce-scattered onto the features."""
    col, row = TensorSharding.of([["model"], []]), TensorSharding.of([[], ["model"]])
    shardings = {a.index: col if a.name.endswith("fc.weight") else row
                 for a in model.arguments if a.name.endswith(("fc.weight", "out.weight"))}
    sites = find_sites(ir.parse(model.text))
    (site,) = [k for k, shape in sites.items() if shape[-1] == 256]
    return shardings, {site: TensorSharding.of([[], [], ["model"]])}


@pytest.fixture(scope="module")
def gqa():
    """The GQA fixture, 2 layers, f32: lowered once for this file's tests (each run below with
    a --spec is the command line's own optimize / evaluate_existing on it, the spec file read
    into its meta as the frontend reads a JSON --spec: a command-line run lowered the script
    again for each spec file, ~1.5 CPU-s each)."""
    return frontends.load(GQA, layers=2, dtype="f32")


def _spec_run(gqa, tmp_path, mesh, spec: dict, *, evaluate=False, allow=frozenset()):
    """The plan ``shard-opt gqa_llama.py --layers 2 --dtype f32 --mesh MESH --spec SPEC
    [--evaluate] [--allow ...]`` builds (a ``Plan``), with the spec file it was given."""
    import dataclasses

    from shard_opt.driver import Options, evaluate_existing, optimize
    from shard_opt.frontends.shard_spec import load_spec_file

    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    model = dataclasses.replace(gqa, meta=dict(gqa.meta, shard_spec=load_spec_file(str(path))))
    opts = Options(meshes=[Mesh.parse(mesh)], progress=False, allow=frozenset(allow))
    return (evaluate_existing if evaluate else optimize)(model, opts).plan


def _with_spec(gqa, tmp_path, mesh, spec: dict, **kw) -> dict:
    """The plan JSON that run writes (``--plan-json``)."""
    from shard_opt.plan import dumps

    return json.loads(dumps(_spec_run(gqa, tmp_path, mesh, spec, **kw)))


@pytest.fixture(scope="module")
def residual():
    return frontends.load(RESIDUAL, dtype="f32")


def test_scattering_into_the_residual_stream_is_priced_infinite(residual):
    shardings, constraints = _megatron_with_output_constraint(residual)
    facts = _evaluator(residual).facts_of(shardings, constraints)
    assert any(c.kind == "reduce_scatter" for c in facts.collectives)
    assert "residual-stream" in facts.violations
    s = _evaluator(residual).score_of(shardings, constraints)
    assert s.unsafe == ("residual-stream",) and math.isinf(s.score)
    assert math.isfinite(s.total_us)  # the time stays, for the report


def test_allowing_the_rule_prices_the_same_plan_finite(residual):
    shardings, constraints = _megatron_with_output_constraint(residual)
    s = _evaluator(residual, allow=frozenset({"residual-stream"})).score_of(shardings, constraints)
    assert s.unsafe == () and s.score == s.total_us


def test_scattering_into_a_bias_add_is_not_the_residual_stream():
    # examples/mlp.mlir: fc2's partial sums reduce-scattered, the bias added on 1/8 of
    # the features, one all_gather: sequence parallelism's identity, no residual add
    model = frontends.load(os.path.join(EXAMPLES, "mlp.mlir"))
    shardings = {0: TensorSharding.of([["model"], []]), 2: TensorSharding.of([[], ["model"]])}
    constraints = {"128x1024xf32->4x32x1024xf32": TensorSharding.of([[], [], ["model"]])}
    facts = _evaluator(model).facts_of(shardings, constraints)
    assert [c.kind for c in facts.collectives].count("reduce_scatter") == 1
    assert facts.violations == []


def test_exclude_rules_drop_options_from_the_search(gqa):
    model = gqa
    meshes = [Mesh.parse("8x4")]
    limit, removed = safety.limits(model, structure_of(model)), {}
    groups = make_groups(model.arguments, meshes, set(PARALLELISM), limit=limit, removed=removed)
    by_role = {g.role: g for g in groups}
    emb = by_role["model.embed_tokens.weight"]
    # a row lookup's vocabulary is offered: tt-mlir partitions it (a masked lookup and an all_reduce)
    assert any(o.dims[0] for o in emb.options)
    k = next(g for r, g in by_role.items() if r.endswith("k_proj.weight"))
    # 8 KV heads: 2, 4 and 8-way splits of the heads dim, never 32 (part of a head)
    assert {o.split_factor(0, meshes[0]) for o in k.options} <= {1, 2, 4, 8}
    assert removed.get("vocab-gather", 0) == 0 and removed["heads"] > 0
    # allowed, the options come back
    free = make_groups(model.arguments, meshes, set(PARALLELISM),
                       limit=safety.limits(model, structure_of(model), frozenset({"heads"})))
    k_free = next(g for g in free if g.role == k.role)
    assert 32 in {o.split_factor(0, meshes[0]) for o in k_free.options}


def test_plan_lists_every_rule():
    # the CLI's plan for the GQA fixture on 8x4 (one search a test run, tests/test_gqa.py's)
    from test_gqa import gqa_plan_on_32_devices

    rows = {r["rule"]: r for r in gqa_plan_on_32_devices()["safety"]}
    assert set(rows) == set(safety.BY_ID)
    assert rows["vocab-gather"]["removed"] == 0 and rows["heads"]["removed"] > 0  # a row lookup may split
    assert not any(r["plan_breaks"] or r["allowed"] for r in rows.values())


def test_the_megatron_baseline_keeps_a_tied_tables_vocab_split(run_cli, tmp_path):
    # a tied embedding is the LM head too: Megatron's column split of the head is a
    # vocabulary split of the lookup, a row lookup tt-mlir partitions (vocab-gather allows
    # it since 2026-12-05): the baseline is priced as written, nothing adjusted
    plan_path = tmp_path / "plan.json"
    code, _, err = run_cli(os.path.join(FIXTURES, "tied_llama.py"), "--layers", "2", "--mesh", "1x8", "--dtype",
                           "f32", "--plan-json", plan_path, "-o", tmp_path / "out.mlir", "--quiet")
    assert code == 0, err
    plan = json.loads(plan_path.read_text())
    mega = plan["baselines"]["megatron"]
    assert "adjusted" not in mega and "breaks" not in mega and "as_written" not in mega
    assert mega["arguments"]["model.embed_tokens.weight"] == [["model"], []]
    assert plan["cost"]["total_us"] <= mega["total_us"]


def test_an_evaluated_spec_that_splits_inside_a_head_is_flagged(gqa, tmp_path):
    # 8 KV heads on 8x4: k_proj split 32 ways gives a device a quarter of a head
    plan = _with_spec(gqa, tmp_path, "8x4", {"model.layers.*.self_attn.k_proj.weight": [["batch", "model"], None]},
                      evaluate=True)
    assert {r["rule"]: r["plan_breaks"] for r in plan["safety"]}["heads"]
    assert any("heads" in n for n in plan["notes"])
    assert "heads" in plan["baselines"]["loader-spec"]["breaks"]  # the plan is the spec, as written


def test_a_row_lookup_may_split_its_vocabulary_another_gather_may_not():
    from shard_opt.rules.vocab_gather import is_row_lookup

    rows = "#stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>"
    assert is_row_lookup(rows, "array<i64: 1, 256>", (1024, 256))
    assert not is_row_lookup(rows, "array<i64: 1, 128>", (1024, 256))  # half a row
    two = ("#stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0, 1], start_index_map = [0, 1], "
           "index_vector_dim = 1>")
    assert not is_row_lookup(two, "array<i64: 1, 1, 64>", (32, 32, 64))  # two start indices per lookup


def test_an_unknown_rule_is_one_line(run_cli, tmp_path):
    code, _, err = run_cli(os.path.join(EXAMPLES, "mlp.mlir"), "--mesh", "1x8", "--allow", "residual,heads",
                           "-o", tmp_path / "out.mlir")
    assert code != 0
    assert err.strip().count("\n") == 0 and "residual" in err and "residual-stream" in err
    assert not (tmp_path / "out.mlir").exists()


def test_a_hidden_split_embedding_shards_the_residual_stream(gqa, tmp_path):
    # the expert's failure mode: the embedding split on hidden and nothing keeping the
    # residual stream whole; Shardy slices q/k/v/o to match instead of all-reducing, the
    # residual adds run on 1/8 of the features: flagged (this is what tt-mlir miscompiles)
    spec = {
        "model.embed_tokens.weight": [None, "model"],
        "model.layers.*.self_attn.q_proj.weight": ["model", None],
        "model.layers.*.self_attn.o_proj.weight": [None, "model"],
        "model.layers.*.mlp.gate_proj.weight": ["model", None],
        "model.layers.*.mlp.up_proj.weight": ["model", None],
        "model.layers.*.mlp.down_proj.weight": [None, "model"]}
    plan = _with_spec(gqa, tmp_path, "1x8", spec, evaluate=True)
    # the patterns name every layer's weights (a JSON spec may use the plan's role globs)
    assert plan["baselines"]["loader-spec"]["unmatched"] == []
    assert {a["name"]: a["sharding"] for a in plan["arguments"]}["model.layers.1.mlp.down_proj.weight"] == [[], ["model"]]
    assert {r["rule"]: r["plan_breaks"] for r in plan["safety"]}["residual-stream"]
    # the same projections with the embedding replicated keep the stream whole
    kept = _with_spec(gqa, tmp_path, "1x8", {k: v for k, v in spec.items() if "embed" not in k}, evaluate=True)
    assert not {r["rule"]: r["plan_breaks"] for r in kept["safety"]}["residual-stream"]


HEAD_SPLIT = {"model.layers.*.self_attn.k_proj.weight": [["batch", "model"], None],
              "model.layers.*.mlp.gate_proj.weight": ["model", None]}


def _spec_plan(gqa, tmp_path, allow=frozenset()):
    """The plan and report of a search on 8x4 from ``HEAD_SPLIT`` (``--report``'s text: the
    command line renders the plan it writes, ``render_report``)."""
    from shard_opt.emit.report import render_report
    from shard_opt.plan import dumps

    plan = _spec_run(gqa, tmp_path, "8x4", HEAD_SPLIT, allow=allow)
    return json.loads(dumps(plan)), render_report(plan, png_path=None)


def test_every_baseline_is_priced_within_the_rules(gqa, tmp_path):
    # a spec that splits k_proj 32 ways over 8 KV heads (a quarter of a head per device,
    # the heads rule). Priced as written it would be a plan the search may not make; the
    # baseline is priced with that split replicated, its figure as written and the rule
    # beside it, and the report says so
    plan, report = _spec_plan(gqa, tmp_path)
    base = plan["baselines"]["loader-spec"]
    # (and tile-columns: a quarter of an 8-wide head is 2 columns per device, gathered)
    assert base["breaks"] == ["heads", "tile-columns"]
    assert [a["argument"] for a in base["adjusted"]] == ["model.layers.*.self_attn.k_proj.weight"]
    assert {a["rule"] for a in base["adjusted"]} == {"heads"}
    assert base["as_written"]["total_us"] != base["total_us"]
    assert {"ccl_count", "fits", "compute_us", "ccl_us"} <= set(base["as_written"])
    # what the figure prices: the heads split replicated, the rest of the spec as written
    assert base["arguments"]["model.layers.*.mlp.gate_proj.weight"] == [["model"], []]
    assert "breaks" not in plan["baselines"]["replicated"] and "as_written" not in plan["baselines"]["replicated"]
    assert any(n.startswith("the loader-spec (the loader's own spec) baseline keeps model.layers.*.self_attn.k_proj")
               for n in plan["notes"])
    # the report: the rule, both figures, never a silent comparison
    para = next(ln for ln in report.splitlines() if ln.startswith("**⚠ Baseline `loader-spec`"))
    assert "`heads`" in para and re.search(r"\[\d+\]", para)
    assert f"{base['total_us']:.1f} us" in para
    row = next(ln for ln in report.splitlines() if ln.startswith("| loader-spec"))
    assert "`heads`" in row and "as written" in row and f"{base['total_us']:.1f} us" in row
    # --allow heads: the split is allowed, the baseline is its plan as written
    free, report = _spec_plan(gqa, tmp_path, allow={"heads", "tile-columns"})
    base_free = free["baselines"]["loader-spec"]
    assert "breaks" not in base_free and "as_written" not in base_free
    assert base_free["total_us"] == base["as_written"]["total_us"]
    assert "⚠ Baseline" not in report


def test_a_loader_spec_that_splits_a_row_lookups_vocabulary_is_priced_as_written(gqa, tmp_path):
    # tt-mlir partitions a vocab-split row lookup (a masked lookup and an all_reduce) and
    # its program computes the unsharded answer: the spec is priced as written
    base = _with_spec(gqa, tmp_path, "1x8", {"model.embed_tokens.weight": ["model", None],
                                             "model.layers.*.mlp.gate_proj.weight": ["model", None]})
    base = base["baselines"]["loader-spec"]
    assert "breaks" not in base and "adjusted" not in base
    assert base["arguments"]["model.embed_tokens.weight"] == [["model"], []]
    assert base["source"] and base["unmatched"] == []
