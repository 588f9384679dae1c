"""shard_opt.parallel: the caller's share, the workers' chunks and the layered batch give
the facts an in-process evaluation gives, whoever computed them."""

import itertools
import os

import pytest

from shard_opt import costmodel, frontends, parallel
from shard_opt.candidates import PARALLELISM, make_groups
from shard_opt.evaluate import Evaluator, LayeredEvaluator, run_facts_batch
from shard_opt.sharding import Mesh

from conftest import EXAMPLES


@pytest.fixture
def two_jobs(monkeypatch):
    monkeypatch.setenv("SHARD_OPT_JOBS", "2")
    parallel.close()
    yield
    parallel.close()


def _setup():
    model = frontends.load(os.path.join(EXAMPLES, "mlp.mlir"))
    mesh = Mesh((2, 4))
    system = costmodel.get_system("wh-loudbox")
    cm = costmodel.get_cost_model("tenstorrent")
    groups = make_groups(model.arguments, [mesh], set(PARALLELISM))
    cands = list(itertools.islice(itertools.product(*[range(len(g.options)) for g in groups]), 24))
    return model, mesh, system, cm, groups, cands


def test_shared_batch_gives_the_in_process_facts(two_jobs):
    model, mesh, system, cm, groups, cands = _setup()
    alone = Evaluator(model, mesh, system, cm)
    want = [alone.facts(groups, a) for a in cands]

    shared = Evaluator(model, mesh, system, cm)
    assert parallel.start() == 1  # two jobs: this process and one worker
    todo = shared.unpropagated(groups, cands)
    run_facts_batch([(shared, groups, todo)])
    assert [shared.facts(groups, a) for a in cands] == want
    # a second batch: the worker knows the evaluator by its uid, the spec is not sent again
    again = Evaluator(model, mesh, system, cm).with_cost_model(cm)
    assert [s.key() for s in again.score_many(groups, cands)] == [alone.score(groups, a).key() for a in cands]


def test_layered_batch_holds_both_short_models(two_jobs):
    model, mesh, system, cm, groups, cands = _setup()
    e1, e2 = Evaluator(model, mesh, system, cm), Evaluator(model, mesh, system, cm)
    layered = LayeredEvaluator(e1, e2, 4)
    parallel.start()
    got = layered.score_many(groups, cands[:3])  # 3 candidates: 6 tasks, shared with the worker
    ref = Evaluator(model, mesh, system, cm)
    for a, s in zip(cands[:3], got):
        r = ref.score(groups, a)
        assert s.total_us == pytest.approx(r.total_us) and s.ccl_count == r.ccl_count
