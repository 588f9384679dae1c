"""Evaluated candidates' facts kept on disk (shard_opt.factcache): a second run on the same
model and mesh (a zoo model, a .mlir file or a load script) propagates nothing and writes
the same plan; another mesh, a change to the code, other argument kinds or --no-cache
misses."""

import json
import os

import pytest

from shard_opt import evaluate, factcache
from shard_opt.frontends import cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "examples", "mlp.mlir")


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """A private cache and a count of the Shardy runs of every evaluator."""
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    runs = []
    real = evaluate.Evaluator.propagate

    def propagate(self, *a, **k):
        runs.append(self.model.name)
        return real(self, *a, **k)

    monkeypatch.setattr(evaluate.Evaluator, "propagate", propagate)
    monkeypatch.setenv("SHARD_OPT_JOBS", "1")  # every run in this process, where it is counted
    return runs


def _plan(path):
    plan = json.loads(path.read_text())
    del plan["search"]["seconds"]
    return plan


def test_second_run_propagates_nothing_and_plans_the_same(tmp_path, run_cli, counted):
    args = ["zoo:mlp", "--mesh", "2x4", "-o", tmp_path / "o.mlir", "--quiet"]
    assert run_cli(*args, "--plan-json", tmp_path / "a.json")[0] == 0
    first = len(counted)
    assert first > 10
    (stored,) = os.listdir(tmp_path / "cache" / factcache.SUBDIR)
    assert stored.startswith("mlp-") and stored.endswith(factcache.SUFFIX)
    assert run_cli(*args, "--plan-json", tmp_path / "b.json")[0] == 0
    assert len(counted) == first + 1  # the final evaluation on the whole model only
    assert _plan(tmp_path / "a.json") == _plan(tmp_path / "b.json")
    # another mesh: other facts
    assert run_cli("zoo:mlp", "--mesh", "1x8", "-o", tmp_path / "o.mlir", "--quiet")[0] == 0
    assert len(counted) > first + 2 and len(os.listdir(tmp_path / "cache" / factcache.SUBDIR)) == 2


def test_a_change_to_the_code_misses(tmp_path, run_cli, counted, monkeypatch):
    args = ["zoo:mlp", "--mesh", "1x2", "-o", tmp_path / "o.mlir", "--quiet"]
    assert run_cli(*args)[0] == 0
    first = len(counted)
    monkeypatch.setattr(factcache, "_code_digest", lambda: "another version of the analysis")
    assert run_cli(*args)[0] == 0
    assert len(counted) == 2 * first




def test_the_code_digest_covers_the_safety_rules():
    # a rule's breaks() decides ModuleFacts.violations: an edit to shard_opt/rules/ must
    # not be served the facts (and the violations) the old rule found
    from shard_opt.rules import residual_stream

    paths = {os.path.abspath(p) for _, p in factcache._sources()}
    assert os.path.abspath(residual_stream.__file__) in paths
    assert os.path.abspath(factcache.__file__) in paths

def test_no_cache_stores_nothing(tmp_path, run_cli, counted):
    assert run_cli("zoo:mlp", "--mesh", "1x2", "-o", tmp_path / "o.mlir", "--no-cache")[0] == 0
    assert run_cli(MLP, "--mesh", "1x2", "-o", tmp_path / "o.mlir", "--no-cache")[0] == 0
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("source", [MLP, os.path.join(ROOT, "tests", "fixtures", "scripts", "residual_mlp.py")],
                         ids=["mlir", "load-script"])
def test_a_mlir_file_or_a_load_script_reuses_its_facts(tmp_path, run_cli, counted, source):
    """Keyed by the module the search prepared, not by where it came from: the second run on
    the same .mlir file or load script propagates only the final whole-model evaluation."""
    args = [source, "--mesh", "1x2", "-o", tmp_path / "o.mlir", "--quiet"]
    assert run_cli(*args, "--plan-json", tmp_path / "a.json")[0] == 0
    first = len(counted)
    assert first > 2 and os.listdir(tmp_path / "cache" / factcache.SUBDIR)
    assert run_cli(*args, "--plan-json", tmp_path / "b.json")[0] == 0
    assert len(counted) - first < first and len(counted) - first <= 1
    assert _plan(tmp_path / "a.json") == _plan(tmp_path / "b.json")


def test_other_argument_kinds_miss(tmp_path, counted):
    """The facts read each argument's kind (a weight's bytes are not an input's), which the
    module text does not carry: the same text with another kind is another key."""
    import dataclasses

    from shard_opt import costmodel, frontends
    from shard_opt.sharding import Mesh

    model = frontends.load(MLP)
    other = dataclasses.replace(model, arguments=[dataclasses.replace(a, kind="input") if a.kind == "param" else a
                                                  for a in model.arguments])
    system, cm = costmodel.get_system("wh-loudbox"), costmodel.get_cost_model("tenstorrent")
    keys = {factcache.key_of(evaluate.Evaluator(m, Mesh((1, 2)), system, cm)) for m in (model, other)}
    assert len(keys) == 2


def test_a_damaged_file_is_no_facts(tmp_path, run_cli, counted):
    args = ["zoo:mlp", "--mesh", "1x2", "-o", tmp_path / "o.mlir", "--quiet"]
    assert run_cli(*args)[0] == 0
    first = len(counted)
    (stored,) = os.listdir(tmp_path / "cache" / factcache.SUBDIR)
    (tmp_path / "cache" / factcache.SUBDIR / stored).write_bytes(b"not a pickle")
    assert run_cli(*args)[0] == 0
    assert len(counted) == 2 * first


def test_facts_files_are_evicted_with_the_lowering_entries(tmp_path, run_cli, counted):
    assert run_cli("zoo:mlp", "--mesh", "1x2", "-o", tmp_path / "o.mlir", "--quiet")[0] == 0
    root = str(tmp_path / "cache")
    assert cache.usage(root)[0] == 1  # the cache line counts lowering entries only
    cache.evict(root, limit=0)
    assert os.listdir(os.path.join(root, factcache.SUBDIR)) == [] and cache.usage(root) == (0, 0)
