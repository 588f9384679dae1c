"""An embedding table is not split on the dim its lookup indexes."""

from shard_opt.rules import Rule


class VocabGather(Rule):
    def excludes(self, model, structure):
        return {x: 1 for x in gather_indexed_dims(model)}


def gather_indexed_dims(model) -> set[tuple[int, int]]:
    """(argument, dim) of every table a ``stablehlo.gather`` indexes, for each dim it
    indexes (``start_index_map``): an embedding table's vocabulary. A model scored from
    its short copies is read from its 1-layer copy, whose tables map onto every layer by
    role (``lowered.layer_copy``): the whole module need not be parsed, nor even lowered yet."""
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
        if table is not None:
            for d in attr_ints(g.attr(node, "dimension_numbers"), "start_index_map"):
                out.add((table, d))
    if short is model:
        return out
    by_role = indices_by_role(model.arguments)
    return {(i, d) for t, d in out for i in by_role.get((short.arguments[t].role, short.arguments[t].shape), ())}


RULE = VocabGather(
    "vocab-gather", "an embedding table is not split on the dim its lookup indexes", "tt_mlir_3370", "exclude",
    "a vocab-split gather needs a collective_permute that tt-mlir cannot lower")
