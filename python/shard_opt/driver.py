"""From a lowered model to a plan: search (or evaluate), baselines, memory fallback.

``optimize`` is the main job; ``evaluate_existing`` prices the shardings already in an
annotated module (``--evaluate``). Both return an ``Outcome`` with the plan JSON and the
module texts the emitters need.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import threading
import time
from dataclasses import dataclass, field

from shard_opt import analysis, costmodel, ir, parallel, safety, timing
from shard_opt.baselines import ONE_AXIS, LoaderSpec, autoshard_groups, loader_spec, megatron_pairs, megatron_shardings
from shard_opt.candidates import PARALLELISM, Group, make_groups, site_groups
from shard_opt.errors import PassError, UserError
from shard_opt.evaluate import (
    Evaluator, LayeredEvaluator, Score, constraints_for, group_members, shardings_by_role, shardings_for,
)
from shard_opt.lowered import LoweredModel, PendingModel, same_arguments
from shard_opt.pass_manager import PassContext, PassManager
from shard_opt.passes.add_mesh import AddMesh
from shard_opt.passes.apply_constraints import ApplyConstraints
from shard_opt.passes.apply_shardings import ApplyShardings
from shard_opt.passes.shardy_propagate import insert_guards
from shard_opt.plan import build_plan, collective_entry, score_dict
from shard_opt.search import (
    Progress, assignment_of, conv_weight_indices, final_evaluation, fit_first, make_scorer, search,
)
from shard_opt.sharding import Mesh, TensorSharding
from shard_opt.structure import structure_of
from shard_opt.weights import WeightFormats


@dataclass
class Options:
    meshes: list[Mesh] = field(default_factory=list)
    system: str | None = None
    cost_model: str = "tenstorrent"
    parallelism: tuple[str, ...] = PARALLELISM
    allow_collective_permute: bool = False
    propagation: str = "tt-mlir"  # shardy-propagate's pipeline (tt-mlir's, or Shardy's own "sdy")
    weights: WeightFormats = field(default_factory=WeightFormats)  # --weight-dtype
    allow: frozenset = frozenset()  # compiler-safety rules turned off (--allow; shard_opt.safety)
    progress: bool = True
    baselines: bool = True
    check: bool = False  # compile the finalists and baselines with tt-mlir (shard_opt.ttmlir.check)
    stream: object = None

    def setting(self) -> dict:
        """The ``Evaluator`` options these options imply."""
        return {"pipeline": self.propagation, "weights": self.weights, "allow": self.allow}


@dataclass
class Outcome:
    plan: dict
    annotated_text: str  # input module + sdy.mesh + the plan's argument shardings
    propagated_text: str  # after Shardy, with explicit collectives and accounting attrs
    model: LoweredModel


def resolve_system(mesh: Mesh, name: str | None):
    system_name = name or costmodel.default_system_for_mesh(mesh.shape)
    system = costmodel.get_system(system_name)
    meshes = [tuple(m) for m in getattr(system, "meshes", ())]
    if meshes and tuple(mesh.shape) not in meshes:
        shapes = ", ".join("x".join(map(str, m)) for m in meshes)
        refused = getattr(system, "refused_meshes", {}).get(tuple(mesh.shape))
        why = f" ({refused})" if refused else ""
        raise UserError(f"--system {system_name} has meshes {shapes}, not {mesh.spec}{why}; "
                        f"pick a listed shape or another system (shard-opt --list-systems)")
    return system_name, system


def annotate(model: LoweredModel, mesh: Mesh, shardings: dict[int, TensorSharding],
             constraints: dict | None = None, allow: frozenset = frozenset()) -> str:
    """The model's module with ``mesh``, the argument ``shardings`` and the ``constraints``
    written in, and shardy-propagate's guards: the ``-o`` module."""
    return annotate_many(model, mesh, [(shardings, constraints)], allow)[0]


def annotate_many(model: LoweredModel, mesh: Mesh, plans: list[tuple[dict, dict | None]],
                  allow: frozenset = frozenset()) -> list[str]:
    """``annotate`` for several plans of one model, parsing its module once (a full-size
    model's text takes a second to parse; the tt-mlir check annotates five plans)."""
    base = ir.parse(model.text, filename=model.name)
    out = []
    for k, (shardings, constraints) in enumerate(plans):
        module = base if k == len(plans) - 1 else base.operation.clone()
        ctx = PassContext(mesh=mesh, shardings=shardings, arguments=model.arguments, constraints=constraints or {})
        # results carry their closed, replicated sharding: the boundary rule is part of the
        # plan, so XLA, tt-mlir and --evaluate all see the same output gather
        PassManager([AddMesh(), ApplyShardings(), ApplyConstraints()], ctx).run(module)
        insert_guards(module, allow=allow, arguments=model.arguments)  # the guards of the rules not turned off
        out.append(ir.print_module(module))
    return out


