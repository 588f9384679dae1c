"""The search: Megatron where it is optimal, the brute-force optimum everywhere it can be checked."""

import itertools
import json
import math
import os

import pytest

from shard_opt import costmodel, evaluate, frontends, parallel, safety
from shard_opt import search as search_mod
from shard_opt.candidates import PARALLELISM, argument_options
from shard_opt.driver import Options, optimize
from shard_opt.evaluate import Evaluator, follows_consumer
from shard_opt.sharding import Mesh
from shard_opt.structure import structure_of

from conftest import EXAMPLES

MLP = os.path.join(EXAMPLES, "mlp.mlir")


@pytest.fixture(scope="module")
def mlp():
    return frontends.load(MLP)


def plan_for(model, mesh, parallelism=PARALLELISM, **kw):
    return optimize(model, Options(meshes=[Mesh.parse(mesh)], parallelism=tuple(parallelism), progress=False, **kw)).plan


def shardings(plan):
    return {a["name"]: a["sharding"] for a in plan["arguments"]}


def test_tensor_only_on_a_line_is_megatron_column_then_row(mlp):
    plan = plan_for(mlp, "1x8", ["tensor"])
    s = shardings(plan)
    assert s["fc1.weight"] == [["model"], []]  # split on output features (column)
    assert s["fc2.weight"] == [[], ["model"]]  # split on input features (row)
    assert s["fc1.bias"] == [["model"]]  # Shardy splits the column bias with its weight
    assert s["x"] == [[], [], []]  # activations whole
    # fc2's partial sums are reduced once: Megatron's all_reduce, or (cheaper here) the
    # reduce_scatter + all_gather a constraint on fc2's output reshape buys (Korthikanti et al.)
    kinds = sorted(c["kind"] for c in plan["collectives"])
    assert kinds in (["all_reduce"], ["all_gather", "reduce_scatter"])
    assert all(c["axes"] == ["model"] for c in plan["collectives"])
    assert (kinds == ["all_reduce"]) == ("constraints" not in plan)
    assert plan["cost"]["total_us"] <= plan["baselines"]["megatron"]["total_us"]


def test_tensor_only_on_2x4_beats_megatron_and_keeps_activations_whole(mlp):
    plan = plan_for(mlp, "2x4", ["tensor"])
    assert plan["cost"]["total_us"] <= plan["baselines"]["megatron"]["total_us"]
    assert plan["cost"]["total_us"] < plan["baselines"]["replicated"]["total_us"]
    s = shardings(plan)
    assert s["x"] == [[], [], []]
    kinds = [c["kind"] for c in plan["collectives"]]
    assert kinds.count("all_reduce") + kinds.count("reduce_scatter") == 1  # one reduction of fc2's sums


def brute_force(model, mesh_spec, parallelism):
    """The optimum by enumerating every per-argument option, without the search code."""
    mesh = Mesh.parse(mesh_spec)
    system = costmodel.get_system(costmodel.default_system_for_mesh(mesh.shape))
    ev = Evaluator(model, mesh, system, costmodel.get_cost_model("tenstorrent"))
    free = [a for a in model.arguments if not follows_consumer(a)]  # 1-D params stay open
    limit = safety.limits(model, structure_of(model))  # what the rules remove, as the search removes it
    per_arg = [[o for o in argument_options(a, [mesh], set(parallelism)) if not safety.allowed(o, a, limit, mesh)]
               for a in free]
    best = None
    for combo in itertools.product(*per_arg):
        s = ev.run({a.index: sh for a, sh in zip(free, combo)}).score
        if best is None or s.total_us < best.total_us:
            best = s
    return best, len(list(itertools.product(*per_arg)))


@pytest.mark.parametrize("mesh, parallelism", [("2x4", PARALLELISM), ("2x4", ["tensor"])])
def test_plan_is_the_brute_force_optimum(mlp, mesh, parallelism):
    plan = plan_for(mlp, mesh, parallelism, baselines=False)
    best, n = brute_force(mlp, mesh, parallelism)
    # the argument space is enumerated whole (a static decision: the space and its op
    # count); constraint sites are then searched from its best plans, so the plan is the
    # brute-force optimum or better (never worse)
    assert plan["search"]["exhaustive"] and plan["search"]["space_size"] == n
    assert plan["search"]["candidates_evaluated"] >= n
    if "constraints" in plan:
        assert plan["cost"]["total_us"] < round(best.total_us, 3)
    else:
        assert plan["cost"]["total_us"] == round(best.total_us, 3)  # the plan JSON keeps 3 decimals


def _the_plan(plan):
    """What a plan decides: argument shardings, constraints, collectives, cost."""
    return (shardings(plan), plan.get("constraints"), [(c["kind"], c["axes"], c["shape"]) for c in plan["collectives"]],
            plan["cost"])


class _SlowClock:
    """``time`` as ``evaluate`` reads it, on a machine ``factor`` times slower."""

    def __init__(self, factor):
        import time

        self._time, self.factor = time, factor

    def perf_counter(self):
        return self._time.perf_counter() * self.factor

    def __getattr__(self, name):
        return getattr(self._time, name)


