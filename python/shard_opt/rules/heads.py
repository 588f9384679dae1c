"""Attention heads are split whole: a device never holds part of a head."""

import functools

from shard_opt import ir
from shard_opt.dataflow import ELEMENTWISE_OPS, reshape_blocks
from shard_opt.rules import Rule


class Heads(Rule):
    def excludes(self, model, structure):
        return {x: units for x, units in structure.units.items()
                if units < model.arguments[x[0]].shape[x[1]]}  # features that come in heads

    def breaks(self, walk) -> bool:
        """A value split on a head's inner dims (see ``cuts_a_head``), or grouped-query
        attention whose query heads per device are not a whole number of groups of its KV
        heads per device (see ``uneven_groups``)."""
        return cuts_a_head(walk) or bool(uneven_groups(walk))


def uneven_groups(walk) -> list[tuple[int, int]]:
    """(query heads, KV heads) per device of every grouped-query attention in the propagated
    module ``walk`` describes where the first is not a multiple of the second.

    tt-mlir's SDPA takes the KV heads before they are repeated for their query heads and
    refuses a device program whose query heads do not divide by its KV heads: "Query num
    heads must be divisible by key/value num heads" (tt-mlir issue 8861; 16 query heads split
    8 ways beside 4 replicated KV heads: 2 and 4). Found from the graph, not from names: the
    repeat of K or V for its query heads is a ``broadcast_in_dim`` that inserts one group dim
    after the heads (``[B, Hkv, S, D] -> [B, Hkv, G, S, D]``) and a reshape that merges the
    two (``-> [B, Hkv*G, S, D]``); the query heads per device are the merged dim's local
    size, the KV heads per device the broadcast operand's."""
    out = []
    for op in walk.reshapes:
        src = op.operands[0]
        b = src.owner
        while getattr(b, "name", "") in _SAME_DIMS:  # the repeat sliced or gathered on its way
            b = b.operands[0].owner
        if getattr(b, "name", "") != "stablehlo.broadcast_in_dim":
            continue
        kv, rep, merged = _shape(b.operands[0]), _shape(b.results[0]), _shape(op.results[0])
        if kv is None or rep is None or merged is None or len(merged) != len(rep) - 1:
            continue
        dims = list(b.attributes["broadcast_dimensions"])
        if len(kv) == len(rep) - 1:  # [B, Hkv, S, D] -> [B, Hkv, G, S, D]: the group dim inserted
            inserted = [d for d in range(len(rep)) if d not in dims]
            if len(inserted) != 1 or dims != [d for d in range(len(rep)) if d != inserted[0]]:
                continue
            g, kv_dim = inserted[0], inserted[0] - 1
        elif len(kv) == len(rep) and dims == list(range(len(rep))):  # [B, Hkv, 1, S, D] -> [B, Hkv, G, S, D]
            grown = [d for d in range(len(rep)) if kv[d] == 1 and rep[d] > 1]
            if len(grown) != 1:
                continue
            g = kv_dim = grown[0]
            kv_dim = g - 1
        else:
            continue
        h = g - 1  # the heads dim, merged with the group dim after it
        if (h < 0 or rep[g] <= 1 or merged[h] != rep[h] * rep[g] or merged[:h] != rep[:h]
                or merged[h + 1:] != rep[g + 1:]):
            continue
        q_local = merged[h] // _factor(walk.shard.get(op.results[0]), h, walk.mesh)
        kv_local = kv[kv_dim] // _factor(walk.shard.get(b.operands[0]), kv_dim, walk.mesh)
        if kv_local and q_local % kv_local:
            out.append((q_local, kv_local))
    return out


def _factor(s, d, mesh) -> int:
    if s is None or d >= s.rank or not s.dims[d]:
        return 1
    return s.split_factor(d, mesh) if mesh is not None else 1


