"""``.mlir`` text (a file or stdin) -> ``LoweredModel``; and the argument-name attributes.

Argument names and kinds travel inside the module as argument attributes that only
shard-opt reads::

    func.func @main(%arg0: tensor<256x64xf32> {shard_opt.kind = "param", shard_opt.name = "fc1.weight"}, ...)

Every frontend writes them (``annotate_arguments``), so a module written out with
``-o`` and read back keeps its names; Shardy ignores them (propagation and explicit
collectives work with them present, tests/test_frontends.py checks it).

Reading a module, for each ``@main`` argument:

* name: ``shard_opt.name`` if present; else the argument's name location, which is
  how JAX records pytree paths (``loc("params['dense']['kernel']")`` with
  ``as_text(debug_info=True)``), written as a dotted path (``params.dense.kernel``);
  else ``%argN``.
* kind: ``shard_opt.kind`` if present; else from the name: ``past_key_values`` /
  ``cache`` -> ``cache``; a name under ``params`` or ending in ``.weight``, ``.bias``,
  ``.kernel``, ``.scale``, ``.embedding`` -> ``param``; ``inv_freq``,
  ``running_mean``/``running_var`` -> ``buffer``; else (every unnamed ``%argN``, a
  name such as ``x`` or ``w1``) from the graph (``structure.graph_weights``): an
  argument contracted against an activation (a matmul's weight, a convolution's
  kernel) and the bias added to its product are ``param``, anything else ``input``.
  Arguments are *not* guessed to be weights from their rank: an activation is rank
  >= 2 too, and calling it a weight would let the search split it "for free".
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys

from shard_opt import ir
from shard_opt.errors import UserError
from shard_opt.lowered import ARG_KINDS, Argument, LoweredModel, find_repeats

NAME_ATTR = "shard_opt.name"
KIND_ATTR = "shard_opt.kind"

_PARAM_SUFFIX = (".weight", ".bias", ".kernel", ".scale", ".embedding", ".gate_up_proj", ".down_proj")
_BUFFER_SUFFIX = ("inv_freq", "running_mean", "running_var", "num_batches_tracked")


def path_to_dotted(text: str) -> str:
    """``params['dense']['kernel']`` / ``x[0].w`` -> ``params.dense.kernel`` / ``x.0.w``."""
    s = re.sub(r"\[['\"]([^'\"]*)['\"]\]", r".\1", text)
    s = re.sub(r"\[(\d+)\]", r".\1", s)
    return s.strip(".")


def _named_kind(name: str | None) -> str | None:
    if not name or name.startswith("%arg"):
        return None
    low = name.lower()
    if "past_key_values" in low or low.startswith("cache") or ".cache" in low or "kv_cache" in low:
        return "cache"
    if low.endswith(_BUFFER_SUFFIX):
        return "buffer"
    if low.startswith("params.") or low.endswith(_PARAM_SUFFIX):
        return "param"
    return None


def _arg_attr_dicts(func) -> list[dict]:
    irm = ir.ir()
    n = len(func.regions[0].blocks[0].arguments)
    out = [dict() for _ in range(n)]
    if "arg_attrs" in func.attributes:
        for i, a in enumerate(func.attributes["arg_attrs"]):
            d = irm.DictAttr(a)
            out[i] = {d[j].name: d[j].attr for j in range(len(d))}
    return out


def arguments_of(module, *, where: str = "<input>", graph_kinds: bool = True) -> list[Argument]:
    """Arguments of ``@main`` with names and kinds recovered as the module docstring says
    (``graph_kinds=False``: those neither an attribute nor a name gives are ``input``,
    for a caller that knows them)."""
    irm = ir.ir()
    func = ir.main_func(module, where)
    attrs = _arg_attr_dicts(func)
    args = []
    with module.context:
        for i, barg in enumerate(func.regions[0].blocks[0].arguments):
            tt = ir.tensor_type(barg.type)
            shape, dtype = tt if tt else ((), str(barg.type))
            a = attrs[i]
            name = None
            if NAME_ATTR in a:
                name = irm.StringAttr(a[NAME_ATTR]).value
            else:
                loc = barg.location
                if isinstance(loc, irm.NameLoc):
                    name = path_to_dotted(loc.name_str) or None
            name = name or f"%arg{i}"
            kind = None
            if KIND_ATTR in a:
                kind = irm.StringAttr(a[KIND_ATTR]).value
                if kind not in ARG_KINDS:
                    raise UserError(f"{where}: argument {i} has {KIND_ATTR} = {kind!r}; use one of "
                                    f"{', '.join(ARG_KINDS)}")
            args.append(Argument(i, name, kind or _named_kind(name) or "", tuple(int(s) for s in shape), dtype))
    unknown = {a.index for a in args if not a.kind}
    if unknown:
        weights = _weights_from_graph(module, unknown) if graph_kinds else set()
        args = [a if a.kind else dataclasses.replace(a, kind="param" if a.index in weights else "input")
                for a in args]
    return args


def _weights_from_graph(module, unknown: set[int]) -> set[int]:
    """``structure.graph_weights`` of ``module`` (a copy, calls inlined: a JAX model's
    ``@relu`` is part of the graph)."""
    from shard_opt.dataflow import Graph
    from shard_opt.passes.inline_calls import inline_calls
    from shard_opt.structure import graph_weights

    module = ir.parse(ir.print_module(module))
    inline_calls(module)
    return graph_weights(Graph.of(module, ["input"] * len(ir.main_func(module).arguments)), unknown)


def annotate_arguments(text: str, arguments: list[Argument], *, where: str = "<module>") -> str:
    """Return ``text`` with ``shard_opt.name``/``shard_opt.kind`` on every ``@main`` argument.

    Also checks that ``arguments`` matches ``@main`` (count, shapes): a mismatch is a
    frontend bug, reported as such.
    """
    irm = ir.ir()
    module = ir.parse(text, filename=where)
    func = ir.main_func(module)
    block_args = func.regions[0].blocks[0].arguments
    if len(block_args) != len(arguments):
        raise RuntimeError(f"{where}: @main has {len(block_args)} arguments but the frontend named "
                           f"{len(arguments)}")
    attrs = _arg_attr_dicts(func)
    with module.context:
        for a, barg in zip(arguments, block_args):
            tt = ir.tensor_type(barg.type)
            if tt is not None and tuple(tt[0]) != tuple(a.shape):
                raise RuntimeError(f"{where}: argument {a.index} ({a.name}) is {tt[0]} in the module but "
                                   f"{a.shape} in the frontend's list")
        new = []
        for i, a in enumerate(arguments):
            d = dict(attrs[i])
            d[NAME_ATTR] = irm.StringAttr.get(a.name)
            d[KIND_ATTR] = irm.StringAttr.get(a.kind)
            new.append(irm.DictAttr.get(d))
        func.attributes["arg_attrs"] = irm.ArrayAttr.get(new)
    return ir.print_module(module)


def strip_annotations(text: str) -> str:
    """``text`` without shard-opt's argument-name attributes (for output that must not carry them)."""
    irm = ir.ir()
    module = ir.parse(text)
    func = ir.main_func(module)
    attrs = _arg_attr_dicts(func)
    with module.context:
        new = [irm.DictAttr.get({k: v for k, v in d.items() if k not in (NAME_ATTR, KIND_ATTR)}) for d in attrs]
        func.attributes["arg_attrs"] = irm.ArrayAttr.get(new)
    return ir.print_module(module)


