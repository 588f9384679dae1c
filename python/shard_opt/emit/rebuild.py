"""Rebuild the module tt-xla builds from an emitted script, and compare it with the plan.

``--emit-torch`` writes the plan as tables (``SHARD_OPT_PARAM_SPECS``,
``SHARD_OPT_INPUT_SPECS``, ``SHARD_OPT_GUARDS``, ``SHARD_OPT_OUTPUT_CONSTRAINTS``) and
helpers that apply them with ``xs.mark_sharding`` and forward hooks. What tt-mlir then
compiles is the user's program with those annotations and nothing else: none of
shard-opt's own guards (``insert-guards``). This harness builds that
module and propagates it the way the plan was priced, so the two can be compared:

1. the script's tables are read with ``ast.literal_eval`` (and the mesh from its
   ``Mesh(np.arange(N), SHAPE, AXES)``), never by running it (it imports torch_xla);
2. parameter specs are mapped onto the lowered model's arguments by name, else by role
   (the layer index written ``*``, as the script's ``shard_opt_role`` does), the input
   specs onto its inputs in order; an axis of size 1 is replicated (tt_torch's own rule),
   and a tensor the script does not mark is replicated, closed (torch_xla's default);
3. each ``SHARD_OPT_GUARDS`` entry becomes one ``sdy.sharding_constraint`` (closed, as
   ``tt_torch.sharding.sharding_constraint_hook`` writes it) on the output of every
   module it names, found the way ``script_guards`` found it
   (``shard_opt.module_outputs.Graph.module_output``); an ``SHARD_OPT_OUTPUT_CONSTRAINTS``
   entry becomes the replicated anchor and the constraint ``shard_opt_constraint_hook``
   writes; the reshape constraints the script asks the user to add by hand
   (``#   reshape SITE: SPEC = ...``) are applied as written (``by_hand=False`` leaves
   them out); the guards it could not tie to a module cannot be, and are listed;
4. Shardy runs as the plan's evaluation runs it (``shard_opt.evaluate.prepare``, the
   same mesh and pipeline) but with ``guard_opaque_ops`` and ``guard_moved_dims`` off;
5. the collectives (kind, axes, global shape, as a multiset) are compared with the plan
   JSON's ``collectives``, the priced module's.

Run::

    python -m shard_opt.emit.rebuild EMITTED.py --model LOAD_SCRIPT.py --plan PLAN.json \\
        [--layers N] [--no-guards]

It prints what it applied and the difference, and exits 0 when the collectives are the
priced ones, 1 when not. ``--tt-mlir`` also compiles the rebuilt module, unpropagated, the
way tt-xla hands it over (the user's program with the script's annotations) with tt-mlir
(``shard_opt.ttmlir``, compile-only) and requires that tt-mlir runs the priced collectives
and, when the plan JSON holds its own tt-mlir check, that every stage's collectives are the
ones tt-mlir made of the priced module. ``--no-guards`` rebuilds without ``SHARD_OPT_GUARDS`` (what a
script that lost its guards compiles to). ``tests/test_guards.py`` runs it on the
fused-split cases.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

from shard_opt import ir
from shard_opt.emit import _plan
from shard_opt.emit._plan import role as role_of
from shard_opt.sharding import AxisRef, Mesh, TensorSharding

TABLES = ("SHARD_OPT_PARAM_SPECS", "SHARD_OPT_INPUT_SPECS", "SHARD_OPT_GUARDS", "SHARD_OPT_OUTPUT_CONSTRAINTS")
_BY_HAND_RESHAPE = re.compile(r"^#\s+reshape (\S+): SPEC = (.+)$")
_BY_HAND_GUARD = re.compile(r"^#\s+([\w-]+): (.+?): SPEC = (\(.*\))$")


@dataclass
class Tables:
    """What an emitted script says, read without running it."""

    mesh: Mesh
    params: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)
    guards: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)  # SHARD_OPT_OUTPUT_CONSTRAINTS
    reshapes: dict = field(default_factory=dict)  # site -> spec, by hand
    loose: list = field(default_factory=list)  # by-hand guards no module stands for: (rule, site, spec)


def read_tables(script_text: str) -> Tables:
    """The emitted script's spec tables, its mesh and its by-hand instructions."""
    tree = ast.parse(script_text)
    found: dict = {}
    mesh = None
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            continue
        name = node.targets[0].id
        if name in TABLES:
            found[name] = ast.literal_eval(node.value)
        elif isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "Mesh":
            args = node.value.args
            shape = ast.literal_eval(args[1])
            axes = ast.literal_eval(args[2])
            mesh = Mesh(tuple(shape), tuple(axes))
    if mesh is None:
        raise ValueError("the script builds no Mesh(np.arange(N), SHAPE, AXES): not a shard-opt emitted script")
    t = Tables(mesh, found.get("SHARD_OPT_PARAM_SPECS", {}), list(found.get("SHARD_OPT_INPUT_SPECS", [])),
               found.get("SHARD_OPT_GUARDS", {}), found.get("SHARD_OPT_OUTPUT_CONSTRAINTS", {}))
    for line in script_text.splitlines():
        m = _BY_HAND_RESHAPE.match(line.strip())
        if m:
            t.reshapes[m.group(1)] = ast.literal_eval(m.group(2))
            continue
        m = _BY_HAND_GUARD.match(line.strip())
        if m and not line.strip().startswith("#   reshape"):
            t.loose.append((m.group(1), m.group(2), ast.literal_eval(m.group(3))))
    return t


