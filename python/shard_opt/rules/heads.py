"""Attention heads are split whole: a device never holds part of a head."""

from shard_opt.rules import Rule


class Heads(Rule):
    def excludes(self, model, structure):
        return {x: units for x, units in structure.units.items()
                if units < model.arguments[x[0]].shape[x[1]]}  # features that come in heads


RULE = Heads(
    "heads", "attention heads are split whole", "expert_kv_heads", "exclude",
    "a split that does not divide the heads gives a device part of a head; layers with 1-2 KV heads keep "
    "K/V replicated")
