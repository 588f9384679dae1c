"""The candidate space: which shardings each argument may take, and argument groups.

A *group* is a set of arguments that move together: the same role across repeated
layers (``model.layers.*.mlp.up_proj.weight``), so a 32-layer model has the search
space of one layer. An *option* is one ``TensorSharding`` for every member.

What may be split follows ``--parallelism`` (DESIGN.md):
- ``tensor``: parameters (and a KV cache's non-batch dims) on any divisible dim;
- ``data``: inputs (and a KV cache) on their batch dim (dim 0);
- ``sequence``: inputs on their token dim (dim 1).
Intermediate values get groups too (``site_groups``): a sharding constraint on the
reshape that splits features into heads, when Shardy needs that hint.
One-dimensional parameters (norm scales, biases) are not searched: the evaluator leaves
them open and Shardy gives them their consumer's split (``evaluate.follows_consumer``).
Convolution weights split on channels only: spatial dims would need a
halo exchange tt-mlir does not lower (tt-mlir issue 8216, references section 6).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from shard_opt.lowered import Argument
from shard_opt.sharding import Mesh, TensorSharding

PARALLELISM = ("tensor", "sequence", "data")


@dataclass(frozen=True)
class Group:
    """Arguments that share one sharding decision."""

    role: str
    members: tuple[int, ...]
    shape: tuple[int, ...]
    kind: str
    options: tuple[TensorSharding, ...]
    by: str = "role"  # how members are found in another lowering: "role" or "shape"

    def key(self) -> tuple:
        if self.by == "site":
            return ("site", self.role)
        return (self.role, self.shape, self.kind) if self.by == "role" else ("shape", self.shape)

    def describe(self, option: int) -> str:
        if self.by == "site" and option == 0:
            return "unconstrained"
        return describe_sharding(self.options[option])


def describe_sharding(s: TensorSharding) -> str:
    if s.is_replicated:
        return "replicated"
    parts = [f"dim {i} on {'+'.join(a.name for a in d)}" for i, d in enumerate(s.dims) if d]
    return ", ".join(parts)


def splittable_dims(arg: Argument, parallelism: set[str], conv_weight: bool = False) -> list[int]:
    rank = len(arg.shape)
    dims: set[int] = set()
    if arg.kind in ("param", "buffer"):
        if "tensor" in parallelism and rank >= 2:
            # A conv kernel [out, in, *spatial] (PyTorch layout) splits on channels only.
            dims.update(range(2) if conv_weight else range(rank))
    elif arg.kind == "cache":
        if "tensor" in parallelism:
            dims.update(range(1, rank))
        if "data" in parallelism and rank >= 1:
            dims.add(0)
        if "sequence" in parallelism and rank >= 3:
            dims.add(rank - 2)
    else:  # input
        if "data" in parallelism and rank >= 1:
            dims.add(0)
        if "sequence" in parallelism and rank >= 2:
            dims.add(1)
    return sorted(dims)


def _divides(size: int, axes: tuple[str, ...], meshes: list[Mesh]) -> bool:
    for m in meshes:
        f = 1
        for a in axes:
            f *= m.axis_size(a)
        if f <= 1 or size % f:
            return False
    return True


def argument_options(
    arg: Argument, meshes: list[Mesh], parallelism: set[str], *, rich: bool = True,
    conv_weight: bool = False,
) -> list[TensorSharding]:
    """Replicated first, then each divisible split, in a fixed order.

    ``rich`` adds what tt-mlir's AutoShardingPass does not search: one dim on both mesh
    axes, and two dims each on its own axis.
    """
    mesh = meshes[0]
    rank = len(arg.shape)
    axes = [a for a in mesh.axes if any(m.axis_size(a) > 1 for m in meshes)]
    dims = splittable_dims(arg, parallelism, conv_weight)
    out = [TensorSharding.replicated(rank)]

    def make(assign: dict[int, tuple[str, ...]]) -> TensorSharding:
        return TensorSharding.of([list(assign.get(d, ())) for d in range(rank)])

    out += one_axis_splits(arg.shape, dims, axes, meshes)
    if rich and len(axes) >= 2:
        both = tuple(axes[:2])  # major to minor, as the mesh orders them
        for d in dims:
            if _divides(arg.shape[d], both, meshes):
                out.append(make({d: both}))
        for d1, d2 in itertools.permutations(dims, 2):
            a1, a2 = axes[0], axes[1]
            if _divides(arg.shape[d1], (a1,), meshes) and _divides(arg.shape[d2], (a2,), meshes):
                out.append(make({d1: (a1,), d2: (a2,)}))
    return out


def one_axis_splits(shape, dims, axes, meshes: list[Mesh]) -> list[TensorSharding]:
    """One option per (dim, axis) that divides it on every mesh: that dim split on that axis."""
    rank = len(shape)
    return [TensorSharding.of([[a] if i == d else [] for i in range(rank)])
            for d in dims for a in axes if _divides(shape[d], (a,), meshes)]


def make_groups(
    arguments: list[Argument], meshes: list[Mesh], parallelism: set[str], *, rich: bool = True,
    conv_weights: set[int] = frozenset(),
) -> list[Group]:
    """Group arguments by role and shape; each group gets its options.

    Groups with a single option (nothing may be split) are dropped from the search:
    they stay replicated.
    """
    by_key: dict[tuple, list[Argument]] = {}
    for a in arguments:
        by_key.setdefault((a.role, a.shape, a.kind), []).append(a)
    groups = []
    for (role, shape, kind), members in by_key.items():
        opts = argument_options(members[0], meshes, parallelism, rich=rich,
                                conv_weight=members[0].index in conv_weights)
        if len(opts) > 1:
            groups.append(Group(role, tuple(m.index for m in members), shape, kind, tuple(opts)))
    return groups


def site_groups(module_text: str, meshes: list[Mesh], parallelism: set[str]) -> list[Group]:
    """One group per constraint site (``passes/apply_constraints.py``): the reshapes that
    split features into heads. Option 0 is *no constraint* (Shardy decides); the others
    split one dim of the reshape's result on one mesh axis. Tensor parallelism only."""
    if "tensor" not in parallelism:
        return []
    from shard_opt import ir
    from shard_opt.passes.apply_constraints import find_sites

    mesh = meshes[0]
    axes = [a for a in mesh.axes if any(m.axis_size(a) > 1 for m in meshes)]
    groups = []
    for site, shape in find_sites(ir.parse(module_text)).items():
        opts = [TensorSharding.replicated(len(shape)), *one_axis_splits(shape, range(len(shape)), axes, meshes)]
        if len(opts) > 1:
            groups.append(Group(site, (), tuple(shape), "intermediate", tuple(opts), by="site"))
    return groups
