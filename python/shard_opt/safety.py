"""Compiler-safety rules: what tt-mlir cannot lower or miscompiles today, in one table.

Each rule is one row of ``RULES``: an id (the ``--allow`` flag turns it off), what it
keeps a plan from doing, the source that records the limit (a key of
``shard_opt.emit.citations.CITATIONS``), and how it acts:

- ``exclude``: the search never offers the split (``limits``: a dim may be split only
  by factors that divide its *units*);
- ``inf``: a plan that does it is priced infinite (found in the propagated module:
  ``shard_opt.analysis`` records ``ModuleFacts.violations``);
- ``guard``: the plan pays for the safe form (a gather before a slice, a replicated
  anchor before a constraint), priced as such.

The search and the report both read the table: the plan JSON's ``safety`` lists each
rule, what it removed and whether the user allowed it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt.errors import UserError


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    citation: str
    action: str  # "exclude" | "inf" | "guard"
    detail: str


RULES = (
    Rule("residual-stream", "the residual stream stays whole on the axis row-parallel matmuls reduce over",
         "expert_residual_stream", "inf",
         "a residual stream split on its hidden features (found in the propagated module: a residual add whose "
         "result is split on a projection's output features, whether a reduce_scatter or weights sliced to match "
         "a hidden-split embedding made it so) lets tt-mlir drop the all-reduces after row-parallel layers, "
         "silently corrupting the result (PCC ~0.37); the experts keep it replicated"),
    Rule("vocab-gather", "an embedding table is not split on the dim its lookup indexes", "tt_mlir_3370", "exclude",
         "a vocab-split gather needs a collective_permute that tt-mlir cannot lower"),
    Rule("heads", "attention heads are split whole", "expert_kv_heads", "exclude",
         "a split that does not divide the heads gives a device part of a head; layers with 1-2 KV heads keep "
         "K/V replicated"),
    Rule("conv-spatial", "convolutions split on channels only", "tt_mlir_8216", "exclude",
         "a split of a convolution's spatial dims needs a halo exchange tt-mlir does not expose"),
    Rule("collective-permute", "no collective_permute", "tt_mlir_3370", "inf",
         "tt-mlir does not lower sdy.collective_permute (\"not implemented yet\")"),
    Rule("fused-split", "a slice of a split dim gathers it first", "expert_fused_split", "guard",
         "torch.split / chunk across a sharded fused dim cuts it where devices do not, which miscompiles under "
         "Shardy; shardy-propagate's guard-moved-dims gathers the dim before the slice, and the plan pays for it"),
    Rule("reshape-constraint", "constraints after a reshape are written as a replicated-then-sharded pair",
         "tt_xla_3643", "guard",
         "a single constraint after a reshape lets Shardy push the split back through it (\"number of elements "
         "doesn't match\"); the emitted script writes the pair"),
)
BY_ID = {r.id: r for r in RULES}


def parse_allow(text: str | None) -> frozenset[str]:
    """``--allow residual-stream,heads``: the rules turned off."""
    if not text:
        return frozenset()
    ids = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in ids if x not in BY_ID]
    if bad:
        raise UserError(f"--allow {text!r}: {', '.join(bad)} is not a rule; rules: {', '.join(BY_ID)}")
    return frozenset(ids)


def limits(model, structure, allow: frozenset[str] = frozenset()) -> dict[tuple[int, int], tuple[int, str]]:
    """(argument, dim) -> (units, rule): that dim may be split only by factors dividing
    ``units`` (1: not at all), by the ``exclude`` rules the user did not allow."""
    out: dict[tuple[int, int], tuple[int, str]] = {}
    if "heads" not in allow:
        for x, units in structure.units.items():
            if units < model.arguments[x[0]].shape[x[1]]:  # features that come in heads
                out[x] = (units, "heads")
    if "vocab-gather" not in allow:
        for x in gather_indexed_dims(model):
            out[x] = (1, "vocab-gather")
    if "conv-spatial" not in allow:
        for a in model.arguments:
            if a.kind == "param" and len(a.shape) >= 3 and (a.module_class or "").lower().startswith("conv"):
                for d in range(2, len(a.shape)):
                    out[(a.index, d)] = (1, "conv-spatial")
    return out


def allowed(option, arg, limit: dict, mesh) -> str | None:
    """The rule ``option`` (a TensorSharding of argument ``arg``) breaks, or None."""
    for d in range(option.rank):
        if not option.dims[d]:
            continue
        got = limit.get((arg.index, d))
        if got is not None and got[0] % option.split_factor(d, mesh):
            return got[1]
    return None


def gather_indexed_dims(model) -> set[tuple[int, int]]:
    """(argument, dim) of every table a ``stablehlo.gather`` indexes, for each dim it
    indexes (``start_index_map``): an embedding table's vocabulary. A model scored from
    its short copies is read from its 1-layer copy, whose tables map onto every layer by
    role (``layer_copy``): the whole module need not be parsed, nor even lowered yet."""
    from shard_opt import ir
    from shard_opt.dataflow import Graph, attr_ints
    from shard_opt.lowered import indices_by_role

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


def layer_copy(model):
    """The 1-layer copy of a model scored from its short copies (more than two repeated
    layers, ``search.make_scorer``), else the model: what a layer holds, every layer holds."""
    if model.with_layers is not None and (model.num_layers or 0) > 2:
        return model.with_layers(1)
    return model


def broken_by(model, shardings: dict, limit: dict, meshes, violations=()) -> set[str]:
    """The rules a plan breaks: an ``exclude`` rule by an argument's split (a user's spec
    is priced as written), an ``inf`` rule by what its propagated module does."""
    out = set(violations)
    for i, sh in shardings.items():
        for mesh in meshes:
            rule = allowed(sh, model.arguments[i], limit, mesh)
            if rule:
                out.add(rule)
    return out


def report(removed: dict[str, int], allow: frozenset[str], priced_inf: dict[str, int],
           broken: set[str] = frozenset()) -> list[dict]:
    """The plan JSON's ``safety``: every rule, how many options it removed from the search
    (``exclude``) or candidates it priced infinite (``inf``), whether the user allowed it
    and whether the plan breaks it."""
    return [{"rule": r.id, "title": r.title, "citation": r.citation, "action": r.action, "detail": r.detail,
             "removed": removed.get(r.id, 0), "priced_infinite": priced_inf.get(r.id, 0),
             "allowed": r.id in allow, "plan_breaks": r.id in broken}
            for r in RULES]