def optimize(model: LoweredModel | PendingModel, opts: Options) -> Outcome:
    """The plan for ``model`` (see the module docstring). A ``PendingModel`` (a zoo model
    still lowering in another process) is looked ahead of: the scorer, the structure, the
    baselines and the search need only its arguments and its short copies, so they run on
    its provisional model; then the real model is waited for (the final evaluation and the
    plan read its module), and when its arguments are not the ones predicted, everything
    starts again from it (the plan is the same either way)."""
    pending = model if isinstance(model, PendingModel) else None
    if pending is not None:
        ahead = pending.provisional
        # only a model scored from its short copies can be looked ahead of (make_scorer)
        layered = ahead is not None and ahead.with_layers is not None and (ahead.num_layers or 0) > 2
        model = ahead if layered else pending.resolve()
    meshes = opts.meshes
    mesh = meshes[0]
    for m in meshes:
        m.check_supported()
    system_name, system = resolve_system(mesh, opts.system)
    cm = costmodel.get_cost_model(opts.cost_model, allow_collective_permute=opts.allow_collective_permute)
    stream = opts.stream or sys.stderr
    progress = Progress(model.name, stream, enabled=opts.progress)
    setting = opts.setting()
    scorer = make_scorer(model, mesh, system, cm, **setting)
    structure = structure_of(model)
    # the compiler-safety rules the search is held to hold every baseline too (_held_to_rules)
    limit, removed, removed_options = safety.limits(model, structure, opts.allow), {}, {}
    # what the plan is judged by: every rule's limits, the allowed ones too (an allowed
    # rule is not enforced, but a plan that breaks it still says so: plan_breaks)
    judged = safety.limits(model, structure) if opts.allow else limit
    mega_written = megatron_shardings(model, mesh, structure=structure)
    mega, _ = _within_limits(model, mega_written, limit, meshes)
    baselines, autoshard, user, user_kept = {}, None, None, None
    priced_by: dict = {}  # baseline -> what its figures price ({"figure"|"as_written": (shardings, constraints)})
    with timing.phase("baselines"):
        if opts.baselines:
            # priced first, so the search starts from the expert plan and from tt-mlir's pass's
            # plan: whatever the search finds is at least as fast as both (when representable)
            baselines, autoshard = _baselines(model, mesh, meshes, scorer, mega_written, limit, priced_by)
            baselines["megatron"]["pairs"] = megatron_pairs(model, structure)
        user = loader_spec(model, mesh)
        if user is not None:
            _warn_spec(user, stream)
            # the user's own plan: priced as a baseline, and a seed (the search starts from it)
            baselines["loader-spec"], user_kept = _loader_baseline(model, scorer, user, limit, meshes, priced_by)
    groups = make_groups(model.arguments, meshes, set(opts.parallelism), conv_weights=conv_weight_indices(model),
                         limit=limit, removed=removed, removed_options=removed_options)
    seeds = [assignment_of(groups, mega)]
    if autoshard is not None:
        seeds.append(assignment_of(groups, autoshard))
    if user is not None:
        seeds.append(assignment_of(groups, shardings_by_role(model, user_kept)))
    with timing.phase("search"):
        t0 = time.monotonic()
        short = safety.layer_copy(model)  # the sites of a layer are every layer's
        sites = site_groups(short.text, meshes, set(opts.parallelism), short.arguments)
        result = search(model, meshes, system, cm, parallelism=set(opts.parallelism), groups=groups,
                        scorer=scorer, progress=progress, seeds=seeds, sites=sites)
        seconds = time.monotonic() - t0

        groups, assignment, score = result.groups, result.assignment, result.score
        # candidates priced before the constraint sites joined the search leave every site
        # unconstrained (option 0): key them at the full length, so every plan is comparable
        result.scored = {a + (0,) * (len(groups) - len(a)): s for a, s in result.scored.items()}
        fallback = None
        if not score.fits and not any(s.fits for s in result.scored.values()):
            # nothing the speed search tried fits: search for memory (fitting plans first, the
            # least memory, then time), from the fastest plan and the seeds
            seen = result.scored
            mem = search(model, meshes, system, cm, parallelism=set(opts.parallelism), groups=groups,
                         scorer=scorer, progress=progress, seeds=[result.assignment, _most_split(groups, mesh)] + [
                             s + tuple(0 for _ in range(len(groups) - len(s))) for s in seeds],
                         objective=fit_first)
            result.scored = {**seen, **mem.scored}
        if not score.fits:
            fitting = [(s.key(), a) for a, s in result.scored.items() if s.fits]
            if not fitting:
                need = min(s.memory_bytes for s in result.scored.values())
                raise UserError(
                    f"{model.name} does not fit on {system_name} ({mesh.spec}) under any plan evaluated: "
                    f"the smallest needs {need / 2**30:.1f} GiB per device; use more devices or a "
                    f"system with more DRAM (--devices, --system)"
                )
            _, alt = min(fitting)
            alt_score = result.scored[alt]
            if alt_score.key() < score.key():  # the memory search found a faster plan: no trade-off
                result.assignment, result.score = alt, alt_score
            else:
                fallback = (
                    f"the fastest plan ({score.total_us:.1f} us) needs {score.memory_bytes / 2**30:.2f} GiB per "
                    f"device, more than {system_name}'s DRAM allows; took the fastest plan that fits "
                    f"({alt_score.total_us:.1f} us, {100 * (alt_score.total_us / score.total_us - 1):+.1f}% time)"
                )
                stream.write(f"shard-opt: WARNING: memory fallback: {fallback}\n")
            assignment, score = alt, alt_score

    if pending is not None and model is not pending.resolve():
        # the search read the short copies alone (its limits and sites too: safety.layer_copy);
        # what follows reads the whole module: the real model from here on
        real = pending.resolve()
        if not same_arguments(model, real) or real.meta.get("shard_spec") is not None:
            return optimize(real, opts)  # the prediction was wrong: start from the model
        model = real
    with timing.phase("final"):
        final = final_evaluation(model, mesh, system, cm, groups, assignment, **setting)
    if isinstance(scorer, LayeredEvaluator) and baselines:
        with timing.phase("baselines.whole"):  # priced as the plan is: the whole model (issue 24 item 7)
            price_whole(model, mesh, system, cm, setting, baselines, priced_by)
    checked = None
    if opts.check:
        with timing.phase("check"):
            checked = tt_mlir_check(model, mesh, system, cm, groups, assignment, final, result, baselines, mega,
                                    user_kept, setting, stream, progress=opts.progress)
        assignment, final = checked.assignment, checked.final
        score = result.scored.get(assignment, score)
    with timing.phase("analysis"):
        outcome = _explain(model, opts, mesh, meshes, system_name, cm, scorer, groups, assignment, score, result,
                           seconds, fallback, baselines, user, mega, judged, removed, final, structure,
                           removed_options)
    if checked is not None:
        checked.attach(outcome.plan)
        if opts.progress:
            from shard_opt.ttmlir.check import line

            stream.write(line(checked.plan_check) + "\n")
    with timing.phase("persist"):
        scorer.persist()  # what Shardy made of each candidate, for the next run (shard_opt.factcache)
    _note_refusal(outcome.plan, model, mesh)
    return outcome


FINALISTS = 3  # the recommendation and the next distinct plans compiled by the tt-mlir check


@dataclass
class Checked:
    """What the tt-mlir check decided: the plan to recommend (``assignment``, ``final``),
    its ``checks.tt_mlir``, the finalists it was chosen from, and the baselines' checks."""

    assignment: tuple
    final: object
    plan_check: dict
    finalists: list[dict] = field(default_factory=list)
    baselines: dict = field(default_factory=dict)
    note: str | None = None

    def attach(self, plan: dict) -> None:
        check = dict(self.plan_check)
        if self.finalists:
            check["finalists"] = self.finalists
        plan.setdefault("checks", {})["tt_mlir"] = check
        if "checked_us" in check:
            plan["cost"]["checked_us"] = check["checked_us"]
        for name, b in self.baselines.items():
            if name in plan.get("baselines", {}):
                plan["baselines"][name]["tt_mlir"] = b
                if "checked_us" in b:
                    plan["baselines"][name]["checked_us"] = b["checked_us"]
        if self.note:
            plan.setdefault("notes", []).append(self.note)


def tt_mlir_check(model, mesh, system, cm, groups, assignment, final, result, baselines, mega, user, setting,
                  stream, progress: bool = True) -> Checked:
    """Compile the search's finalists (its plan and the next ``FINALISTS - 1`` distinct
    ones, each evaluated on the whole model) and the Megatron and loader-spec baselines
    with tt-mlir (``shard_opt.ttmlir.check``), price what tt-mlir emits on top of what
    was priced, and recommend the finalist with the lowest checked cost that tt-mlir
    compiles (the search's own plan unless another one wins, said loudly). The baselines are
    compiled as priced, within the compiler-safety rules (``_held_to_rules``): ``mega`` and
    ``user`` (the loader's spec by role) are the shardings kept within them."""
    from shard_opt.plan import checkable
    from shard_opt.ttmlir import check as ttc

    t0 = time.perf_counter()
    ok, why = ttc.status()
    if not ok:
        stream.write(f"shard-opt: tt-mlir check skipped: {why}\n")
        return Checked(assignment, final, ttc.skipped(why))
    evaluator = Evaluator(model, mesh, system, cm, **setting)  # one prepared module for every plan compiled
    with timing.phase("check.finalists"):
        finalists = _finalists(model, groups, assignment, final, result, evaluator)
    n = math.prod(mesh.shape)
    base_evals = {}
    for name, shardings in (("megatron", mega if "megatron" in baselines else None),
                            ("loader-spec", shardings_by_role(model, user) if user is not None else None)):
        if shardings is not None:
            base_evals[name] = evaluator.run(shardings, keep_ir=False)
    names = [f"finalist-{k}" for k in range(len(finalists))] + list(base_evals)
    texts = annotate_many(model, mesh, [(fe.shardings, constraints_for(groups, a)) for a, fe in finalists]
                          + [(ev.shardings, None) for ev in base_evals.values()], evaluator.allow)
    jobs = [ttc.Job(name, text, n) for name, text in zip(names, texts)]
    if progress:
        stream.write(f"shard-opt: tt-mlir: compiling {len(finalists)} finalist{'s' if len(finalists) > 1 else ''}"
                     f"{' and ' + ', '.join(base_evals) if base_evals else ''} (--no-check skips this)\n")
    with timing.phase("check.compile"):
        # XLA partitions the search's plan meanwhile (the parent is idle while tt-mlir's
        # children compile): the reductions it makes are what tt-mlir's must include
        xla: dict = {}
        xla_thread = threading.Thread(target=_xla_collectives_into, args=(xla, 0, texts[0], n), daemon=True)
        xla_thread.start()
        compiled = ttc.compile_all(jobs, system, tuple(mesh.shape))
        xla_thread.join()
    with timing.phase("check.read"):
        plans = [checkable(model, mesh, fe) for _, fe in finalists]
        checks = [ttc.summarize(p, c, system, priced_ops=len(fe.facts.ops), cost_model=cm)
                  for p, c, (_, fe) in zip(plans, compiled, finalists)]
        # in order of checked cost, each finalist tt-mlir compiled is held against XLA's
        # reductions until one keeps them all (a full Llama-3-8B module takes XLA ~11 s here:
        # the others, costlier, are not partitioned)
        for k in sorted((k for k, c in enumerate(checks) if c["compiled"]), key=lambda k: (checks[k]["checked_us"], k)):
            if k not in xla:
                _xla_collectives_into(xla, k, texts[k], n)
            ttc.hold_against_xla(checks[k], plans[k], compiled[k], xla[k])
            if not checks[k].get("likely_miscompile"):
                break
    rows = []
    for k, ((a, fe), chk) in enumerate(zip(finalists, checks)):
        rows.append({"rank": k + 1, "total_us": round(fe.score.total_us, 3), "checked_us": chk.get("checked_us"),
                     "compiled": chk["compiled"], "matches": chk["matches"], "error": chk["error"],
                     "likely_miscompile": chk.get("likely_miscompile"),
                     "ttnn": chk["stages"].get("ttnn", {}),
                     "arguments_changed": _changed(model, final.shardings, fe.shardings)})
    usable = [k for k, chk in enumerate(checks) if chk["compiled"] and not chk.get("likely_miscompile")]
    best = min(usable, key=lambda k: (checks[k]["checked_us"], k)) if usable else 0
    note = None
    if best != 0:
        if not checks[0]["compiled"]:
            why0 = f"tt-mlir does not compile it ({checks[0]['error']})"
        elif checks[0].get("likely_miscompile"):
            why0 = ("it is a likely miscompile: tt-mlir leaves out a reduction XLA makes for the same shardings "
                    f"({checks[0]['xla']['missing_reductions'][0]})")
        else:
            why0 = (f"what tt-mlir emits for it is priced {checks[0]['checked_us']:.1f} us, finalist {best + 1}'s "
                    f"{checks[best]['checked_us']:.1f} us")
        note = (f"tt-mlir check: the search's best plan ({finalists[0][1].score.total_us:.1f} us modeled) is not "
                f"recommended: {why0}; finalist {best + 1} ({finalists[best][1].score.total_us:.1f} us modeled) is")
        stream.write(f"shard-opt: WARNING: {note}\n")
    elif not usable and checks[0].get("likely_miscompile"):
        note = ("tt-mlir check: every finalist is a likely miscompile (tt-mlir leaves out a reduction XLA makes: "
                f"{checks[0]['xla']['missing_reductions'][0]}); do not deploy the plan as it is")
        stream.write(f"shard-opt: WARNING: {note}\n")
    elif not usable:
        note = f"tt-mlir check: no finalist compiled; the plan is shown as found, unchecked: {checks[0]['error']}"
        stream.write(f"shard-opt: WARNING: {note}\n")
    base_checks = {}
    for name, c in zip(base_evals, compiled[len(finalists):]):  # not partitioned by XLA (time)
        chk = ttc.summarize(checkable(model, mesh, base_evals[name]), c, system,
                            priced_ops=len(base_evals[name].facts.ops), cost_model=cm)
        base_checks[name] = {k: chk.get(k) for k in ("compiled", "error", "matches", "checked_us", "extra_ccl_us",
                                                      "missing_ccl_us", "extra_ops_us", "ttnn_ops_per_step",
                                                      "likely_miscompile")}
        base_checks[name]["ttnn"] = chk["stages"].get("ttnn", {})
        base_checks[name]["differences"] = chk["differences"]
    a, fe = finalists[best]
    checks[best]["check_seconds"] = round(time.perf_counter() - t0, 3)  # the whole check: compiles, reading
    return Checked(a, fe, checks[best], rows if len(rows) > 1 else [], base_checks, note)


