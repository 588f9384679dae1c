"""The search driver: find the cheapest assignment of options to argument groups.

1. Groups and options come from ``shard_opt.candidates``.
2. Small spaces are enumerated exhaustively. Larger ones run a deterministic local
   search: start from seeds (replicated, the Megatron baseline, the best single-group
   moves), then repeatedly try every option of every group and keep the best move,
   until no move improves. Every candidate is priced by real Shardy propagation
   (``shard_opt.evaluate``), memoized. "Small" is decided from the space and a static
   cost per candidate (the ops of the module(s) it propagates), never from a clock or
   the core count, so a slower or a busier machine searches the same candidates.
3. Constraint sites are searched last, from each of the ``SITE_STARTS`` best argument
   assignments (a refinement can make a runner-up the best plan).
4. Deep models are scored from their 1- and 2-layer versions (``LayeredEvaluator``);
   the winner is then evaluated once on the whole model for the plan's figures.

Ties break on fewer collectives, then fewer bytes, then the earlier option, so the same
input always gives the same plan.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from dataclasses import dataclass, field

from shard_opt.candidates import Group, make_groups
from shard_opt.evaluate import Evaluation, Evaluator, LayeredEvaluator, Score, constraints_for, shardings_for
from shard_opt.lowered import LoweredModel
from shard_opt.sharding import Mesh, TensorSharding

EXHAUSTIVE_LIMIT = 1500
# enumerate a space only if space x ops per candidate (``scorer.ops_each``) is at most this
# (None: always, up to EXHAUSTIVE_LIMIT): about 5 s of Shardy on one core of the 2-core
# machine of benchmarks/results.md. The 648 candidates of examples/mlp.mlir on 2x4 cost
# 48,600 (75 each); GPT-2 XL's 432 on 1x8 381,456 (883 each: its 1- and 2-layer copies).
EXHAUSTIVE_OPS = 100_000
SITE_STARTS = 3  # constraint sites are searched from this many of the best argument plans


@dataclass
class Progress:
    """Prints a status line on stderr when a search runs longer than a second. Its "best"
    is the best plan the run has scored so far, by the search's order (``Score.key``): it
    never gets worse, whichever part of the search (a constraint-site search started from
    a runner-up, the memory fallback's) reports."""

    label: str
    stream: object = None
    enabled: bool = True
    start: float = field(default_factory=time.monotonic)
    last: float = 0.0
    best: Score | None = None

    def update(self, done: int, total: int | None, best: Score | None) -> None:
        if best is not None and (self.best is None or best.key() < self.best.key()):
            self.best = best
        now = time.monotonic()
        if not self.enabled or now - self.start < 1.0 or now - self.last < 1.0:
            return
        self.last = now
        of = f"/{total}" if total else ""
        best = self.best
        b = f", best {best.total_us:.1f} us, {best.ccl_count} CCLs" if best else ""
        (self.stream or sys.stderr).write(
            f"shard-opt: {self.label}: {done}{of} candidates ({now - self.start:.1f} s){b}\n"
        )


@dataclass
class SearchResult:
    groups: list[Group]
    assignment: tuple[int, ...]
    score: Score
    candidates_evaluated: int
    seconds: float
    exhaustive: bool
    neighbours: list[tuple[str, Score, dict]]  # rejected one-group alternatives
    scored: dict[tuple, Score]


def search(model: LoweredModel, meshes: list[Mesh], system, cost_model, *,
           parallelism: set[str], groups: list[Group] | None = None, scorer=None,
           seeds: list[tuple[int, ...]] = (), progress: Progress | None = None, rich: bool = True,
           exhaustive_limit: int = EXHAUSTIVE_LIMIT, exhaustive_ops: int | None = EXHAUSTIVE_OPS,
           sites: list[Group] = (), site_starts: int = SITE_STARTS, objective=Score.key,
           screen_top: int | None = None) -> SearchResult:
    """Search the plan space of ``model`` on ``meshes`` (scored on ``meshes[0]``).

    The argument space is enumerated when it has at most ``exhaustive_limit`` candidates
    and ``space x scorer.ops_each`` is at most ``exhaustive_ops`` (both static: the same
    model gets the same plan on any machine, under any ``SHARD_OPT_JOBS``).

    ``sites`` (``candidates.site_groups``) are searched after the argument groups, from
    each of their ``site_starts`` best assignments (of distinct times: see
    ``_site_starts``); the best result wins. A constraint on an intermediate value is a
    refinement of an argument plan, and keeping it out of the first stage keeps the
    small spaces enumerable (the exhaustive optimum is over argument groups); but the
    best refinement need not be of the argument optimum (examples/mlp.mlir on 2x4: no
    constraint improves the optimum's 159.2 us; the next time's plan, 162.3 us, refines
    to 147.1 us). Each start's search also takes the compound moves that reach argument
    groups, so a later start can end on a better argument plan with no constraint.

    ``objective`` orders scores (``Score.key``: time first; ``fit_first`` for the memory
    fallback).

    ``screen_top``: an enumerated space of a deep model is first ranked on the scorer's
    1-layer copy alone (``screen_many``, one Shardy run each instead of two), and only its
    ``screen_top`` best are scored in full; the best of those wins (the one-axis baseline,
    ``driver._baselines``)."""
    t0 = time.monotonic()
    conv = conv_weight_indices(model)
    if groups is None:
        groups = make_groups(model.arguments, meshes, parallelism, rich=rich, conv_weights=conv)
    scorer = scorer or make_scorer(model, meshes[0], system, cost_model)
    progress = progress or Progress(model.name, enabled=False)
    sizes = [len(g.options) for g in groups]
    space = math.prod(sizes)
    score = _Scores(scorer, groups)
    score_all, scored = score.many, score.scored
    screened: set[tuple] = set()  # candidates ranked by the cheap proxy only

    def tick(b):
        progress.update(len(scored) + len(screened), None, score(b))

    exhaustive = space <= exhaustive_limit
    if exhaustive and exhaustive_ops is not None:
        # a static budget: a deep model's candidate costs two Shardy runs (1 and 2 layers),
        # and GPT-2 XL's 432 candidates on 1x8 take 13-15 s on one core
        exhaustive = space * scorer.ops_each <= exhaustive_ops
    if exhaustive:
        every = list(itertools.product(*[range(n) for n in sizes]))
        if screen_top is not None and len(every) > screen_top:
            proxy = dict(zip(every, scorer.screen_many(groups, every)))
            screened.update(every)
            every = sorted(every, key=lambda a: (objective(proxy[a]), a))[:screen_top]
        best = None
        for i in range(0, len(every), 256):
            score_all(every[i:i + 256])
            best = min(every[:i + 256], key=lambda a: (objective(score(a)), a))
            progress.update(min(i + 256, len(every)), space, score(best))
    else:
        start = [tuple(0 for _ in groups)] + [s for s in seeds if len(s) == len(groups)]
        score_all(start)  # also times one evaluation, which decides whether workers pay
        moves = _moves(groups, scorer)
        best = min(start, key=lambda a: (objective(score(a)), a))
        best = _local_search(best, moves, groups, scorer, score, score_all, tick, screened, objective=objective)
    if sites:
        starts = _site_starts(best, scored, site_starts, objective)
        pad = tuple(0 for _ in sites)
        groups = score.groups = list(groups) + list(sites)
        # the argument-only candidates scored so far leave every site unconstrained
        score.scored = scored = {a + pad: s for a, s in scored.items()}
        padded = {a + pad for a in screened}
        screened.clear()
        screened.update(padded)
        site_moves = _moves(groups, scorer, only=range(len(groups) - len(sites), len(groups)))
        ends = [_local_search(a + pad, site_moves, groups, scorer, score, score_all, tick, screened,
                              objective=objective) for a in starts]
        best = min(ends, key=lambda a: (objective(score(a)), a))
    neighbours = []
    for gi, g in enumerate(groups):
        for o in range(len(g.options)):
            if o == best[gi]:
                continue
            alt = best[:gi] + (o,) + best[gi + 1:]
            if alt in scored:
                label = f"{g.role}: {g.describe(o)}"
                neighbours.append((label, scored[alt], {g.role: g.options[o].axis_names()}))
    return SearchResult(groups, best, score(best), len(screened | set(scored)), time.monotonic() - t0,
                        exhaustive, neighbours, scored)


def _site_starts(best: tuple[int, ...], scored: dict, k: int, objective) -> list[tuple[int, ...]]:
    """The argument plans the constraint-site search starts from: ``best`` and the next
    best scored ones, up to ``k``, one per distinct score (equal times are mostly one
    program: a replicated weight whose consumer splits it is sliced for free, see
    ``Score.key``), ties broken by the assignment."""
    out, seen = [best], {round(scored[best].score, 6)}
    for a in sorted(scored, key=lambda a: (objective(scored[a]), a)):
        if len(out) >= k:
            break
        t = round(scored[a].score, 6)
        if t not in seen and a != best and not math.isinf(scored[a].score):
            seen.add(t)
            out.append(a)
    return out


def local_search_from(start: tuple[int, ...], groups: list[Group], scorer) -> tuple[tuple[int, ...], Score]:
    """The local optimum the search reaches from ``start`` alone (no seeds, no
    enumeration): what ``benchmarks/bench_search.py`` restarts from random plans to
    probe spaces too large to enumerate."""
    score = _Scores(scorer, groups)
    best = _local_search(tuple(start), _moves(groups, scorer), groups, scorer, score, score.many,
                         lambda b: None, set())
    return best, score(best)


@dataclass
class _Scores:
    """Scores of assignments over ``groups``, memoized; ``many`` prices the new ones of a
    batch together (in the scorer's worker processes when that pays)."""

    scorer: object
    groups: list
    scored: dict = field(default_factory=dict)

    def __call__(self, a: tuple[int, ...]) -> Score:
        if a not in self.scored:
            self.scored[a] = self.scorer.score(self.groups, a)
        return self.scored[a]

    def many(self, cands: list[tuple[int, ...]]) -> None:
        new = [a for a in dict.fromkeys(cands) if a not in self.scored]
        for a, sc in zip(new, self.scorer.score_many(self.groups, new)):
            self.scored[a] = sc


def _moves(groups: list[Group], scorer, only=None) -> list[dict[int, int]]:
    """Single-group moves, plus compound moves found by probe propagation.

    For every (group, option), Shardy tells which other groups follow it; the compound
    move sets them all at once, so a pair that only pays off together (a column-parallel
    weight and its row-parallel partner) is one step, not two uphill ones. ``only``
    limits the moves to those groups (their compound moves still reach any group).
    """
    movable = list(range(len(groups))) if only is None else list(only)
    # probe the one-axis, one-dim splits: those are what Shardy propagates into partners
    probes = [(gi, o) for gi in movable for o in range(1, len(groups[gi].options))
              if sum(len(d) for d in groups[gi].options[o].dims) == 1]
    follows = dict(zip(probes, scorer.probe_many(groups, probes)))
    moves, seen = [], set()
    for gi in movable:
        for o in range(len(groups[gi].options)):
            for move in ({gi: o}, {gi: o, **follows.get((gi, o), {})}):
                key = tuple(sorted(move.items()))
                if key not in seen:
                    seen.add(key)
                    moves.append(move)
    return moves


def fit_first(s: Score) -> tuple:
    """The memory fallback's order: plans that fit first, then the least memory, then time."""
    return (not s.fits, 0 if s.fits else s.memory_bytes, s.key())


def _local_search(best, moves, groups, scorer, score, score_all, tick, screened: set, *,
                  max_rounds: int = 30, verify: int = 4, keep: int = 20, objective=Score.key):
    """Best-improvement local search with cheap screening.

    Each round applies every active move to the current plan and ranks the results by
    the scorer's proxy (the 1-layer model for a deep model, the score itself otherwise);
    the ``verify`` best-ranked are scored for real. The best improving one is taken, and
    the other improving ones that change different groups are added to it one by one
    while the combination keeps improving (fewer rounds on a deep model). After the first
    round only the ``keep`` most promising moves stay active; when no active move
    improves, one last round over all moves confirms the local optimum. Deterministic:
    ranks break ties on the assignment itself.
    """
    def apply(move, base):
        cand = list(base)
        for gi, o in move.items():
            cand[gi] = o
        return tuple(cand)

    def key(a):
        return (objective(score(a)), a)

    active = moves
    for _ in range(max_rounds):
        cands = list(dict.fromkeys(c for c in (apply(m, best) for m in active) if c != best))
        if not cands:
            break
        proxy = dict(zip(cands, scorer.screen_many(groups, cands)))
        screened.update(cands)
        ranked = sorted(cands, key=lambda a: (objective(proxy[a]), a))
        top = ranked[:verify]
        score_all(top)
        improving = sorted((a for a in top if key(a) < key(best)), key=key)
        nxt = best
        if improving:
            nxt = improving[0]
            changed = {i for i, (x, y) in enumerate(zip(nxt, best)) if x != y}
            for a in improving[1:]:
                diff = {i: a[i] for i, (x, y) in enumerate(zip(a, best)) if x != y}
                if changed.isdisjoint(diff):
                    combo = apply(diff, nxt)
                    score_all([combo])
                    if key(combo) < key(nxt):
                        nxt, changed = combo, changed | set(diff)
        tick(nxt)
        full = active is moves
        if nxt == best:
            if full:
                break  # no move at all improves: a local optimum
            active = moves  # confirm over every move before stopping
            continue
        if full and len(moves) > keep:
            rank = {c: i for i, c in enumerate(ranked)}
            active = sorted(moves, key=lambda m: rank.get(apply(m, best), len(rank)))[:keep]
        best = nxt
    return best


def make_scorer(model: LoweredModel, mesh: Mesh, system, cost_model, **setting):
    """An evaluator for ``model``: layered (1 + 2 layers) when the model can re-lower.
    ``setting``: the ``Evaluator`` options (``pipeline``...). A zoo model's evaluators start
    from the facts earlier runs stored (``shard_opt.factcache``; the caller ``persist()``s)."""
    layers = model.num_layers or 0
    persist = True  # what Shardy made of each candidate is kept (shard_opt.factcache; off with the cache)
    if model.with_layers is not None and layers > 2:
        return LayeredEvaluator(
            Evaluator(model.with_layers(1), mesh, system, cost_model, persist=persist, **setting),
            Evaluator(model.with_layers(2), mesh, system, cost_model, persist=persist, **setting),
            layers,
        )
    return Evaluator(model, mesh, system, cost_model, persist=persist, **setting)


def conv_weight_indices(model: LoweredModel) -> set[int]:
    return {a.index for a in model.arguments
            if a.kind == "param" and len(a.shape) >= 3 and (a.module_class or "").lower().startswith("conv")}


def assignment_of(groups: list[Group], shardings: dict[int, TensorSharding]) -> tuple[int, ...]:
    """The assignment closest to per-argument ``shardings`` (first member decides)."""
    out = []
    for g in groups:
        want = shardings.get(g.members[0]) if g.members else None  # a constraint site: unconstrained
        choice = 0
        if want is not None:
            for i, o in enumerate(g.options):
                if o.axis_names() == want.axis_names():
                    choice = i
                    break
        out.append(choice)
    return tuple(out)


def final_evaluation(model: LoweredModel, mesh: Mesh, system, cost_model,
                     groups: list[Group], assignment: tuple[int, ...], **setting) -> Evaluation:
    """Evaluate the chosen plan on the whole model, keeping the propagated IR."""
    ev = Evaluator(model, mesh, system, cost_model, **setting)
    return ev.run(shardings_for(model, groups, assignment), constraints=constraints_for(groups, assignment),
                  keep_ir=True)


# ---- the neighbourhood of the plan: what the explanation reads, priced here once ----------

RIVALS = 4  # per group, the options the proxy ranks best, priced for "best other"
RULE_COST_TRIES = 32  # removed options priced per rule, at most (in the groups' order)


@dataclass(frozen=True)
class Alternative:
    """One option of one group priced in place of the plan's choice (every other group at
    the plan's): ``label`` says why it is shown (``replicated``, ``unconstrained``,
    ``megatron column`` ..., ``best other``), ``bill`` its collectives as signatures
    (``bill_of``)."""

    group: int
    option: int
    label: str
    score: Score
    bill: tuple


@dataclass(frozen=True)
class Neighbourhood:
    """Everything the explanation of a plan reads that had to be priced, priced by the
    engine once the search and the check have settled on the plan (``price_neighbourhood``);
    ``shard_opt.explain`` prices nothing itself.

    - ``base``: the plan's score and ``base_bill`` its collectives (``bill_of``);
    - ``alternatives``: per group, the options a reader weighs (``Alternative``);
    - ``layer``: one repeated layer's bill (``layer_bill``): (count or None, entries);
    - ``loader``: per group, the loader spec's option for it and its score (None: the
      spec's split is not an option of the group, or the spec names nothing there);
    - ``rule_costs``: what each compiler-safety rule kept the plan from (``rule_costs``);
    - ``other_profile``: the candidates the robustness table re-ranks, priced under the
      other collective profile: (its name, {assignment: total_us}), or None."""

    base: Score
    base_bill: tuple
    alternatives: tuple
    layer: tuple
    loader: tuple | None
    rule_costs: dict
    other_profile: tuple | None
    plan_score: Score  # the plan as the search scored it (robustness: the scored pool's own)
    pool: dict  # robustness: assignment -> score of the distinct plans it re-ranks
    equivalent: int  # robustness: candidates priced as the plan in compute and collectives


def price_neighbourhood(groups: list[Group], assignment: tuple[int, ...], scorer, scored: dict, *,
                        megatron: tuple[int, ...] = (), loader: dict | None = None,
                        removed_options: dict | None = None, cost_model=None) -> Neighbourhood:
    """Price what the explanation of the plan ``assignment`` reads (``Neighbourhood``), in
    batches (``scorer.score_many``): the alternatives per group, the loader spec's choices
    (``loader``: role -> sharding), what the safety rules' removed options would have
    saved, and the candidates ``scored`` re-ranked under the other collective profile."""
    base = scorer.score(groups, assignment)
    alternatives = _alternatives(groups, assignment, scorer, megatron)
    plan_score, pool, same = _robustness_pool(scored, assignment, groups, scorer)
    other = _other_profile(cost_model)
    other_profile = None
    if other is not None:
        view = scorer.with_cost_model(other)
        other_profile = (other.ccl_profile, {a: view.score(groups, a).total_us for a in pool})
    return Neighbourhood(
        base=base, base_bill=bill_of(scorer, groups, assignment), alternatives=alternatives,
        layer=layer_bill(scorer, groups=groups, assignment=assignment),
        loader=_loader_choices(groups, assignment, scorer, loader) if loader is not None else None,
        rule_costs=rule_costs(groups, assignment, scorer, base, removed_options or {}, scored),
        other_profile=other_profile, plan_score=plan_score, pool=pool, equivalent=same)


def _alternatives(groups, assignment, scorer, megatron: tuple[int, ...]) -> tuple:
    """Per group, the options a reader weighs, each priced on the whole model with every
    other group at the plan's choice: replicated, the group's Megatron role, and the best
    other option (the next best too while fewer than two are listed)."""

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
            picks.append((mega, "megatron " + role_word(g, mega)))
        rest = [o for o in range(len(g.options)) if o != mine and o not in {p for p, _ in picks}]
        rest.sort(key=lambda o: (proxy[alt_of(gi, o)].key(), o))
        chosen.append((picks, rest[:RIVALS]))
    scorer.score_many(groups, [alt_of(gi, o) for gi, (picks, short) in enumerate(chosen)
                               for o in [p for p, _ in picks] + short])
    out = []
    for gi, (picks, short) in enumerate(chosen):
        short.sort(key=lambda o: (scorer.score(groups, alt_of(gi, o)).key(), o))
        # the best other option, and the next ones until a reader sees two choices
        for o in short[:max(1, 2 - len(picks))]:
            picks.append((o, "best other"))
        out.append(tuple(Alternative(gi, o, label, scorer.score(groups, alt_of(gi, o)),
                                     bill_of(scorer, groups, alt_of(gi, o))) for o, label in picks))
    return tuple(out)


def role_word(g, option: int) -> str:
    """``column`` / ``row`` for a 2-D weight split on its output / input features."""
    dims = [d for d, axes in enumerate(g.options[option].dims) if axes]
    if len(g.shape) == 2 and dims == [0]:
        return "column"
    if len(g.shape) == 2 and dims == [1]:
        return "row"
    return g.describe(option)


def bill_of(scorer, groups, assignment) -> tuple:
    """The collectives to compare plans by: one repeated layer's when the scorer is
    layered, else the whole module's, as (kind, axes, bytes per device) signatures."""
    if isinstance(scorer, LayeredEvaluator):
        _, layer = layer_bill(scorer, groups=groups, assignment=assignment)
        return tuple((c["kind"], tuple(c["axes"]), c["bytes_per_device"]) for c in layer)
    return tuple((c.kind, c.axes, c.bytes_per_device) for c in scorer.facts(groups, assignment).collectives)


def layer_bill(scorer, *, by_role=None, groups=None, assignment=None,
               constraints=None) -> tuple[int | None, list[dict]]:
    """The collectives of one repeated layer: the 2-layer model's minus the 1-layer model's
    (a count, and the collectives as plan-JSON entries); (None, []) for a model priced whole.
    ``constraints``: with ``by_role``, a loader's activation spec (``LoaderSpec.constraints``)."""
    from shard_opt.evaluate import shardings_by_role

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


def _loader_choices(groups, assignment, scorer, by_role: dict) -> tuple:
    """Per group (not the constraint sites'): (the option the loader's spec gives it or
    None, its score with the rest of the plan kept or None)."""
    out = []
    for gi, g in enumerate(groups):
        if g.by == "site":
            out.append((None, None))
            continue
        want = by_role.get(g.role)
        want_names = want.axis_names() if want is not None else [[] for _ in g.shape]
        option = next((o for o, opt in enumerate(g.options) if opt.axis_names() == want_names), None)
        score = None
        if option is not None and option != assignment[gi]:
            score = scorer.score(groups, assignment[:gi] + (option,) + assignment[gi + 1:])
        out.append((option, score))
    return tuple(out)


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


def _robustness_pool(scored: dict, assignment, groups, scorer) -> tuple[Score, dict, int]:
    """(the plan's score, the distinct plans the robustness table re-ranks, how many
    candidates cost what the plan costs): the evaluated candidates that are priceable and
    fit (when the plan fits); candidates with the plan's compute and collective times are
    the same plan to the cost model (a replicated weight sliced locally, a bias that follows
    its consumer) and left out."""
    plan = scored.get(assignment) or scorer.score(groups, assignment)
    pool = {a: s for a, s in scored.items() if math.isfinite(s.score) and (s.fits or not plan.fits)}
    same = {a for a, s in pool.items() if _cost_pair(s) == _cost_pair(plan)}
    pool = {a: s for a, s in pool.items() if a not in same}
    pool[assignment] = plan
    return plan, pool, len(same - {assignment})


def _cost_pair(s) -> tuple[float, float]:
    return round(s.compute_us, 3), round(s.ccl_us, 3)


def _other_profile(cm):
    """The cost model with the other collective profile (None for models without one)."""
    import dataclasses

    profile = getattr(cm, "ccl_profile", None)
    if profile is None:
        return None
    return dataclasses.replace(cm, ccl_profile="tuned" if profile == "generic" else "generic")
