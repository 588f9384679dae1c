"""The explanation a plan carries: what each group weighed, the baselines' notes, one
layer's bill, the safety table and what each rule cost, robustness, the guards, the KV
layout, the routed experts.

``explain`` turns what the search found and what the engine priced around it (a
``search.Neighbourhood``) into an ``Explanation``, the plan's explanatory fields as values
and its notes in words; ``explain_evaluated`` does the same for ``--evaluate``. Nothing
here prices, propagates or changes the plan chosen: every figure was priced before
(``search.price_neighbourhood``), and ``shard_opt.build`` builds the plan from the
explanation once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from shard_opt import ir, safety, timing
from shard_opt.baselines import LoaderSpec, megatron_pairs
from shard_opt.evaluation import Score
from shard_opt.lowered import LoweredModel
from shard_opt.search import Neighbourhood, assignment_of
from shard_opt.evaluate import constraints_for
from shard_opt.sharding import Mesh
from shard_opt.weights import WeightFormats


@dataclass(frozen=True)
class Setting:
    """Where the plan was searched: the model, its meshes, the model's structure and the
    run's options (``driver.Options``)."""

    model: LoweredModel
    mesh: Mesh
    meshes: list[Mesh]
    structure: object
    opts: object


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Rules:
    """The compiler-safety rules the search was held to: every rule's limits, the allowed
    ones too (``judged``: what the plan is judged by), what the ``exclude`` rules removed
    (counts by rule) and the options they removed (rule -> [(role, option)])."""

    judged: dict
    removed: dict
    removed_options: dict


@dataclass(frozen=True)
class Baselines:
    """The plans the search was compared with: their plan-JSON entries (``priced``), the
    loader's spec (or None) and the Megatron plan's argument shardings, within the rules."""

    priced: dict
    user: LoaderSpec | None
    mega: dict


@dataclass(frozen=True)
class Explanation:
    """A plan's explanatory fields (their plan JSON keys) and its notes, in words: what
    ``shard_opt.build.build_plan`` reads beside the evaluation and the checks. ``notes``
    come before the check's note, ``late_notes`` after it; ``strategy`` None: named from
    the shardings (``build.strategy_text``)."""

    propagation: str | None = None
    weight_dtype: str | None = None
    weight_formats: dict | None = None
    strategy: str | None = None
    groups: list = field(default_factory=list)
    baselines: dict = field(default_factory=dict)
    search: dict | None = None
    scored: Score | None = None
    memory_fallback: str | None = None
    ccl_per_layer: int | None = None
    layer_collectives: list | None = None
    loader_comparison: list | None = None
    safety: list | None = None
    robustness: dict | None = None
    guards: list | None = None
    constraints: list | None = None
    routed_experts: dict | None = None
    kv_layout: dict | None = None
    pairs: list | None = None
    notes: tuple = ()
    late_notes: tuple = ()
    nothing_to_split: str | None = None  # said on stderr by the CLI for the plan it keeps


