"""A slice of a split dim gathers it first (torch.split / chunk of a fused projection)."""

from __future__ import annotations

from shard_opt import ir
from shard_opt.dataflow import MOVING_OPS, moved_dims_of
from shard_opt.rules import Rule


class FusedSplit(Rule):
    def guard(self, op) -> str | None:
        """The moved dims closed and whole, the others open (``{?}``): Shardy then gathers
        them instead of leaving the movement implicit (a permutation factor)."""
        dims = moved_dims_of(op)
        if not dims:
            return None
        rank = len(ir.tensor_type(op.operands[0].type)[0])
        body = ", ".join("{}" if d in dims else "{?}" for d in range(rank))
        return f"[{body}]"

    def hoist(self, graph, op):
        """The module output the sliced tensor is (``Graph.trace``), with the moved dims
        mapped onto it, when the mapping is exact (a reshape may leave a dim free to split
        by some factors only: then the guard stays in front of ``op``) and the weight is
        its module's own ``.weight``; else None."""
        from shard_opt.module_outputs import Untied, back_dims

        dims = moved_dims_of(op)
        try:
            tie = graph.trace(op.operands[0])
        except Untied:
            return None
        kept, limits = back_dims(tie.path, set(dims))
        arg = graph.arguments[tie.weight]
        if not kept or limits or not arg.name.endswith(".weight") or \
                (arg.module_class or "").lower().startswith("embedding"):
            return None
        return tie.output, kept

    def script_guards(self, module, model) -> list[dict]:
        """The guards of the propagated ``module`` (``Evaluation.text`` parsed: Shardy has
        turned each guard into the collective it needed, or into nothing) as forward hooks
        on module outputs: one entry per torch module (per role when every layer's agrees),
        the partition spec of its output with the dims its guards keep whole ``None`` and
        the others as Shardy split them there. A guard no module output stands for is an
        entry with ``"module": None`` and the reason in ``why``: the user adds it by hand."""
        return script_guards(module, model, self)

    def breaks(self, walk) -> bool:
        """An unguarded slice / pad / reverse whose operand is split on a dim it moves."""
        for op in walk.moving:
            s = walk.shard.get(op.operands[0])
            if s is not None and any(s.dims[d] for d in moved_dims_of(op) if d < s.rank):
                return True
        return False


RULE = FusedSplit(
    "fused-split", "a slice of a split dim gathers it first", "expert_fused_split", "guard",
    "torch.split / chunk across a sharded fused dim cuts it where devices do not, which miscompiles under "
    "Shardy; shardy-propagate's guard-moved-dims gathers the dim before the slice, and the plan pays for it",
    # tt-mlir's ReplicateNonSplittableValues (lib/Dialect/StableHLO/Transforms/
    # ReplicateNonSplittableValues.cpp), mirrored in shardy-propagate, replicates a slice that
    # cuts a split dim itself, so an unguarded slice is gathered too and ``breaks`` now sees
    # only pads and reverses; the guard still puts the gather where the script's hook does.
    guard_ops=MOVING_OPS)


_TORCH_OP = {"stablehlo.slice": "torch.split / chunk / slicing", "stablehlo.pad": "padding",
             "stablehlo.reverse": "torch.flip"}


