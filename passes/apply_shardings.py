"""``apply-shardings``: set ``sdy.sharding`` on ``@main``'s arguments and results.

The driver (search, ``--evaluate``) puts argument index -> sharding into the pass
context; this pass writes them as attributes Shardy reads::

    %arg1: tensor<256x64xf32>   ->   %arg1: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}

Options:
  replicate-outputs: give every result a closed, replicated sharding (the boundary
    rule of DESIGN.md: outputs are returned whole, so a split output pays its gather).
    Results named in the context's ``result_shardings`` keep that sharding instead
    (a KV cache stays on device). Results that already carry a sharding are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import ir
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.sharding import TensorSharding


@dataclass(frozen=True)
class ApplyShardings(ModulePass):
    name = "apply-shardings"
    summary = "Set sdy.sharding on @main's arguments (and replicated results)"

    replicate_outputs: bool = True

    def apply(self, ctx: PassContext, module) -> None:
        func = ir.main_func(module)
        result_shardings = getattr(ctx, "result_shardings", {}) or {}
        with module.context:
            ftype = func.attributes["function_type"].value
            _set_attrs(func, "arg_attrs", len(ftype.inputs), ctx.shardings)
            if self.replicate_outputs:
                wanted = {}
                for i, t in enumerate(ftype.results):
                    tt = ir.tensor_type(t)
                    if tt is None:
                        continue
                    wanted[i] = result_shardings.get(i, TensorSharding.replicated(len(tt[0])))
                _set_attrs(func, "res_attrs", len(ftype.results), wanted, keep_existing=True)


def _set_attrs(func, key: str, count: int, shardings: dict, keep_existing: bool = False) -> None:
    irm = ir.ir()
    old = func.attributes[key] if key in func.attributes else None
    new = []
    for i in range(count):
        entries = {}
        if old is not None:
            d = irm.DictAttr(old[i])
            for j in range(len(d)):
                na = d[j]
                entries[na.name] = na.attr
        s = shardings.get(i)
        if s is not None and not (keep_existing and "sdy.sharding" in entries):
            entries["sdy.sharding"] = irm.Attribute.parse(s.to_attr())
        new.append(irm.DictAttr.get(entries))
    func.attributes[key] = irm.ArrayAttr.get(new)
