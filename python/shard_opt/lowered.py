"""What a frontend hands the core: a StableHLO module and what its arguments are.

Every frontend (``.mlir`` text, PyTorch load script, JAX function, zoo) returns a
``LoweredModel``. The module text has one public ``func.func @main``; ``arguments``
lists its arguments in order, each with a name the user recognises (a PyTorch FQN such
as ``model.layers.3.self_attn.q_proj.weight``, a JAX pytree path, or ``%argN``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

ARG_KINDS = ("param", "buffer", "input", "cache")

_LAYER_INDEX = re.compile(r"\.(\d+)\.")


@dataclass(frozen=True)
class Argument:
    """One argument of ``@main``.

    Attributes:
      index: position in ``@main``'s argument list.
      name: user-facing name (FQN for PyTorch parameters and buffers).
      kind: ``param`` (weight), ``buffer``, ``input`` (activation from the host) or
        ``cache`` (a KV cache handed in for decode).
      shape: global shape.
      dtype: MLIR element type (``bf16``, ``f32``, ``i64``...).
      module_class: class name of the owning module (``Linear``, ``LlamaAttention``),
        when the frontend knows it.
    """

    index: int
    name: str
    kind: str
    shape: tuple[int, ...]
    dtype: str
    module_class: str | None = None

    @property
    def layer(self) -> int | None:
        """Index of the repeated block this argument belongs to, if its name has one."""
        m = _LAYER_INDEX.search("." + self.name + ".")
        return int(m.group(1)) if m else None

    @property
    def role(self) -> str:
        """The name with layer indices replaced by ``*``: one role across repeated layers."""
        return _LAYER_INDEX.sub(".*.", "." + self.name + ".").strip(".")


@dataclass
class LoweredModel:
    """A model lowered to StableHLO, ready for the passes.

    Attributes:
      name: model name for reports (``llama-3-8b``, a script's stem, a file name).
      text: StableHLO module text (may already carry ``sdy`` annotations).
      arguments: one entry per ``@main`` argument, in order.
      source: ``mlir``, ``pytorch``, ``jax`` or ``zoo``.
      script_path: the user's load script, for ``--emit-torch``.
      num_layers: how many repeated blocks the module holds, if known.
      with_layers: re-lower the same model keeping ``k`` repeated blocks; the search
        uses it to evaluate a short model and compose (None if not available).
      architecture: the module tree with parameter shapes and FLOPs (``--describe``).
      meta: anything else a frontend wants reports to show (dtype, batch, phase...).
    """

    name: str
    text: str
    arguments: list[Argument]
    source: str = "mlir"
    script_path: str | None = None
    num_layers: int | None = None
    with_layers: Callable[[int], "LoweredModel"] | None = None
    architecture: dict | None = None
    meta: dict = field(default_factory=dict)
