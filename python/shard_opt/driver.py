"""From a lowered model to a plan: search (or evaluate), baselines, memory fallback.

``optimize`` is the main job (the orchestration: baselines, search, memory fallback, the
tt-mlir check and its re-rank); the explanation the plan carries is written by
``shard_opt.explain``. ``evaluate_existing`` prices the shardings already in an
annotated module (``--evaluate``). Both return an ``Outcome`` with the ``Plan`` and the
module texts the emitters need.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

from shard_opt import analysis, costmodel, ir, parallel, safety, timing
from shard_opt.baselines import ONE_AXIS, LoaderSpec, autoshard_groups, loader_spec, megatron_pairs, megatron_shardings
from shard_opt.candidates import PARALLELISM, Group, make_groups, site_groups
from shard_opt.errors import PassError, UserError
from shard_opt.evaluate import (
    Evaluator, LayeredEvaluator, Score, constraints_for, group_members, is_partitioned, shardings_by_role,
    shardings_for,
)
from shard_opt.lowered import LoweredModel, PendingModel, same_arguments
from shard_opt.pass_manager import PassContext, PassManager
from shard_opt.passes.add_mesh import AddMesh
from shard_opt.passes.apply_constraints import ApplyConstraints
from shard_opt.passes.apply_shardings import ApplyShardings
from shard_opt.passes.shardy_propagate import insert_guards
from shard_opt.passes.unfold_batch_matmul import unfold_batch_matmul
from shard_opt.passes.wrap_composites import wrap_composites
from shard_opt.explain import (
    Baselines, Found, Rules, Setting, _note_guards, _note_weights, _space, explain, layer_bill, note_refusal,
)
from shard_opt.plan import Plan, build_plan, collective_entry, score_dict
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
    plan: Plan
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
             constraints: dict | None = None, allow: frozenset = frozenset(), sdpa: bool = True) -> str:
    """The model's module with ``mesh``, the argument ``shardings`` and the ``constraints``
    written in, and shardy-propagate's guards: the ``-o`` module (``sdpa``: attention in
    tt-xla's SDPA composite where tt-mlir's rule takes it; False: every attention flat)."""
    return annotate_many(model, mesh, [(shardings, constraints)], allow, sdpa=sdpa)[0]


def annotate_many(model: LoweredModel, mesh: Mesh, plans: list[tuple[dict, dict | None]],
                  allow: frozenset = frozenset(), left_flat: list | None = None, sdpa: bool = True) -> list[str]:
    """``annotate`` for several plans of one model, parsing its module once (a full-size
    model's text takes a second to parse; the tt-mlir check annotates five plans).
    ``left_flat``, a list: gets, per plan, the attentions left out of tt-xla's SDPA
    composite and why (``wrap_composites``)."""
    base = ir.parse(model.text, filename=model.name)
    # batched matmuls on every batch dim, as the evaluator priced them (evaluate.prepare) and
    # as torch_xla writes them: the module handed over is the module priced
    unfold_batch_matmul(base)
    out = []
    for k, (shardings, constraints) in enumerate(plans):
        module = base if k == len(plans) - 1 else base.operation.clone()
        ctx = PassContext(mesh=mesh, shardings=shardings, arguments=model.arguments, constraints=constraints or {})
        # results carry their closed, replicated sharding: the boundary rule is part of the
        # plan, so XLA, tt-mlir and --evaluate all see the same output gather
        PassManager([AddMesh(), ApplyShardings(), ApplyConstraints()], ctx).run(module)
        insert_guards(module, allow=allow, arguments=model.arguments)  # the guards of the rules not turned off
        # tt-xla's composites for the norms and GELUs (passes/wrap_composites.py), so tt-mlir
        # runs them as the fused kernels shard-opt priced
        flat: list[str] = []
        wrap_composites(module, arguments=model.arguments, left_flat=flat, sdpa=sdpa)
        if left_flat is not None:
            left_flat.append(flat)
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
        sites = site_groups(short.text, meshes, set(opts.parallelism), short.arguments, allow=opts.allow,
                            removed=removed)
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
        plan = explain(Setting(model, mesh, meshes, system_name, cm, scorer, structure, opts),
                       Found(groups, assignment, score, result, seconds, fallback, final),
                       Rules(judged, removed, removed_options), Baselines(baselines, user, mega))
        annotated = annotate(model, mesh, final.shardings, constraints_for(groups, assignment), opts.allow,
                             sdpa=checked.sdpa if checked is not None else True)
        outcome = Outcome(plan, annotated, final.text, model)
    if checked is not None:
        checked.attach(outcome.plan)
        if opts.progress:
            from shard_opt.ttmlir.check import line

            stream.write(line(checked.plan_check) + "\n")
    with timing.phase("persist"):
        scorer.persist()  # what Shardy made of each candidate, for the next run (shard_opt.factcache)
    note_refusal(outcome.plan, model, mesh)
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
    sdpa: bool = True  # the recommended plan compiles with attention in tt-xla's SDPA composite

    def attach(self, plan: Plan) -> None:
        check = dict(self.plan_check)
        if self.finalists:
            check["finalists"] = self.finalists
        plan.checks = {**(plan.checks or {}), "tt_mlir": check}
        if "checked_us" in check:
            plan.cost.checked_us = check["checked_us"]
        for name, b in self.baselines.items():
            if name in plan.baselines:
                plan.baselines[name]["tt_mlir"] = b
                if "checked_us" in b:
                    plan.baselines[name]["checked_us"] = b["checked_us"]
        if self.note:
            plan.note(self.note)


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
    from shard_opt.ttmlir import reference as xla_reference

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
    left_flat: list[list[str]] = []
    specs = ([(fe.shardings, constraints_for(groups, a)) for a, fe in finalists]
             + [(ev.shardings, None) for ev in base_evals.values()])
    texts = annotate_many(model, mesh, specs, evaluator.allow, left_flat)
    jobs = [ttc.Job(name, text, n) for name, text in zip(names, texts)]
    if progress:
        stream.write(f"shard-opt: tt-mlir: compiling {len(finalists)} finalist{'s' if len(finalists) > 1 else ''}"
                     f"{' and ' + ', '.join(base_evals) if base_evals else ''} (--no-check skips this)\n")
    with timing.phase("check.compile"):
        # XLA partitions the search's plan meanwhile, in its own process (ttmlir.reference
        # says why): the reductions it makes are what tt-mlir's must include
        xla = {0: xla_reference.start(texts[0], n)}
        compiled = ttc.compile_all(jobs, system, tuple(mesh.shape))
        flat = _without_sdpa(model, mesh, system, specs, evaluator.allow, names, texts, compiled, left_flat)
    with timing.phase("check.read"):
        plans = [checkable(model, mesh, fe) for _, fe in finalists]
        checks = [ttc.summarize(p, c, system, facts=fe.facts, cost_model=cm, left_flat=flat)
                  for p, c, (_, fe), flat in zip(plans, compiled, finalists, left_flat)]
        # in order of checked cost, each finalist tt-mlir compiled is held against XLA's
        # reductions until one keeps them all (a full Llama-3-8B module takes XLA ~1.7 s here:
        # the others, costlier, are not partitioned)
        order = sorted((k for k, c in enumerate(checks) if c["compiled"]), key=lambda k: (checks[k]["checked_us"], k))
        for k in order:
            ref = xla.pop(k, None) or xla_reference.start(texts[k], n)
            ttc.hold_against_xla(checks[k], plans[k], compiled[k], ref.result(), texts[k])
            if not checks[k].get("likely_miscompile"):
                break
        for ref in xla.values():  # the search's plan, when tt-mlir did not compile it: not read
            ref.close()
    rows = []
    for k, ((a, fe), chk) in enumerate(zip(finalists, checks)):
        rows.append({"rank": k + 1, "total_us": round(fe.score.total_us, 3), "checked_us": chk.get("checked_us"),
                     "compiled": chk["compiled"], "matches": chk["matches"], "error": chk["error"],
                     "likely_miscompile": chk.get("likely_miscompile"),
                     "ttnn": chk["stages"].get("ttnn", {}),
                     "arguments_changed": _changed(model, final.shardings, fe.shardings)})
    usable = [k for k, chk in enumerate(checks) if chk["compiled"] and not chk.get("likely_miscompile")]
    best = min(usable, key=lambda k: (checks[k]["checked_us"], k)) if usable else 0
    if ttc.is_startup_error(checks[0]["error"]):
        best, usable = 0, []  # the check could not run the search's plan: it is shown unchecked, not replaced
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
                            facts=base_evals[name].facts, cost_model=cm)
        base_checks[name] = {k: chk.get(k) for k in ("compiled", "error", "matches", "checked_us", "extra_ccl_us",
                                                      "missing_ccl_us", "extra_ops_us", "ttnn_ops_per_step",
                                                      "likely_miscompile")}
        base_checks[name]["ttnn"] = chk["stages"].get("ttnn", {})
        base_checks[name]["differences"] = chk["differences"]
    a, fe = finalists[best]
    checks[best]["check_seconds"] = round(time.perf_counter() - t0, 3)  # the whole check: compiles, reading
    return Checked(a, fe, checks[best], rows if len(rows) > 1 else [], base_checks, note, sdpa=best not in flat)


def _without_sdpa(model, mesh, system, specs, allow, names, texts, compiled, left_flat) -> set[int]:
    """Compile again, with every attention flat, the plans tt-mlir refused for an SDPA
    composite (``wrap_composites`` leaves out the attentions whose shardings shard-opt's
    propagation shows tt-mlir's SDPA rule cannot take; tt-mlir's own propagation through the
    composite can still give its query and result apart: bert-large 1L 1x8's best plan,
    "Query and result must have the same type"). Replaces their ``texts``, ``compiled`` and
    ``left_flat`` entries in place; the indices redone."""
    from shard_opt.ttmlir import check as ttc

    redo = [k for k, c in enumerate(compiled) if not c.compiled and "scaled_dot_product_attention" in (c.error or "")]
    if not redo:
        return set()
    flat_texts = annotate_many(model, mesh, [specs[k] for k in redo], allow, sdpa=False)
    n = math.prod(mesh.shape)
    again = ttc.compile_all([ttc.Job(names[k], t, n) for k, t in zip(redo, flat_texts)], system, tuple(mesh.shape))
    for k, t, c in zip(redo, flat_texts, again):
        count = texts[k].count('"tenstorrent.scaled_dot_product_attention"')
        error = " ".join((compiled[k].error or "").split(";")[0].split())
        left_flat[k] = [f"tt-mlir refused the composite for this plan ({error})"] * count
        texts[k], compiled[k] = t, c
    return set(redo)


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


def _most_split(groups, mesh: Mesh) -> tuple[int, ...]:
    """Every parameter group at its most-split option (the least memory per device): where
    the memory fallback's search starts when no plan the speed search tried fits."""
    def factor(g, o):
        if g.by == "site" or g.kind not in ("param", "buffer"):
            return 1
        return math.prod(g.options[o].split_factor(d, mesh) for d in range(g.options[o].rank))

    return tuple(max(range(len(g.options)), key=lambda o: (factor(g, o), -o)) for g in groups)


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
    # a partitioned module (the -o module of --evaluate) is priced as it is written: Shardy
    # run on it again would reduce every partial sum twice (evaluate.is_partitioned)
    as_written = is_partitioned(module)
    ev = Evaluator(model, mesh, system, cm, **opts.setting(), as_written=as_written)
    final = ev.run(shardings, constraints=acts, keep_ir=True)
    plan = build_plan(model, mesh, [mesh], system_name, opts.cost_model, list(opts.parallelism), final)
    plan.propagation = opts.propagation
    _note_weights(plan, opts.weights, model)
    broken = safety.broken_by(model, shardings, safety.limits(model, structure_of(model)), [mesh],
                              final.facts.violations)
    plan.safety = safety.report({}, opts.allow, {}, broken)
    for rule in sorted(broken - set(opts.allow)):
        plan.note(
            f"this plan breaks the {rule} rule ({safety.BY_ID[rule].title}): {safety.BY_ID[rule].detail}")
    _note_guards(plan, model, final, opts.allow)
    note_refusal(plan, model, mesh)
    if user is not None:
        plan.strategy = f"the {user.source}'s shard spec ({user.where})"
        plan.baselines = {"loader-spec": {**plan.cost.to_json(), "source": user.source, "where": user.where,
                                             "mesh": user.mesh, "unmatched": user.unmatched,
                                             "not_dividing": user.not_dividing}}
        if user.activations:
            plan.baselines["loader-spec"]["activations"] = {k: c.axis_names() for k, c in user.activations.items()}
        if broken - set(opts.allow) - safety.REPORTED:  # the plan is the spec: it breaks them as written
            plan.baselines["loader-spec"]["breaks"] = sorted(broken - set(opts.allow) - safety.REPORTED)
        if user.mesh and list(user.mesh) != list(mesh.shape):
            plan.note(
                f"get_mesh_config({mesh.num_devices}) gives {'x'.join(map(str, user.mesh))}; priced on {mesh.spec}")
    if as_written:
        plan.note("the input's collectives are explicit (a module Shardy partitioned, such as the -o module of "
                  "--evaluate): priced as written, without propagating it again")
        annotated = final.text
    else:
        annotated = annotate(model, mesh, shardings, acts, allow=opts.allow)  # the activation spec written in too
    if opts.check and as_written:
        # tt-mlir runs Shardy on what it compiles: it would partition this module a second time
        why = ("the input is already partitioned (explicit collectives): tt-mlir compiles the module before "
               "propagation; check the module --evaluate was given")
        if opts.progress:
            sys.stderr.write(f"shard-opt: tt-mlir check skipped: {why}\n")
        from shard_opt.ttmlir import check as ttc

        plan.checks = {**(plan.checks or {}), "tt_mlir": ttc.skipped(why)}
    elif opts.check:
        with timing.phase("check"):
            check_evaluated(model, mesh, system, cm, final, annotated, plan, progress=opts.progress)
    return Outcome(plan, annotated, final.text, model)


def check_evaluated(model, mesh, system, cm, final, annotated: str, plan: Plan, *, stream=None,
                    progress: bool = True) -> None:
    """The tt-mlir check of an evaluated plan (``--evaluate``): its module alone, compiled by
    tt-mlir and partitioned by XLA, into ``plan["checks"]["tt_mlir"]`` (nothing to choose
    between, so nothing is recommended instead; a likely miscompile is said loudly)."""
    from shard_opt.plan import checkable
    from shard_opt.ttmlir import check as ttc
    from shard_opt.ttmlir import reference as xla_reference

    stream = stream or sys.stderr
    t0 = time.perf_counter()
    ok, why = ttc.status()
    if not ok:
        stream.write(f"shard-opt: tt-mlir check skipped: {why}\n")
        plan.checks = {**(plan.checks or {}), "tt_mlir": ttc.skipped(why)}
        return
    n = math.prod(mesh.shape)
    if progress:
        stream.write("shard-opt: tt-mlir: compiling the evaluated plan (--no-check skips this)\n")
    ref = xla_reference.start(annotated, n)  # XLA's partitioning, in its own process, meanwhile
    (compiled,) = ttc.compile_all([ttc.Job("evaluated", annotated, n)], system, tuple(mesh.shape))
    xla = {0: ref.result()}
    checked = checkable(model, mesh, final)
    chk = ttc.summarize(checked, compiled, system, facts=final.facts, cost_model=cm)
    if 0 in xla:
        ttc.hold_against_xla(chk, checked, compiled, xla[0], annotated)
    chk["check_seconds"] = round(time.perf_counter() - t0, 3)
    plan.checks = {**(plan.checks or {}), "tt_mlir": chk}
    if "checked_us" in chk:
        plan.cost.checked_us = chk["checked_us"]
    if chk.get("likely_miscompile"):
        plan.note(
            "tt-mlir check: a likely miscompile: tt-mlir leaves out a reduction XLA makes for the same shardings ("
            f"{chk['xla']['missing_reductions'][0]}); do not deploy the plan as it is")
    if progress:
        stream.write(ttc.line(chk) + "\n")
