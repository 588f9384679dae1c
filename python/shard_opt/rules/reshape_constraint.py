"""Constraints after a reshape are written as a replicated-then-sharded pair."""

from shard_opt.rules import Rule

RULE = Rule(
    "reshape-constraint", "constraints after a reshape are written as a replicated-then-sharded pair",
    "tt_xla_3643", "guard",
    "a single constraint after a reshape lets Shardy push the split back through it (\"number of elements "
    "doesn't match\"); the emitted script writes the pair")
