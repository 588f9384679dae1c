"""An embedding table is split on the dim its lookup indexes only where tt-mlir lowers the
split lookup: a row lookup.

A vocab-split table was once a ``collective_permute`` tt-mlir cannot lower (tt-mlir issue
3370; tt-xla's vLLM plugin constrains ``VocabParallelEmbedding``'s output for it). Checked
2026-12-05 with jax-tt-plugin 0.1.3 (benchmarks/results.md, "vocab-split lookups"): for a row
lookup (one start index per token, whole rows: ``nn.Embedding``, a tied LM head's table)
tt-mlir partitions the split table as a masked lookup, each device reading its own rows
(``stablehlo.gather`` with ``tt.fill_out_of_bounds``, lowered to ``ttir.rows_gather
fill_out_of_bounds = true``) and an ``all_reduce`` of the rows, no ``collective_permute``;
its partitioned program computes the unsharded model's answer (the numerics check, which
runs that gather as tt-mlir does: out-of-table rows read zero) in decode and prefill, tied
and untied. So the rule now removes only the splits of a gather that is not a row lookup
(several start indices, or slices narrower than a row), which that check has not seen.
A ``collective_permute`` Shardy still writes for a split lookup is the
``collective-permute`` rule's (priced infinite).
"""

from shard_opt.rules import Rule


class VocabGather(Rule):
    def excludes(self, model, structure):
        return {x: 1 for x in gather_indexed_dims(model, row_lookups=False)}


def gather_indexed_dims(model, *, row_lookups: bool = True) -> set[tuple[int, int]]:
    """(argument, dim) of every table a ``stablehlo.gather`` indexes, for each dim it
    indexes (``start_index_map``): an embedding table's vocabulary. ``row_lookups=False``
    leaves out the row lookups (``is_row_lookup``), which tt-mlir partitions split. A model
    scored from its short copies is read from its 1-layer copy, whose tables map onto every
    layer by role (``lowered.layer_copy``): the whole module need not be parsed, nor even
    lowered yet."""
    from shard_opt import ir
    from shard_opt.dataflow import Graph, attr_ints
    from shard_opt.lowered import indices_by_role, layer_copy

    short = layer_copy(model)
    g = Graph.of(ir.parse(short.text, filename=short.name), [a.kind for a in short.arguments])
    out = set()
    for node in g.nodes:
        if node.name != "stablehlo.gather":
            continue
        table = g.values[g.source(node.operands[0])].arg
        if table is None:
            continue
        numbers = g.attr(node, "dimension_numbers")
        if not row_lookups and is_row_lookup(numbers, g.attr(node, "slice_sizes"), short.arguments[table].shape):
            continue
        for d in attr_ints(numbers, "start_index_map"):
            out.add((table, d))
    if short is model:
        return out
    by_role = indices_by_role(model.arguments)
    return {(i, d) for t, d in out for i in by_role.get((short.arguments[t].role, short.arguments[t].shape), ())}


def is_row_lookup(numbers, slice_sizes, shape) -> bool:
    """Whether a gather (its ``dimension_numbers`` and ``slice_sizes`` attributes) reads whole
    rows of a table of ``shape`` by one start index each: one indexed dim, collapsed, every
    other dim read whole (the lookup tt-mlir partitions as a masked ``rows_gather``)."""
    from shard_opt.dataflow import attr_ints

    start = attr_ints(numbers, "start_index_map")
    collapsed = attr_ints(numbers, "collapsed_slice_dims")
    sizes = attr_ints(slice_sizes)
    if len(start) != 1 or list(collapsed) != list(start) or len(sizes) != len(shape):
        return False
    return all(sizes[d] == shape[d] for d in range(len(shape)) if d != start[0]) and sizes[start[0]] == 1


RULE = VocabGather(
    "vocab-gather", "an embedding table is split on its lookup's indexed dim only for a row lookup", "tt_mlir_3370",
    "exclude",
    "a row lookup (one index per token, whole rows) of a vocab-split table is partitioned by tt-mlir as a masked "
    "lookup and an all_reduce, and computes right; any other gather of a split table stays excluded (a "
    "collective_permute tt-mlir cannot lower)")