def sharding_of(spec, rank: int, mesh: Mesh, mesh_name: str = "mesh") -> TensorSharding:
    """A torch partition spec as Shardy sees it (tt_torch: an axis of size 1 is replicated)."""
    dims = []
    for d in range(rank):
        entry = spec[d] if d < len(spec) else None
        names = [] if entry is None else [entry] if isinstance(entry, str) else list(entry)
        dims.append(tuple(AxisRef(a) for a in names if a in mesh.axes and mesh.axis_size(a) > 1))
    return TensorSharding(tuple(dims), mesh_name)


def _lookup(table: dict, name: str):
    return table.get(name, table.get(role_of(name)))


@dataclass
class Rebuilt:
    """The rebuilt module's collectives, and what of the script went into it."""

    collectives: list  # (kind, axes, global shape)
    applied: dict
    not_applied: list
    text: str | None = None
    script_module: str | None = None  # keep_script_module: the annotated, unpropagated module


def rebuild(script_text: str, model, *, pipeline: str = "tt-mlir", guards: bool = True, by_hand: bool = True,
            keep_text: bool = False, keep_script_module: bool = False) -> Rebuilt:
    """The module tt-xla builds from the emitted ``script_text`` for ``model`` (the
    ``LoweredModel`` of the script it was emitted from), propagated without shard-opt's
    guards (module docstring). ``guards=False`` leaves ``SHARD_OPT_GUARDS`` out."""
    from shard_opt import pipelines
    from shard_opt.evaluate import prepare
    from shard_opt.pass_manager import PassContext, PassManager

    t = read_tables(script_text)
    mesh = t.mesh
    shardings = {}
    applied = {"params": [], "inputs": [], "guards": [], "output_constraints": [], "reshapes": []}
    not_applied = []
    used = set()
    for a in model.arguments:
        if a.kind in ("param", "buffer"):
            spec = t.params.get(a.name)
            key = a.name if spec is not None else role_of(a.name)
            spec = spec if spec is not None else t.params.get(key)
            if spec is not None:
                used.add(key)
                shardings[a.index] = sharding_of(spec, len(a.shape), mesh)
                applied["params"].append(a.name)
    inputs = [a for a in model.arguments if a.kind in ("input", "cache")]
    for a, spec in zip(inputs, t.inputs):
        if spec is not None:
            shardings[a.index] = sharding_of(spec, len(a.shape), mesh)
            applied["inputs"].append(a.name)
    for a in model.arguments:  # a tensor the script does not mark is replicated (torch_xla's default)
        shardings.setdefault(a.index, TensorSharding.replicated(len(a.shape)))
    not_applied += [f"SHARD_OPT_PARAM_SPECS[{k!r}] names no parameter" for k in t.params if k not in used]

    text, _ = prepare(model, pipeline)
    module = ir.parse(text, filename=model.name)
    constraints = {}
    if by_hand:
        constraints = {site: sharding_of(spec, len(spec), mesh) for site, spec in t.reshapes.items()}
        applied["reshapes"] = sorted(constraints)
    hooked = _annotate(module, model, t, shardings, constraints, guards, decouple=pipeline == "tt-mlir")
    for what, names in hooked["applied"].items():
        applied[what] = names
    not_applied += hooked["not_applied"]
    not_applied += [f"by hand, no module: {rule}: {site}: SPEC = {spec}" for rule, site, spec in t.loose]
    script_module = None
    if keep_script_module:  # the module as tt-xla hands it to tt-mlir: the user's program, annotated
        script_module = ir.parse(model.text, filename=model.name)
        # torch_xla's batched matmuls (the export pipeline's first step, as annotate.annotate_many does)
        PassManager(pipelines.EXPORT_PREPARE, PassContext(arguments=model.arguments)).run(script_module)
        _annotate(script_module, model, t, shardings, constraints, guards, decouple=False)
        script_module = ir.print_module(script_module)
    ctx2 = PassContext(mesh=mesh, arguments=model.arguments)
    PassManager(pipelines.rebuilt(pipeline), ctx2).run(module)
    collectives = [(c.kind, tuple(c.axes), tuple(c.global_shape)) for c in ctx2.facts.collectives]
    return Rebuilt(collectives, applied, not_applied, ir.print_module(module) if keep_text else None, script_module)


