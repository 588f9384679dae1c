"""``shardy-propagate``: run real Shardy propagation and make collectives explicit.

Runs, in jaxlib's in-process Shardy (references/toolchain.md)::

    sdy-propagation-pipeline,
    sdy-export-pipeline{enable-insert-explicit-collectives=true}

after which every reshard is an ``sdy.all_reduce`` / ``all_gather`` / ``all_slice`` /
``reduce_scatter`` / ``all_to_all`` / ``collective_permute`` with its tensor type, the
same step tt-mlir's StableHLO pipeline takes (InsertExplicitReshards then
ReshardToCollectives; references/tenstorrent.md section 5).

Options:
  propagation: the propagation pass to run (``sdy-propagation-pipeline`` by default;
    ``sdy-user-priority-propagate`` and the basic/aggressive variants work too).
  explicit-collectives: insert the collectives (default true).
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.pass_manager import ModulePass, PassContext


@dataclass(frozen=True)
class ShardyPropagate(ModulePass):
    name = "shardy-propagate"
    summary = "Run Shardy propagation and insert explicit collectives"

    propagation: str = "sdy-propagation-pipeline"
    explicit_collectives: bool = True

    def apply(self, ctx: PassContext, module) -> None:
        export = "sdy-export-pipeline"
        if self.explicit_collectives:
            export += "{enable-insert-explicit-collectives=true}"
        ir.run_pipeline(module, f"builtin.module({self.propagation}, {export})", name=self.name)