def _xla_collectives_into(out: dict, key, text: str, n: int) -> None:
    """``out[key]``: XLA's collectives for ``text`` partitioned over ``n`` CPU devices, or the
    error XLA gave (in words): the tt-mlir check's reference for reductions."""
    from shard_opt import verify

    try:
        out[key] = verify.xla_collectives(text, n)
    except (UserError, PassError) as e:
        out[key] = str(e)


def _finalists(model, groups, assignment, final, result, evaluator) -> list[tuple]:
    """(assignment, whole-model evaluation) of the search's plan and the next distinct ones,
    best first by the search's score, ``FINALISTS`` at most; a plan that breaks a safety rule,
    is priced infinite, or does not fit where the plan fits is not a finalist."""
    finalists = [(assignment, final)]
    seen = {_plan_key(final)}
    ranked = sorted(result.scored.items(), key=lambda kv: (kv[1].key(), kv[0]))
    tried = 0
    for a, s in ranked:
        if len(finalists) >= FINALISTS or tried >= 4 * FINALISTS:
            break
        if a == assignment or not math.isfinite(s.total_us) or s.unsafe or (final.score.fits and not s.fits):
            continue
        tried += 1
        # as final_evaluation evaluates the plan, on the evaluator the check prepared once
        fe = evaluator.run(shardings_for(model, groups, a), constraints=constraints_for(groups, a), keep_ir=True)
        if _plan_key(fe) not in seen:  # another assignment of the same plan (a tie) is not a rival
            seen.add(_plan_key(fe))
            finalists.append((a, fe))
    return finalists


def _plan_key(ev) -> tuple:
    """What a plan is once propagated: the argument shardings Shardy settled on and the
    collectives it inserted (two assignments with the same key are the same program)."""
    return (tuple(sorted((i, s.body()) for i, s in ev.shardings.items() if not s.is_replicated)),
            tuple((c.kind, tuple(c.axes), tuple(c.global_shape)) for c in ev.facts.collectives))


def _changed(model, base: dict, other: dict) -> dict:
    """The arguments whose sharding differs between two plans: name -> other's sharding."""
    out = {}
    for a in model.arguments:
        x, y = base.get(a.index), other.get(a.index)
        bx = x.body() if x is not None and not x.is_replicated else None
        by = y.body() if y is not None and not y.is_replicated else None
        if bx != by:
            out[a.name] = y.axis_names() if y is not None else [[] for _ in a.shape]
    return out


def _note_refusal(plan: dict, model: LoweredModel, mesh: Mesh) -> None:
    """The loader's get_mesh_config raised for this mesh's device count: not offered, said in a note."""
    from shard_opt.frontends.shard_spec import refusal

    why = refusal(model.meta.get("shard_spec"), mesh.num_devices)
    if why:
        plan.setdefault("notes", []).append(why)


def _explain(model, opts, mesh, meshes, system_name, cm, scorer, groups, assignment, score, result, seconds,
             fallback, baselines, user, mega, judged, removed, final, structure,
             removed_options=None) -> Outcome:
    """The plan JSON around the winner: what each group weighed, the baselines, the
    per-layer bill, the safety table, robustness, and the annotated module. ``judged``:
    every rule's limits, the allowed rules' too (``safety.broken_by``)."""
    group_info = _group_info(groups, assignment, result)
    alternatives = _alternatives(groups, assignment, scorer, assignment_of(groups, mega))
    for info, alts in zip(group_info, alternatives):
        if alts:
            info["alternatives"] = alts
    rejected = [
        {"label": label, **score_dict(s), "arguments_changed": changed}
        for label, s, changed in sorted(result.neighbours, key=lambda n: n[1].key())
    ]
    plan = build_plan(
        model, mesh, meshes, system_name, opts.cost_model, list(opts.parallelism), final,
        groups=group_info, baselines=baselines,
        search={"candidates_evaluated": result.candidates_evaluated, "seconds": round(seconds, 3),
                "exhaustive": result.exhaustive, "rejected": rejected,
                "space_size": _space([g for g in groups if g.by != "site"]),
                "constraint_sites": sum(1 for g in groups if g.by == "site")},
        memory_fallback=fallback, scored=score,
    )
    plan["propagation"] = opts.propagation
    for name, b in baselines.items():
        note = _rules_note(name, b)
        if note:
            plan.setdefault("notes", []).append(note)
    _note_weights(plan, opts.weights, model)
    per_layer, layer = layer_bill(scorer, groups=groups, assignment=assignment)
    if per_layer is not None:
        plan["cost"]["ccl_per_layer"], plan["layer_collectives"] = per_layer, layer
    if user is not None:
        plan["loader_comparison"] = _loader_comparison(groups, assignment, scorer, user)
    inf: dict[str, int] = {}
    for s in result.scored.values():
        for rule in s.unsafe:
            inf[rule] = inf.get(rule, 0) + 1
    broken = safety.broken_by(model, final.shardings, judged, meshes, final.facts.violations)
    with timing.phase("analysis.rule-costs"):
        costs = rule_costs(groups, assignment, scorer, score, removed_options or {}, result.scored)
    plan["safety"] = safety.report(removed, opts.allow, inf, broken, costs)
    plan["robustness"] = _robustness(result.scored, assignment, groups, scorer, cm, assignment_of(groups, mega))
    _note_guards(plan, model, final, opts.allow)
    constraints = constraints_for(groups, assignment)
    if constraints:
        plan["constraints"] = [{"site": site, "op": "stablehlo.reshape", "sharding": s.axis_names()}
                               for site, s in constraints.items()]
    routed = final.facts.routed_experts
    if routed:
        plan["routed_experts"] = routed
        plan.setdefault("notes", []).append(
            f"experts priced as routed: the router picks {routed['top_k']} of {routed['experts']} experts per token "
            f"(found in the graph), so the expert matmuls do {routed['top_k']}/{routed['experts']} of the dense "
            f"work and read {routed['weights_read']:.0%} of the experts' weights for {routed['tokens']} token(s) "
            f"per device (uniform routing)")
    kv = kv_layout(model, mesh, final.shardings, "heads" in broken, structure, allowed="heads" in opts.allow)
    if kv:
        plan["kv_layout"] = kv
        plan.setdefault("notes", []).append(kv["reason"])
    annotated = annotate(model, mesh, final.shardings, constraints, opts.allow)
    return Outcome(plan, annotated, final.text, model)


