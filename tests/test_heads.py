"""The heads rule (rules/heads.py) on Qwen3.5's full attention: 4 KV heads of head_dim 256
on 8 devices (issue #22 case 2). A batch of 2 hid the KV heads from the structure (the
exclusion then let K/V split 8 ways); the propagated module is read too, so a split inside
a head is found however it got there, and ``kv_layout`` says what the rule says."""

from __future__ import annotations

import json
import math
import os

import pytest

from shard_opt import costmodel, frontends, safety
from shard_opt.candidates import PARALLELISM, make_groups
from shard_opt.driver import Options, optimize
from shard_opt.explain import kv_layout
from shard_opt.evaluate import Evaluator
from shard_opt.sharding import Mesh, TensorSharding
from shard_opt.structure import structure_of

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "scripts")
QWEN = os.path.join(FIXTURES, "qwen35_attention.py")
GQA = os.path.join(FIXTURES, "gqa_llama.py")
MESH = Mesh.parse("1x8")
COL, ROW = TensorSharding.of([["model"], []]), TensorSharding.of([[], ["model"]])


@pytest.fixture(scope="module")
def qwen():
    model = frontends.load(QWEN, layers=1)  # its load_inputs: a batch of 2; one layer, as REAL_RUNS plans it
    assert model.meta["attention"] == {"heads": 16, "kv_heads": 4, "head_dim": 256}
    return model


@pytest.fixture(scope="module")
def plans(qwen, real_plan):
    # the default plan is the CLI's for the same script and mesh (conftest.REAL_RUNS, one
    # search a test run, shared with the report and citation tests)
    default = real_plan("qwen35")
    allowed = optimize(qwen, Options(meshes=[MESH], progress=False, allow=frozenset({"heads"}))).plan
    return default, allowed


def _evaluator(model, allow=frozenset()):
    system = costmodel.get_system(costmodel.default_system_for_mesh(MESH.shape))
    return Evaluator(model, MESH, system, costmodel.get_cost_model("tenstorrent"), allow=allow)


def _by_suffix(model, spec: dict) -> dict:
    return {a.index: s for a in model.arguments for suffix, s in spec.items() if a.name.endswith(suffix)}


def _factor(plan, suffix: str) -> int:
    sizes = dict(zip(plan["mesh"]["axes"], plan["mesh"]["shape"]))
    arg = next(a for a in plan["arguments"] if a["name"].endswith(suffix))
    return math.prod(sizes[ax] for ax in arg["sharding"][0])


def _heads_row(plan) -> dict:
    return next(r for r in plan["safety"] if r["rule"] == "heads")


def test_the_kv_heads_are_found_at_a_batch_of_two(qwen):
    units = {qwen.arguments[i].name: n for (i, d), n in structure_of(qwen).units.items() if d == 0}
    assert units["model.layers.0.self_attn.k_proj.weight"] == 4
    assert units["model.layers.0.self_attn.v_proj.weight"] == 4
    assert units["model.layers.0.self_attn.q_proj.weight"] == 16  # not the batch (2)
    groups = make_groups(qwen.arguments, [MESH], set(PARALLELISM), limit=safety.limits(qwen, structure_of(qwen)))
    k = next(g for g in groups if g.role.endswith("k_proj.weight"))
    assert {o.split_factor(0, MESH) for o in k.options} == {1}  # 8 does not divide 4 heads
    free = make_groups(qwen.arguments, [MESH], set(PARALLELISM),
                       limit=safety.limits(qwen, structure_of(qwen), frozenset({"heads"})))
    k = next(g for g in free if g.role.endswith("k_proj.weight"))
    assert 8 in {o.split_factor(0, MESH) for o in k.options}  # allowed, the cut is offered


def test_the_default_plan_keeps_whole_heads(plans):
    plan, _ = plans
    f = _factor(plan, "layers.0.self_attn.k_proj.weight")
    assert 4 % f == 0  # replicated, or split by a divisor of the KV heads
    kv = plan["kv_layout"]
    assert kv["kv_split"] == f and not kv["cuts_heads"] and "cut" not in kv["reason"].replace("no head is cut", "")
    row = _heads_row(plan)
    assert row["removed"] > 0 and not row["plan_breaks"] and not row["allowed"]
    # the model prefers the cut: the rule says what it cost, and what it kept out
    cost = row["cost"]
    assert cost["plan_us"] == plan["cost"]["total_us"] and cost["preferred_us"] < cost["plan_us"]
    # the queries split 8 ways beside 4 replicated KV heads: 2 query heads over 4 KV heads per
    # device, which tt-mlir's SDPA refuses (tt-mlir issue 8861, uneven_groups)
    assert cost["arguments"] == {"model.layers.*.self_attn.q_proj.weight": [["model"], []],
                                 "model.layers.*.self_attn.o_proj.weight": [[], ["model"]]}
    assert row["priced_infinite"] > 0
    from shard_opt.emit.report import render_report

    assert "It cost this plan" in render_report(plan, png_path=None)


