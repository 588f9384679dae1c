"""``apply-constraints``: pin the sharding of intermediate values with ``sdy.sharding_constraint``.

Argument shardings are not always enough: where a value's layout changes shape (the
reshape that splits a projection's features into attention heads), Shardy may keep
the value whole, or split it in a way that costs a collective later. A constraint on the
reshape's result is the hint: Shardy propagates from it as from an argument, and
inserts whatever collective it needs to honour it.

A *site* is every ``stablehlo.reshape`` that splits a dim in two or more
(``tensor<1x128x4096xbf16> -> tensor<1x128x32x128xbf16>``; not an unsqueeze), keyed by its operand and result types
(``1x128x4096xbf16->1x128x32x128xbf16``): the same reshape in every repeated layer is
one site, so the search decides it once, like a role. ``find_sites`` lists them.

The driver puts site -> sharding into the pass context (``constraints``); this pass
puts ``%c = sdy.sharding_constraint %r <@mesh, [...]>`` after each matching reshape and
points every other use of ``%r`` at ``%c``. Keys ``activation:KEY`` are a user's activation
spec (a loader's ``load_activation_shard_spec``; ``shard_opt.activations``): the values
``KEY`` names get their constraints, back to back, before the sites'.

Options:
  constraints: constraints given on the command line, for tests: ``SITE=DIM/DIM/...``
    entries joined by ``,``; a dim lists its axes joined by ``+``, ``-`` leaves it
    whole (``1x128x4096xbf16->1x128x32x128xbf16=-/-/model/-``). Added to (and
    overriding) what the driver put in the context.
"""

from __future__ import annotations

from dataclasses import dataclass

from shard_opt import activations, ir
from shard_opt.errors import UserError
from shard_opt.pass_manager import ModulePass, PassContext
from shard_opt.sdy import constraint_op, mesh_name_of
from shard_opt.sharding import TensorSharding

SITE_OPS = ("stablehlo.reshape",)


@dataclass(frozen=True)
class ApplyConstraints(ModulePass):
    name = "apply-constraints"
    summary = "Constrain the sharding of intermediate values (reshape sites) with sdy.sharding_constraint"

    constraints: str = ""

    def apply(self, ctx: PassContext, module) -> None:
        wanted = dict(ctx.constraints or {})
        wanted.update(parse_constraints_option(self.constraints))
        if not wanted:
            return
        mesh_name = mesh_name_of(module)
        if mesh_name is None:
            raise UserError("apply-constraints: the module has no sdy.mesh; run add-mesh first")
        irm = ir.ir()
        with module.context:
            for key, c in wanted.items():  # a user's activation spec (shard_opt.activations)
                if key.startswith(activations.PREFIX):
                    activations.insert(module, ctx.arguments or [], key[len(activations.PREFIX):], c, mesh_name)
            for op, site in _site_ops(module):
                s = wanted.get(site)
                if s is None:
                    continue
                value = op.results[0]
                rank = len(ir.tensor_type(value.type)[0])
                if s.rank != rank:
                    raise UserError(f"apply-constraints: the constraint for {site} has {s.rank} dims, the "
                                    f"reshape's result has {rank}; give one entry per result dim")
                with irm.InsertionPoint.after(op), op.location:
                    c = constraint_op(value, TensorSharding(s.dims, mesh_name).to_attr())
                value.replace_all_uses_except(c.result, c)


def site_key(op) -> str | None:
    """The site an op is, or None (a reshape that does not add dims, another op)."""
    if op.operation.name not in SITE_OPS or len(op.operands) != 1:
        return None
    src, dst = ir.tensor_type(op.operands[0].type), ir.tensor_type(op.results[0].type)
    if src is None or dst is None or _non_unit(dst[0]) <= _non_unit(src[0]):
        return None  # not a split: an unsqueeze or a merge
    if not dst[1].startswith(("f", "bf")):
        return None  # index arithmetic, masks: not data a layout hint helps
    return f"{_type_body(*src)}->{_type_body(*dst)}"


def _non_unit(shape) -> int:
    return sum(1 for d in shape if d != 1)


def _type_body(shape, dtype) -> str:
    return "x".join([*map(str, shape), dtype])


def _site_ops(module):
    for op in ir.walk_ops(module.operation):
        site = site_key(op)
        if site is not None:
            yield op, site


def find_sites(module) -> dict[str, tuple[int, ...]]:
    """Site key -> result shape, in program order."""
    out = {}
    for op, site in _site_ops(module):
        out.setdefault(site, ir.tensor_type(op.results[0].type)[0])
    return out


def parse_constraints_option(text: str) -> dict[str, TensorSharding]:
    out = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        site, sep, dims = entry.rpartition("=")
        if not sep or "->" not in site:
            raise UserError(f"apply-constraints: bad entry {entry!r}; write IN->OUT=DIM/DIM, "
                            f"e.g. 1x128x4096xbf16->1x128x32x128xbf16=-/-/model/-")
        out[site] = TensorSharding.of([[] if d == "-" else d.split("+") for d in dims.split("/")])
    return out
