"""A mixture of experts priced as routed: the router's top-k found in the graph
(analysis.router_of), the stacked experts' FLOPs and weight reads scaled to k of E."""

from __future__ import annotations

import os

import pytest

from shard_opt import costmodel, frontends
from shard_opt.evaluate import Evaluator
from shard_opt.sharding import Mesh

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "scripts")
MIXTRAL = os.path.join(FIXTURES, "tiny_mixtral.py")
GQA = os.path.join(FIXTURES, "gqa_llama.py")
MESH = Mesh.parse("1x8")


@pytest.fixture(scope="module")
def mixtral():
    return frontends.load(MIXTRAL, dtype="f32")


def _facts(model, shardings=None):
    system = costmodel.get_system(costmodel.default_system_for_mesh(MESH.shape))
    return Evaluator(model, MESH, system, costmodel.get_cost_model("tenstorrent")).facts_of(shardings or {})


def test_the_router_is_found_from_the_graph(mixtral):
    facts = _facts(mixtral)
    r = facts.routed_experts
    assert r == {"experts": 8, "top_k": 2, "tokens": 32, "weights_read": round(1 - (1 - 2 / 8) ** 32, 4)}


def test_expert_matmuls_do_k_of_e_of_the_dense_work(mixtral):
    facts = _facts(mixtral)
    dense = {"gate_up": 2 * 32 * 128 * 2 * 256 * 8, "down": 2 * 32 * 256 * 128 * 8}  # every expert, every token
    flops = sorted({o.flops for o in facts.ops if o.kind == "matmul"})
    for f in dense.values():
        assert f * 2 / 8 in flops and f not in flops


def test_one_decoded_token_reads_k_of_e_experts_weights():
    model = frontends.load(MIXTRAL, dtype="f32", phase="decode", seq_len=64)
    facts = _facts(model)
    r = facts.routed_experts
    assert (r["experts"], r["top_k"], r["tokens"]) == (8, 2, 1) and r["weights_read"] == 0.25
    expert_bytes = 4 * 8 * 128 * 2 * 256  # one layer's gate_up, f32
    assert expert_bytes // 4 in {o.weight_bytes for o in facts.ops}
    assert expert_bytes not in {o.weight_bytes for o in facts.ops}


def test_a_dense_model_has_no_router():
    assert _facts(frontends.load(GQA, layers=1, dtype="f32")).routed_experts is None
