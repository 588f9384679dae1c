"""Convolutions split on channels only: a spatial split needs a halo exchange."""

from shard_opt.rules import Rule


class ConvSpatial(Rule):
    def excludes(self, model, structure):
        out = {}
        for a in model.arguments:
            if a.kind == "param" and len(a.shape) >= 3 and (a.module_class or "").lower().startswith("conv"):
                for d in range(2, len(a.shape)):
                    out[(a.index, d)] = 1
        return out


RULE = ConvSpatial(
    "conv-spatial", "convolutions split on channels only", "tt_mlir_8216", "exclude",
    "a split of a convolution's spatial dims needs a halo exchange tt-mlir does not expose",
    limitation=("**a convolution is split on a spatial dim**, which needs a halo exchange tt-mlir does not expose",
                "; shard channels instead."),
    limitation_claim="spatial-conv-halo")