def script_guards(module, model, rule: Rule = None) -> list[dict]:
    """``FusedSplit.script_guards`` (see there); ``module`` is an MLIR module or its text,
    ``model`` the ``LoweredModel`` whose arguments name the weights."""
    from shard_opt.analysis import meshes_of
    from shard_opt.lowered import role_of
    from shard_opt.module_outputs import Graph, Untied, back_dims

    rule_id = rule.id if rule is not None else "fused-split"
    if isinstance(module, str):
        module = ir.parse(module, filename=model.name)
    meshes = meshes_of(module)
    graph = Graph(module, model.arguments)
    tied: dict = {}  # module output value -> {"weight", "kept", "limits", "ops", "gathers"}
    untied: dict = {}  # (site, reason, sharding) -> count
    for op in ir.ops_in(module.operation, MOVING_OPS):
        dims = moved_dims_of(op)
        if not dims:
            continue
        operand = op.operands[0]
        shape = ir.tensor_type(operand.type)[0]
        try:
            tie = graph.trace(operand)
            kept, limits = back_dims(tie.path, set(dims))
            entry = tied.setdefault(tie.output, {"weight": tie.weight, "kept": set(), "limits": {}, "ops": [],
                                                 "gathers": []})
            entry["kept"] |= kept
            for d, f in limits.items():
                entry["limits"][d] = min(f, entry["limits"].get(d, f))
            entry["ops"].append((op.name, tuple(dims), shape))
            entry["gathers"] += [_collective_text(p) for p in tie.path if p.name.startswith("sdy.")
                                 and p.name != "sdy.sharding_constraint"]
        except Untied as e:
            s = value_sharding(operand)
            spec = [[] if d in dims else [a.name for a in s.dims[d]] for d in range(len(shape))] if s else \
                [[] for _ in shape]
            site = f"{op.name} of tensor<{'x'.join(map(str, shape))}> on dim{'s' if len(dims) > 1 else ''} " \
                   f"{', '.join(map(str, dims))}"
            gathers = owner_name(operand).startswith("sdy.")
            key = (site, str(e), repr(spec), gathers)
            untied[key] = untied.get(key, 0) + 1
    # one entry per module: its guards merged (a dim any of them keeps whole is whole)
    per_module = []
    for out, entry in tied.items():
        arg = model.arguments[entry["weight"]]
        spec, why_not = _output_spec(out, entry, meshes)
        name = arg.name[:-len(".weight")] if arg.name.endswith(".weight") else None
        if name is None:
            why_not = (f"the op reading it reads {arg.name}, not a module's .weight: "
                       f"its output is no module's") if why_not is None else why_not
        elif (arg.module_class or "").lower().startswith("embedding"):
            why_not = (f"the matmul reads {arg.name}, an Embedding's weight (tied): the module making the "
                       f"matmul is another one, hook it by hand")
        shape = list(ir.tensor_type(out.type)[0])
        if why_not is not None:
            site = f"the output [{', '.join(map(str, shape))}] of the op reading {arg.name}"
            key = (site, why_not, repr(spec), bool(entry["gathers"]))
            untied[key] = untied.get(key, 0) + len(entry["ops"])
            continue
        per_module.append({"name": name, "role": role_of(arg.role[:-len(".weight")] if arg.role.endswith(".weight")
                                                          else name),
                           "sharding": spec, "shape": shape, "ops": entry["ops"], "gathers": entry["gathers"],
                           "kept": sorted(entry["kept"]), "limits": dict(entry["limits"])})
    out_entries = []
    by_role: dict = {}
    for m in per_module:
        by_role.setdefault(m["role"], []).append(m)
    for role, members in by_role.items():
        same = len({repr(m["sharding"]) for m in members}) == 1 and len({repr(m["shape"]) for m in members}) == 1
        groups = [(role, members)] if same else [(m["name"], [m]) for m in members]
        for key, ms in groups:
            m = ms[0]
            out_entries.append({"rule": rule_id, "module": key, "sharding": m["sharding"],
                                "why": _why(m), "shape": m["shape"],
                                "sites": sum(len(x["ops"]) for x in ms)})
    for (site, reason, spec, gathers), n in untied.items():
        out_entries.append({
            "rule": rule_id, "module": None, "site": site, "sharding": eval(spec),  # noqa: S307 - our own repr
            "sites": n, "gathers": gathers,
            "why": (f"not tied to a module: {reason}. "
                    + ("The plan gathers there: add " if gathers else "Whole there already in this plan; to keep "
                       "it so, add ")
                    + "sharding_constraint_tensor(t, mesh, SPEC) on the sliced tensor in forward() by hand")})
    return out_entries


def owner_name(value) -> str:
    o = value.owner
    o = o.operation if hasattr(o, "operation") else o
    return getattr(o, "name", "") if type(o).__name__ != "Block" else ""