def cuts_a_head(walk) -> bool:
    """Whether the propagated module ``walk`` describes splits a head, however the split
    got there: an argument's option (a K/V projection split past its heads), a KV cache
    split on its head_dim, or Shardy's propagation.

    The heads come from the graph, not from names: a **head reshape** is a reshape that
    splits a weight projection's output features into several dims (``[.., H*D] ->
    [.., H, D]``); the dims after the first (D) are inside a head. They are followed
    forward through everything that keeps them a dim of their own (elementwise ops, the
    per-head norms, RoPE's slices and concatenates, transposes, GQA's broadcast, the KV
    cache's update, the attention matmuls' free dims) and stop where a reshape merges
    them with other dims again (``[.., H, D] -> [.., H*D]``: the features, whose splits
    the ``units`` exclusion judges) or a reduction or contraction consumes them. A value
    split there on more than one device holds part of a head (with 4 KV heads on 8
    devices Shardy shards the head reshape on sub-axes, ``{"model":(1)4}, {"model":(4)2}``).
    """
    marks: dict = {}  # Value -> the dims of it that lie inside a head
    work = []
    for op in walk.reshapes:
        inner = _head_reshape(op, walk.weight_values)
        if inner:
            r = op.results[0]
            marks[r] = inner
            work.append(r)
    while work:
        v = work.pop()
        dims = marks[v]
        if _split(walk.shard.get(v), dims, walk.mesh):
            return True
        for use in v.uses:
            op = use.owner
            for r, got in _forward(op, marks):
                if got and not got <= marks.get(r, frozenset()):
                    marks[r] = marks.get(r, frozenset()) | got
                    work.append(r)
    return False


def _split(s, dims, mesh) -> bool:
    if s is None:
        return False
    for d in dims:
        if d < s.rank and s.dims[d]:
            if mesh is None or s.split_factor(d, mesh) > 1:
                return True
    return False


def _shape(v):
    return _type_shape(v.type)


@functools.lru_cache(maxsize=4096)
def _type_shape(t):
    """A ranked tensor type's shape, else None (types are uniqued: cached by the type, as
    every candidate of a model meets the same few hundred)."""
    tt = ir.tensor_type(t)
    return tt[0] if tt else None


@functools.lru_cache(maxsize=4096)
def _splits(src: tuple, dst: tuple) -> tuple:
    """(source dim, the result dims after the first) of each block of a reshape from
    ``src`` to ``dst`` that splits one dim into several (dims of size 1 aside): what a
    head reshape may be, from the shapes alone (cached: the same reshapes in every candidate)."""
    out = []
    for bi, bj in reshape_blocks(src, dst) or ():
        big_src = [k for k in bi if src[k] > 1]
        big_dst = [j for j in bj if dst[j] > 1]
        if len(big_src) == 1 and len(big_dst) > 1:
            out.append((big_src[0], tuple(big_dst[1:])))
    return tuple(out)


def _head_reshape(op, weight_values) -> frozenset:
    """The result dims inside a head, when ``op`` splits a projection's output features
    into several dims (else empty)."""
    src, dst = _shape(op.operands[0]), _shape(op.results[0])
    if src is None or dst is None:
        return frozenset()
    splits = _splits(src, dst)
    if not splits:
        return frozenset()
    inner = set()
    for k, rest in splits:
        if _is_features(op.operands[0], k, weight_values):
            inner.update(rest)
    return frozenset(inner)


_SAME_DIMS = frozenset({"stablehlo.convert", "sdy.all_gather", "sdy.all_slice", "sdy.all_reduce",
                        "sdy.reduce_scatter", "sdy.reshard", "sdy.sharding_constraint", "sdy.all_to_all"})


def _is_features(value, dim: int, weight_values, depth: int = 0) -> bool:
    """Whether dim ``dim`` of ``value`` is a weight projection's output features: a free
    dim of a weight operand of a ``dot_general``, through dims views and collectives keep
    and bias adds."""
    if depth > 12:
        return False
    owner = value.owner
    name = getattr(owner, "name", "")
    if name == "stablehlo.dot_general":
        from shard_opt.analysis import _dims

        text = str(owner.attributes["dot_dimension_numbers"])
        lb, rb = _dims(text, "lhs_batching_dimensions"), _dims(text, "rhs_batching_dimensions")
        lc, rc = _dims(text, "lhs_contracting_dimensions"), _dims(text, "rhs_contracting_dimensions")
        lhs, rhs = owner.operands[0], owner.operands[1]
        lfree = [d for d in range(len(_shape(lhs))) if d not in lb and d not in lc]
        rfree = [d for d in range(len(_shape(rhs))) if d not in rb and d not in rc]
        if dim < len(lb):
            return False
        if dim < len(lb) + len(lfree):
            return lhs in weight_values
        return rhs in weight_values and dim - len(lb) - len(lfree) < len(rfree)
    if name in _SAME_DIMS:
        return _is_features(owner.operands[0], dim, weight_values, depth + 1)
    if name == "stablehlo.transpose":
        return _is_features(owner.operands[0], list(owner.attributes["permutation"])[dim], weight_values, depth + 1)
    if name == "stablehlo.reshape":
        back = _reshape_back(_shape(owner.operands[0]), _shape(value), dim)
        return back is not None and _is_features(owner.operands[0], back, weight_values, depth + 1)
    if name in ("stablehlo.add", "stablehlo.multiply"):  # a bias or a scale
        rest = [o for o in owner.operands if o not in weight_values]
        return len(rest) == 1 and _is_features(rest[0], dim, weight_values, depth + 1)
    return False


