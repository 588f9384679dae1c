"""Layers found from repeated argument signatures (raw .mlir, Flax-style names)."""

import jax
import jax.numpy as jnp

from shard_opt import frontends
from shard_opt.candidates import PARALLELISM, make_groups
from shard_opt.driver import Options, optimize
from shard_opt.frontends.jax_frontend import lower_jax
from shard_opt.frontends.mlir_frontend import strip_annotations
from shard_opt.lowered import Argument, find_repeats
from shard_opt.sharding import Mesh

D, H, LAYERS = 256, 1024, 3


def stack(params, x):
    for i in range(LAYERS):
        p = params[f"layers_{i}"]
        x = x + jnp.maximum(x @ p["up"], 0.0) @ p["down"]
    return x @ params["head"]


def _params():
    f32 = jnp.float32
    p = {f"layers_{i}": {"up": jax.ShapeDtypeStruct((D, H), f32), "down": jax.ShapeDtypeStruct((H, D), f32)}
         for i in range(LAYERS)}
    p["head"] = jax.ShapeDtypeStruct((D, D), f32)
    return p


def test_flax_style_layer_names_become_one_role():
    lm = lower_jax(stack, _params(), jax.ShapeDtypeStruct((64, D), jnp.float32),
                   kinds={"params": "param"})
    roles = {a.name: a.role for a in lm.arguments}
    assert roles["params.layers_2.up"] == roles["params.layers_0.up"] == "params.layers_*.up"
    assert roles["params.layers_1.down"] == "params.layers_*.down"
    assert roles["params.head"] == "params.head"  # not part of the repeated block
    assert [a.layer for a in lm.arguments if a.role == "params.layers_*.up"] == [0, 1, 2]
    assert lm.num_layers == LAYERS
    groups = make_groups(lm.arguments, [Mesh.parse("1x8")], {"tensor"})
    assert len(groups) == 3  # up, down, head: not 7


def test_unnamed_mlir_layers_are_found_and_searched_once(tmp_path):
    lm = lower_jax(stack, _params(), jax.ShapeDtypeStruct((64, D), jnp.float32), kinds={"params": "param"})
    path = tmp_path / "stack.mlir"
    path.write_text(strip_annotations(lm.text))
    raw = frontends.load(str(path))
    assert all(a.name.startswith("%arg") for a in raw.arguments)
    repeated = [a for a in raw.arguments if a.repeat]
    assert len(repeated) == 2 * LAYERS and raw.num_layers == LAYERS
    assert len({a.role for a in repeated}) == 2
    assert repeated[0].role.endswith("(repeated)")
    # one decision per role: every layer gets the same sharding
    plan = optimize(raw, Options(meshes=[Mesh.parse("1x8")], parallelism=PARALLELISM, progress=False)).plan
    by_role = {}
    for a, arg in zip(plan["arguments"], raw.arguments):
        if arg.repeat:
            by_role.setdefault(arg.role, set()).add(repr(a["sharding"]))
    assert all(len(v) == 1 for v in by_role.values())


def test_no_repeats_and_named_layers_are_left_alone():
    args = [Argument(i, f"%arg{i}", "input", s, "f32") for i, s in enumerate([(4, 8), (8, 2), (3,)])]
    assert find_repeats(args) == args
    named = [Argument(0, "model.layers.0.w", "param", (4, 4), "f32"),
             Argument(1, "model.layers.1.w", "param", (4, 4), "f32")]
    assert find_repeats(named) == named
    # a run of 1-D signatures alone is not a layer
    norms = [Argument(i, f"n{i}", "param", (16,), "f32") for i in range(6)]
    assert find_repeats(norms) == norms


def test_equal_shapes_in_one_layer_are_not_layers():
    # q, k, v, o of one attention layer: the same signature four times, different names
    names = ["attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight", "mlp.up.weight", "mlp.down.weight"]
    shapes = [(64, 64)] * 4 + [(256, 64), (64, 256)]
    args = [Argument(i, nm, "param", s, "f32") for i, (nm, s) in enumerate(zip(names, shapes))]
    assert find_repeats(args) == args
