"""No ``sdy.collective_permute``: tt-mlir does not lower it."""

from shard_opt.rules import Rule


class CollectivePermute(Rule):
    def breaks(self, walk) -> bool:
        return "sdy.collective_permute" in walk.collectives


RULE = CollectivePermute(
    "collective-permute", "no collective_permute", "tt_mlir_3370", "inf",
    "tt-mlir does not lower sdy.collective_permute (\"not implemented yet\")",
    limitation=("**collective_permute is not lowered by tt-mlir** (\"not implemented yet\")",
                ": this plan will not compile until that is fixed; choose an alternative."),
    limitation_claim="collective-permute-unsupported")