RULE_COST_TRIES = 32  # removed options priced per rule, at most (in the groups' order)


def rule_costs(groups, assignment, scorer, score, removed_options: dict, scored: dict) -> dict[str, dict]:
    """What each safety rule cost the plan, for the rules that kept it from something the
    model prefers: rule -> {"plan_us", "preferred_us", "arguments": {role: sharding}}.

    An ``exclude`` rule's removed options were never offered: each is priced in place of
    its group's choice in the plan (one at a time, the rest of the plan unchanged; the
    rule's own check is the only one waived, as its times are kept for an unsafe score).
    An ``inf`` rule's candidates were scored and set aside: the fastest of them."""
    by_role = {g.role: g.options[o] for g, o in zip(groups, assignment) if g.by != "site"}
    constraints = constraints_for(groups, assignment)
    out: dict[str, dict] = {}

    def keep(rule, total, changed):
        if math.isfinite(total) and total < score.total_us - 1e-6 and (
                rule not in out or total < out[rule]["preferred_us"]):
            out[rule] = {"plan_us": round(score.total_us, 3), "preferred_us": round(total, 3),
                         "arguments": {r: sh.axis_names() for r, sh in changed.items()}}

    for rule, options in removed_options.items():
        seen = set()
        for role, option in options:
            if (role, option) in seen or len(seen) >= RULE_COST_TRIES:
                continue
            seen.add((role, option))
            keep(rule, scorer.score_by_role({**by_role, role: option}, constraints).total_us, {role: option})
    for a, s in scored.items():
        for rule in s.unsafe:
            if len(a) == len(groups):
                keep(rule, s.total_us, {g.role: g.options[o] for g, o, p in zip(groups, a, assignment)
                                        if o != p and g.by != "site"})
    return out


def script_guards(model: LoweredModel, final, allow: frozenset = frozenset()) -> list[dict]:
    """The guards the plan was priced with, as the user's script writes them: each safety
    rule's ``script_guards`` of the propagated module ``final.text`` (the rules the user
    did not turn off; their guards are all the module has)."""
    from shard_opt.rules import GUARDS

    rules = [r for r in GUARDS if r.id not in allow]
    if not rules or not final.text:
        return []
    with timing.phase("guards"):
        module = ir.parse(final.text, filename=model.name)
        return [g for r in rules for g in r.script_guards(module, model)]


def _note_guards(plan: dict, model: LoweredModel, final, allow: frozenset) -> None:
    """The plan JSON's ``guards`` (``script_guards``), and a note for those no module
    output stands for: the emitted script cannot hook them, the user adds them by hand."""
    plan["guards"] = script_guards(model, final, allow)
    loose = [g for g in plan["guards"] if g.get("module") is None]
    if loose:
        n = sum(g.get("sites", 1) for g in loose)
        k = sum(g.get("sites", 1) for g in loose if g.get("gathers"))
        rules = ", ".join(sorted({g["rule"] for g in loose}))
        text = (f"{n} guard{'s' if n != 1 else ''} the plan was priced with ({rules}) could not be tied to a module "
                f"output, so the emitted script cannot hook {'them' if n != 1 else 'it'} (plan JSON guards, "
                f"module null: where and why); ")
        if k:
            text += (f"{k} of them gather{'s' if k == 1 else ''} in this plan: add {'them' if k != 1 else 'it'} "
                     f"by hand, or tt-mlir compiles the unguarded split")
        else:
            text += "none gathers in this plan (the sliced tensors are whole already): nothing to add for this plan"
        plan.setdefault("notes", []).append(text)


def _note_weights(plan: dict, weights: WeightFormats, model: LoweredModel) -> None:
    """The weight formats in the plan JSON (``weight_dtype``, and ``weight_formats``: the
    default and the per-parameter overrides tt-xla takes, role rules spelled out as name
    globs), and the rules that named no matmul weight."""
    plan["weight_dtype"] = weights.text()
    if weights.is_plain:
        return
    overrides = {}
    if weights.rules:
        from shard_opt.weights import ROLES, weight_roles_of

        roles = weight_roles_of(model)
        for pattern, dtype in weights.rules:
            if pattern in ROLES:
                for a in model.arguments:
                    if roles.get(a.index) == pattern:
                        overrides[a.role] = dtype
            else:
                overrides[pattern] = dtype
        missed = weights.unmatched(model.arguments, roles)
        if missed:
            plan.setdefault("notes", []).append(
                f"--weight-dtype: {', '.join(missed)} named no matmul weight of {model.name}; those rules did nothing")
    plan["weight_formats"] = {"default": weights.default, "overrides": overrides}


KV_ROLES = re.compile(r"(k_proj|v_proj|key|value)\.weight$")


def kv_layout(model: LoweredModel, mesh: Mesh, shardings: dict, cuts_heads: bool, structure=None,
              allowed: bool = False) -> dict | None:
    """How the plan lays out grouped-query attention's KV heads, and why (in words).

    Whether a head is cut is the ``heads`` rule's verdict on the plan (``cuts_heads``:
    ``safety.broken_by`` found the rule broken, by an argument split past its heads or a
    propagated module that splits inside one, ``rules/heads.py``), never recomputed
    here, so the words and ``plan_breaks`` agree. The K/V projections are the attention
    columns whose heads (``structure.units``) are the KV heads, found in the graph (by
    name when the structure has none); ``kv_split`` is how many ways the most split of
    them has its output features split.
    """
    att = model.meta.get("attention")
    if not att or att["kv_heads"] == att["heads"]:
        return None
    heads, kvh, hd = att["heads"], att["kv_heads"], att["head_dim"]
    kv_dims = []
    if structure is not None:
        cols = sorted({c for c, _, kind in structure.pairs if kind == "attention"})
        kv_dims = [c for c in cols if structure.units.get(c) == kvh]
    if not kv_dims:
        kv_dims = [(a.index, 0) for a in model.arguments if a.kind == "param" and KV_ROLES.search(a.name)]
    if not kv_dims:
        return None

    def factor(x) -> int:
        s = shardings.get(x[0])
        return s.split_factor(x[1], mesh) if s is not None and x[1] < s.rank else 1

    f = max(factor(x) for x in kv_dims)  # the most split of them (K and V may differ)
    if cuts_heads:
        where = (f"the K/V projections are split {f} ways over {kvh} KV heads, so each head's {hd}-wide "
                 f"head_dim is cut {f // math.gcd(f, kvh)} ways" if f > 1 and kvh % f else
                 f"the propagated module splits a head's {hd}-wide head_dim across devices (Shardy moved a "
                 f"split there, or a KV cache is split on it)")
        why = (f"this plan cuts attention heads: {where}; the heads rule forbids it"
               + (" (turned off here by --allow heads)" if allowed else ""))
    elif f == 1:
        why = (f"K/V projections replicated: {kvh} KV heads serve {heads} query heads "
               f"(grouped-query attention); splitting them did not pay for its collectives")
    elif kvh % f == 0:
        why = f"{kvh} KV heads split {f} ways: {kvh // f} whole KV heads per device, no head is cut"
    else:  # the split does not divide the heads, yet the propagated module keeps them whole
        why = (f"K/V projections split {f} ways over {kvh} KV heads; Shardy gathers them before the head "
               f"reshape, so every device holds whole heads")
    return {"heads": heads, "kv_heads": kvh, "head_dim": hd, "kv_split": f, "cuts_heads": cuts_heads,
            "reason": why}