def _annotate(module, model, t: Tables, shardings: dict, constraints: dict, guards: bool, *, decouple: bool) -> dict:
    """``module`` (``model``'s, parsed) annotated as the script ``t`` annotates it: its mesh,
    the argument ``shardings``, the by-hand ``constraints``, then every output constraint and
    (``guards``) guard hook on the output of each module it names. What was applied, and the
    entries no module output stood for."""
    from shard_opt import pipelines
    from shard_opt.module_outputs import READER_OPS, Graph
    from shard_opt.pass_manager import PassContext, PassManager
    from shard_opt.sdy import constraint_op

    mesh = t.mesh
    ctx = PassContext(mesh=mesh, shardings=shardings, arguments=model.arguments, constraints=constraints)
    PassManager(pipelines.script(decouple=decouple), ctx).run(module)  # as the evaluator prepares every candidate
    applied = {"guards": [], "output_constraints": []}
    not_applied = []
    tables = [(t.outputs, True, "output_constraints")]
    if guards:
        tables.append((t.guards, False, "guards"))
    irm = ir.ir()
    with module.context:
        graph = Graph(module, model.arguments)
        for table, anchor, what in tables:
            if not table:
                continue
            hit = set()
            for op in ir.ops_in(module.operation, READER_OPS):
                w = graph.reader_weight(op)
                if w is None or not model.arguments[w].name.endswith(".weight"):
                    continue
                name = model.arguments[w].name[:-len(".weight")]
                spec = _lookup(table, name)
                if spec is None:
                    continue
                hit.add(name if name in table else role_of(name))
                out = graph.module_output(op)
                rank = len(ir.tensor_type(out.type)[0])
                where = out.owner.operation if hasattr(out.owner, "operation") else out.owner
                value = out
                with irm.InsertionPoint.after(where), where.location:
                    first = None
                    if anchor:  # shard_opt_constraint_hook: replicated, then the spec (tt-xla issue 3643)
                        first = constraint_op(value, TensorSharding.replicated(rank).to_attr())
                        value = first.result
                    c = constraint_op(value, sharding_of(spec, rank, mesh).to_attr())
                out.replace_all_uses_except(c.result, first if first is not None else c)
                applied[what].append(name)
            not_applied += [f"{what} entry {k!r} names no module output" for k in table if k not in hit]
    return {"applied": applied, "not_applied": not_applied}


def priced_collectives(plan) -> list:
    """The plan's collectives as (kind, axes, global shape)."""
    return [(c.kind, tuple(c.axes), tuple(c.shape)) for c in plan.collectives or []]


def compare(priced: list, rebuilt: list) -> dict:
    """``{"equal", "missing", "extra"}``: the collectives the rebuilt module lacks and has
    beyond the priced ones (multisets, each with its count)."""
    a, b = Counter(priced), Counter(rebuilt)
    missing = [{"kind": k, "axes": list(ax), "shape": list(s), "count": n} for (k, ax, s), n in sorted((a - b).items())]
    extra = [{"kind": k, "axes": list(ax), "shape": list(s), "count": n} for (k, ax, s), n in sorted((b - a).items())]
    return {"equal": not missing and not extra, "missing": missing, "extra": extra}


def check(script_text: str, model, plan, **kwargs) -> dict:
    """``rebuild`` and ``compare`` with the plan's collectives, as one dict (``plan``: the
    ``Plan``, or its plan JSON dict: ``_plan.as_plan``)."""
    plan = _plan.as_plan(plan)
    r = rebuild(script_text, model, pipeline=plan.propagation or "tt-mlir", **kwargs)
    out = compare(priced_collectives(plan), r.collectives)
    out.update({"applied": r.applied, "not_applied": r.not_applied, "rebuilt": len(r.collectives),
                "priced": len(priced_collectives(plan)), "script_module": r.script_module})
    return out


