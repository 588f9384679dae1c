"""From a lowered model to what its plan is built from: search (or evaluate), baselines,
memory fallback, the tt-mlir check.

``optimize`` is the main job, in one straight line: the setting, the baselines (priced
first: they seed the search), the search and its memory fallback, the whole-model
evaluation, the baselines re-priced on the whole model, the tt-mlir check and its re-rank,
the neighbourhood of the plan priced once (``search.price_neighbourhood``), the
explanation (``shard_opt.explain``, which prices nothing), the ``-o`` module.
``evaluate_existing`` prices the shardings already in an annotated module
(``--evaluate``). Both return an ``Outcome``: what the plan is built from
(``build.PlanParts``) and the module texts the emitters need; the plan itself is built
once, by ``build.build_plan``.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from dataclasses import dataclass, field

from shard_opt import analysis, costmodel, ir, parallel, safety, timing
from shard_opt.baselines import ONE_AXIS, LoaderSpec, autoshard_groups, loader_spec, megatron_shardings
from shard_opt.candidates import PARALLELISM, Group, make_groups, site_groups
from shard_opt.errors import UserError
from shard_opt.evaluation import Candidate
from shard_opt.evaluate import (
    Evaluator, LayeredEvaluator, Score, constraints_for, group_members, is_partitioned, shardings_by_role,
    shardings_for,
)
from shard_opt.lowered import LoweredModel, PendingModel, layer_copy, same_arguments
from shard_opt.annotate import annotate
from shard_opt.build import PlanParts, build_plan, collective_entry, tt_mlir_check
from shard_opt.explain import Baselines, Found, Rules, Setting, _space, explain, explain_evaluated, score_dict
from shard_opt.plan import Plan
from shard_opt.search import (
    Progress, assignment_of, conv_weight_indices, final_evaluation, fit_first, layer_bill, make_scorer,
    price_neighbourhood, search,
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
    screen: bool = False  # stop after the search: a ``Screened``, no whole-model work (shard_opt.serve)
    stream: object = None

    def setting(self) -> dict:
        """The ``Evaluator`` options these options imply."""
        return {"pipeline": self.propagation, "weights": self.weights, "allow": self.allow}


@dataclass(frozen=True)
class Outcome:
    """A run on one model: what its plan is built from (``parts``), the ``-o`` module and
    the propagated one. ``plan`` is the plan as the run left it; the command line builds
    the one it writes with what it adds after the run (``build.Extras``)."""

    parts: PlanParts
    annotated_text: str  # input module + sdy.mesh + the plan's argument shardings
    propagated_text: str  # after Shardy, with explicit collectives and accounting attrs
    model: LoweredModel

    @functools.cached_property
    def plan(self) -> Plan:
        return build_plan(self.parts)


@dataclass
class Screened:
    """What ``optimize`` found when stopped after its search (``Options.screen``): the plan
    (``groups``, ``assignment``) and its ``score`` from the ``scorer`` (a deep model's
    figure extrapolated from its 1- and 2-layer copies, as the search ranks), before any
    whole-model evaluation, baseline or check."""

    model: LoweredModel
    scorer: object
    groups: list
    assignment: tuple
    score: Score
    fallback: str | None = None


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
    priced_by: dict = {}  # baseline -> what its figures price ({"figure"|"as_written": Candidate})
    with timing.phase("baselines"):
        if opts.baselines:
            # priced first, so the search starts from the expert plan and from tt-mlir's pass's
            # plan: whatever the search finds is at least as fast as both (when representable)
            baselines, autoshard = _baselines(model, mesh, meshes, scorer, mega_written, limit, priced_by)
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
        short = layer_copy(model)  # the sites of a layer are every layer's
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

    if opts.screen:  # --serve's screening of a configuration (shard_opt.serve): the search's own figure
        return Screened(model, scorer, groups, assignment, score, fallback)
    if pending is not None and model is not pending.resolve():
        # the search read the short copies alone (its limits and sites too: lowered.layer_copy);
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
        from shard_opt.deliverable import check_search

        with timing.phase("check"):
            checked = check_search(model, mesh, system, cm, groups, assignment, final, result, baselines, mega,
                                   user_kept, setting, stream, progress=opts.progress)
        if checked.assignment != assignment:
            assignment, final = checked.assignment, checked.final
            score = result.scored.get(assignment) or scorer.score(groups, assignment)
    with timing.phase("analysis"):
        # what the explanation reads, priced once around the plan; then the explanation
        near = price_neighbourhood(groups, assignment, scorer, result.scored, megatron=assignment_of(groups, mega),
                                   loader=user.by_role if user is not None else None,
                                   removed_options=removed_options, cost_model=cm)
        explanation = explain(Setting(model, mesh, meshes, structure, opts),
                              Found(groups, assignment, score, result, seconds, fallback, final),
                              Rules(judged, removed, removed_options), Baselines(baselines, user, mega), near)
        # the -o module: with a check, the very module tt-mlir compiled for the recommendation
        annotated = (checked.text if checked is not None and checked.text else
                     annotate(model, mesh, final.shardings, constraints_for(groups, assignment), opts.allow))
    if checked is not None and opts.progress:
        from shard_opt.ttmlir.check import line

        stream.write(line(tt_mlir_check(checked)) + "\n")
    with timing.phase("persist"):
        scorer.persist()  # what Shardy made of each candidate, for the next run (shard_opt.factcache)
    parts = PlanParts(model, mesh, tuple(meshes), system_name, opts.cost_model, tuple(opts.parallelism), final,
                      explanation, checked)
    return Outcome(parts, annotated, final.text, model)


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
    for k in ("candidates_evaluated",):
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
    """What a baseline's figures price on the whole model, as ``Candidate`` s (given as
    (argument shardings, constraints)): ``figure`` its ``total_us`` (within the rules when
    ``adjusted``), ``as_written`` its figure as written when that differs (``_held_to_rules``)."""
    priced_by[name] = {"figure": Candidate.of(*(within if adjusted else written))}
    if adjusted:
        priced_by[name]["as_written"] = Candidate.of(*written)


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
            s = whole.score_of(got["figure"].shardings, got["figure"].constraints)
            extrapolated = entry["total_us"]
            entry.update(score_dict(s))
            entry["extrapolated_us"] = extrapolated
            entry["priced"] = "whole model"
        if "as_written" in got and entry.get("as_written", {}).get("total_us") is not None:
            s = whole.score_of(got["as_written"].shardings, got["as_written"].constraints)
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


# The one-axis baseline's space (up to 1500 plans) is ranked by its heuristic on a deep
# model's 1-layer copy, and only the best ONE_AXIS_SCREEN_TOP are scored on both short
# copies (the whole model's extrapolated heuristic decides among them, as it decided among
# all before): one Shardy run per plan instead of two. Checked 2026-12-05 on every fixture
# script and example load script on 2x4 and 1x8 (benchmarks/one_axis_screen.py): the plan
# the whole enumeration chose was the screen's first in every case, so 16 is a margin.
ONE_AXIS_SCREEN_TOP = 16


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
                 groups=ag, exhaustive_limit=1500, exhaustive_ops=None, screen_top=ONE_AXIS_SCREEN_TOP)
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
    explanation = explain_evaluated(model, mesh, final, opts, structure_of(model), shardings, user, as_written)
    if as_written:
        annotated = final.text
    else:
        # the activation spec written in too; a .mlir module in the form it was given (its
        # tt-xla composites, or none: an -o module of composites off stays so), a model
        # lowered here in tt-xla's default form (composites on)
        form = "on" if model.source != "mlir" or model.meta.get("composites") else "off"
        annotated = annotate(model, mesh, shardings, acts, allow=opts.allow, composites=form)
    checked = None
    if opts.check and as_written:
        # tt-mlir runs Shardy on what it compiles: it would partition this module a second time
        why = ("the input is already partitioned (explicit collectives): tt-mlir compiles the module before "
               "propagation; check the module --evaluate was given")
        if opts.progress:
            sys.stderr.write(f"shard-opt: tt-mlir check skipped: {why}\n")
        from shard_opt.deliverable import Checked
        from shard_opt.ttmlir import check as ttc
        from shard_opt.verdict import not_checked

        checked = Checked(None, final, ttc.skipped(why), not_checked(why))
    elif opts.check:
        from shard_opt.deliverable import check_evaluated

        with timing.phase("check"):
            checked = check_evaluated(model, mesh, system, cm, final, annotated, progress=opts.progress)
    parts = PlanParts(model, mesh, (mesh,), system_name, opts.cost_model, tuple(opts.parallelism), final,
                      explanation, checked)
    return Outcome(parts, annotated, final.text, model)