def explain(setting: Setting, found: Found, rules: Rules, baselines: Baselines, near: Neighbourhood) -> Explanation:
    """The explanation of the plan the search found (``found``), from what the engine priced
    around it (``near``)."""
    model, opts = setting.model, setting.opts
    groups, assignment, result, final = found.groups, found.assignment, found.result, found.final
    mega = assignment_of(groups, baselines.mega)
    group_info = _group_info(groups, assignment, result)
    for info, alts in zip(group_info, _alternatives(groups, near)):
        if alts:
            info["alternatives"] = alts
    rejected = [
        {"label": label, **score_dict(s), "arguments_changed": changed}
        for label, s, changed in sorted(result.neighbours, key=lambda n: n[1].key())
    ]
    notes = [note for name, b in baselines.priced.items() for note in [_rules_note(name, b)] if note]
    weight_dtype, weight_formats, weight_note = _weights(opts.weights, model)
    notes += [weight_note] if weight_note else []
    broken = safety.broken_by(model, final.shardings, rules.judged, setting.meshes, final.facts.violations)
    inf: dict[str, int] = {}
    for s in result.scored.values():
        for rule in s.unsafe:
            inf[rule] = inf.get(rule, 0) + 1
    guards, guard_note = _guards(model, final, opts.allow)
    notes += [guard_note] if guard_note else []
    constraints = constraints_for(groups, assignment)
    routed = final.facts.routed_experts
    if routed:
        notes.append(
            f"experts priced as routed: the router picks {routed['top_k']} of {routed['experts']} experts per token "
            f"(found in the graph), so the expert matmuls do {routed['top_k']}/{routed['experts']} of the dense "
            f"work and read {routed['weights_read']:.0%} of the experts' weights for {routed['tokens']} token(s) "
            f"per device (uniform routing)")
    kv = kv_layout(model, setting.mesh, final.shardings, "heads" in broken, setting.structure,
                   allowed="heads" in opts.allow)
    if kv:
        notes.append(kv["reason"])
    per_layer, layer = near.layer
    refusal = note_refusal(model, setting.mesh)
    nothing = _nothing_to_split(group_info, setting.meshes, opts.parallelism)
    return Explanation(
        propagation=opts.propagation, weight_dtype=weight_dtype, weight_formats=weight_formats,
        strategy="replicated (nothing can be split on this mesh)" if nothing else None,
        groups=group_info, baselines=baselines.priced,
        search={"candidates_evaluated": result.candidates_evaluated, "seconds": round(found.seconds, 3),
                "exhaustive": result.exhaustive, "rejected": rejected,
                "space_size": _space([g for g in groups if g.by != "site"]),
                "constraint_sites": sum(1 for g in groups if g.by == "site")},
        scored=found.score, memory_fallback=found.fallback,
        ccl_per_layer=per_layer, layer_collectives=layer if per_layer is not None else None,
        loader_comparison=_loader_comparison(groups, assignment, near, baselines.user)
        if baselines.user is not None else None,
        safety=safety.report(rules.removed, opts.allow, inf, broken, near.rule_costs),
        robustness=_robustness(near, assignment, groups, mega),
        guards=guards,
        constraints=[{"site": site, "op": "stablehlo.reshape", "sharding": s.axis_names()}
                     for site, s in constraints.items()] or None,
        routed_experts=routed or None, kv_layout=kv,
        pairs=megatron_pairs(model, setting.structure),
        notes=tuple(notes), late_notes=(refusal,) if refusal else (), nothing_to_split=nothing)


def explain_evaluated(model: LoweredModel, mesh: Mesh, final, opts, structure, shardings: dict, user,
                      as_written: bool) -> Explanation:
    """The explanation of a plan ``--evaluate`` priced as it is written: the shardings on
    the input (``shardings``), or a loader's own spec (``user``)."""
    weight_dtype, weight_formats, weight_note = _weights(opts.weights, model)
    notes = [weight_note] if weight_note else []
    broken = safety.broken_by(model, shardings, safety.limits(model, structure), [mesh], final.facts.violations)
    for rule in sorted(broken - set(opts.allow)):
        notes.append(f"this plan breaks the {rule} rule ({safety.BY_ID[rule].title}): {safety.BY_ID[rule].detail}")
    guards, guard_note = _guards(model, final, opts.allow)
    notes += [guard_note] if guard_note else []
    refusal = note_refusal(model, mesh)
    notes += [refusal] if refusal else []
    strategy, baselines = None, {}
    if user is not None:
        strategy = f"the {user.source}'s shard spec ({user.where})"
        spec = {**score_dict(final.score), "layout_us": _r(final.cost.layout_us), "source": user.source,
                "where": user.where, "mesh": user.mesh, "unmatched": user.unmatched,
                "not_dividing": user.not_dividing}
        if user.activations:
            spec["activations"] = {k: c.axis_names() for k, c in user.activations.items()}
        if broken - set(opts.allow) - safety.REPORTED:  # the plan is the spec: it breaks them as written
            spec["breaks"] = sorted(broken - set(opts.allow) - safety.REPORTED)
        baselines = {"loader-spec": spec}
        if user.mesh and list(user.mesh) != list(mesh.shape):
            notes.append(f"get_mesh_config({mesh.num_devices}) gives {'x'.join(map(str, user.mesh))}; "
                         f"priced on {mesh.spec}")
    if as_written:
        notes.append("the input's collectives are explicit (a module Shardy partitioned, such as the -o module of "
                     "--evaluate): priced as written, without propagating it again")
    return Explanation(propagation=opts.propagation, weight_dtype=weight_dtype, weight_formats=weight_formats,
                       strategy=strategy, baselines=baselines, safety=safety.report({}, opts.allow, {}, broken),
                       guards=guards, pairs=megatron_pairs(model, structure), notes=tuple(notes))


