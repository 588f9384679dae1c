"""The candidate space: which shardings each argument may take, and argument groups.

A *group* is a set of arguments that move together: the same role across repeated
layers (``model.layers.*.mlp.up_proj.weight``), so a 32-layer model has the search
space of one layer. An *option* is one ``TensorSharding`` for every member.

What may be split follows ``--parallelism`` (docs/design.md), by what each dim *is*
(``dim_class``: one rule for arguments and for the intermediate values below):

- a **batch** dim (family ``data``): dim 0 of an input or a KV cache;
- a **token** dim (family ``sequence``): dim 1 of an input of rank >= 3
  (``[batch, tokens, hidden]``) or of integer token ids / masks of rank 2
  (``[batch, tokens]``); dim ``rank - 2`` of a KV cache of rank >= 3
  (``[batch, heads, tokens, head_dim]``);
- a **feature** dim (family ``tensor``): every dim of a parameter or buffer; a KV
  cache's other dims (heads, head_dim); the last dim of an input of rank >= 3 (its
  hidden features);
- anything else (the dims between token and features of a rank-4 input, dim 1 of a
  float rank-2 input) is nothing known, and never split.

An argument may split the dims whose family ``--parallelism`` allows
(``splittable_dims``), except that ``tensor`` splits weights: an input's feature dim is
not a candidate of its own (Shardy splits it when a weight's split reaches it).
Intermediate values get groups too (``site_groups``): a sharding constraint on the
reshape that splits features into heads, when Shardy needs that hint; a constraint
may split a dim of the reshape's result only when every argument dim indexing it
(``dataflow.dim_sources``) is of a family ``--parallelism`` allows, so ``tensor`` alone
never splits activations along batch or tokens through a constraint.
One-dimensional parameters (norm scales, biases) are not searched: the evaluator leaves
them open and Shardy gives them their consumer's split (``evaluate.follows_consumer``).
Convolution weights split on channels only: spatial dims would need a
halo exchange tt-mlir does not lower (tt-mlir issue 8216, references section 6).
The compiler-safety rules that exclude splits (``shard_opt.safety``: a vocabulary-split
embedding, part of an attention head) drop options here (``make_groups(limit=)``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from shard_opt import safety
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


# The parallelism family that splits each class of dim (``dim_class``).
FAMILY = {"batch": "data", "token": "sequence", "feature": "tensor"}


def dim_class(kind: str, shape, dtype: str, dim: int) -> str | None:
    """``batch``, ``token``, ``feature`` or None: what dim ``dim`` of an argument of this
    kind, shape and element type is (the rule in the module docstring)."""
    rank = len(shape)
    if kind in ("param", "buffer"):
        return "feature"
    if kind == "cache":
        if dim == 0:
            return "batch"
        return "token" if rank >= 3 and dim == rank - 2 else "feature"
    # an input
    if dim == 0:
        return "batch"
    if dim == 1 and (rank >= 3 or (rank == 2 and _is_integer(dtype))):
        return "token"
    if rank >= 3 and dim == rank - 1:
        return "feature"
    return None


def _is_integer(dtype: str) -> bool:
    """Token ids, positions, masks: ``i64``, ``ui8``, ``i1``."""
    return dtype.startswith(("i", "ui", "si"))


def splittable_dims(arg: Argument, parallelism: set[str], conv_weight: bool = False) -> list[int]:
    """The dims of ``arg`` the search may split under ``parallelism``: those whose class
    (``dim_class``) is of an allowed family. One-dimensional parameters are left to
    follow their consumer, an input's features are not split on their own (``tensor``
    splits weights) and a conv kernel ``[out, in, *spatial]`` (PyTorch layout) splits on
    channels only."""
    rank = len(arg.shape)
    if arg.kind in ("param", "buffer") and rank < 2:
        return []
    dims = []
    for d in range(rank):
        c = dim_class(arg.kind, arg.shape, arg.dtype, d)
        if c is None or FAMILY[c] not in parallelism:
            continue
        if (c == "feature" and arg.kind == "input") or (conv_weight and d >= 2):
            continue
        dims.append(d)
    return dims


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
    conv_weights: set[int] = frozenset(), limit: dict | None = None, removed: dict | None = None,
    removed_options: dict | None = None,
) -> list[Group]:
    """Group arguments by role and shape; each group gets its options.

    ``limit`` (``safety.limits``) drops the options a compiler-safety rule excludes (a
    split of an embedding's vocabulary, of part of an attention head); ``removed``
    counts them per rule, and ``removed_options`` lists them per rule as (role, option)
    (the report prices them: what the rule cost). Groups with a single option (nothing may be split) are
    dropped from the search: they stay replicated.
    """
    by_key: dict[tuple, list[Argument]] = {}
    for a in arguments:
        by_key.setdefault((a.role, a.shape, a.kind), []).append(a)
    groups = []
    for (role, shape, kind), members in by_key.items():
        opts = argument_options(members[0], meshes, parallelism, rich=rich,
                                conv_weight=members[0].index in conv_weights)
        if limit:
            kept = []
            for o in opts:
                broken = {safety.allowed(o, m, limit, mesh) for m in members for mesh in meshes} - {None}
                if broken:
                    for rule in broken:
                        if removed is not None:
                            removed[rule] = removed.get(rule, 0) + 1
                        if removed_options is not None:
                            removed_options.setdefault(rule, []).append((role, o))
                else:
                    kept.append(o)
            opts = kept
        if len(opts) > 1:
            groups.append(Group(role, tuple(m.index for m in members), shape, kind, tuple(opts)))
    return groups


def site_groups(module_text: str, meshes: list[Mesh], parallelism: set[str],
                arguments: list[Argument] | None = None, *, allow: frozenset = frozenset(),
                removed: dict | None = None) -> list[Group]:
    """One group per constraint site (``passes/apply_constraints.py``): the reshapes that
    split features into heads. Option 0 is *no constraint* (Shardy decides); the others
    split one dim of the reshape's result on one mesh axis, for the dims ``parallelism``
    allows (``site_dims``) and the compiler-safety rules not in ``allow`` leave
    (``safety.site_limits``: a token dim split below whole 32-row tiles); ``removed``
    counts the dropped options per rule. ``arguments`` give the module's argument kinds;
    without them they are read from the module (``shard_opt.kind``, else the argument
    names, as the ``.mlir`` frontend reads them)."""
    from shard_opt import ir
    from shard_opt.passes.apply_constraints import find_sites

    module = ir.parse(module_text)
    sites = find_sites(module)
    if not sites:
        return []
    classes = site_dims(module, arguments)
    mesh = meshes[0]
    axes = [a for a in mesh.axes if any(m.axis_size(a) > 1 for m in meshes)]
    groups = []
    for site, shape in sites.items():
        dims = allowed_dims(classes.get(site), parallelism)
        limit = safety.site_limits(shape, classes.get(site) or [], allow)
        splits = []
        for o in one_axis_splits(shape, dims, axes, meshes):
            broken = {safety.site_allowed(o, limit, m) for m in meshes} - {None}
            for rule in broken:
                if removed is not None:
                    removed[rule] = removed.get(rule, 0) + 1
            if not broken:
                splits.append(o)
        opts = [TensorSharding.replicated(len(shape)), *splits]
        if len(opts) > 1:
            groups.append(Group(site, (), tuple(shape), "intermediate", tuple(opts), by="site"))
    return groups


def allowed_dims(classes: list[frozenset] | None, parallelism: set[str]) -> list[int]:
    """The site dims a constraint may split: indexed by at least one argument dim, every
    one of a known class whose family ``parallelism`` allows."""
    return [d for d, cs in enumerate(classes or ())
            if cs and None not in cs and all(FAMILY[c] in parallelism for c in cs)]


def site_dims(module, arguments: list[Argument] | None = None) -> dict[str, list[frozenset]]:
    """Site key -> per result dim, the classes (``dim_class``: ``batch``, ``token``,
    ``feature``, None for an argument dim of no known class) of the argument dims that
    index it (``dataflow.dim_sources``), over every reshape of that site. Calls are
    inlined first (on a copy of ``module``), as the evaluated module is; a site met
    nowhere in ``@main`` then, or a dim indexed by nothing, has no classes.

    A reshape that splits a dim merged from several argument dims gets them back one per
    part when they match (``[8, 128, 1024] -> [1024, 1024] -> ... -> [8, 128, 1024]``:
    batch, token, feature); ``dim_sources`` alone gives the major part all of them."""
    from shard_opt import ir
    from shard_opt.dataflow import Graph, dim_sources
    from shard_opt.passes.apply_constraints import site_key
    from shard_opt.passes.inline_calls import inline_calls

    module = ir.parse(ir.print_module(module))
    inline_calls(module)
    if arguments is None:
        from shard_opt.frontends.mlir_frontend import arguments_of
        arguments = arguments_of(module)
    args = sorted(arguments, key=lambda a: a.index)
    g = Graph.of(module, [a.kind for a in args])
    src = dim_sources(g)
    out: dict[str, list[set]] = {}
    for node in g.nodes:
        site = site_key(node.op) if node.name == "stablehlo.reshape" else None
        if site is None:
            continue
        per_dim = out.setdefault(site, [set() for _ in g.values[node.results[0]].shape])
        for d, sources in enumerate(_split_sources(g, node, src)):
            per_dim[d].update(dim_class(args[a].kind, args[a].shape, args[a].dtype, ad) for a, ad in sources)
    return {site: [frozenset(c) for c in per_dim] for site, per_dim in out.items()}


def _split_sources(g, node, src) -> list[frozenset]:
    """``src`` of the reshape ``node``'s result, each merged dim it splits back into the
    argument dims it was merged from: the argument dims, in order, with the sizes of
    the split's parts, one argument dim a part (every argument in the merged sources
    must match, or the split keeps ``dim_sources``' major-part rule)."""
    from shard_opt.dataflow import reshape_blocks

    o, r = node.operands[0], node.results[0]
    in_shape, out_shape = g.values[o].shape, g.values[r].shape
    res = list(src[r])
    for bi, bj in reshape_blocks(in_shape, out_shape) or ():
        big_in = [k for k in bi if in_shape[k] > 1]
        big_out = [k for k in bj if out_shape[k] > 1]
        if len(big_in) != 1 or len(big_out) < 2:
            continue
        sizes = [out_shape[k] for k in big_out]
        by_arg: dict[int, list[int]] = {}
        for a, d in src[o][big_in[0]]:
            by_arg.setdefault(a, []).append(d)
        parts = [set() for _ in sizes]
        for a, dims in by_arg.items():
            arg_shape = g.values[g.args[a]].shape
            dims.sort()
            if [arg_shape[d] for d in dims] != sizes:
                break
            for p, d in zip(parts, dims):
                p.add((a, d))
        else:
            if by_arg:
                for k, p in zip(big_out, parts):
                    res[k] = frozenset(p)
    return res
