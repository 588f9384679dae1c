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


def role_of(name: str) -> str:
    """A name with its layer indices written ``*``: ``model.layers.3.mlp.up_proj.weight``
    -> ``model.layers.*.mlp.up_proj.weight`` (one role across repeated layers)."""
    return _LAYER_INDEX.sub(".*.", "." + name + ".").strip(".")


def layer_of(name: str) -> int | None:
    """The first layer index in a name (``model.layers.3.mlp`` -> 3), or None."""
    m = _LAYER_INDEX.search("." + name + ".")
    return int(m.group(1)) if m else None


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
    repeat: tuple[str, int] | None = None  # (role, layer) found by ``find_repeats``

    @property
    def layer(self) -> int | None:
        """Index of the repeated block this argument belongs to, if its name has one."""
        if self.repeat:
            return self.repeat[1]
        return layer_of(self.name)

    @property
    def role(self) -> str:
        """The name with layer indices replaced by ``*``: one role across repeated layers."""
        if self.repeat:
            return self.repeat[0]
        return role_of(self.name)


_DIGITS = re.compile(r"\d+")


def find_repeats(arguments: list[Argument], *, min_repeats: int = 2) -> list[Argument]:
    """Mark the repeated layers of a module whose argument names do not show them.

    A ``.mlir`` module with ``%argN`` names, or a Flax model (``layers_0``, ``layers_1``),
    has no ``.N.`` in its names, so every layer's weights would be their own group and
    the search space would grow with depth. Here the repetition is read from the
    argument *signatures* (kind, shape, dtype): the longest run of one block of ``p``
    signatures repeated ``k >= min_repeats`` times, the block holding at least two
    distinct signatures and one tensor of rank >= 2, and, for named arguments, names that
    differ across the repeats only in their numbers. Each argument of the run gets
    ``repeat = (role, layer)``: the role is the name with the numbers that vary across
    layers written ``*`` (``params.layers_*.Dense_0.kernel``), or ``%argN (repeated)``
    for unnamed arguments; the layer is the repetition index. Arguments whose names already
    carry ``.N.`` layer indices are returned unchanged.
    """
    if any(a.layer is not None for a in arguments):
        return arguments
    sig = [(a.kind, a.shape, a.dtype) for a in arguments]
    n = len(sig)
    found = []  # (covered, -period, start, period, repeats)
    for p in range(2, n // min_repeats + 1):
        for start in range(0, n - min_repeats * p + 1):
            block = sig[start:start + p]
            if len(set(block)) < 2 or not any(len(shape) >= 2 for _, shape, _ in block):
                continue  # q, k, v, o of one layer with equal shapes are not layers
            k = 1
            while start + (k + 1) * p <= n and sig[start + k * p:start + (k + 1) * p] == block:
                k += 1
            if k >= min_repeats:
                found.append((k * p, -p, start, p, k))
    for _, _, start, p, k in sorted(found, reverse=True):
        roles = [_vary([arguments[start + r * p + j].name for r in range(k)]) for j in range(p)]
        if all(roles) and len(set(roles)) == p:
            break
    else:
        return arguments
    out = list(arguments)
    for j in range(p):
        for r in range(k):
            a = arguments[start + r * p + j]
            out[a.index] = Argument(a.index, a.name, a.kind, a.shape, a.dtype, a.module_class, (roles[j], r))
    return out


def _vary(names: list[str]) -> str | None:
    """The role of one position across repeats: ``layers_0.w``, ``layers_1.w`` ->
    ``layers_*.w``; unnamed ``%arg3``, ``%arg9`` -> ``%arg3 (repeated)``; None when the
    names disagree otherwise (then these are not repeats of one layer)."""
    if all(n.startswith("%arg") for n in names):
        return f"{names[0]} (repeated)"
    parts = [_DIGITS.split(n) for n in names]
    nums = [_DIGITS.findall(n) for n in names]
    if any(x != parts[0] for x in parts):
        return None
    varying = [i for i, d in enumerate(nums[0]) if any(m[i] != d for m in nums)]
    if not varying:
        return None
    out = parts[0][0]
    for i, d in enumerate(nums[0]):
        out += ("*" if i in varying else d) + parts[0][i + 1]
    return out


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


# A model whose whole is at most this many times its 2-block copy is scored whole, with no
# short copies: a layered score (shard_opt.evaluate.LayeredEvaluator) screens each
# candidate on the 1-block copy and verifies it on the 2-block copy too, and lowers both;
# when the blocks are a small part of the model the two copies cost more than the model
# (the search verifies about one candidate in five: a whole run costs less than a 1-block
# run plus a fifth of a 2-block run below ~1.2x). The Wan VAE decoder is 1.07x its 2-block
# copy; every other zoo model with blocks is 9x or more.
SCORED_WHOLE = 1.25


def scored_whole(meta: dict) -> bool:
    """Whether a model with these ``meta`` is scored whole (``SCORED_WHOLE``): more than
    two blocks (with two or fewer the search scores the model whole anyway, and the
    1-block copy still gives the structure), yet hardly bigger than two of them (its
    ``whole_per_two_blocks``, which the torch frontend records)."""
    ratio = meta.get("whole_per_two_blocks")
    return ratio is not None and ratio <= SCORED_WHOLE and (meta.get("total_layers") or 0) > 2


class PendingModel:
    """A model another process is still lowering, standing in for it.

    Reading any attribute waits for the real ``LoweredModel`` (``resolve()``) and gives its
    value, so every consumer may treat this as the model. The driver alone looks ahead:
    ``provisional`` is the model as far as it is known before the lowering ends (its
    arguments predicted from its short copies, ``predict_arguments``; no text), enough to
    start the work that needs only the arguments; after ``resolve()`` the driver checks
    that the prediction held (``same_arguments``) or starts again from the real model.
    """

    def __init__(self, provisional: "LoweredModel | None", finish: Callable[[], "LoweredModel"]):
        object.__setattr__(self, "_provisional", provisional)
        object.__setattr__(self, "_finish", finish)
        object.__setattr__(self, "_real", None)

    @property
    def provisional(self) -> "LoweredModel | None":
        return self._provisional

    def resolve(self) -> "LoweredModel":
        if self._real is None:
            object.__setattr__(self, "_real", self._finish())
        return self._real

    def __getattr__(self, name):  # only names this class does not define
        return getattr(self.resolve(), name)

    def __setattr__(self, name, value):
        setattr(self.resolve(), name, value)


def layer_copy(model: "LoweredModel") -> "LoweredModel":
    """The 1-layer copy of a model scored from its short copies (more than two repeated
    layers, ``search.make_scorer``), else the model: what a layer holds, every layer holds
    (the search reads its limits and constraint sites there)."""
    if model.with_layers is not None and (model.num_layers or 0) > 2:
        return model.with_layers(1)
    return model


def indices_by_role(arguments: list[Argument]) -> dict[tuple, list[int]]:
    """(role, shape) -> the indices of the arguments with that role and shape: the same
    weight in every layer (what a short copy's argument stands for in the whole model)."""
    out: dict[tuple, list[int]] = {}
    for a in arguments:
        out.setdefault((a.role, a.shape), []).append(a.index)
    return out


def same_arguments(a: "LoweredModel", b: "LoweredModel") -> bool:
    """What a provisional model stood for is what ``b`` is: same name, layers and arguments."""
    return a.name == b.name and a.num_layers == b.num_layers and list(a.arguments) == list(b.arguments)


def predict_arguments(short1: list[Argument], short2: list[Argument], layers: int) -> list[Argument] | None:
    """The arguments of the ``layers``-block model, from its 1- and 2-block copies'.

    The 2-block list is the 1-block list with the second block's arguments inserted right
    after the first block's, each named as its first-block twin with one number 0 -> 1
    (``model.layers.0.mlp.up_proj.weight`` / ``model.layers.1...``). The whole model repeats
    the second block for blocks 1 .. layers-1, that number counting up. None when the lists
    do not have that shape (the caller then waits for the real arguments).
    """
    n1, n2 = len(short1), len(short2)
    b = n2 - n1
    if b <= 0 or layers < 2:
        return None

    def same(x: Argument, y: Argument) -> bool:
        return (x.name, x.kind, x.shape, x.dtype, x.module_class, x.repeat) == \
            (y.name, y.kind, y.shape, y.dtype, y.module_class, y.repeat)

    p = 0
    while p < n1 and same(short1[p], short2[p]):
        p += 1
    if p < b or not all(same(short1[i], short2[i + b]) for i in range(p, n1)):
        return None
    namers = []
    for x, y in zip(short1[p - b:p], short2[p:p + b]):
        if (x.kind, x.shape, x.dtype, x.module_class) != (y.kind, y.shape, y.dtype, y.module_class) or \
                x.repeat is not None or y.repeat is not None:
            return None
        tx, ty = re.split(r"(\d+)", x.name), re.split(r"(\d+)", y.name)
        diff = [i for i, (u, v) in enumerate(zip(tx, ty)) if u != v]
        if len(tx) != len(ty) or len(diff) != 1 or (tx[diff[0]], ty[diff[0]]) != ("0", "1"):
            return None
        namers.append((ty, diff[0]))
    if len({d for _, d in namers}) != 1:
        return None

    def named(y: Argument, tokens: list[str], at: int, k: int) -> Argument:
        return Argument(0, "".join(tokens[:at] + [str(k)] + tokens[at + 1:]), y.kind, y.shape, y.dtype,
                        y.module_class, y.repeat)

    middle = [named(y, tokens, at, k) for k in range(1, layers)
              for y, (tokens, at) in zip(short2[p:p + b], namers)]
    out = list(short1[:p]) + middle + list(short1[p:])
    return [Argument(i, a.name, a.kind, a.shape, a.dtype, a.module_class, a.repeat) for i, a in enumerate(out)]
