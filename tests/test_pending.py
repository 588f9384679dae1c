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
    opts = Options(meshes=[Mesh((2, 4))], progress=False)
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


def test_a_whole_model_hardly_bigger_than_its_copies_is_lowered_here():
    from shard_opt.frontends.zoo import _whole_is_small

    def copy(chars, layers):
        return LoweredModel("m", "x" * chars, [], meta={"total_layers": layers})

    # the Wan VAE decoder's module text: 3 blocks of ~5.6k characters on a rest of ~88k
    assert _whole_is_small([copy(93416, 3), copy(99040, 3)])
    # a 32-block language model: the whole is ~14x its 2-block copy, a child lowers it
    assert not _whole_is_small([copy(60000, 32), copy(65000, 32)])
    assert not _whole_is_small([copy(60000, 1), copy(60000, 1)])  # no block to measure