@pytest.mark.parametrize("mesh", ["2x4", "1x8"])
def test_plan_is_the_same_under_any_budget_clock_and_job_count(mlp, mesh, monkeypatch):
    """Whether the space is enumerated is decided from the space and the module's op
    count, never from a measured time or the core count; and enumeration and local search
    agree on 1x8, because constraint sites are searched from several argument plans. On 2x4
    they no longer do since the tile rows of 2026-12-05: the enumerated optimum (185.8 us, the
    sequences data-parallel on "model" so each chip's matmuls read one 32-row tile, no
    constraint) is an argument plan local search does not reach from its start; it ends at a
    refinement of 198.1 us (the batch on "batch", the hidden on "model", a reshape constraint:
    the 2x4 plan of before, 180.3 us then). Local search is held to never beating the
    enumeration there, and to within 10% of it (a search finding, not a cost-model one)."""
    monkeypatch.setenv("SHARD_OPT_CACHE", "off")  # every run propagates its candidates (no facts from the last)

    def run(budget=search_mod.EXHAUSTIVE_OPS, jobs="1", slow=1):
        monkeypatch.setitem(search_mod.search.__kwdefaults__, "exhaustive_ops", budget)
        monkeypatch.setenv("SHARD_OPT_JOBS", jobs)
        monkeypatch.setattr(evaluate, "time", _SlowClock(slow))
        parallel.close()
        try:
            return plan_for(mlp, mesh, baselines=False)
        finally:
            parallel.close()

    default = run()
    plans = {"no budget": run(budget=None), "local search": run(budget=0),
             "2 jobs, 100x slower clock": run(jobs="2", slow=100)}
    # a 15-op module's space is enumerated, on any machine
    assert default["search"]["exhaustive"] and plans["2 jobs, 100x slower clock"]["search"]["exhaustive"]
    assert not plans["local search"]["search"]["exhaustive"]
    for name, plan in plans.items():
        if mesh == "2x4" and name == "local search":
            assert default["cost"]["total_us"] <= plan["cost"]["total_us"] <= 1.1 * default["cost"]["total_us"]
            continue
        assert _the_plan(plan) == _the_plan(default), name
    if mesh == "2x4":
        assert not default.get("constraints") and default["cost"]["total_us"] <= 185.9


def test_site_starts_are_the_best_distinct_times():
    S = evaluate.Score

    def sc(t, n=1):
        return S(t, t, t, 0.0, n, 0, 0, True)

    scored = {(0, 0): sc(5.0), (1, 0): sc(3.0, 2), (0, 1): sc(3.0, 3), (2, 0): sc(4.0), (0, 2): sc(math.inf),
              (1, 1): sc(4.0, 2), (2, 2): sc(6.0)}
    starts = search_mod._site_starts((1, 0), scored, 3, S.key)
    assert starts == [(1, 0), (2, 0), (0, 0)]  # (0, 1) and (1, 1) repeat a time; infinite never starts
    assert search_mod._site_starts((1, 0), scored, 1, S.key) == [(1, 0)]


def test_plan_json_has_the_design_fields(mlp):
    plan = plan_for(mlp, "2x4")
    for key in ("model", "mesh", "system", "arguments", "collectives", "cost", "baselines", "search"):
        assert key in plan
    assert plan["mesh"].to_json() == {"shape": [2, 4], "axes": ["batch", "model"]}
    assert set(plan["baselines"]) == {"replicated", "megatron", "one-axis-heuristic"}
    c = plan["cost"]
    assert c["ccl_count"] == len(plan["collectives"])
    assert c["ccl_bytes"] == sum(x["bytes_per_device"] for x in plan["collectives"])
    assert c["ccl_us"] == pytest.approx(sum(x["time_us"] for x in plan["collectives"]), abs=1e-2)
    json.dumps(plan.to_json())  # serialisable


def test_one_device_has_one_one_axis_plan(mlp):
    """On a 1x1 mesh every split is over an axis of one device, i.e. the replicated plan:
    tt-mlir's one-axis space is that one plan (it priced 3^k copies of it before), and the
    baseline is the replicated plan's figure."""
    from shard_opt.baselines import autoshard_groups

    assert autoshard_groups(mlp, Mesh((1, 1))) == []
    assert autoshard_groups(mlp, Mesh((1, 2)))  # one device more: a real space
    plan = plan_for(mlp, "1x1")
    one_axis, replicated = plan["baselines"]["one-axis-heuristic"], plan["baselines"]["replicated"]
    assert one_axis["candidates_evaluated"] == 1
    assert one_axis["total_us"] == replicated["total_us"] == plan["cost"]["total_us"]


def test_search_is_deterministic(mlp, monkeypatch):
    monkeypatch.setenv("SHARD_OPT_CACHE", "off")  # the second run propagates again (no facts from the first)
    a = plan_for(mlp, "2x4").to_json()
    b = plan_for(mlp, "2x4").to_json()
    a["search"].pop("seconds"), b["search"].pop("seconds")
    assert a == b


def test_every_listed_mesh_must_divide(mlp):
    plan = optimize(mlp, Options(meshes=[Mesh.parse("2x4"), Mesh.parse("1x8")], progress=False)).plan
    for a in plan["arguments"]:
        for dim, axes in zip(a["shape"], a["sharding"]):
            for m in ([2, 4], [1, 8]):
                f = 1
                for ax in axes:
                    f *= dict(zip(["batch", "model"], m))[ax]
                assert dim % f == 0
    assert len(plan["meshes"]) == 2


@pytest.mark.parametrize("mesh", ["2x4", "1x8"])
def test_transformer_block_at_least_as_fast_as_both_baselines(mesh):
    block = frontends.load(os.path.join(EXAMPLES, "transformer_block.mlir"))
    plan = plan_for(block, mesh)
    assert not plan["search"]["exhaustive"]  # the local search, not enumeration
    assert plan["cost"]["total_us"] <= plan["baselines"]["megatron"]["total_us"]
    assert plan["cost"]["total_us"] <= plan["baselines"]["one-axis-heuristic"]["total_us"]
    assert plan["cost"]["total_us"] < plan["baselines"]["replicated"]["total_us"]
