"""A zoo model lowered beside its short copies (frontends/zoo.py ``lower_beside``): the
arguments predicted from the copies, the PendingModel standing in for the model, and the
driver's look-ahead giving the plan the real model gives, the prediction right or wrong."""

import dataclasses
import json
import os

from shard_opt import frontends
from shard_opt.driver import Options, optimize
from shard_opt.lowered import Argument, LoweredModel, PendingModel, predict_arguments, same_arguments
from shard_opt.plan import dumps
from shard_opt.sharding import Mesh


def _args(names, shapes=None):
    return [Argument(i, n, "input" if n == "ids" else "param", (shapes or {}).get(n, (4, 4)), "bf16", "Linear")
            for i, n in enumerate(names)]


def _layer(k):
    return [f"model.layers.{k}.q.weight", f"model.layers.{k}.o.weight"]


def test_arguments_of_the_whole_model_from_its_short_copies():
    head, tail = ["model.embed.weight"], ["model.norm.weight", "lm_head.weight", "ids"]
    one = _args(head + _layer(0) + tail)
    two = _args(head + _layer(0) + _layer(1) + tail)
    want = _args(head + sum((_layer(k) for k in range(12)), []) + tail)
    assert predict_arguments(one, two, 12) == want
    assert predict_arguments(one, one, 12) is None  # no block inserted
    odd = _args(head + _layer(0) + ["model.layers.1.q.weight", "model.layers.1.x.weight"] + tail)
    assert predict_arguments(one, odd, 12) is None  # the second block is not the first's twin
    shapes = {"model.layers.1.o.weight": (8, 4)}
    assert predict_arguments(one, _args(head + _layer(0) + _layer(1) + tail, shapes), 12) is None


def test_pending_model_reads_through_to_the_real_one():
    real = LoweredModel("m", "module {}", _args(["a"]))
    calls = []
    pending = PendingModel(None, lambda: calls.append(1) or real)
    assert pending.provisional is None and not calls
    assert pending.text == "module {}" and pending.name == "m" and calls == [1]
    pending.meta["x"] = 1
    assert real.meta == {"x": 1} and pending.resolve() is real and calls == [1]


def _plan(model):
    """The plan JSON without ``search.seconds`` (the one field that may differ)."""
    opts = Options(meshes=[Mesh((1, 2))], progress=False)  # the smallest mesh with a search
    plan = json.loads(dumps(optimize(model, opts).plan))
    del plan["search"]["seconds"]
    return plan


def test_look_ahead_gives_the_plan_of_the_real_model():
    script = os.path.join(os.path.dirname(__file__), "fixtures", "scripts", "gqa_llama.py")
    real = frontends.load(script, layers=3)  # scored from its 1- and 2-layer copies
    want = _plan(real)
    right = dataclasses.replace(real, text="")  # what a provisional model knows: no module text
    assert same_arguments(right, real)
    assert _plan(PendingModel(right, lambda: real)) == want
    # a wrong prediction (another shape for one argument): the driver starts again from the model
    args = list(real.arguments)
    args[0] = dataclasses.replace(args[0], shape=tuple(2 * s for s in args[0].shape))
    wrong = dataclasses.replace(real, text="", arguments=args)
    assert not same_arguments(wrong, real)
    assert _plan(PendingModel(wrong, lambda: real)) == want


def test_a_model_hardly_bigger_than_its_2_block_copy_is_scored_whole():
    from torch import nn

    from shard_opt.frontends.torch_frontend import whole_per_two_blocks
    from shard_opt.lowered import scored_whole

    def model(blocks: int, rest: int) -> nn.Module:
        m = nn.Module()
        m.stem = nn.Sequential(*[nn.Linear(4, 4) for _ in range(rest)])
        m.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(blocks))
        return m

    # a VAE decoder's shape: 3 small blocks on a large rest (the Wan VAE: 1.07)
    small = whole_per_two_blocks(model(3, 40))
    assert small == round(46 / 44, 3) and scored_whole({"whole_per_two_blocks": small, "total_layers": 3})
    # a language model's: 32 blocks, a small rest
    deep = whole_per_two_blocks(model(32, 2))
    assert deep == round(66 / 6, 3) and not scored_whole({"whole_per_two_blocks": deep, "total_layers": 32})
    assert whole_per_two_blocks(nn.Linear(4, 4)) is None and not scored_whole({})
    # two blocks: scored whole anyway; the 1-block copy still gives the structure
    assert not scored_whole({"whole_per_two_blocks": 1.0, "total_layers": 2})


def test_limits_and_sites_read_from_the_1_layer_copy_are_the_whole_models():
    """A model scored from its copies reads its gather tables and constraint sites from its
    1-layer copy (``layer_copy``), so the search need not wait for the whole module:
    they must be what the whole module gives."""
    from shard_opt.candidates import site_groups
    from shard_opt.lowered import layer_copy
    from shard_opt.rules.vocab_gather import gather_indexed_dims

    script = os.path.join(os.path.dirname(__file__), "fixtures", "scripts", "gqa_llama.py")
    model = frontends.load(script, layers=3)  # the look-ahead test's model: one lowering for both
    whole = dataclasses.replace(model, with_layers=None)  # read the module itself
    assert layer_copy(model) is not model and layer_copy(whole) is whole
    tables = gather_indexed_dims(model)
    assert tables and tables == gather_indexed_dims(whole)
    meshes = [Mesh((2, 4))]
    short = layer_copy(model)
    sites = site_groups(short.text, meshes, {"data", "tensor", "sequence"}, short.arguments)
    assert sites and sites == site_groups(whole.text, meshes, {"data", "tensor", "sequence"}, whole.arguments)