def value_sharding(value):
    """The ``TensorSharding`` the propagated module gives ``value`` (None: none written,
    replicated)."""
    from shard_opt.analysis import arg_shardings, _per_value_of
    from shard_opt.module_outputs import is_block_arg

    if is_block_arg(value):
        parent = value.owner.owner
        parent = parent.operation if hasattr(parent, "operation") else parent
        got = arg_shardings(parent)
        i = ir.ir().BlockArgument(value).arg_number
        return got[i] if i < len(got) else None
    op = value.owner
    op = op.operation if hasattr(op, "operation") else op
    got = _per_value_of(op.attributes)
    if not got:
        return None
    i = next((k for k, r in enumerate(op.results) if r == value), 0)
    return got[i] if i < len(got) else got[0]


def _output_spec(out, entry, meshes) -> tuple[list, str | None]:
    """The module output's spec (per dim, mesh axis names): the dims kept whole empty,
    the others as Shardy split the output; and why it cannot be written, or None."""
    shape = ir.tensor_type(out.type)[0]
    s = value_sharding(out)
    mesh = meshes.get(s.mesh_name) if s is not None else None
    spec = []
    for d in range(len(shape)):
        axes = s.dims[d] if s is not None and d < s.rank else ()
        if d in entry["kept"] or not axes:
            spec.append([])
            continue
        if any(a.size is not None for a in axes):
            return [[] if d in entry["kept"] else [str(a) for a in (s.dims[d] if s else ())]
                    for d in range(len(shape))], (
                f"the output's dim {d} is split on sub-axes ({', '.join(map(str, axes))}), which a partition "
                f"spec cannot name")
        limit = entry["limits"].get(d)
        if limit is not None and mesh is not None:
            factor = 1
            for a in axes:
                factor *= a.length(mesh)
            if limit % factor:
                spec.append([])  # keeping the dim whole is the form the spec can write
                continue
        spec.append([a.name for a in axes])
    return spec, None


def _collective_text(op) -> str:
    """``all_gather of [2, 64, 384] on model``: a collective Shardy made of a guard."""
    import re

    kind = op.name.split(".", 1)[1]
    shape = ir.tensor_type(op.results[0].type)[0]
    attrs = op.attributes
    named = [str(attrs[i].attr) for i in range(len(attrs))
             if attrs[i].name != "out_sharding" and not attrs[i].name.startswith("shard_opt.")]
    axes = sorted(set(re.findall(r'"([^"]+)"', " ".join(named))))
    return f"{kind} of [{', '.join(map(str, shape))}]" + (f" on {'+'.join(axes)}" if axes else "")


def _why(m: dict) -> str:
    """The reason for one module's guard, in words."""
    kinds = sorted({_TORCH_OP.get(name, name) for name, _, _ in m["ops"]})
    n, kept = len(m["ops"]), m["kept"]
    calls = f"{' and '.join(kinds)} after it ({n} slice{'s' if n != 1 else ''} per call)"
    if kept:
        text = (f"{calls} cut{'s' if n == 1 else ''} dim{'s' if len(kept) != 1 else ''} "
                f"{', '.join(map(str, kept))} of its output [{', '.join(map(str, m['shape']))}]: kept whole "
                f"there, each device slices what it holds")
    else:  # the slices cut a view of the output (heads -> head_dim): a split by whole heads keeps them whole
        cut = sorted({d for _, ds, _ in m["ops"] for d in ds})
        views = sorted({"x".join(map(str, shape)) for _, _, shape in m["ops"]})
        lim = ", ".join(f"dim {d} by a factor of {f}" for d, f in sorted(m["limits"].items()))
        text = (f"{calls} cut{'s' if n == 1 else ''} dim{'s' if len(cut) != 1 else ''} {', '.join(map(str, cut))} "
                f"of a view [{', '.join(views)}] of its output [{', '.join(map(str, m['shape']))}], whole while the "
                f"output is split {lim or 'not at all'} at most: pinned to this plan's split")
    gathers = sorted(set(m["gathers"]))
    if gathers:
        text += f" (priced: {'; '.join(gathers)})"
    else:
        text += " (whole there already in this plan: the constraint keeps it so)"
    return text