def _nothing_to_split(group_info: list, meshes: list[Mesh], parallelism) -> str | None:
    """No argument had a split to search (no allowed dim divisible by a mesh axis): the plan
    is replicated by necessity, not because splits lost; the note saying so, or None."""
    sizes = sorted({f"{a}={n}" for m in meshes for a, n in zip(m.axes, m.shape) if n > 1})
    if group_info or not sizes:
        return None
    return (f"nothing to split: no dimension that --parallelism {','.join(parallelism)} may split is divisible "
            f"by a mesh axis ({', '.join(sizes)}), so every argument is replicated and each chip runs the whole "
            f"model; to shard it, choose a mesh whose axis sizes divide the model's dimensions"
            + ("" if set(parallelism) >= {"tensor", "sequence", "data"} else " or allow more --parallelism"))


def note_refusal(model: LoweredModel, mesh: Mesh) -> str | None:
    """The loader's get_mesh_config raised for this mesh's device count: not offered, said in a note."""
    from shard_opt.frontends.shard_spec import refusal

    return refusal(model.meta.get("shard_spec"), mesh.num_devices) or None


def _r(x: float) -> float | None:
    if x is None or (isinstance(x, float) and math.isinf(x)):
        return None
    return round(float(x), 3)


def score_dict(s: Score) -> dict:
    """A score as the plan JSON records it (a baseline, a rejected alternative)."""
    return {"total_us": _r(s.total_us), "compute_us": _r(s.compute_us), "ccl_us": _r(s.ccl_us),
            "ccl_count": s.ccl_count, "ccl_bytes": s.ccl_bytes,
            "memory_per_device_bytes": int(s.memory_bytes), "fits": bool(s.fits)}


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


def _guards(model: LoweredModel, final, allow: frozenset) -> tuple[list[dict], str | None]:
    """The plan JSON's ``guards`` (``script_guards``), and a note for those no module
    output stands for: the emitted script cannot hook them, the user adds them by hand."""
    guards = script_guards(model, final, allow)
    loose = [g for g in guards if g.get("module") is None]
    if not loose:
        return guards, None
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
    return guards, text


def _weights(weights: WeightFormats, model: LoweredModel) -> tuple[str, dict | None, str | None]:
    """The weight formats in the plan JSON (``weight_dtype``, and ``weight_formats``: the
    default and the per-parameter overrides tt-xla takes, role rules spelled out as name
    globs), and a note for the rules that named no matmul weight."""
    if weights.is_plain:
        return weights.text(), None, None
    overrides, note = {}, None
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
            note = f"--weight-dtype: {', '.join(missed)} named no matmul weight of {model.name}; those rules did nothing"
    return weights.text(), {"default": weights.default, "overrides": overrides}, note


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


def _alternatives(groups, near: Neighbourhood) -> list[list[dict]]:
    """Per group, the options a reader weighs (``near.alternatives``, priced on the whole
    model with every other group at the plan's choice), with the difference in time and
    collectives and the reason in words."""
    base = near.base
    per_layer = near.layer[0] is not None
    out = []
    for gi, (g, alts) in enumerate(zip(groups, near.alternatives)):
        entries = []
        for alt in alts:
            s, o, label = alt.score, alt.option, alt.label
            delta = _delta(s, base)
            moved = _bill_delta(list(alt.bill), list(near.base_bill))
            words = _bill_words(moved, per_layer=per_layer)
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


def _robustness(near: Neighbourhood, assignment, groups, megatron) -> dict:
    """Does the recommendation still win when the model is wrong? The distinct candidates
    the search evaluated (``near.pool``) re-ranked with collective time x0.5 and x2,
    compute x0.5 and x2, and under the other collective profile; per check the winner and
    its lead over the runner-up (a share of the runner-up's step)."""
    pool = near.pool
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
    if near.other_profile is not None:
        name, times = near.other_profile
        check(f"ccl profile {name}", dict(times))
    return {"holds": all(c["winner"] == "plan" for c in checks), "candidates": len(pool),
            "equivalent": near.equivalent, "checks": checks}


def _label(groups, a, plan, megatron) -> str:
    """A plan in words: the baseline it is, or how it differs from the recommendation."""
    if megatron and a == tuple(megatron) + a[len(megatron):]:
        return "megatron"
    diff = [f"{g.role}: {g.describe(o)}" for g, o, p in zip(groups, a, plan) if o != p]
    return "; ".join(diff[:3]) + (f"; +{len(diff) - 3} more" if len(diff) > 3 else "")


def _loader_comparison(groups, assignment, near: Neighbourhood, user: LoaderSpec) -> list[dict]:
    """Component by component, where the loader's spec and the plan differ: what the
    spec's choice costs with the rest of the plan kept (so each difference is priced on
    its own, ``near.loader``), and why in words."""
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
        option, score = near.loader[gi]
        if option is None:
            entry["reason"] = "the spec's split is not one the search considers for this tensor"
        else:
            entry.update(_delta(score, near.base))
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
