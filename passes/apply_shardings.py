"""``apply-shardings``: set ``sdy.sharding`` on ``@main``'s arguments and results.

The driver (search, ``--evaluate``) puts argument index -> sharding into the pass
context; this pass writes them as attributes Shardy reads::

    %arg1: tensor<256x64xf32>   ->   %arg1: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}

Options:
  shardings: argument shardings given on the command line, for tests and quick
    experiments: ``ARG:DIM/DIM/...`` entries joined by ``,``; a dim lists its axes
    joined by ``+``, ``-`` is replicated. ``shardings=0:model/-,1:-/model`` is
    ``%arg0: [{"model"}, {}]`` and ``%arg1: [{}, {"model"}]``. Added to (and
    overriding) what the driver put in the context.
  replicate-outputs: give every result a closed, replicated sharding (the boundary
    rule of docs/design.md: outputs are returned whole, so a split output pays its gather).
    Results named in the context's ``result_shardings`` keep that sharding instead
    (a KV cache stays on device). Results that already carry a sharding are kept.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from shard_opt import ir
from shard_opt.errors import UserError
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.sharding import TensorSharding


@dataclass(frozen=True)
class ApplyShardings(ModulePass):
    name = "apply-shardings"
    summary = "Set sdy.sharding on @main's arguments (and replicated results)"

    shardings: str = ""
    replicate_outputs: bool = True

    def apply(self, ctx: PassContext, module) -> None:
        func = ir.main_func(module)
        result_shardings = ctx.result_shardings or {}
        wanted_args = dict(ctx.shardings)
        wanted_args.update(parse_shardings_option(self.shardings))
        with module.context:
            ftype = func.attributes["function_type"].value
            n_inputs = len(ftype.inputs)  # the property builds a list of every input type
            for i in wanted_args:
                if i >= n_inputs:
                    raise UserError(f"apply-shardings: @main has {n_inputs} arguments, no argument {i}")
            _set_attrs(func, "arg_attrs", n_inputs, wanted_args)
            if self.replicate_outputs:
                wanted = {}
                for i, t in enumerate(ftype.results):
                    tt = ir.tensor_type(t)
                    if tt is None:
                        continue
                    wanted[i] = result_shardings.get(i, TensorSharding.replicated(len(tt[0])))
                _set_attrs(func, "res_attrs", len(ftype.results), wanted, keep_existing=True)


def parse_shardings_option(text: str) -> dict[int, TensorSharding]:
    """``0:model/-,1:-/model`` -> {0: [{"model"}, {}], 1: [{}, {"model"}]}."""
    out = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        index, sep, dims = entry.partition(":")
        if not sep or not index.isdigit():
            raise UserError(f"apply-shardings: bad entry {entry!r}; write ARG:DIM/DIM, e.g. 0:model/-")
        out[int(index)] = TensorSharding.of(
            [[] if d == "-" else d.split("+") for d in dims.split("/")]
        )
    return out


@functools.lru_cache(maxsize=4096)
def _parsed(text: str, context):
    return ir.ir().Attribute.parse(text, context)


def _set_attrs(func, key: str, count: int, shardings: dict, keep_existing: bool = False) -> None:
    irm = ir.ir()
    old = func.attributes[key] if key in func.attributes else None
    context = irm.Context.current
    new = []
    for i in range(count):
        s = shardings.get(i)
        new.append(_with_sharding(old[i] if old is not None else None, s.to_attr() if s is not None else None,
                                  keep_existing, context))
    func.attributes[key] = irm.ArrayAttr.get(new)


@functools.lru_cache(maxsize=16384)
def _with_sharding(old, sharding: str | None, keep_existing: bool, context):
    """The attribute dictionary ``old`` (or an empty one) with ``sdy.sharding`` set to
    ``sharding`` (unless ``keep_existing`` and it has one); once per (dictionary, sharding):
    a search writes the same few on every candidate (attributes are uniqued)."""
    irm = ir.ir()
    entries = {}
    if old is not None:
        d = irm.DictAttr(old)
        for j in range(len(d)):
            na = d[j]
            entries[na.name] = na.attr
    if sharding is not None and not (keep_existing and "sdy.sharding" in entries):
        entries["sdy.sharding"] = _parsed(sharding, context)
    return irm.DictAttr.get(entries, context)
