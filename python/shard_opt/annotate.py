"""A plan written into the model's module: the module tt-mlir compiles and ``-o`` carries.

``annotate_many`` takes the model's module, keeps attention's batched matmuls on every batch
dim (``unfold_batch_matmul``, as the evaluator priced them and torch_xla writes them), adds
the mesh, the argument shardings and the constraint sites' ``sdy.sharding_constraint``s,
inserts the guards of the compiler-safety rules not turned off, and, with ``composites``
"on", wraps attention, LayerNorm and GELU in tt-xla's ``tenstorrent.*`` composites
(``passes/wrap_composites.py``) as ``torch.compile(backend="tt")`` hands them to tt-mlir by
default; "off" leaves every one flat, as tt-xla does with ``tt_enable_composite_ops`` False.
The steps are the pipelines ``pipelines.EXPORT_PREPARE`` (once per model) and
``pipelines.export`` (per plan), run by the pass manager.
"""

from __future__ import annotations

from shard_opt import ir, pipelines
from shard_opt.pass_manager import PassContext, PassManager
from shard_opt.passes.wrap_composites import wrap_composites

FORMS = ("on", "off")  # tt-xla's composites on (its default) or off (tt_enable_composite_ops=False)


def annotate(model, mesh, shardings: dict, constraints: dict | None = None, allow: frozenset = frozenset(),
             composites: str = "on") -> str:
    """The model's module with ``mesh``, the argument ``shardings`` and the ``constraints``
    written in, and shardy-propagate's guards: the ``-o`` module."""
    return annotate_many(model, mesh, [(shardings, constraints)], allow, composites=composites)[0]


def annotate_many(model, mesh, plans: list[tuple[dict, dict | None]], allow: frozenset = frozenset(),
                  composites: str = "on") -> list[str]:
    """``annotate`` for several plans of one model, parsing its module once (a full-size
    model's text takes a second to parse; the tt-mlir check annotates several plans)."""
    if composites not in FORMS:
        raise ValueError(f"composites must be one of {FORMS}, not {composites!r}")
    base = ir.parse(model.text, filename=model.name)
    PassManager(pipelines.EXPORT_PREPARE, PassContext(arguments=model.arguments)).run(base)
    # results carry their closed, replicated sharding: the boundary rule is part of the plan,
    # so XLA, tt-mlir and --evaluate all see the same output gather
    export = pipelines.export(allow, composites=composites)
    out = []
    for k, (shardings, constraints) in enumerate(plans):
        module = base if k == len(plans) - 1 else base.operation.clone()
        ctx = PassContext(mesh=mesh, shardings=shardings, arguments=model.arguments, constraints=constraints or {})
        PassManager(export, ctx).run(module)
        out.append(ir.print_module(module))
    return out


def has_composites(text: str) -> bool:
    """The module holds tt-xla composites (``stablehlo.composite "tenstorrent.*"``)."""
    return 'stablehlo.composite "tenstorrent.' in text


def composites_form(compiled_text: str, flat_text: str) -> str:
    """The form a module tt-mlir compiled is in: "on" (it holds tt-xla's composites), "off"
    (it holds none where tt-xla would wrap some: ``flat_text``, the same module flat, has
    groups ``wrap_composites`` wraps) or "none" (the model has nothing to wrap)."""
    if has_composites(compiled_text):
        return "on"
    probe = ir.parse(flat_text, filename="<composites>")
    return "off" if wrap_composites(probe) else "none"