def _most_split(groups, mesh: Mesh) -> tuple[int, ...]:
    """Every parameter group at its most-split option (the least memory per device): where
    the memory fallback's search starts when no plan the speed search tried fits."""
    def factor(g, o):
        if g.by == "site" or g.kind not in ("param", "buffer"):
            return 1
        return math.prod(g.options[o].split_factor(d, mesh) for d in range(g.options[o].rank))

    return tuple(max(range(len(g.options)), key=lambda o: (factor(g, o), -o)) for g in groups)


def _space(groups) -> int:
    n = 1
    for g in groups:
        n *= len(g.options)
    return n


def _group_info(groups, assignment, result) -> list[dict]:
    info = []
    for gi, (g, choice) in enumerate(zip(groups, assignment)):
        alts = [(s.key(), s, o) for o in range(len(g.options)) if o != choice
                for s in [result.scored.get(assignment[:gi] + (o,) + assignment[gi + 1:])] if s]
        why = g.describe(choice)
        if alts:
            _, s, o = min(alts, key=lambda x: (x[0], x[2]))
            d = s.total_us - result.score.total_us
            why += (f"; best alternative ({g.describe(o)}) is {d:+.1f} us "
                    f"with {s.ccl_count} CCLs vs {result.score.ccl_count}")
        info.append({"role": g.role, "members": list(g.members), "shape": list(g.shape), "kind": g.kind,
                     "sharding": None if g.by == "site" and choice == 0 else g.options[choice].axis_names(),
                     "why": why})
    return info


_RIVALS = 4  # per group, the options the proxy ranks best, priced for "best other"


def _alternatives(groups, assignment, scorer, megatron: tuple[int, ...]) -> list[list[dict]]:
    """Per group, the options a reader weighs, each priced on the whole model with every
    other group at the plan's choice: replicated, the group's Megatron role, and the best
    other option (the next best too while fewer than two are listed), with the
    difference in time and collectives and the reason in words."""
    base = scorer.score(groups, assignment)

    def alt_of(gi, o):
        return assignment[:gi] + (o,) + assignment[gi + 1:]

    cands = [alt_of(gi, o) for gi, g in enumerate(groups) for o in range(len(g.options)) if o != assignment[gi]]
    # every option ranked by the search's cheap proxy (the 1-layer model of a deep model,
    # the score itself otherwise; memoized: most were screened by the search), and only
    # the shown ones and the closest rivals of "best other" priced on the whole model
    proxy = dict(zip(cands, scorer.screen_many(groups, cands)))
    chosen = []
    for gi, g in enumerate(groups):
        mine = assignment[gi]
        picks = []
        if mine != 0:
            picks.append((0, "unconstrained" if g.by == "site" else "replicated"))
        mega = megatron[gi] if gi < len(megatron) else 0
        if g.by != "site" and mega not in (0, mine):
            picks.append((mega, "megatron " + _role_word(g, mega)))
        rest = [o for o in range(len(g.options)) if o != mine and o not in {p for p, _ in picks}]
        rest.sort(key=lambda o: (proxy[alt_of(gi, o)].key(), o))
        chosen.append((picks, rest[:_RIVALS]))
    scorer.score_many(groups, [alt_of(gi, o) for gi, (picks, short) in enumerate(chosen)
                               for o in [p for p, _ in picks] + short])
    base_bill = _bill(scorer, groups, assignment)
    out = []
    for gi, (g, (picks, short)) in enumerate(zip(groups, chosen)):
        short.sort(key=lambda o: (scorer.score(groups, alt_of(gi, o)).key(), o))
        # the best other option, and the next ones until a reader sees two choices
        for o in short[:max(1, 2 - len(picks))]:
            picks.append((o, "best other"))
        entries = []
        for o, label in picks:
            alt = assignment[:gi] + (o,) + assignment[gi + 1:]
            s = scorer.score(groups, alt)
            delta = _delta(s, base)
            moved = _bill_delta(_bill(scorer, groups, alt), base_bill)
            words = _bill_words(moved, per_layer=isinstance(scorer, LayeredEvaluator))
            if s.unsafe:
                words.insert(0, "breaks " + ", ".join(s.unsafe))
            if s.compute_us != base.compute_us:
                words.append(f"compute {s.compute_us - base.compute_us:+.1f} us")
            if s.fits != base.fits:
                words.append("fits in DRAM" if s.fits else "does not fit in DRAM")
            entries.append({"option": label if label != "best other" else g.describe(o), "kind": label,
                            "sharding": None if g.by == "site" and o == 0 else g.options[o].axis_names(),
                            **delta, "ccl_bytes": s.ccl_bytes, "collectives_delta": moved,
                            "reason": ", ".join(words) or "the same collectives and compute"})
        out.append(entries)
    return out


def _role_word(g, option: int) -> str:
    """``column`` / ``row`` for a 2-D weight split on its output / input features."""
    dims = [d for d, axes in enumerate(g.options[option].dims) if axes]
    if len(g.shape) == 2 and dims == [0]:
        return "column"
    if len(g.shape) == 2 and dims == [1]:
        return "row"
    return g.describe(option)


def _bill(scorer, groups, assignment) -> list[tuple]:
    """The collectives to compare plans by: one repeated layer's when the scorer is
    layered, else the whole module's, as (kind, axes, bytes per device) signatures."""
    if isinstance(scorer, LayeredEvaluator):
        _, layer = layer_bill(scorer, groups=groups, assignment=assignment)
        return [(c["kind"], tuple(c["axes"]), c["bytes_per_device"]) for c in layer]
    return [(c.kind, c.axes, c.bytes_per_device) for c in scorer.facts(groups, assignment).collectives]


def _bill_delta(alt: list[tuple], base: list[tuple]) -> list[dict]:
    """Signed counts of each collective ``alt`` has more (or fewer) than ``base``."""
    counts: dict[tuple, int] = {}
    for sig in alt:
        counts[sig] = counts.get(sig, 0) + 1
    for sig in base:
        counts[sig] = counts.get(sig, 0) - 1
    return [{"kind": k, "axes": list(a), "bytes_per_device": b, "count": n}
            for (k, a, b), n in sorted(counts.items()) if n]


def _bill_words(moved: list[dict], *, per_layer: bool) -> list[str]:
    """The bill's change in words, per collective kind: ``+4 all_slice (1.0 MiB)``, the
    added and the removed apart (a size when all of a kind's are one size)."""
    where = " per layer" if per_layer else ""
    by: dict[tuple[str, int], list[dict]] = {}
    for m in moved:
        by.setdefault((m["kind"], 1 if m["count"] > 0 else -1), []).append(m)
    words = []
    for (kind, sign), ms in sorted(by.items(), key=lambda x: (-x[0][1], x[0][0])):
        n = sum(m["count"] for m in ms)
        sizes = {m["bytes_per_device"] for m in ms}
        size = (f" of {_size(next(iter(sizes)))}" if len(sizes) == 1 else
                f" ({_size(sum(abs(m['count']) * m['bytes_per_device'] for m in ms))} in all)")
        words.append(f"{n:+d} {kind}{size}{where}")
    return words


def _size(n: float) -> str:
    for unit, div in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"


