"""Compiler-safety rules: what tt-mlir cannot lower or miscompiles today, one file each.

A rule is one object (``Rule``) that carries every piece of its behaviour:

- ``excludes``: the options it removes from the search, as ``(argument, dim) -> units``
  (that dim may be split only by factors dividing ``units``; 1: not at all), and
  ``site_excludes`` the same for a constraint site's dims;
- ``breaks``: whether a propagated module does what it forbids (read from the walk
  ``shard_opt.analysis.extract_facts`` makes: ``Walk``); a candidate that does is priced
  infinite unless the user allowed the rule;
- ``guard_ops`` / ``guard`` / ``hoist``: the constraint it inserts in front of an op
  before propagation (``shardy-propagate``'s guards), so the safe form is explicit and
  priced, and the module output it may sit on instead (what the user's script can hook);
- ``script_guards``: how that guard is written into the user's tt-xla script.

``--allow ID`` turns a rule off: its exclusions and guards go, and a plan that breaks it
says so (``plan_breaks`` in the plan JSON's ``safety``). Adding a rule is one file here
(an instance named ``RULE``, its id the file's name), one entry in ``_MODULES`` and a
test; its citation is a key of ``shard_opt.emit.citations.CITATIONS``. Every reader asks
this registry: the search and the baselines (``shard_opt.safety``, what the driver calls),
``--allow`` and its help, the plan's safety table, the report's safety rules and compiler
limitations (``limitation``, ``in_plan``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass
class Walk:
    """What ``extract_facts`` saw in a propagated module that the rules read: every
    ``stablehlo.add``, the ops a guard may sit in front of, every reshape, the
    collectives by op name, the local shapes around every on-device slice, the values
    computed from weights alone, each value's sharding and the module's mesh."""

    adds: list = field(default_factory=list)
    moving: list = field(default_factory=list)  # slice / pad / reverse ops
    reshapes: list = field(default_factory=list)
    collectives: set = field(default_factory=set)  # op names: "sdy.all_gather", ...
    slices: list = field(default_factory=list)  # (local shape before, after) of every sdy.all_slice of an activation
    gathers: list = field(default_factory=list)  # (local shape before, after) of every sdy.all_gather of an activation
    dots: list = field(default_factory=list)  # every stablehlo.dot_general
    weight_values: set = field(default_factory=set)
    shard: dict = field(default_factory=dict)  # Value -> TensorSharding
    mesh: object = None  # the module's Mesh (a sharding's split factors)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    citation: str  # a key of shard_opt.emit.citations.CITATIONS
    action: str  # "exclude" | "inf" | "guard" | "report": how it mainly acts (the report's column; "report": found
    # and said, not priced)
    detail: str
    guard_ops: tuple[str, ...] = ()
    # the report's compiler-limitation line when a plan hits the rule (``in_plan``): (the words
    # the citation follows, the rest), and the claim (shard_opt.emit.citations.CLAIMS) it backs
    limitation: tuple[str, str] = ()
    limitation_claim: str = ""

    def in_plan(self, plan) -> bool:
        """Whether a plan (``shard_opt.plan.Plan``) hits the rule: its safety table says the
        plan breaks it (an allowed rule too: the plan still does what it forbids)."""
        return any(r.get("rule") == self.id and r.get("plan_breaks") for r in plan.safety or [])

    def excludes(self, model, structure) -> dict[tuple[int, int], int]:
        """(argument, dim) -> units: the splits the search may not offer."""
        return {}

    def site_excludes(self, shape, classes) -> dict[int, int]:
        """dim -> units: the splits a constraint site (``candidates.site_groups``: a reshape's
        result of ``shape``, each dim's argument-dim ``classes``) may not be offered, as
        ``excludes`` says for arguments."""
        return {}

    def breaks(self, walk: Walk) -> bool:
        """Whether the propagated module ``walk`` describes does what the rule forbids."""
        return False

    def guard(self, op) -> str | None:
        """The ``#sdy.sharding`` text to constrain operand 0 of ``op`` (one of
        ``guard_ops``) to before propagation, or None."""
        return None

    def hoist(self, graph, op):
        """Where the guard of ``op`` goes instead of its operand: ``(value, dims kept
        whole)`` on a module's output (``graph``: ``shard_opt.module_outputs.Graph`` of the
        module being guarded), so the priced form is the one ``script_guards`` writes; or
        None (in front of ``op``)."""
        return None

    def script_guards(self, module, model) -> list[dict]:
        """The guards of a propagated ``module`` as the user's script must write them:
        ``[{"rule", "module", "sharding", "why"}]`` (a forward hook on the torch module
        whose output the guard constrains)."""
        return []


_MODULES = ("residual_stream", "vocab_gather", "heads", "conv_spatial", "collective_permute", "fused_split",
            "reshape_constraint", "tile_aligned", "tile_columns", "one_axis_contraction")
IDS = tuple(m.replace("_", "-") for m in _MODULES)  # a rule's id is its file's name, with "-" for "_"
RULES: tuple[Rule, ...] = tuple(importlib.import_module(f"{__name__}.{m}").RULE for m in _MODULES)
assert tuple(r.id for r in RULES) == IDS, "a rule's id must be its file's name"
BY_ID = {r.id: r for r in RULES}
DETECTORS = tuple(r for r in RULES if type(r).breaks is not Rule.breaks)
GUARDS = tuple(r for r in RULES if r.guard_ops)
REPORTED = frozenset(r.id for r in RULES if r.action == "report")  # found and said, never priced infinite


def violations(walk: Walk) -> list[str]:
    """The ids of the rules the module ``walk`` describes breaks, in ``RULES`` order."""
    return [r.id for r in DETECTORS if r.breaks(walk)]
