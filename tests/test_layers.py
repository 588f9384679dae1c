"""Deep models are scored from their 1- and 2-layer versions: c1 + (L-1)(c2 - c1).

These tests check that extrapolation against a whole-model evaluation of the same plan,
and the memory fallback that a deep model can trigger.
"""

import os

import pytest

from shard_opt import costmodel, frontends
from shard_opt.baselines import megatron_shardings
from shard_opt.candidates import PARALLELISM, make_groups
from shard_opt.driver import Options, optimize
from shard_opt.evaluate import Evaluator
from shard_opt.search import assignment_of, make_scorer
from shard_opt.sharding import Mesh

SCRIPT = os.path.join(os.path.dirname(__file__), "fixtures", "scripts", "gqa_llama.py")


@pytest.fixture(scope="module")
def model():
    m = frontends.load(SCRIPT, layers=4)
    assert m.num_layers == 4 and m.with_layers is not None
    return m


@pytest.mark.parametrize("plan", ["replicated", "megatron"])
def test_extrapolated_score_equals_whole_model(model, plan):
    mesh = Mesh.parse("2x4")
    system = costmodel.get_system("wh-loudbox")
    cm = costmodel.get_cost_model("tenstorrent")
    groups = make_groups(model.arguments, [mesh], set(PARALLELISM))
    a = tuple(0 for _ in groups) if plan == "replicated" else assignment_of(groups, megatron_shardings(model, mesh))
    layered = make_scorer(model, mesh, system, cm).score(groups, a)
    whole = Evaluator(model, mesh, system, cm).score(groups, a)
    assert layered.ccl_count == whole.ccl_count
    assert layered.ccl_bytes == whole.ccl_bytes
    assert layered.total_us == pytest.approx(whole.total_us, rel=1e-9)
    assert layered.compute_us == pytest.approx(whole.compute_us, rel=1e-9)
    assert layered.memory_bytes == pytest.approx(whole.memory_bytes, rel=0.01)  # peak activations: a max
    if plan == "megatron":
        assert whole.ccl_count > 0


def test_memory_fallback_is_loud(capsys):
    """A system too small for the fastest plan: the fastest plan that fits, said loudly."""
    import dataclasses

    model = frontends.load(SCRIPT, layers=2)
    base = costmodel.get_system("wh-loudbox")
    mesh = Mesh.parse("2x4")
    fast = optimize(model, Options(meshes=[mesh], progress=False, baselines=False)).plan
    # DRAM just below what the fastest plan needs, above what the smallest plan needs
    need = fast["cost"]["memory_per_device_bytes"]
    tight = dataclasses.replace(base, name="tight", dram_bytes=int(need * 0.95 / 0.9))
    costmodel.register_system(tight)
    try:
        plan = optimize(model, Options(meshes=[mesh], system="tight", progress=True, baselines=False)).plan
    finally:
        from shard_opt.costmodel import registry

        registry._extra_systems.pop("tight", None)
    err = capsys.readouterr().err
    assert plan["memory_fallback"] is True
    assert "WARNING: memory fallback" in err
    assert "took the fastest plan that fits" in plan["memory_fallback_reason"]
    assert plan["cost"]["fits"] and plan["cost"]["memory_per_device_bytes"] < need
    assert plan["cost"]["total_us"] >= fast["cost"]["total_us"]


def test_a_screened_enumeration_scores_only_the_screens_best_and_keeps_the_full_choice(model):
    """``search(..., screen_top=k)`` (the one-axis baseline's): every plan of the space is
    ranked on the 1-layer copy, only the k best are scored on both copies, and the plan
    chosen is the whole enumeration's."""
    import math

    from shard_opt.baselines import autoshard_groups
    from shard_opt.search import search

    mesh = Mesh.parse("2x4")
    system = costmodel.get_system("wh-loudbox")
    h = costmodel.get_cost_model("autoshard-heuristic")
    groups = autoshard_groups(model, mesh)[:3]
    space = math.prod(len(g.options) for g in groups)
    assert space > 8

    def run(**kw):
        return search(model, [mesh], system, h, parallelism=set(PARALLELISM), groups=groups,
                      scorer=make_scorer(model, mesh, system, h), exhaustive_limit=1500, exhaustive_ops=None, **kw)

    full, screened = run(), run(screen_top=4)
    assert len(full.scored) == space and len(screened.scored) == 4
    assert screened.candidates_evaluated == full.candidates_evaluated == space
    assert screened.assignment == full.assignment
    assert screened.score == full.score
