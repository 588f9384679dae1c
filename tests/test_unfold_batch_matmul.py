"""unfold-batch-matmul: attention's batched matmuls keep batch and heads apart, so a plan
with users on one mesh axis and heads on another (tt-metal's Galaxy decode layout) does
not gather the heads; the rewritten program computes the same numbers."""

from __future__ import annotations

import os

import numpy as np

from shard_opt import costmodel, frontends, ir
from shard_opt.evaluate import Evaluator, shardings_by_role
from shard_opt.passes.unfold_batch_matmul import unfold_batch_matmul
from shard_opt.sharding import Mesh, TensorSharding

GQA = os.path.join(os.path.dirname(__file__), "fixtures", "scripts", "gqa_llama.py")


def _decode():
    return frontends.load(GQA, layers=1, phase="decode", batch=4, seq_len=64, dtype="f32")


def test_the_rewrite_computes_the_same_numbers():
    model = _decode()
    module = ir.parse(model.text)
    assert unfold_batch_matmul(module) == 2  # scores and probabilities x values
    rng = np.random.default_rng(0)
    args = []
    for a in model.arguments:
        if a.kind == "input":
            args.append(rng.integers(0, 1024, a.shape).astype(np.int64))
        else:
            args.append(rng.standard_normal(a.shape).astype(np.float32))
    before = ir.xla_execute(ir.xla_compile(model.text, 1, shardy=False), args)
    after = ir.xla_execute(ir.xla_compile(ir.print_module(module), 1, shardy=False), args)
    for (_, x), (_, y) in zip((o[0] for o in before), (o[0] for o in after)):
        # the same products and sums; XLA may order the additions otherwise (float rounding)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-4)


def test_users_and_heads_on_two_axes_keep_attention_local():
    # users (4) on "batch", heads on "model": Q/K/V column-parallel, o row-parallel,
    # the KV cache [users, kv heads, positions, head_dim] split the same way
    model = _decode()
    mesh = Mesh.parse("2x4")
    col, row = TensorSharding.of([["model"], []]), TensorSharding.of([[], ["model"]])
    cache = TensorSharding.of([["batch"], ["model"], [], []])
    layout = {r: col for r in ("q_proj", "k_proj", "v_proj")}
    layout["o_proj"] = row
    def proj(a):
        return a.name.split(".")[-2] if a.name.count(".") else None

    by_role = {a.role: layout[proj(a)] for a in model.arguments if proj(a) in layout}
    by_role.update({a.role: cache for a in model.arguments if a.kind == "cache"})
    by_role.update({a.role: TensorSharding.of([["batch"], []]) for a in model.arguments if a.kind == "input"})
    system = costmodel.get_system(costmodel.default_system_for_mesh(mesh.shape))
    ev = Evaluator(model, mesh, system, costmodel.get_cost_model("tenstorrent"))
    facts = ev.facts_of(shardings_by_role(model, by_role))
    def owner(c):
        return model.arguments[c.origin_arg].name if c.origin_arg >= 0 else ""

    gathered = [c for c in facts.collectives if c.cause == "attention inputs" or
                (c.kind == "all_gather" and "model" in c.axes and "self_attn" in owner(c))]
    assert gathered == [], [(c.kind, c.axes, c.global_shape, owner(c)) for c in gathered]