def _reshape_back(src, dst, dim: int):
    """The operand dim result dim ``dim`` of a reshape is, when it is that dim alone."""
    for bi, bj in reshape_blocks(src, dst) or ():
        if dim in bj:
            big_src = [k for k in bi if src[k] > 1]
            big_dst = [j for j in bj if dst[j] > 1]
            return big_src[0] if len(big_src) == 1 and big_dst == [dim] else None
    return None


_POSITIONAL = frozenset(ELEMENTWISE_OPS | _SAME_DIMS | {
    "stablehlo.slice", "stablehlo.pad", "stablehlo.reverse", "stablehlo.concatenate", "stablehlo.dynamic_slice",
    "stablehlo.dynamic_update_slice", "stablehlo.copy"})


def _forward(op, marks: dict):
    """(result, its dims inside a head) of ``op``, from its operands' ``marks``."""
    name = op.name
    results = list(op.results)
    if not results:
        return []
    r = results[0]
    rshape = _shape(r)
    if rshape is None:
        return []
    operands = list(op.operands)
    got = set()
    if name in _POSITIONAL:
        for o in operands:
            if o in marks and len(_shape(o) or ()) == len(rshape):
                got |= marks[o]
    elif name == "stablehlo.transpose":
        perm = list(op.attributes["permutation"])
        src = marks.get(operands[0], frozenset())
        got = {j for j, p in enumerate(perm) if p in src}
    elif name == "stablehlo.broadcast_in_dim":
        dims = list(op.attributes["broadcast_dimensions"])
        src = marks.get(operands[0], frozenset())
        got = {dims[i] for i in src if i < len(dims)}
    elif name == "stablehlo.reshape":
        src_shape = _shape(operands[0])
        src = marks.get(operands[0], frozenset())
        for bi, bj in reshape_blocks(src_shape, rshape) or ():
            big_src = [k for k in bi if src_shape[k] > 1]
            big_dst = [j for j in bj if rshape[j] > 1]
            if len(big_src) == 1 and big_src[0] in src:  # kept whole, or split further: still inside
                got.update(big_dst)
    elif name == "stablehlo.reduce":
        reduced = set(op.attributes["dimensions"])
        src = marks.get(operands[0], frozenset())
        kept = [d for d in range(len(_shape(operands[0]))) if d not in reduced]
        got = {j for j, d in enumerate(kept) if d in src}
    elif name == "stablehlo.dot_general":
        from shard_opt.analysis import _dims

        text = str(op.attributes["dot_dimension_numbers"])
        lb, rb = _dims(text, "lhs_batching_dimensions"), _dims(text, "rhs_batching_dimensions")
        lc, rc = _dims(text, "lhs_contracting_dimensions"), _dims(text, "rhs_contracting_dimensions")
        lm, rm = marks.get(operands[0], frozenset()), marks.get(operands[1], frozenset())
        out = [a in lm or b in rm for a, b in zip(lb, rb)]
        out += [d in lm for d in range(len(_shape(operands[0]))) if d not in lb and d not in lc]
        out += [d in rm for d in range(len(_shape(operands[1]))) if d not in rb and d not in rc]
        got = {j for j, m in enumerate(out) if m}
    return [(r, frozenset(got))]


RULE = Heads(
    "heads", "attention heads are split whole", "expert_kv_heads", "exclude",
    "a split that does not divide the heads gives a device part of a head; layers with 1-2 KV heads keep "
    "K/V replicated (and a plan whose propagated module splits inside a head: a K/V projection split past "
    "its heads, a KV cache split on its head_dim, is priced infinite; so is grouped-query attention whose "
    "query heads per device are not a multiple of its KV heads per device, which tt-mlir's SDPA refuses: "
    "\"Query num heads must be divisible by key/value num heads\", tt-mlir issue 8861)")
