"""Constraints after a reshape are written as a replicated-then-sharded pair."""

from shard_opt.rules import Rule


class ReshapeConstraint(Rule):
    def in_plan(self, plan) -> bool:
        """A guard rule: a plan hits it when it has the constraints the rule writes as pairs."""
        return bool(plan.constraints)


RULE = ReshapeConstraint(
    "reshape-constraint", "constraints after a reshape are written as a replicated-then-sharded pair",
    "tt_xla_3643", "guard",
    "a single constraint after a reshape lets Shardy push the split back through it (\"number of elements "
    "doesn't match\"); the emitted script writes the pair",
    limitation=("intermediate constraints are written as a replicated-then-sharded pair, the workaround for sharded "
                "reshapes", "."),
    limitation_claim="reshape-constraint-pair")