def _robustness(scored: dict, assignment, groups, scorer, cm, megatron) -> dict:
    """Does the recommendation still win when the model is wrong? Every evaluated candidate
    re-ranked with collective time x0.5 and x2, compute x0.5 and x2, and under the other
    collective profile; per check the winner and its lead over the runner-up (a share of
    the runner-up's step)."""
    plan = scored.get(assignment) or scorer.score(groups, assignment)
    pool = {a: s for a, s in scored.items() if math.isfinite(s.score) and (s.fits or not plan.fits)}
    # candidates with the plan's compute and collective times are the same plan to the
    # cost model (a replicated weight sliced locally, a bias that follows its consumer):
    # every perturbation moves them together, so they are not runners-up
    same = {a for a, s in pool.items() if _cost_pair(s) == _cost_pair(plan)}
    pool = {a: s for a, s in pool.items() if a not in same}
    pool[assignment] = plan
    checks = []

    def check(label: str, times: dict) -> None:
        ranked = sorted(times, key=lambda a: (round(times[a], 6), a != assignment, a))
        winner = ranked[0]
        runner = ranked[1] if len(ranked) > 1 else winner
        margin = (times[runner] - times[winner]) / times[runner] if times[runner] else 0.0
        entry = {"perturbation": label, "winner": "plan" if winner == assignment else _label(groups, winner,
                                                                                             assignment, megatron),
                 "margin": round(margin, 4), "margin_us": round(times[runner] - times[winner], 3),
                 "runner_up": _label(groups, runner, assignment, megatron) if runner != assignment else "plan"}
        if winner != assignment:
            entry["plan_behind"] = round((times[assignment] - times[winner]) / times[winner], 4)
        checks.append(entry)

    for label, fc, fk in (("ccl x0.5", 0.5, 1), ("ccl x2", 2, 1), ("compute x0.5", 1, 0.5), ("compute x2", 1, 2)):
        check(label, {a: fk * s.compute_us + fc * s.ccl_us for a, s in pool.items()})
    other = _other_profile(cm)
    if other is not None:
        view = scorer.with_cost_model(other)
        check(f"ccl profile {other.ccl_profile}", {a: view.score(groups, a).total_us for a in pool})
    return {"holds": all(c["winner"] == "plan" for c in checks), "candidates": len(pool),
            "equivalent": len(same - {assignment}), "checks": checks}


def _cost_pair(s) -> tuple[float, float]:
    return round(s.compute_us, 3), round(s.ccl_us, 3)


def _other_profile(cm):
    """The cost model with the other collective profile (None for models without one)."""
    profile = getattr(cm, "ccl_profile", None)
    if profile is None:
        return None
    return dataclasses.replace(cm, ccl_profile="tuned" if profile == "generic" else "generic")


def _label(groups, a, plan, megatron) -> str:
    """A plan in words: the baseline it is, or how it differs from the recommendation."""
    if a == tuple(megatron) + a[len(megatron):]:
        return "megatron"
    diff = [f"{g.role}: {g.describe(o)}" for g, o, p in zip(groups, a, plan) if o != p]
    return "; ".join(diff[:3]) + (f"; +{len(diff) - 3} more" if len(diff) > 3 else "")


def _warn_spec(user: LoaderSpec, stream) -> None:
    """A spec entry that does nothing is said on stderr (the plan JSON and the report list them too)."""
    if user.unmatched:
        shown = "; ".join(user.unmatched[:5]) + (f"; +{len(user.unmatched) - 5} more" if len(user.unmatched) > 5 else "")
        stream.write(f"shard-opt: WARNING: {user.where}: {len(user.unmatched)} shard-spec "
                     f"entr{'ies' if len(user.unmatched) != 1 else 'y'} matched nothing and did nothing: {shown}\n")
    if user.not_dividing:
        shown = "; ".join(f"{d['name']} dim {d['dim']} ({d['size']}) on {'+'.join(d['axes'])}" for d in user.not_dividing[:5])
        stream.write(f"shard-opt: WARNING: {user.where}: {len(user.not_dividing)} split(s) do not divide their dim and "
                     f"were priced replicated (as tt-xla's safe_mark_sharding does): {shown}\n")


def _loader_baseline(model: LoweredModel, scorer, user: LoaderSpec, limit: dict, meshes,
                     priced_by: dict | None = None) -> tuple[dict, dict]:
    """The ``loader-spec`` baseline: the spec priced like the others, with what it names,
    under the rules the search is held to (``_held_to_rules``); also the spec by role
    within those rules (what the baseline's figure prices)."""

    acts = user.constraints()  # the loader's activation spec, priced with its weight spec

    def priced(by_role: dict) -> tuple[dict, Score]:
        score = scorer.score_by_role(by_role, acts)
        out = score_dict(score)
        out.update({
            "source": user.source, "where": user.where, "mesh": user.mesh,
            "arguments": {role: sh.axis_names() for role, sh in by_role.items()},
            "unmatched": user.unmatched, "not_dividing": user.not_dividing,
        })
        if user.activations:
            out["activations"] = {k: c.axis_names() for k, c in user.activations.items()}
        per_layer, layer = layer_bill(scorer, by_role=by_role, constraints=acts)
        if per_layer is not None:
            out["ccl_per_layer"], out["layer_collectives"] = per_layer, layer
        else:  # priced whole: the spec's collectives by component, as the plan lists its own
            args = {a.index: a for a in model.arguments}
            out["collectives"] = [collective_entry(c, args)
                                  for c in scorer.facts_of(shardings_by_role(model, by_role), acts).collectives]
        return out, score

    written, score = priced(user.by_role)
    _, adjusted = _within_limits(model, shardings_by_role(model, user.by_role), limit, meshes)
    left = {a["argument"] for a in adjusted}
    kept = {role: (TensorSharding.replicated(sh.rank) if role in left else sh) for role, sh in user.by_role.items()}
    if priced_by is not None:
        _record(priced_by, "loader-spec", adjusted, (shardings_by_role(model, user.by_role), acts),
                (shardings_by_role(model, kept), acts))
    return _held_to_rules(written, score, adjusted, lambda: priced(kept)), kept


def _loader_comparison(groups, assignment, scorer, user: LoaderSpec) -> list[dict]:
    """Component by component, where the loader's spec and the plan differ: what the
    spec's choice costs with the rest of the plan kept (so each difference is priced on
    its own), and why in words."""
    base = scorer.score(groups, assignment)
    out = []
    for gi, g in enumerate(groups):
        if g.by == "site":
            continue
        want = user.by_role.get(g.role)
        want_names = want.axis_names() if want is not None else [[] for _ in g.shape]
        mine = g.options[assignment[gi]].axis_names()
        if want_names == mine:
            continue
        entry = {"component": g.role, "expert": want_names, "plan": mine}
        option = next((o for o, opt in enumerate(g.options) if opt.axis_names() == want_names), None)
        if option is None:
            entry["reason"] = "the spec's split is not one the search considers for this tensor"
        else:
            alt = scorer.score(groups, assignment[:gi] + (option,) + assignment[gi + 1:])
            entry.update(_delta(alt, base))
        out.append(entry)
    for role, sh in user.by_role.items():
        if not any(g.role == role for g in groups) and not sh.is_replicated:
            out.append({"component": role, "expert": sh.axis_names(), "plan": None,
                        "reason": "a 1-D parameter: the plan leaves it open for Shardy to split with its consumer"})
    return out


def _delta(alt: Score, base: Score) -> dict:
    """How ``alt`` compares with ``base``: time, collectives, bytes, in numbers and words."""
    d_us, d_ccl, d_bytes = alt.total_us - base.total_us, alt.ccl_count - base.ccl_count, alt.ccl_bytes - base.ccl_bytes
    words = [f"{d_us:+.1f} us"]
    if d_ccl:
        words.append(f"{d_ccl:+d} collective{'s' if abs(d_ccl) != 1 else ''}")
    if d_bytes:
        words.append(f"{d_bytes / 2**20:+.2f} MiB moved per device")
    if alt.compute_us != base.compute_us:
        words.append(f"compute {alt.compute_us - base.compute_us:+.1f} us")
    if alt.fits != base.fits:
        words.append("fits in DRAM" if alt.fits else "does not fit in DRAM")
    return {"total_us": round(alt.total_us, 3), "delta_us": round(d_us, 3), "ccl_count": alt.ccl_count,
            "delta_ccls": d_ccl, "delta_bytes": d_bytes, "reason": ", ".join(words)}


