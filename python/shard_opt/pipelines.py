"""The pipelines shard-opt runs, as text: one place for the order of every step.

Each is a ``--pass-pipeline`` string run by the pass manager (``shard_opt.pass_manager``):
every step is a registered pass with its lit test (``lit_tests/passes/<name>.mlir``) or one
of MLIR's, and a step that fails leaves a repro. A function here gives the text for a
run's options; nothing else in shard-opt writes a step order.

Pricing (``shard_opt.evaluate``), in three parts, so the shared work runs once:

- ``prepare``: once per model, the module every candidate starts from::

      builtin.module(inline-calls, unfold-batch-matmul, mark-fusions)

- ``shared``: once per evaluator (a model on a mesh), what every candidate shares::

      builtin.module(add-mesh, insert-guards, decouple-const-fanout{only-sharded=false})

- ``candidate``: per candidate, on a copy of the shared module::

      builtin.module(apply-shardings, apply-constraints,
                     shardy-propagate{guard-opaque-ops=false guard-moved-dims=false
                                      decouple-const-fanout=false},
                     collect-collectives)

  (``probe``: the same up to propagation, no collectives made explicit.)

Export (``shard_opt.annotate.annotate_many``): the ``-o`` module, the user's module with the
plan written in, as tt-xla hands it to tt-mlir (no fusion tags, calls kept)::

      builtin.module(unfold-batch-matmul)                     once per model, then per plan:
      builtin.module(add-mesh, apply-shardings, apply-constraints, insert-guards, wrap-composites)

  (composites "off": no ``wrap-composites``, as tt-xla with ``tt_enable_composite_ops`` False.)

Rebuild (``shard_opt.emit.rebuild``): the module tt-xla builds from the emitted script,
``prepare`` then ``script`` (the script's own hooks go in between: not a pass) then
``rebuilt``.

With ``--propagation sdy`` the tt-mlir-only steps (``inline-calls``,
``decouple-const-fanout``) are left out; a partitioned module priced as written
(``--evaluate`` of an ``-o`` module: ``evaluate.is_partitioned``) runs no step that
would prepare, guard or propagate it again.
"""

from __future__ import annotations


def _pipeline(steps) -> str:
    return "builtin.module(" + ", ".join(s for s in steps if s) + ")"


def _allow(allow) -> str:
    """``insert-guards`` with the rules turned off (``--allow``), in a stable order."""
    return "insert-guards" + (f"{{allow={','.join(sorted(allow))}}}" if allow else "")


def prepare(propagation: str = "tt-mlir", *, as_written: bool = False) -> str:
    """The module every candidate starts from: calls inlined (tt-mlir's pipeline starts
    with its inliner), batched matmuls on every batch dim (as torch_xla and JAX write
    them), the op groups tt-mlir runs as one kernel tagged."""
    if as_written:
        return _pipeline([])
    return _pipeline(["inline-calls" if propagation == "tt-mlir" else "", "unfold-batch-matmul", "mark-fusions"])


def shared(propagation: str = "tt-mlir", allow=frozenset(), *, as_written: bool = False) -> str:
    """What every candidate of one evaluator shares: the mesh, the guards (they depend on
    the ops alone) and, with tt-mlir's pipeline, the constant-fed broadcasts decoupled in
    every function (before any shardings: a replicated candidate has no reshard the
    copies could change)."""
    if as_written:
        return _pipeline(["add-mesh"])
    return _pipeline(["add-mesh", _allow(allow),
                      "decouple-const-fanout{only-sharded=false}" if propagation == "tt-mlir" else ""])


def _propagate(propagation: str, **options) -> str:
    """``shardy-propagate`` with its own guards and decoupling off (``shared`` did them)."""
    opts = {"guard-opaque-ops": "false", "guard-moved-dims": "false", "decouple-const-fanout": "false", **options}
    if propagation != "tt-mlir":
        opts = {"pipeline": propagation, **opts}
    return "shardy-propagate{" + " ".join(f"{k}={v}" for k, v in opts.items()) + "}"


def candidate(propagation: str = "tt-mlir", *, verify: bool = False, annotate: bool = False,
              as_written: bool = False) -> str:
    """One candidate, on a copy of the shared module: its shardings and constraints applied,
    real Shardy propagation, the collectives read. ``verify``/``annotate``: MLIR's verifier
    and the accounting attributes, for a candidate whose IR is kept (the plan's)."""
    propagate = "" if as_written else _propagate(propagation, **({} if verify else {"verify": "false"}))
    collect = "collect-collectives" + ("" if annotate else "{annotate=false}")
    return _pipeline(["apply-shardings", "apply-constraints", propagate, collect])


def probe(propagation: str = "tt-mlir") -> str:
    """A probe (``Evaluator.probe``): one group annotated, propagation only."""
    return _pipeline(["apply-shardings", "apply-constraints",
                      _propagate(propagation, **{"explicit-collectives": "false", "verify": "false"})])


EXPORT_PREPARE = _pipeline(["unfold-batch-matmul"])


def export(allow=frozenset(), *, composites: str = "on") -> str:
    """One plan written into the user's module (after ``EXPORT_PREPARE``): the mesh, the
    argument shardings (results closed and replicated: the boundary rule), the
    constraints, the guards of the rules not turned off, and, with ``composites`` "on",
    tt-xla's composites (every attention, LayerNorm and GELU, as ``torch.compile(backend="tt")``
    wraps them by default; "off": every one flat, ``tt_enable_composite_ops`` False)."""
    return _pipeline(["add-mesh", "apply-shardings", "apply-constraints", _allow(allow),
                      "wrap-composites" if composites == "on" else ""])


def script(*, decouple: bool = True) -> str:
    """The rebuilt script's annotations, as the evaluator prepares every candidate: the
    mesh, the decoupled broadcasts (``decouple``: tt-mlir's pipeline, on a prepared
    module), the argument shardings and constraints."""
    return _pipeline(["add-mesh", "decouple-const-fanout{only-sharded=false}" if decouple else "",
                      "apply-shardings", "apply-constraints"])


def rebuilt(propagation: str = "tt-mlir") -> str:
    """The rebuilt script's module propagated without shard-opt's guards, its collectives read."""
    return _pipeline([_propagate(propagation), "collect-collectives"])