def load_mlir_text(text: str, *, name: str, where: str) -> LoweredModel:
    """Validate ``text`` (parse, static shapes, find ``@main``) and read its arguments. The text is kept as
    given, but for tt-xla composites shard-opt wrote, which are flattened (``flatten_composites``)."""
    if not text.strip():
        raise UserError(f"{where}: empty input; give a StableHLO module")
    module = ir.parse(text, filename=where)
    check_static_shapes(module, text, where=where)
    meta = {}
    if "tenstorrent." in text and "stablehlo.composite" in text:
        # a module shard-opt wrote (-o): its tt-xla composites flattened, as tt-mlir flattens
        # them before propagating, so it is priced as it was when written (and --evaluate's
        # check compiles it with them again: meta["composites"])
        from shard_opt.passes.wrap_composites import flatten_composites

        if flatten_composites(module):
            text = ir.print_module(module)
            meta["composites"] = "on"
    args = find_repeats(arguments_of(module, where=where))  # layers from repeated signatures
    layers = {a.layer for a in args if a.layer is not None}
    return LoweredModel(name=name, text=text, arguments=args, source="mlir",
                        num_layers=(max(layers) + 1) if layers else None, meta=meta)


_MAYBE_DYNAMIC = re.compile(r"tensor<(?:\d+x)*[?*]")


def check_static_shapes(module, text: str, *, where: str) -> None:
    """Reject dynamic (``tensor<?x16xf32>``) and unranked tensors: Shardy needs static shapes.

    The text is searched first (fast); only a hit walks the IR, to name the value and its place.
    """
    if not _MAYBE_DYNAMIC.search(text):
        return
    irm = ir.ir()

    def dynamic(t) -> bool:
        return ir.is_dynamic(t) or isinstance(t, irm.UnrankedTensorType)

    with module.context:
        for op in ir.walk_ops(module.operation):
            found = None
            for region in op.regions:
                for block in region.blocks:
                    for i, a in enumerate(block.arguments):
                        if found is None and dynamic(a.type):
                            found = (f"argument {i}", a.type)
            for i, r in enumerate(op.results):
                if found is None and dynamic(r.type):
                    found = (f"result {i}", r.type)
            if found:
                what = op.operation.name
                if what == "func.func":
                    what = "@" + irm.StringAttr(op.attributes["sym_name"]).value
                raise UserError(
                    f"{ir.location_text(op.location, where)}: {what} {found[0]} has a dynamic shape "
                    f"({found[1]}); shard-opt needs static shapes: export the model with concrete input shapes"
                )


def _decode(data: bytes, where: str) -> str:
    """UTF-8 text with universal newlines, as text-mode ``open`` reads it."""
    try:
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        raise UserError(f"{where}: not a text file (byte {data[e.start]:#04x} at offset {e.start} is not UTF-8); "
                        f"give the StableHLO module as text") from None


def read_text(path: str) -> str:
    """The text of a ``.mlir`` file, or of stdin for ``-``; a ``UserError`` otherwise."""
    if path == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        return _decode(stdin.read(), "<stdin>") if stdin is not None else sys.stdin.read()
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such file; check the path")
    try:
        with open(path, "rb") as f:
            return _decode(f.read(), path)
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None


def load_mlir(path: str) -> LoweredModel:
    """A ``.mlir`` file, or ``-`` for stdin."""
    text = read_text(path)
    if path == "-":
        return load_mlir_text(text, name="stdin", where="<stdin>")
    return load_mlir_text(text, name=os.path.splitext(os.path.basename(path))[0], where=path)