def layer_bill(scorer, *, by_role=None, groups=None, assignment=None,
               constraints=None) -> tuple[int | None, list[dict]]:
    """The collectives of one repeated layer: the 2-layer model's minus the 1-layer model's
    (a count, and the collectives as plan-JSON entries); (None, []) for a model priced whole.
    ``constraints``: with ``by_role``, a loader's activation spec (``LoaderSpec.constraints``)."""
    if not isinstance(scorer, LayeredEvaluator):
        return None, []
    if by_role is not None:
        f1, f2 = (e.facts_of(shardings_by_role(e.model, by_role), constraints) for e in (scorer.e1, scorer.e2))
    else:
        f1, f2 = (e.facts(groups, assignment) for e in (scorer.e1, scorer.e2))

    def sig(c):
        return c.kind, c.axes, c.global_shape, c.dtype, c.bytes_per_device

    left = [sig(c) for c in f1.collectives]
    extra = []
    for c in f2.collectives:
        if sig(c) in left:
            left.remove(sig(c))
        else:
            extra.append({"kind": c.kind, "axes": list(c.axes), "shape": list(c.global_shape), "dtype": c.dtype,
                          "bytes_per_device": c.bytes_per_device})
    return len(f2.collectives) - len(f1.collectives), extra


def _within_limits(model, shardings: dict, limit: dict, meshes) -> tuple[dict, list[dict]]:
    """``shardings`` with every split a compiler limit forbids (an ``exclude`` rule of
    ``shard_opt.safety``) left out (replicated, as arguments not given are), and what was
    left: one entry per argument role (every layer's copy of a weight is one entry),
    ``{"argument", "rule", "was"}``."""
    kept, adjusted, seen = {}, [], set()
    for i, sh in sorted(shardings.items()):
        a = model.arguments[i]
        rule = next((r for m in meshes if (r := safety.allowed(sh, a, limit, m))), None)
        if rule is None:
            kept[i] = sh
        elif a.role not in seen:
            seen.add(a.role)
            adjusted.append({"argument": a.role, "rule": rule, "was": sh.axis_names()})
    return kept, adjusted


BASELINE_LABELS = {"megatron": "Megatron", "loader-spec": "loader-spec (the loader's own spec)"}


def _rules_note(name: str, entry: dict) -> str | None:
    """A plan note for a baseline that breaks a compiler-safety rule as written: what it
    keeps replicated to keep the rules, and its figure as written (``_held_to_rules``)."""
    breaks = entry.get("breaks")
    if not breaks:
        return None
    label = BASELINE_LABELS.get(name, name)
    written = (entry.get("as_written") or {}).get("total_us")
    written = "unpriceable" if written is None else f"{written:.1f} us"
    adjusted = entry.get("adjusted") or []
    if adjusted:
        left = ", ".join(f"{a['argument']} (rule {a['rule']}: {safety.BY_ID[a['rule']].title})" for a in adjusted)
        text = f"the {label} baseline keeps {left} replicated, as the search must"
    else:
        rules = ", ".join(f"{r} ({safety.BY_ID[r].title})" if r in safety.BY_ID else r for r in breaks)
        text = f"the {label} baseline breaks {rules} in what Shardy makes of it, which the search never does"
    if entry.get("still_breaks"):
        text += f"; it still breaks {', '.join(entry['still_breaks'])} so, and has no figure within the rules"
    return f"{text}; as written it is {written}, a plan that breaks {', '.join(breaks)}"


AS_WRITTEN = ("total_us", "compute_us", "ccl_us", "ccl_count", "ccl_bytes", "fits")


def _held_to_rules(written: dict, score: Score, adjusted: list[dict], reprice) -> dict:
    """A baseline priced under the compiler-safety rules the search is held to.

    ``written`` is its entry as written (priced ``score``); ``adjusted`` the splits an
    ``exclude`` rule forbids (``_within_limits``: left replicated, as the search would have
    to); ``reprice()`` prices it so and returns (entry, score). A baseline that breaks no
    rule is returned as it is. One that does gets the figure within the rules, its figure
    as written under ``as_written`` and the rules it breaks as written under ``breaks``; an
    ``inf`` rule (found in what Shardy makes of it, ``score.unsafe``) that it still breaks
    with those splits replicated leaves no figure within the rules: ``total_us`` null,
    ``still_breaks`` naming the rules."""
    breaks = sorted({a["rule"] for a in adjusted} | set(score.unsafe))
    if not breaks:
        return written
    out, within = reprice() if adjusted else (dict(written), score)
    for k in ("pairs", "candidates_evaluated"):
        if k in written:
            out[k] = written[k]
    if within.unsafe:
        out["total_us"] = None
        out["still_breaks"] = list(within.unsafe)
    if adjusted:
        out["adjusted"] = adjusted
    out["as_written"] = {k: written[k] for k in AS_WRITTEN if k in written}
    out["breaks"] = breaks
    return out


def _record(priced_by: dict, name: str, adjusted: list, written: tuple, within: tuple | None) -> None:
    """What a baseline's figures price, (argument shardings, constraints) on the whole model:
    ``figure`` its ``total_us`` (within the rules when ``adjusted``), ``as_written`` its
    figure as written when that differs (``_held_to_rules``)."""
    priced_by[name] = {"figure": within if adjusted else written}
    if adjusted:
        priced_by[name]["as_written"] = written


def price_whole(model, mesh, system, cm, setting: dict, baselines: dict, priced_by: dict) -> None:
    """Re-price each baseline on the whole model, as the plan's ``cost`` is (its final
    evaluation), not extrapolated from the 1- and 2-layer copies: the "x faster" ratios
    then compare one method with itself. The copies' figure stays as ``extrapolated_us``;
    ``priced`` says which (``whole model``). A baseline with no figure within the rules
    keeps none."""
    whole = Evaluator(model, mesh, system, cm, **setting)
    for name, entry in baselines.items():
        got = priced_by.get(name)
        if not got or entry is None:
            continue
        if entry.get("total_us") is not None:
            shardings, constraints = got["figure"]
            s = whole.score_of(shardings, constraints)
            extrapolated = entry["total_us"]
            entry.update(score_dict(s))
            entry["extrapolated_us"] = extrapolated
            entry["priced"] = "whole model"
        if "as_written" in got and entry.get("as_written", {}).get("total_us") is not None:
            shardings, constraints = got["as_written"]
            s = whole.score_of(shardings, constraints)
            entry["as_written"].update({k: v for k, v in score_dict(s).items() if k in entry["as_written"]})


def _role_shardings(model, shardings: dict) -> dict:
    """``shardings`` as ``_price`` gives them to a scorer (one role group per role), on ``model``."""
    groups = _role_groups(model, shardings)
    return shardings_for(model, groups, tuple(0 for _ in groups))


def _role_groups(model, shardings: dict) -> list:
    members = group_members(model)
    groups, seen = [], set()
    for i, sh in sorted(shardings.items()):
        a = model.arguments[i]
        key = (a.role, a.shape, a.kind)
        if key not in seen:
            seen.add(key)
            groups.append(Group(a.role, tuple(members[key]), a.shape, a.kind, (sh,)))
    return groups


def _price(model, scorer, shardings: dict) -> Score:
    """Argument shardings priced by ``scorer``, each argument as given (arguments left out
    as the search leaves them: closed and replicated, or open when they follow their
    consumer), through one role group per role (``Group.key``), so a scorer of short copies
    (``LayeredEvaluator``) maps them onto its copies as it maps the search's candidates."""
    groups = _role_groups(model, shardings)
    return scorer.score(groups, tuple(0 for _ in groups))


def _megatron_entry(model, all_groups, scorer, mega: dict) -> tuple[dict, Score]:
    """The Megatron plan ``mega`` priced by ``scorer``, with its argument shardings."""
    score = scorer.score(all_groups, assignment_of(all_groups, mega))
    out = score_dict(score)
    out["arguments"] = {model.arguments[i].name: s.axis_names() for i, s in sorted(mega.items())}
    return out, score


