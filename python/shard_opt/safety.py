"""Compiler-safety rules as the driver uses them: the rules themselves are objects in
``shard_opt.rules``, one file each (what a rule removes from the search, detects in a
propagated module, guards before propagation and writes into the user's script).

How a rule acts (its ``action``, the report's column):

- ``exclude``: the search never offers the split (``limits``: a dim may be split only
  by factors that divide its *units*);
- ``inf``: a plan that does it is priced infinite (found in the propagated module:
  ``shard_opt.analysis`` records ``ModuleFacts.violations``);
- ``guard``: the plan pays for the safe form (a gather before a slice, a replicated
  anchor before a constraint), priced as such;
- ``report``: found in the propagated module and said (``plan_breaks``, a note), never
  priced infinite (``one-axis-contraction``: what tt-mlir emits is what the plan pays for,
  and whether it computes right is the tt-mlir numerics check's verdict).

The search and the report both read the rules: the plan JSON's ``safety`` lists each
rule, what it removed and whether the user allowed it.
"""

from __future__ import annotations

import math

from shard_opt.errors import UserError
from shard_opt.rules import BY_ID, REPORTED, RULES, Rule  # noqa: F401  (the driver's names for them)


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
    ``units`` (1: not at all), by the rules the user did not allow. Two rules on one dim
    leave the factors both allow (the gcd of their units), named by the stricter."""
    out: dict[tuple[int, int], tuple[int, str]] = {}
    for rule in RULES:
        if rule.id not in allow:
            for x, units in rule.excludes(model, structure).items():
                if x not in out:
                    out[x] = (units, rule.id)
                else:
                    both = math.gcd(units, out[x][0])
                    out[x] = (both, rule.id if units == both < out[x][0] else out[x][1])
    return out


def site_limits(shape, classes, allow: frozenset[str] = frozenset()) -> dict[int, tuple[int, str]]:
    """dim -> (units, rule) of a constraint site (a reshape's result of ``shape``, each dim's
    argument-dim classes): as ``limits`` for an argument, by the rules not allowed."""
    out: dict[int, tuple[int, str]] = {}
    for rule in RULES:
        if rule.id not in allow:
            for d, units in rule.site_excludes(shape, classes).items():
                if d not in out or units < out[d][0]:
                    out[d] = (math.gcd(units, out[d][0]) if d in out else units, rule.id)
    return out


def site_allowed(option, limit: dict, mesh) -> str | None:
    """The rule a constraint ``option`` (a TensorSharding of a site) breaks, or None."""
    for d in range(option.rank):
        got = limit.get(d)
        if option.dims[d] and got is not None and got[0] % option.split_factor(d, mesh):
            return got[1]
    return None


def allowed(option, arg, limit: dict, mesh) -> str | None:
    """The rule ``option`` (a TensorSharding of argument ``arg``) breaks, or None."""
    for d in range(option.rank):
        if not option.dims[d]:
            continue
        got = limit.get((arg.index, d))
        if got is not None and got[0] % option.split_factor(d, mesh):
            return got[1]
    return None


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
           broken: set[str] = frozenset(), costs: dict | None = None) -> list[dict]:
    """The plan JSON's ``safety``: every rule, how many options it removed from the search
    (``exclude``) or candidates it priced infinite (``inf``), whether the user allowed it
    and whether the plan breaks it; ``cost``, for a rule that kept the plan from something
    the model prefers, what that was and what it would have saved (``explain.rule_costs``)."""
    return [{"rule": r.id, "title": r.title, "citation": r.citation, "action": r.action, "detail": r.detail,
             "removed": removed.get(r.id, 0), "priced_infinite": priced_inf.get(r.id, 0),
             "allowed": r.id in allow, "plan_breaks": r.id in broken,
             **({"cost": costs[r.id]} if costs and r.id in costs else {})}
            for r in RULES]
