"""The explanation a plan carries: what each group weighed, the baselines' notes, one
layer's bill, the safety table and what each rule cost, robustness, the guards, the KV
layout, the routed experts.

``explain`` writes it into the ``Plan`` the driver builds around the search's winner; it
reads four typed inputs (``Setting``: where the plan was searched; ``Found``: what the
search settled on; ``Rules``: the compiler-safety rules it was held to; ``Baselines``:
the plans it was compared with). The orchestration (search, memory fallback, tt-mlir
check, re-rank) stays in ``shard_opt.driver``; nothing here changes the plan chosen.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from shard_opt import ir, safety, timing
from shard_opt.baselines import LoaderSpec, megatron_pairs
from shard_opt.evaluate import LayeredEvaluator, Score, constraints_for, shardings_by_role
from shard_opt.lowered import LoweredModel
from shard_opt.plan import Plan, build_plan, score_dict
from shard_opt.search import assignment_of
from shard_opt.sharding import Mesh
from shard_opt.weights import WeightFormats


@dataclass
class Setting:
    """Where the plan was searched: the model, its meshes and system, the cost model and
    the scorer the search priced candidates with, the model's structure and the run's
    options (``driver.Options``)."""

    model: LoweredModel
    mesh: Mesh
    meshes: list[Mesh]
    system_name: str
    cm: object
    scorer: object
    structure: object
    opts: object


@dataclass
class Found:
    """What the search settled on: its groups, the chosen assignment and its score, the
    search result (every candidate scored, the neighbours rejected), its wall time, the
    memory fallback's reason (or None) and the plan's whole-model evaluation."""

    groups: list
    assignment: tuple
    score: Score
    result: object
    seconds: float
    fallback: str | None
    final: object


@dataclass
class Rules:
    """The compiler-safety rules the search was held to: every rule's limits, the allowed
    ones too (``judged``: what the plan is judged by), what the ``exclude`` rules removed
    (counts by rule) and the options they removed (rule -> [(role, option)])."""

    judged: dict
    removed: dict
    removed_options: dict


@dataclass
class Baselines:
    """The plans the search was compared with: their plan-JSON entries (``priced``), the
    loader's spec (or None) and the Megatron plan's argument shardings, within the rules."""

    priced: dict
    user: LoaderSpec | None
    mega: dict


def explain(setting: Setting, found: Found, rules: Rules, baselines: Baselines) -> Plan:
    """The plan JSON around the winner (``plan.build_plan``) with its explanation: what
    each group weighed, the baselines, the per-layer bill, the safety table, robustness,
    the guards, the constraints, the routed experts and the KV layout."""
    model, opts, scorer = setting.model, setting.opts, setting.scorer
    groups, assignment, result, final = found.groups, found.assignment, found.result, found.final
    mega = assignment_of(groups, baselines.mega)
    group_info = _group_info(groups, assignment, result)
    alternatives = _alternatives(groups, assignment, scorer, mega)
    for info, alts in zip(group_info, alternatives):
        if alts:
            info["alternatives"] = alts
    rejected = [
        {"label": label, **score_dict(s), "arguments_changed": changed}
        for label, s, changed in sorted(result.neighbours, key=lambda n: n[1].key())
    ]
    plan = build_plan(
        model, setting.mesh, setting.meshes, setting.system_name, opts.cost_model, list(opts.parallelism), final,
        groups=group_info, baselines=baselines.priced,
        search={"candidates_evaluated": result.candidates_evaluated, "seconds": round(found.seconds, 3),
                "exhaustive": result.exhaustive, "rejected": rejected,
                "space_size": _space([g for g in groups if g.by != "site"]),
                "constraint_sites": sum(1 for g in groups if g.by == "site")},
        memory_fallback=found.fallback, scored=found.score, pairs=megatron_pairs(model, setting.structure),
    )
    plan.propagation = opts.propagation
    for name, b in baselines.priced.items():
        note = _rules_note(name, b)
        if note:
            plan.note(note)
    _note_weights(plan, opts.weights, model)
    per_layer, layer = layer_bill(scorer, groups=groups, assignment=assignment)
    if per_layer is not None:
        plan.cost.ccl_per_layer, plan.layer_collectives = per_layer, layer
    if baselines.user is not None:
        plan.loader_comparison = _loader_comparison(groups, assignment, scorer, baselines.user)
    inf: dict[str, int] = {}
    for s in result.scored.values():
        for rule in s.unsafe:
            inf[rule] = inf.get(rule, 0) + 1
    broken = safety.broken_by(model, final.shardings, rules.judged, setting.meshes, final.facts.violations)
    with timing.phase("analysis.rule-costs"):
        costs = rule_costs(groups, assignment, scorer, found.score, rules.removed_options or {}, result.scored)
    plan.safety = safety.report(rules.removed, opts.allow, inf, broken, costs)
    plan.robustness = _robustness(result.scored, assignment, groups, scorer, setting.cm, mega)
    _note_guards(plan, model, final, opts.allow)
    constraints = constraints_for(groups, assignment)
    if constraints:
        plan.constraints = [{"site": site, "op": "stablehlo.reshape", "sharding": s.axis_names()}
                            for site, s in constraints.items()]
    routed = final.facts.routed_experts
    if routed:
        plan.routed_experts = routed
        plan.note(
            f"experts priced as routed: the router picks {routed['top_k']} of {routed['experts']} experts per token "
            f"(found in the graph), so the expert matmuls do {routed['top_k']}/{routed['experts']} of the dense "
            f"work and read {routed['weights_read']:.0%} of the experts' weights for {routed['tokens']} token(s) "
            f"per device (uniform routing)")
    kv = kv_layout(model, setting.mesh, final.shardings, "heads" in broken, setting.structure,
                   allowed="heads" in opts.allow)
    if kv:
        plan.kv_layout = kv
        plan.note(kv["reason"])
    return plan


def note_refusal(plan: Plan, model: LoweredModel, mesh: Mesh) -> None:
    """The loader's get_mesh_config raised for this mesh's device count: not offered, said in a note."""
    from shard_opt.frontends.shard_spec import refusal

    why = refusal(model.meta.get("shard_spec"), mesh.num_devices)
    if why:
        plan.note(why)


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


def _note_guards(plan: Plan, model: LoweredModel, final, allow: frozenset) -> None:
    """The plan JSON's ``guards`` (``script_guards``), and a note for those no module
    output stands for: the emitted script cannot hook them, the user adds them by hand."""
    plan.guards = script_guards(model, final, allow)
    loose = [g for g in plan.guards if g.get("module") is None]
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
        plan.note(text)


def _note_weights(plan: Plan, weights: WeightFormats, model: LoweredModel) -> None:
    """The weight formats in the plan JSON (``weight_dtype``, and ``weight_formats``: the
    default and the per-parameter overrides tt-xla takes, role rules spelled out as name
    globs), and the rules that named no matmul weight."""
    plan.weight_dtype = weights.text()
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
            plan.note(
                f"--weight-dtype: {', '.join(missed)} named no matmul weight of {model.name}; those rules did nothing")
    plan.weight_formats = {"default": weights.default, "overrides": overrides}


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
        won = "plan" if winner == assignment else _label(groups, winner, assignment, megatron)
        next_ = _label(groups, runner, assignment, megatron) if runner != assignment else "plan"
        if runner != winner and next_ == won:  # the same up to the label's cut: say how the runner-up differs
            next_ = "the winner with " + (_label(groups, runner, winner, ()) or "an option described alike")
        entry = {"perturbation": label, "winner": won,
                 "margin": round(margin, 4), "margin_us": round(times[runner] - times[winner], 3),
                 "runner_up": next_}
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
    if megatron and a == tuple(megatron) + a[len(megatron):]:
        return "megatron"
    diff = [f"{g.role}: {g.describe(o)}" for g, o, p in zip(groups, a, plan) if o != p]
    return "; ".join(diff[:3]) + (f"; +{len(diff) - 3} more" if len(diff) > 3 else "")


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