def _baselines(model, mesh, meshes, scorer, mega: dict, limit: dict,
               priced_by: dict | None = None) -> tuple[dict, dict]:
    """Replicated, Megatron and AutoShardingPass plans, priced by ``scorer`` under the
    compiler-safety rules the search is held to (``_held_to_rules``: ``mega`` is the
    Megatron plan as written); also the autoshard plan's argument shardings within the
    rules (a seed for the search)."""
    out = {}
    all_groups = make_groups(model.arguments, meshes, set(PARALLELISM))
    zero = tuple(0 for _ in all_groups)
    out["replicated"] = score_dict(scorer.score(all_groups, zero))
    priced_by = priced_by if priced_by is not None else {}
    _record(priced_by, "replicated", [], (shardings_for(model, all_groups, zero), {}), None)
    ag = autoshard_groups(model, mesh)
    if _space(ag) * (scorer.seconds_each or 0.0) > parallel.MIN_SECONDS:
        parallel.start()  # the enumeration below is long: the workers start while Megatron is priced
    written, score = _megatron_entry(model, all_groups, scorer, mega)
    kept, adjusted = _within_limits(model, mega, limit, meshes)
    out["megatron"] = _held_to_rules(written, score, adjusted,
                                     lambda: _megatron_entry(model, all_groups, scorer, kept))
    _record(priced_by, "megatron", adjusted, (shardings_for(model, all_groups, assignment_of(all_groups, mega)), {}),
            (shardings_for(model, all_groups, assignment_of(all_groups, kept)), {}))
    # tt-mlir AutoShardingPass: its own space, scored by its own heuristic, priced by ours.
    heuristic = costmodel.get_cost_model("autoshard-heuristic")
    h_scorer = scorer.with_cost_model(heuristic)  # same propagations, its own scoring
    res = search(model, meshes, None, heuristic, parallelism=set(PARALLELISM), scorer=h_scorer,
                 groups=ag, exhaustive_limit=1500, exhaustive_ops=None)
    score = scorer.score(ag, res.assignment)
    written = score_dict(score)
    written["candidates_evaluated"] = res.candidates_evaluated
    shardings = shardings_for(model, ag, res.assignment)
    written["arguments"] = _split_arguments(model, shardings)
    kept, adjusted = _within_limits(model, shardings, limit, meshes)
    kept = {a.index: kept.get(a.index, TensorSharding.replicated(len(a.shape)))  # closed, as the search's are
            for a in model.arguments if a.index in shardings}

    def reprice():
        s = _price(model, scorer, kept)
        return {**score_dict(s), "arguments": _split_arguments(model, kept)}, s

    out[ONE_AXIS] = _held_to_rules(written, score, adjusted, reprice)
    _record(priced_by, ONE_AXIS, adjusted, (shardings, {}), (_role_shardings(model, kept), {}))
    return out, kept


def _split_arguments(model, shardings: dict) -> dict:
    """Role -> sharding of the arguments a plan splits (one entry for every layer's copy)."""
    out = {}
    for i, s in sorted(shardings.items()):
        if not s.is_replicated:
            out.setdefault(model.arguments[i].role, s.axis_names())
    return out


def evaluate_existing(model: LoweredModel, opts: Options) -> Outcome:
    """Price the shardings already on the input's arguments (``--evaluate``)."""
    module = ir.parse(model.text, filename=model.name)
    meshes = analysis.meshes_of(module)
    if opts.meshes:
        mesh = opts.meshes[0]
        if meshes and mesh.name in meshes and meshes[mesh.name].shape != mesh.shape:
            found = meshes[mesh.name]
            raise UserError(f"{model.name}: the module's @{mesh.name} is {found.spec} but --mesh says {mesh.spec}")
    elif meshes:
        mesh = next(iter(meshes.values()))
    else:
        raise UserError(f"{model.name}: --evaluate needs a mesh: the module has no sdy.mesh; pass --mesh RxC")
    mesh.check_supported()
    system_name, system = resolve_system(mesh, opts.system)
    cm = costmodel.get_cost_model(opts.cost_model, allow_collective_permute=opts.allow_collective_permute)
    existing = analysis.arg_shardings(ir.main_func(module))
    shardings = {i: s for i, s in enumerate(existing) if s is not None}
    user = loader_spec(model, mesh) if not shardings else None
    acts = {}
    if user is not None:  # a load script's own spec (or --spec): that is the plan to price
        shardings = shardings_by_role(model, user.by_role)
        acts = user.constraints()  # with its activation spec
    ev = Evaluator(model, mesh, system, cm, **opts.setting())
    final = ev.run(shardings, constraints=acts, keep_ir=True)
    plan = build_plan(model, mesh, [mesh], system_name, opts.cost_model, list(opts.parallelism), final)
    plan["propagation"] = opts.propagation
    _note_weights(plan, opts.weights, model)
    broken = safety.broken_by(model, shardings, safety.limits(model, structure_of(model)), [mesh],
                              final.facts.violations)
    plan["safety"] = safety.report({}, opts.allow, {}, broken)
    for rule in sorted(broken - set(opts.allow)):
        plan.setdefault("notes", []).append(
            f"this plan breaks the {rule} rule ({safety.BY_ID[rule].title}): {safety.BY_ID[rule].detail}")
    _note_guards(plan, model, final, opts.allow)
    _note_refusal(plan, model, mesh)
    if user is not None:
        plan["strategy"] = f"the {user.source}'s shard spec ({user.where})"
        plan["baselines"] = {"loader-spec": {**plan["cost"], "source": user.source, "where": user.where,
                                             "mesh": user.mesh, "unmatched": user.unmatched,
                                             "not_dividing": user.not_dividing}}
        if user.activations:
            plan["baselines"]["loader-spec"]["activations"] = {k: c.axis_names() for k, c in user.activations.items()}
        if broken - set(opts.allow):  # the plan is the spec: it breaks them as written (the notes say how)
            plan["baselines"]["loader-spec"]["breaks"] = sorted(broken - set(opts.allow))
        if user.mesh and list(user.mesh) != list(mesh.shape):
            plan.setdefault("notes", []).append(
                f"get_mesh_config({mesh.num_devices}) gives {'x'.join(map(str, user.mesh))}; priced on {mesh.spec}")
    annotated = annotate(model, mesh, shardings, acts, allow=opts.allow)  # the activation spec written in too
    if opts.check:
        with timing.phase("check"):
            check_evaluated(model, mesh, system, cm, final, annotated, plan, progress=opts.progress)
    return Outcome(plan, annotated, final.text, model)


def check_evaluated(model, mesh, system, cm, final, annotated: str, plan: dict, *, stream=None,
                    progress: bool = True) -> None:
    """The tt-mlir check of an evaluated plan (``--evaluate``): its module alone, compiled by
    tt-mlir and partitioned by XLA, into ``plan["checks"]["tt_mlir"]`` (nothing to choose
    between, so nothing is recommended instead; a likely miscompile is said loudly)."""
    from shard_opt.plan import checkable
    from shard_opt.ttmlir import check as ttc

    stream = stream or sys.stderr
    t0 = time.perf_counter()
    ok, why = ttc.status()
    if not ok:
        stream.write(f"shard-opt: tt-mlir check skipped: {why}\n")
        plan.setdefault("checks", {})["tt_mlir"] = ttc.skipped(why)
        return
    n = math.prod(mesh.shape)
    if progress:
        stream.write("shard-opt: tt-mlir: compiling the evaluated plan (--no-check skips this)\n")
    xla: dict = {}
    xla_thread = threading.Thread(target=_xla_collectives_into, args=(xla, 0, annotated, n), daemon=True)
    xla_thread.start()
    (compiled,) = ttc.compile_all([ttc.Job("evaluated", annotated, n)], system, tuple(mesh.shape))
    xla_thread.join()
    checked = checkable(model, mesh, final)
    chk = ttc.summarize(checked, compiled, system, priced_ops=len(final.facts.ops), cost_model=cm)
    if 0 in xla:
        ttc.hold_against_xla(chk, checked, compiled, xla[0])
    chk["check_seconds"] = round(time.perf_counter() - t0, 3)
    plan.setdefault("checks", {})["tt_mlir"] = chk
    if "checked_us" in chk:
        plan["cost"]["checked_us"] = chk["checked_us"]
    if chk.get("likely_miscompile"):
        plan.setdefault("notes", []).append(
            "tt-mlir check: a likely miscompile: tt-mlir leaves out a reduction XLA makes for the same shardings ("
            f"{chk['xla']['missing_reductions'][0]}); do not deploy the plan as it is")
    if progress:
        stream.write(ttc.line(chk) + "\n")
