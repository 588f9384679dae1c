"""Baseline plans every plan is compared with, priced by the same cost model.

- ``replicated``: nothing split; every chip runs the whole model.
- ``megatron``: the expert tensor-parallel plan (Megatron-LM, arXiv 1909.08053
  section 3, figures 3-4), as tt-xla writes it for Llama (`examples/pytorch/llama.py`,
  references/tenstorrent.md section 5), found from the model's structure, whatever its
  parameters are called (``shard_opt.structure``): each column -> row pair's column
  weight split on its output features, its row weight on its contracted features;
  stacked MoE experts on the expert dim (expert parallelism); an output head with no
  partner column-parallel; each KV cache on the heads of the projection it extends. A
  column whose features come in fewer units (heads) than the axis has devices stays
  replicated (1-2 KV heads: Gemma-style; a device would get part of a head), and a
  row whose columns are all replicated stays replicated too.
- ``one-axis-heuristic`` (called ``autoshard-heuristic`` before 2026-12-02): a one-axis
  search in the style of tt-mlir's AutoShardingPass (tt-mlir PR 7517, references
  section 7), *not* the pass's own choice: the largest mesh axis; per argument replicate
  or split one dim; arguments under 4096 elements replicated; arguments grouped by
  identical shape; exhaustive up to 1500 candidates, greedy beyond; scored by the
  pass's heuristic formula (cost model ``autoshard-heuristic``). The merged pass differs
  (tt-mlir ``lib/Dialect/StableHLO/Transforms/AutoSharding.cpp`` lines 52 and 116-131:
  the first axis of size > 1; lines 40 and 175-178: no grouping, the Cartesian product
  of rank+1 options per argument capped at 2^20 configurations; function outputs left
  sharded and free, references section 7; ``Utils/ShardingCostModel.cpp`` lines 108-144:
  parameters weighted 3x in its memory term);
  run on its own test subgraphs it chose this baseline's shardings in 6 of 17 cases
  (issue 24). Reproducing it would take its per-candidate pipeline run over up to 2^20
  candidates (hours for a 1-layer Llama, references section 7), so the baseline is named
  for what it is.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from shard_opt.candidates import Group
from shard_opt.lowered import Argument, LoweredModel
from shard_opt.sharding import Mesh, TensorSharding
from shard_opt.structure import Structure, structure_of

ONE_AXIS = "one-axis-heuristic"  # the plan JSON baselines key (was "autoshard-heuristic")


def megatron_shardings(model: LoweredModel, mesh: Mesh, axis: str | None = None,
                       structure: Structure | None = None) -> dict[int, TensorSharding]:
    """The Megatron plan on ``axis`` (default: the last mesh axis, tt-xla's "model")."""
    axis = axis or mesh.axes[-1]
    n = mesh.axis_size(axis)
    st = structure if structure is not None else structure_of(model)
    rank = {a.index: len(a.shape) for a in model.arguments}
    size = {a.index: a.shape for a in model.arguments}
    out: dict[int, TensorSharding] = {}

    def split(x) -> bool:
        arg, dim = x
        if arg in out or size[arg][dim] % n or st.units.get(x, size[arg][dim]) % n:
            return False
        out[arg] = _split(rank[arg], dim, axis)
        return True

    columns_split = {c for c, _, _ in st.pairs if split(c)}
    for c, r, _ in st.pairs:
        if c in columns_split or c[0] in out and out[c[0]] == _split(rank[c[0]], c[1], axis):
            split(r)
    for a, b in st.experts:
        if split(a):
            split(b)
    for h in st.heads:
        split(h)
    for cache, col in st.caches.items():
        if col[0] in out:
            split(cache)
    return out


def megatron_pairs(model: LoweredModel, structure: Structure | None = None) -> list[dict]:
    """The pairs the Megatron baseline splits, by role: ``[{"kind", "column", "row",
    "column_dims", "row_dims"}]`` (columns sharing a row weight listed together: q, k, v ->
    o; the dims, per role listed, are the column's output features and the row's input
    features, as the dataflow pairs them: the plan JSON's ``pairs``)."""
    st = structure if structure is not None else structure_of(model)
    role = {a.index: a.role for a in model.arguments}
    by_row: dict[tuple, dict] = {}
    for c, r, kind in st.pairs:
        entry = by_row.setdefault((role[r[0]], kind), {"kind": kind, "column": [], "row": [role[r[0]]],
                                                       "column_dims": [], "row_dims": [r[1]]})
        if role[c[0]] not in entry["column"]:
            entry["column"].append(role[c[0]])
            entry["column_dims"].append(c[1])
    out = list(by_row.values())
    experts = {}
    for a, b in st.experts:
        experts.setdefault(role[b[0]], {"kind": "experts", "column": [], "row": [role[b[0]]], "column_dims": [],
                                        "row_dims": [b[1]]})
        if role[a[0]] not in experts[role[b[0]]]["column"]:
            experts[role[b[0]]]["column"].append(role[a[0]])
            experts[role[b[0]]]["column_dims"].append(a[1])
    out += list(experts.values())
    out += [{"kind": "head", "column": [role[h[0]]], "row": [], "column_dims": [h[1]], "row_dims": []}
            for h in dict.fromkeys(st.heads)]
    seen, unique = set(), []
    for p in out:
        key = (p["kind"], tuple(p["column"]), tuple(p["row"]))
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _split(rank: int, dim: int, axis: str) -> TensorSharding:
    return TensorSharding.of([[axis] if d == dim else [] for d in range(rank)])


def autoshard_groups(model: LoweredModel, mesh: Mesh) -> list[Group]:
    """AutoShardingPass's space: one axis, one dim, args >= 4096 elements, grouped by shape."""
    axis = max(zip(mesh.shape, mesh.axes))[1]  # its single shardable axis: the largest
    n = mesh.axis_size(axis)
    if n <= 1:
        # one device (a 1x1 mesh, a --serve replica of one chip): a "split" over an axis of
        # one device is the replicated plan itself, so the space is that one plan (the
        # search's own groups leave such axes out the same way: candidates.make_groups).
        # Enumerating them priced up to 3^k copies of the replicated plan.
        return []
    by_shape: dict[tuple, list[Argument]] = {}
    for a in model.arguments:
        elems = 1
        for s in a.shape:
            elems *= s
        if elems >= 4096:
            by_shape.setdefault(a.shape, []).append(a)
    groups = []
    for shape, members in by_shape.items():
        opts = [TensorSharding.replicated(len(shape))]
        opts += [_split(len(shape), d, axis) for d in range(len(shape)) if shape[d] % n == 0]
        if len(opts) > 1:
            groups.append(Group(f"shape {list(shape)}", tuple(m.index for m in members), shape,
                                members[0].kind, tuple(opts), by="shape"))
    return groups


@dataclass
class LoaderSpec:
    """The user's own plan (a loader's ``load_shard_spec`` or ``--spec``) on one mesh.

    Attributes:
      by_role: argument role (or name) -> sharding; arguments not listed are replicated.
      source: ``loader`` or ``spec file``; where: the file it came from.
      mesh: the mesh the loader's ``get_mesh_config`` gives for this many devices (None
        when it has none).
      unmatched: spec entries that name no tensor of the model, or axes the mesh lacks.
      not_dividing: splits that do not divide their dim; replicated, as tt-xla's
        ``safe_mark_sharding`` does ({name, dim, size, axes}).
      activations: the loader's activation spec (``load_activation_shard_spec``, or a
        ``--spec`` file's ``"activations"``): key -> ``ActivationConstraint``, priced with
        the weight spec as constraints on the values the keys name; keys that name no
        value of the model are in ``unmatched``.
    """

    by_role: dict[str, TensorSharding]
    source: str
    where: str
    mesh: list[int] | None
    unmatched: list[str] = field(default_factory=list)
    not_dividing: list[dict] = field(default_factory=list)
    activations: dict = field(default_factory=dict)  # key -> ActivationConstraint (shard_opt.activations)

    def constraints(self) -> dict:
        """The activation spec as ``apply-constraints`` takes it (``activation:KEY`` keys)."""
        from shard_opt.activations import PREFIX

        return {PREFIX + k: c for k, c in self.activations.items()}


def loader_spec(model: LoweredModel, mesh: Mesh) -> LoaderSpec | None:
    """The loader's (or ``--spec``'s) plan for ``mesh``, or None when the model has none.

    Mesh axes of size 1 count as replicated (tt-xla ``python_package/tt_torch/sharding.py``:
    on a (1, N) mesh ``("model", "batch")`` is plain 1-D Megatron).
    """
    data = model.meta.get("shard_spec")
    if not data:
        return None
    entry = data["by_devices"].get(str(mesh.num_devices)) or data["by_devices"].get("*")
    if entry is None:
        return None
    args = {a.name: a for a in model.arguments}
    out = LoaderSpec({}, data["source"], data["where"], entry.get("mesh"), list(entry.get("unmatched", [])))
    sizes = dict(zip(mesh.axes, mesh.shape))
    for name, dims in entry["spec"].items():
        matched = _spec_targets(name, args)
        if not matched:
            out.unmatched.append(name)
            continue
        for a in matched:
            _add_spec_entry(out, name, dims, a, sizes)
    if entry.get("activations"):
        _add_activations(out, model, entry["activations"], sizes)
    return out


def _add_activations(out: LoaderSpec, model: LoweredModel, raw: dict, sizes: dict) -> None:
    """The activation spec entries of ``raw`` ({key: [dims or None, ...]}) that name a value
    of ``model``, as ``ActivationConstraint`` (axes of size 1 dropped, as for weights; a
    None spec is the value replicated)."""
    from shard_opt import ir
    from shard_opt.activations import ActivationConstraint, find_values

    module = ir.parse(model.text, filename=model.name)
    for key, specs in raw.items():
        values = find_values(module, model.arguments, key)
        if not values:
            out.unmatched.append(f"{key} (activation spec: no value of the model is this module's output; "
                                 f"shard_opt.activations says what a key may name)")
            continue
        rank = len(ir.tensor_type(values[0].type)[0])
        shardings, bad = [], False
        for dims in specs:
            if dims is None:
                dims = [None] * rank
            if len(dims) != rank:
                out.unmatched.append(f"{key} (activation spec of {len(dims)} dims for a {rank}-dim value)")
                bad = True
                break
            split = []
            for d in dims:
                axes = [] if d is None else ([d] if isinstance(d, str) else list(d))
                missing = [x for x in axes if x not in sizes]
                if missing:
                    out.unmatched.append(f"{key}: axis {', '.join(missing)} is not a mesh axis ({', '.join(sizes)})")
                split.append([x for x in axes if sizes.get(x, 1) > 1])
            shardings.append(TensorSharding.of(split))
        if not bad:
            out.activations[key] = ActivationConstraint(key, tuple(shardings))


def _spec_targets(name: str, args: dict) -> list:
    """The arguments a spec entry names: one by its name, or by a shell pattern
    (``model.layers.*.mlp.up_proj.weight``, as the plan's roles are written), one per role."""
    if name in args:
        return [args[name]]
    if not any(c in name for c in "*?["):
        return []
    roles: dict[str, object] = {}
    for n, a in args.items():
        if fnmatch.fnmatchcase(n, name):
            roles.setdefault(a.role, a)
    return list(roles.values())


def _add_spec_entry(out: "LoaderSpec", name: str, dims, a, sizes: dict) -> None:
    """One spec entry for argument ``a``: its split per dim, axes the mesh lacks and
    splits that do not divide reported (the latter replicated)."""
    if len(dims) != len(a.shape):
        out.unmatched.append(f"{name} (a spec of {len(dims)} dims for a {len(a.shape)}-dim tensor)")
        return
    split = []
    for d, entry_axes in enumerate(dims):
        axes = [] if entry_axes is None else ([entry_axes] if isinstance(entry_axes, str) else list(entry_axes))
        missing = [x for x in axes if x not in sizes]
        if missing:
            out.unmatched.append(f"{name}: axis {', '.join(missing)} is not a mesh axis ({', '.join(sizes)})")
        axes = [x for x in axes if sizes.get(x, 1) > 1]
        factor = 1
        for x in axes:
            factor *= sizes[x]
        if axes and a.shape[d] % factor:
            out.not_dividing.append({"name": name, "dim": d, "size": a.shape[d], "axes": axes})
            axes = []
        split.append(axes)
    out.by_role.setdefault(a.role, TensorSharding.of(split))
