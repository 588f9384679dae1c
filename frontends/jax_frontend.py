"""JAX function -> ``LoweredModel`` through ``jax.jit(fn).lower(*args)`` (public jax API only).

Arguments: ``@main`` takes the leaves of ``example_args`` in ``jax.tree_util`` order
(``keep_unused=True`` so an unused leaf keeps its slot). Each is named by its pytree
path, prefixed by the Python parameter name from ``fn``'s signature, as a dotted path:
``fn(params, x)`` with ``params = {'dense': {'kernel': ...}}`` gives
``params.dense.kernel`` and ``x`` (list / tuple indices become ``.0``, dataclass and
namedtuple fields their names).

Kinds: leaves under a top-level argument named ``params``, or under a ``'params'`` key
of a dict argument (Flax's ``{'params': ...}`` variables), are ``param``. If there is
no such argument and ``fn`` takes two or more arguments, the first argument's leaves
are ``param`` (the ``apply(params, *inputs)`` convention); everything else is ``input``.
``kinds=`` overrides this per top-level argument.

Shardings: by default the example arguments' shardings are dropped before lowering
(each leaf becomes a plain ``ShapeDtypeStruct``), so the module carries no ``sdy.mesh``,
no ``sdy.sharding`` and none of the ``sdy.sharding_constraint`` ops jax inserts for
sharded inputs: the search decides shardings, ``add-mesh`` adds the mesh. With
``keep_shardings=True`` the module is lowered as given (mesh named and shaped as the
user's ``jax.sharding.Mesh``), for ``--evaluate`` of a plan written in JAX.

The text is ``lowered.as_text()``: ``module @jit_<fn>`` with ``func.func public @main``
(checked), ``jax.result_info`` result attributes kept, plus shard-opt's per-argument
``shard_opt.name`` / ``shard_opt.kind`` attributes (see ``mlir_frontend``).
"""

from __future__ import annotations

import inspect

from shard_opt.errors import UserError
from shard_opt.lowered import ARG_KINDS, Argument, LoweredModel, find_repeats


def _key_str(k) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k).strip(".[]'\"")


def _param_names(fn, n: int) -> list[str]:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:n]]
    return names + [f"arg{i}" for i in range(len(names), n)]


def _plain(x):
    import jax

    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jax.ShapeDtypeStruct(tuple(x.shape), x.dtype)
    return x


def lower_jax(fn, *example_args, name: str | None = None, kinds: dict[str, str] | None = None,
              keep_shardings: bool = False) -> LoweredModel:
    """Lower ``fn(*example_args)`` (arrays or ``jax.ShapeDtypeStruct``) to a ``LoweredModel``.

    Args:
      fn: the function (not already jitted is fine; a ``jax.jit`` object works too).
      example_args: pytrees of arrays / ``ShapeDtypeStruct`` (shapes and dtypes only).
      name: model name for reports (default: ``fn.__name__``).
      kinds: top-level argument name -> kind, overriding the default rule.
      keep_shardings: keep the shardings carried by ``example_args`` (see module docstring).
    """
    import jax

    from shard_opt import ir
    from shard_opt.frontends.mlir_frontend import annotate_arguments, arguments_of

    name = name or getattr(fn, "__name__", None) or "jax_function"
    top_names = _param_names(getattr(fn, "__wrapped__", fn), len(example_args))
    for k, v in (kinds or {}).items():
        if k not in top_names:
            raise UserError(f"lower_jax({name}): kinds names {k!r}, not an argument of the function "
                            f"({', '.join(top_names)})")
        if v not in ARG_KINDS:
            raise UserError(f"lower_jax({name}): kind {v!r} for {k!r}; use one of {', '.join(ARG_KINDS)}")
    args = example_args if keep_shardings else jax.tree_util.tree_map(_plain, example_args)
    try:
        lowered = jax.jit(fn, keep_unused=True).lower(*args)
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UserError(f"lower_jax({name}): jax.jit(...).lower failed: {type(e).__name__}: {msg[:300]}") from None
    text = lowered.as_text()

    leaves, _ = jax.tree_util.tree_flatten_with_path(tuple(example_args))
    has_params_arg = "params" in top_names
    has_params_key = any(len(p) > 1 and _key_str(p[1]) == "params" for p, _ in leaves)
    names, arg_kinds = [], []
    for path, _ in leaves:
        top = int(_key_str(path[0]))
        parts = [top_names[top]] + [_key_str(k) for k in path[1:]]
        names.append(".".join(parts))
        if kinds and top_names[top] in kinds:
            kind = kinds[top_names[top]]
        elif has_params_arg:
            kind = "param" if top_names[top] == "params" else "input"
        elif has_params_key:
            kind = "param" if len(path) > 1 and _key_str(path[1]) == "params" else "input"
        else:
            kind = "param" if (top == 0 and len(example_args) >= 2) else "input"
        arg_kinds.append(kind)

    module = ir.parse(text, filename=f"lower_jax({name})")
    func = ir.main_func(module)
    if func.attributes["sym_name"].value != "main":
        raise RuntimeError(f"lower_jax({name}): jax produced no func @main")
    typed = arguments_of(module, where=name, graph_kinds=False)  # types only: the kinds are below
    if len(typed) != len(names):
        raise RuntimeError(f"lower_jax({name}): @main has {len(typed)} arguments for {len(names)} pytree leaves")
    arguments = [Argument(i, n, k, t.shape, t.dtype) for i, (n, k, t) in enumerate(zip(names, arg_kinds, typed))]
    text = annotate_arguments(text, arguments, where=name)
    arguments = find_repeats(arguments)  # Flax's layers_0, layers_1...: layers from repeated signatures
    layers = {a.layer for a in arguments if a.layer is not None}
    return LoweredModel(name=name, text=text, arguments=arguments, source="jax",
                        num_layers=(max(layers) + 1) if layers else None,
                        meta={"keep_shardings": keep_shardings})