def compile_with_tt_mlir(script_text: str, model, plan, **kwargs) -> dict:
    """The module tt-xla builds from the script (``rebuild(..., keep_script_module=True)``),
    compiled by tt-mlir (``shard_opt.ttmlir.check``, compile-only) and held against the plan:
    the check's summary (``matches``: tt-mlir runs the plan's priced collectives), and, when
    the plan JSON holds its own tt-mlir check, ``same_as_priced_module``: each stage's
    collectives equal those tt-mlir made of the priced module. ``{"skipped": why}`` when the
    plugin cannot run."""
    from shard_opt.ttmlir import check as ttc

    plan = _plan.as_plan(plan)
    ok, why = ttc.status()
    if not ok:
        return {"skipped": why}
    r = rebuild(script_text, model, pipeline=plan.propagation or "tt-mlir", keep_script_module=True, **kwargs)
    return compile_script_module(r.script_module, plan)


def compile_script_module(script_module: str, plan) -> dict:
    """``compile_with_tt_mlir`` for a module already rebuilt (``Rebuilt.script_module``)."""
    from shard_opt import costmodel
    from shard_opt.ttmlir import check as ttc

    plan = _plan.as_plan(plan)
    ok, why = ttc.status()
    if not ok:
        return {"skipped": why}
    shape = tuple(plan.mesh.shape)
    system = costmodel.get_system(plan.system)
    (compiled,) = ttc.compile_all([ttc.Job("script", script_module, math.prod(shape))], system, shape)
    out = ttc.summarize(plan, compiled, system)
    priced = ((plan.checks or {}).get("tt_mlir") or {}).get("stages")
    if priced and compiled.compiled:
        out["same_as_priced_module"] = all(out["stages"].get(k) == v for k, v in priced.items())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m shard_opt.emit.rebuild", description=__doc__.split("\n\n")[0])
    p.add_argument("script", help="the script --emit-torch wrote")
    p.add_argument("--model", required=True, help="the load script it was emitted from (lowered again here)")
    p.add_argument("--plan", required=True, help="the plan JSON of the same run (--plan-json)")
    p.add_argument("--layers", type=int, default=None, help="as the shard-opt run's --layers")
    p.add_argument("--no-guards", action="store_true", help="rebuild without SHARD_OPT_GUARDS")
    p.add_argument("--tt-mlir", action="store_true",
                   help="also compile the rebuilt module with tt-mlir (jax-tt-plugin, compile-only) and compare "
                        "its collectives with the plan's")
    ns = p.parse_args(argv)
    from shard_opt import frontends
    from shard_opt.plan import Plan, PlanSchemaError

    with open(ns.plan) as f:
        try:
            plan = Plan.from_json(json.load(f), where=ns.plan)
        except PlanSchemaError as e:
            p.error(str(e))
    with open(ns.script) as f:
        script = f.read()
    resized = plan.inputs_resized is not None  # --batch / --seq-len changed the script's inputs
    model = frontends.load(ns.model, layers=ns.layers, dtype=plan.dtype or "bf16",
                           batch=plan.batch if resized else None, seq_len=plan.seq_len if resized else None,
                           phase=plan.phase or "prefill")
    result = check(script, model, plan, guards=not ns.no_guards, keep_script_module=ns.tt_mlir)
    applied = result["applied"]
    print(f"applied: {len(applied['params'])} parameter specs, {len(applied['inputs'])} input specs, "
          f"{len(applied['guards'])} guard hooks ({', '.join(sorted(set(applied['guards']))) or '-'}), "
          f"{len(applied['output_constraints'])} output constraints, {len(applied['reshapes'])} by-hand reshapes")
    for line in result["not_applied"]:
        print(f"not applied: {line}")
    print(f"collectives: {result['rebuilt']} rebuilt, {result['priced']} priced")
    for key in ("missing", "extra"):
        for c in result[key]:
            print(f"{key}: {c['count']} x {c['kind']} on {'+'.join(c['axes'])} of {c['shape']}")
    print("equal: the script compiles to the priced collectives" if result["equal"]
          else "DIFFERENT: the script does not compile to the priced collectives")
    ok = result["equal"]
    if ns.tt_mlir:
        tt = compile_script_module(result["script_module"], plan)
        if "skipped" in tt:
            print(f"tt-mlir: skipped: {tt['skipped']}")
        else:
            stages = "; ".join(f"{k}: " + (", ".join(f"{n} {c}" for c, n in sorted(v.items())) or "none")
                               for k, v in tt["stages"].items())
            print(f"tt-mlir: {'compiled' if tt['compiled'] else 'REJECTED: ' + str(tt['error'])}; {stages}")
            for d in tt["differences"]:
                print(f"tt-mlir: {d}")
            same = tt.get("same_as_priced_module")
            if same is not None:
                print("tt-mlir: the same collectives as the priced module's, at every stage" if same
                      else "tt-mlir: DIFFERENT collectives from the priced module's")
            print("tt-mlir: runs the priced collectives" if tt["matches"]
                  else "tt-mlir: DOES NOT run the priced collectives")
            ok = ok and tt["compiled"] and tt["matches"] and same is not False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
