"""What pricing a candidate gives: ``Candidate``, ``Score`` and ``Evaluation``, as values.

The engine (``shard_opt.evaluate``: apply, propagate, collect, price) takes a ``Candidate``
and hands back an ``Evaluation``; the search compares ``Score`` s; the plan builder reads
both. They sit here, below the engine and the plan, so a value type never imports the
code that computes it (``docs/design.md``, "Layout").

    >>> from shard_opt.sharding import TensorSharding
    >>> c = Candidate.of({0: TensorSharding.of([["model"], []])})
    >>> c.shardings[0].axis_names()
    [['model'], []]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from shard_opt.facts import Cost, ModuleFacts
from shard_opt.sharding import TensorSharding

@dataclass(frozen=True, eq=False)
class Candidate:
    """One plan to price: argument index -> sharding (an argument left out follows its
    consumer: open, for Shardy to decide) and constraint site -> sharding (intermediate
    values, ``passes/apply_constraints.py``). Read-only: build another to change it."""

    shardings: Mapping[int, TensorSharding] = field(default_factory=dict)
    constraints: Mapping[str, TensorSharding] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "shardings", MappingProxyType(dict(self.shardings)))
        object.__setattr__(self, "constraints", MappingProxyType(dict(self.constraints or {})))

    @staticmethod
    def of(shardings: Mapping[int, TensorSharding], constraints: Mapping[str, TensorSharding] | None = None
           ) -> "Candidate":
        return Candidate(shardings, constraints or {})

    def body(self) -> tuple:
        """The candidate as text, for equality and hashing: its shardings and constraints."""
        return (tuple(sorted((i, s.body()) for i, s in self.shardings.items())),
                tuple(sorted((k, s.body()) for k, s in self.constraints.items())))

    def __eq__(self, other) -> bool:
        return isinstance(other, Candidate) and self.body() == other.body()

    def __hash__(self) -> int:
        return hash(self.body())

    def __reduce__(self):  # a mapping proxy does not pickle: rebuild from plain dicts
        return Candidate, (dict(self.shardings), dict(self.constraints))


@dataclass(frozen=True)
class Score:
    """The numbers a search compares (additive, so they extrapolate over layers)."""

    score: float
    total_us: float
    compute_us: float
    ccl_us: float
    ccl_count: int
    ccl_bytes: int
    memory_bytes: int
    fits: bool
    unsafe: tuple[str, ...] = ()  # compiler-safety rules it breaks (shard_opt.safety)

    @staticmethod
    def of(cost: Cost, facts: ModuleFacts, allow: frozenset[str] = frozenset()) -> "Score":
        """A module's score; a plan that breaks a safety rule the user did not allow scores
        infinite (its times stay, for the report); a rule that only reports does not."""
        unsafe = tuple(sorted(set(facts.violations) - set(allow) - set(facts.unpriced)))
        return Score(
            math.inf if unsafe else cost.score, cost.total_us, cost.compute_us, cost.ccl_us, len(facts.collectives),
            sum(c.bytes_per_device for c in facts.collectives), cost.memory_per_device_bytes, cost.fits, unsafe,
        )

    def key(self) -> tuple:
        """Sort key: score, then fewer collectives, fewer bytes, less memory.

        Equal times are common: a replicated weight whose consumer is split is sliced
        locally (a free all_slice), so it costs the same time as a split weight, one
        more collective and more DRAM.
        """
        return (round(self.score, 6), self.ccl_count, self.ccl_bytes, self.memory_bytes)


@dataclass(frozen=True)
class Evaluation:
    """A fully evaluated candidate on one module: the argument shardings (with the ones
    Shardy chose for arguments left open, when the IR was kept), the cost model's verdict,
    the facts it priced, the propagated module's text (when kept), the block-float format
    of each weight stored so (argument index -> format) and the safety rules allowed."""

    shardings: Mapping[int, TensorSharding]
    cost: Cost
    facts: ModuleFacts
    text: str | None = None  # the propagated module with explicit collectives
    storage: Mapping[int, str] = field(default_factory=dict)

    allow: frozenset = frozenset()
    score: Score = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "score", Score.of(self.cost, self.facts, self.allow))