def test_allowed_the_cut_is_priced_and_the_plan_says_it_breaks_the_rule(plans):
    default, plan = plans
    row = _heads_row(plan)
    assert row["allowed"] and row["removed"] == 0
    # on 1x8 the cut is modeled cheaper than replicating K/V (3097.9 vs 3114.4 us): the
    # allowed search takes it, and every part of the plan says the same of it
    assert _factor(plan, "layers.0.self_attn.k_proj.weight") == 8
    assert plan["cost"]["total_us"] < default["cost"]["total_us"]
    assert row["plan_breaks"]
    kv = plan["kv_layout"]
    assert kv["kv_split"] == 8 and kv["cuts_heads"]
    assert "head_dim is cut 2 ways" in kv["reason"] and "--allow heads" in kv["reason"]


def test_a_kv_split_past_the_heads_is_found_in_the_propagated_module(qwen):
    # the split as an option the exclusion missed: Shardy shards the head reshape on
    # sub-axes ({"model":(1)4} on the heads, {"model":(4)2} on head_dim)
    shardings = _by_suffix(qwen, {"k_proj.weight": COL, "v_proj.weight": COL, "o_proj.weight": ROW})
    facts = _evaluator(qwen).facts_of(shardings)
    assert "heads" in facts.violations
    assert math.isinf(_evaluator(qwen).score_of(shardings).score)
    s = _evaluator(qwen, allow=frozenset({"heads"})).score_of(shardings)
    assert s.unsafe == () and math.isfinite(s.score)
    # the plan's verdict and its words: one source
    broken = safety.broken_by(qwen, shardings, safety.limits(qwen, structure_of(qwen)), [MESH], facts.violations)
    assert "heads" in broken
    kv = kv_layout(qwen, MESH, shardings, "heads" in broken, structure_of(qwen))
    assert kv["cuts_heads"] and kv["kv_split"] == 8
    # V alone split (K replicated) is read too: Qwen2.5-7B's batch-2 plan split v_proj only
    v_only = _by_suffix(qwen, {"v_proj.weight": COL})
    assert kv_layout(qwen, MESH, v_only, True, structure_of(qwen))["kv_split"] == 8


def test_whole_heads_are_no_violation(qwen):
    # the query heads split 8 ways (2 of 16 each) beside 4 replicated KV heads: whole heads,
    # but 2 query heads over 4 KV heads per device (tt-mlir issue 8861: refused)
    shardings = _by_suffix(qwen, {"q_proj.weight": COL, "o_proj.weight": ROW})
    assert "heads" in _evaluator(qwen).facts_of(shardings).violations
    # Llama's 8 KV heads on 8 devices: one whole head each
    llama = frontends.load(GQA, layers=2, dtype="f32")
    shardings = _by_suffix(llama, {"q_proj.weight": COL, "k_proj.weight": COL, "v_proj.weight": COL,
                                   "o_proj.weight": ROW})
    assert "heads" not in _evaluator(llama).facts_of(shardings).violations


def test_a_kv_cache_split_that_propagation_moves_inside_a_head_is_found():
    # decode: the cache split on its tokens is concatenated with the new token's K along
    # the tokens, and Shardy reshards it onto head_dim (all_to_all) to do so; split on
    # head_dim itself, the scores are partial sums. Both hold part of every head
    decode = frontends.load(QWEN, phase="decode", layers=1)
    for dim in (2, 3):
        body = [[], [], [], []]
        body[dim] = ["model"]
        shardings = {a.index: TensorSharding.of(body) for a in decode.arguments if a.kind == "cache"}
        assert "heads" in _evaluator(decode).facts_of(shardings).violations, dim


def _evaluated_breaks(qwen, tmp_path, mesh, spec):
    """``--evaluate --spec SPEC`` on Qwen3.5's attention: the command line's own
    ``evaluate_existing`` on the module the other tests lowered (the same script), the spec
    file read into its meta as the frontend reads a ``--spec`` (a command-line run lowered the
    script again for each spec file, ~1.5 CPU-s each; the heads rule reads the arguments'
    shardings and the propagated module, not the dtype)."""
    import dataclasses

    from shard_opt.driver import evaluate_existing
    from shard_opt.frontends.shard_spec import load_spec_file
    from shard_opt.plan import dumps

    path = tmp_path / f"spec-{mesh}.json"
    path.write_text(json.dumps(spec))
    specified = dataclasses.replace(qwen, meta=dict(qwen.meta, shard_spec=load_spec_file(str(path))))
    plan = json.loads(dumps(evaluate_existing(specified, Options(meshes=[Mesh.parse(mesh)], progress=False)).plan))
    return {r["rule"]: r["plan_breaks"] for r in plan["safety"]}


def test_query_heads_per_device_must_be_a_multiple_of_kv_heads_per_device(qwen, tmp_path):
    # tt-mlir issue 8861: 16 query heads split 8 ways (2 per device) beside 4 replicated KV
    # heads (4 per device): "Query num heads must be divisible by key/value num heads"
    q_only = {"model.layers.*.self_attn.q_proj.weight": ["model", None],
              "model.layers.*.self_attn.o_proj.weight": [None, "model"]}
    assert _evaluated_breaks(qwen, tmp_path, "1x8", q_only)["heads"]
    # 4 ways with K/V split alike: 4 query heads and 1 KV head per device
    both = {**q_only, "model.layers.*.self_attn.k_proj.weight": ["model", None],
            "model.layers.*.self_attn.v_proj.weight": ["model", None]}
    assert not _evaluated_breaks(qwen, tmp_path, "1x4", both)["heads"]
