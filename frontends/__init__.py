"""Frontends: turn what the user has into a ``LoweredModel`` (StableHLO + named arguments).

``load(INPUT)`` dispatches on INPUT:

* ``zoo:NAME``  -- a bundled architecture at full size, no weights (``zoo.list_models()``);
* ``*.py``      -- a load script: ``load_model()`` + ``load_inputs()``, or a ``ModelLoader``
  class with those methods (tt-forge-models' contract), lowered by ``torch_frontend``;
* ``*.mlir``    -- StableHLO text, ``-`` for stdin (``mlir_frontend``).

JAX functions are lowered from Python with ``jax_frontend.lower_jax(fn, *args)``.
Every error is a ``shard_opt.errors.UserError`` of one line: what, where, what to do.
"""

from __future__ import annotations

import os

from shard_opt.errors import UserError
from shard_opt.lowered import LoweredModel

PHASES = ("prefill", "decode")
DTYPES = ("bf16", "f32", "f16")


ZOO_BATCH, ZOO_SEQ_LEN = 1, 128  # a zoo: model's inputs when --batch / --seq-len are not given


def load(input: str, *, layers: int | None = None, batch: int | None = None, seq_len: int | None = None,
         phase: str = "prefill", dtype: str = "bf16", spec: str | None = None,
         background: bool = False) -> LoweredModel:
    """Lower INPUT to a ``LoweredModel``.

    Args:
      input: ``zoo:NAME``, a ``.py`` load script, a ``.mlir`` file, or ``-`` (stdin).
      layers: keep this many repeated blocks (load scripts and zoo models).
      batch, seq_len: prefill token inputs are ``[batch, seq_len]``; decode is one token
        per sequence against a KV cache of ``seq_len`` positions. None: the input's own
        (a load script's ``load_inputs()``, as it returns them; a zoo model's 1 and 128).
      phase: ``prefill`` or ``decode`` (decode: causal LMs only).
      dtype: ``bf16`` (default), ``f32`` or ``f16`` for parameters and activations.
      spec: a ``--spec`` file: the user's shard spec (``frontends/shard_spec.py``), kept
        in ``meta["shard_spec"]`` like a loader's own ``load_shard_spec``.
      background: a zoo model missing from the cache is lowered in a child process while
        this one lowers its 1- and 2-block copies, and a ``PendingModel`` stands in for it
        (``zoo.lower_beside``; the CLI's choice).

    ``.mlir`` input is taken as written: ``layers`` and ``phase=decode`` are errors for it,
    ``batch``/``seq_len``/``dtype`` do not apply.
    """
    if phase not in PHASES:
        raise UserError(f"--phase {phase!r}: use one of {', '.join(PHASES)}")
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    for flag, v in (("--batch", batch), ("--seq-len", seq_len)):
        if v is not None and v < 1:
            raise UserError(f"{flag} {v}: must be at least 1")
    if layers is not None and layers < 1:
        raise UserError(f"--layers {layers}: must be at least 1")
    if input.startswith("zoo:"):
        from shard_opt.frontends.zoo import load_zoo

        model = load_zoo(input[4:], layers=layers, batch=ZOO_BATCH if batch is None else batch,
                         seq_len=ZOO_SEQ_LEN if seq_len is None else seq_len, phase=phase, dtype=dtype,
                         background=background)
        return _with_json_spec(model, spec)
    if os.path.isdir(input):
        raise UserError(f"{input}: is a directory; give a .py load script, a .mlir file, '-' (stdin) or zoo:NAME")
    ext = os.path.splitext(input)[1].lower()
    if input == "-" or ext == ".mlir":
        if layers is not None:
            raise UserError(f"{input}: --layers applies to load scripts and zoo models, not to .mlir input; "
                            f"drop --layers")
        if phase == "decode":
            raise UserError(f"{input}: --phase decode applies to load scripts and zoo models; a .mlir "
                            f"module is analysed as written: drop --phase decode")
        from shard_opt.frontends.mlir_frontend import load_mlir

        return _with_json_spec(load_mlir(input), spec)
    if ext == ".py":
        from shard_opt.frontends.torch_frontend import load_script

        return load_script(input, layers=layers, batch=batch, seq_len=seq_len, phase=phase, dtype=dtype, spec=spec)
    if not os.path.exists(input):
        raise UserError(f"{input}: no such file; give a .py load script, a .mlir file, '-' or zoo:NAME")
    raise UserError(f"{input}: unknown input type {ext or '(no extension)'!r}; give a .py load script, "
                    f"a .mlir file, '-' (stdin) or zoo:NAME")


def resized_text(resized: dict, where: str) -> str:
    """One line saying what ``hf.adapt_prefill`` did to a script's token inputs
    (``meta["inputs_resized"]``); here, not in ``hf``, so a .mlir run never imports torch."""
    names = ", ".join(resized.get("inputs") or [])
    return (f"{where}: token inputs ({names}) planned as {resized['to']} ({resized['flags']}); "
            f"load_inputs() returns {resized['from']}")


def _with_json_spec(model: LoweredModel, spec: str | None) -> LoweredModel:
    """A zoo model or .mlir module with a ``--spec`` file (JSON: there is no PyTorch model to
    hand a Python spec); the short copies the search lowers get it too."""
    if spec is None:
        return model
    from shard_opt.frontends.shard_spec import load_spec_file
    from shard_opt.lowered import PendingModel

    if isinstance(model, PendingModel):  # the spec goes on the model itself: wait for it
        model = model.resolve()

    model.meta["shard_spec"] = load_spec_file(spec)
    inner = model.with_layers
    if inner is not None:
        def with_layers(k: int) -> LoweredModel:
            return _with_json_spec(inner(k), spec)

        model.with_layers = with_layers
    return model


def list_models() -> list[str]:
    from shard_opt.frontends.zoo import list_models as _lm

    return _lm()


__all__ = ["load", "list_models", "resized_text", "PHASES", "DTYPES"]
