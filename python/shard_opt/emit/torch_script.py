"""Write a plan into the user's PyTorch load script (``--emit-torch``).

The script keeps its formatting and comments (libcst). shard-opt adds:

* the tt-xla SPMD imports at the top (``torch_xla``, ``torch_xla.runtime as xr``,
  ``torch_xla.distributed.spmd as xs``, ``Mesh``, ``numpy as np``, ``os``);
* one marked block after the imports: ``CONVERT_SHLO_TO_SHARDY=1``, ``xr.use_spmd()``,
  the mesh, a table of partition specs (one entry per parameter role, the layer index
  written ``*``, so a 32-layer model is as short as a 2-layer one), and the helpers
  ``shard_opt_model(model)`` / ``shard_opt_inputs(inputs)`` that move tensors to the TT
  device and call ``xs.mark_sharding`` (tt-xla ``examples/pytorch/llama.py``);
* ``return X`` in ``load_model`` / ``load_inputs`` (module functions or a
  ``ModelLoader``'s methods) becomes ``return shard_opt_model(X)`` /
  ``return shard_opt_inputs(X)``. A ``ModelLoader`` that inherits them (a subclass of
  another loader) gets overrides returning ``shard_opt_model(super().load_model(...))``;
  functions or a ``ModelLoader`` the script imports get a wrapping ``def`` or subclass
  after the import (``emit_target``).

* a model the script builds on the meta device is built with weights:
  ``torch.device("meta")`` / ``device="meta"`` in the script's functions become
  ``SHARD_OPT_WEIGHTS_DEVICE`` (``"cpu"``, set in the block; ``_MetaToWeights``), and
  ``shard_opt_model`` / ``shard_opt_inputs`` stop with a clear ``RuntimeError`` on a
  tensor still on meta (PyTorch would say "Cannot copy out of meta tensor").

PyTorch ``Linear.weight`` is ``[out, in]``; the plan's per-dim axes map one to one onto
a partition spec: ``[["model"], []]`` -> ``("model", None)``, a dim on two axes ->
``(("batch", "model"), None)``.

Running it on its own output changes nothing: the block between ``# >>> shard-opt``
and ``# <<< shard-opt`` is replaced, wrapped returns are not wrapped twice and imports
are not added twice. A script written for another plan gets the new plan's block.
"""

from __future__ import annotations

import textwrap

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from shard_opt.emit import _plan
from shard_opt.plan import PipelinePlan
from shard_opt.verdict import COMPOSITES_OPTION
from shard_opt.verdict import of as verdict_of
from shard_opt.errors import UserError

BEGIN = "# >>> shard-opt: sharding plan (generated; re-running shard-opt replaces this block)"
END = "# <<< shard-opt"

MODEL_HELPER = "shard_opt_model"
INPUTS_HELPER = "shard_opt_inputs"

_IMPORTS = (  # (module, obj, asname) for AddImportsVisitor
    ("os", None, None),
    ("numpy", None, "np"),
    ("torch", None, None),
    ("torch_xla", None, None),
    ("torch_xla.runtime", None, "xr"),
    ("torch_xla.distributed.spmd", None, "xs"),
    ("torch_xla.distributed.spmd", "Mesh", None),
)


def emit_torch(script_source: str, plan, *, loader: str | None = None) -> str:
    """The user's load script with the plan's sharding written in.

    Args:
      script_source: text of the load script (defines ``load_model`` and
        ``load_inputs``, as functions or methods of a class such as ``ModelLoader``;
        the class may inherit them, or the script import them: ``emit_target``).
      plan: the ``Plan`` (a plan JSON dict is read as one, ``_plan.as_plan``).
      loader: how the frontend loaded the script (``LoweredModel.meta["loader"]``):
        ``functions`` (module-level load_model/load_inputs) or ``ModelLoader``; None
        reads it from the text.

    Returns:
      The new script text. It parses; without torch_xla installed it fails at the
      first ``torch_xla`` import and nowhere earlier.
    """
    plan = _plan.as_plan(plan)
    if isinstance(plan, PipelinePlan):
        raise UserError("--emit-torch writes one load script; this plan is a pipeline of several models")
    module = _parse(script_source)
    module = _remove_block(module)
    target = _target(module, loader)
    existing = _existing_mark_sharding(module)
    weights = _MetaToWeights()
    module = module.visit(weights)
    wrapper = _ReturnWrapper()
    module = module.visit(wrapper)
    module = _add_wrappers(module, target)

    mesh_name = "shard_opt_mesh" if _binds_top_level(module, "mesh") else "mesh"
    needs_inputs = wrapper.found_inputs or target.get("load_inputs") in ("inherited", "rebind", "subclass")
    block = _block_statements(plan, mesh_name, existing, needs_inputs=needs_inputs, weights_device=weights.used)
    module = _insert_block(module, block)

    ctx = CodemodContext()
    for mod, obj, asname in _IMPORTS:
        AddImportsVisitor.add_needed_import(ctx, mod, obj, asname)
    if plan.constraints:
        AddImportsVisitor.add_needed_import(ctx, "tt_torch.sharding", "sharding_constraint_tensor")
    if _guard_specs(plan):
        AddImportsVisitor.add_needed_import(ctx, "tt_torch.sharding", "sharding_constraint_hook")
    if _weight_overrides(plan):
        AddImportsVisitor.add_needed_import(ctx, "tt_torch.weight_dtype", "apply_weight_dtype_overrides")
    AddImportsVisitor.add_needed_import(ctx, "re")
    module = AddImportsVisitor(ctx).transform_module(module)
    return module.code


# ---------------------------------------------------------------------------------
# Where the plan goes: load_model / load_inputs, defined, inherited or imported
# ---------------------------------------------------------------------------------

LOADER_CLASS = "ModelLoader"


def _parse(script_source: str) -> cst.Module:
    try:
        return cst.parse_module(script_source)
    except cst.ParserSyntaxError as e:
        raise UserError(f"cannot parse the load script: {e.message} (line {e.raw_line})") from None


def emit_target(script_source: str, *, loader: str | None = None) -> dict:
    """Where ``emit_torch`` writes the plan into the script, found without a plan (the CLI
    asks before the search, so a script it cannot rewrite fails in a second, not after it).

    Returns ``{"load_model": HOW, "load_inputs": HOW}``, HOW one of ``def`` (a function
    or a ModelLoader method the script defines: its returns are wrapped), ``inherited``
    (the script's ModelLoader inherits it: an override calling ``super()`` is added),
    ``rebind`` (a module-level name the script imports or assigns: a wrapping ``def`` is
    added after it), ``subclass`` (the script imports its ModelLoader: a subclass of it,
    with both overrides, is added) or None (no load_inputs: inputs stay as they are).
    Raises ``UserError`` when there is no load_model to wrap.
    """
    return _target(_remove_block(_parse(script_source)), loader)


def _top_class(module: cst.Module, name: str):
    return next((s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == name), None)


def _top_def(module: cst.Module, name: str) -> bool:
    return any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in module.body)


def _class_binding(cls: cst.ClassDef, name: str) -> str | None:
    """``def`` when the class body defines ``name`` with def, ``assigned`` when it binds it
    otherwise (``load_model = staticmethod(f)``), None when it inherits it."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else [cls.body]
    for stmt in body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return "def"
        small = stmt.body if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else []
        for s in small:
            targets = [t.target for t in s.targets] if isinstance(s, cst.Assign) else (
                [s.target] if isinstance(s, cst.AnnAssign) else [])
            if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                return "assigned"
    return None


def _target(module: cst.Module, loader: str | None) -> dict:
    given = loader is not None
    if loader is None:  # as the frontend chooses: module functions first, then the class
        if _binds_top_level(module, "load_model"):
            loader = "functions"
        elif _binds_top_level(module, LOADER_CLASS):
            loader = LOADER_CLASS
        else:
            raise UserError("the load script defines no load_model(): shard-opt cannot tell where the model is built")
    if loader == "functions":
        target = {}
        for name in ("load_model", "load_inputs"):
            if _top_def(module, name):
                target[name] = "def"
            elif _binds_top_level(module, name) or given:
                target[name] = "rebind"  # imported or assigned (or, as the frontend found, a star import)
        return target
    cls = _top_class(module, LOADER_CLASS)
    if cls is None:
        return {"load_model": "subclass", "load_inputs": "subclass"}
    target = {}
    for name in ("load_model", "load_inputs"):
        how = _class_binding(cls, name)
        if how == "assigned":
            raise UserError(f"the load script's {LOADER_CLASS}.{name} is assigned, not written with def: "
                            f"--emit-torch cannot wrap what it returns; define it as def {name}(self, ...)")
        target[name] = how or "inherited"
    return target


_HELPERS = {"load_model": MODEL_HELPER, "load_inputs": INPUTS_HELPER}


def _override(name: str) -> str:
    return (f"def {name}(self, *args, **kwargs):\n"
            f"    return {_HELPERS[name]}(super().{name}(*args, **kwargs))\n")


def _add_wrappers(module: cst.Module, target: dict) -> cst.Module:
    """The definitions ``target`` asks for: overrides of inherited methods in the script's
    ModelLoader, wrapping defs after imported functions, a subclass of an imported
    ModelLoader. Each is a ``def`` whose return is wrapped, so a second run sees ``def``
    and leaves it as it is."""
    inherited = [n for n, how in target.items() if how == "inherited"]
    if inherited:
        body = []
        for stmt in module.body:
            if isinstance(stmt, cst.ClassDef) and stmt.name.value == LOADER_CLASS:
                stmt = _with_methods(stmt, inherited)
            body.append(stmt)
        module = module.with_changes(body=body)
    added = ""
    rebind = [n for n, how in target.items() if how == "rebind"]
    for name in rebind:
        added += (f"\n\n_shard_opt_{name} = {name}\n\n\n"
                  f"def {name}(*args, **kwargs):\n"
                  f"    return {_HELPERS[name]}(_shard_opt_{name}(*args, **kwargs))\n")
    if any(how == "subclass" for how in target.values()):
        methods = "\n".join(textwrap.indent(_override(n), "    ") for n in ("load_model", "load_inputs"))
        added += (f"\n\nclass {LOADER_CLASS}({LOADER_CLASS}):\n"
                  f'    """The imported {LOADER_CLASS}, its model and inputs sharded by shard-opt."""\n\n'
                  + methods)
    if not added:
        return module
    statements = list(cst.parse_module(added.lstrip("\n")).body)
    statements[0] = statements[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    body = list(module.body)
    at = next((i for i, stmt in enumerate(body) if _is_main_guard(stmt)), len(body))
    if at < len(body):  # two blank lines between the added defs and the guard
        guard = body[at]
        blank = [cst.EmptyLine(), cst.EmptyLine()]
        body[at] = guard.with_changes(leading_lines=blank + [ln for ln in guard.leading_lines if ln.comment])
    return module.with_changes(body=body[:at] + statements + body[at:])


def _with_methods(cls: cst.ClassDef, names: list[str]) -> cst.ClassDef:
    parsed = cst.parse_module("class _C:\n" + "\n".join(textwrap.indent(_override(n), "    ") for n in names))
    methods = [m.with_changes(leading_lines=[cst.EmptyLine(indent=False)]) for m in parsed.body[0].body.body]
    if isinstance(cls.body, cst.IndentedBlock):
        old = list(cls.body.body)
        if len(old) == 1 and _is_pass(old[0]):
            old = []
        return cls.with_changes(body=cls.body.with_changes(body=[*old, *methods]))
    old = [] if all(isinstance(s, cst.Pass) for s in cls.body.body) else [cst.SimpleStatementLine(body=cls.body.body)]
    return cls.with_changes(body=cst.IndentedBlock(body=[*old, *methods]))


def _is_pass(stmt) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, cst.Pass) for s in stmt.body)


# ---------------------------------------------------------------------------------
# The generated block
# ---------------------------------------------------------------------------------

def _param_specs(plan) -> list[tuple[str, list, str]]:
    """(name or role, sharding, comment) for every sharded parameter and buffer."""
    by_role: dict[str, list] = {}
    for a in plan.arguments or []:
        if _plan.is_weight(a):
            by_role.setdefault(_plan.role(a.name), []).append(a)
    why = {g.get("role"): g.get("why", "") for g in plan.groups or []}
    out = []
    for r, members in by_role.items():
        shardings = {repr(m.sharding) for m in members}
        if len(shardings) == 1:
            s = members[0].sharding
            if _plan.is_sharded(s):
                out.append((r, s, _comment(s, members[0].shape, why.get(r, ""))))
            continue
        for m in members:  # layers disagree: one entry per tensor
            s = m.sharding
            if _plan.is_sharded(s):
                out.append((m.name, s, _comment(s, m.shape, why.get(r, ""))))
    return out


def _comment(sharding, shape, why: str) -> str:
    """``column-parallel [4096x4096]`` for a Linear weight ([out, in]); else the shape and
    the first clause of the search's reason."""
    kind = ""
    sharding = _plan.axis_names(sharding)
    if len(sharding) == 2:
        if sharding[0] and not sharding[1]:
            kind = "column-parallel"
        elif sharding[1] and not sharding[0]:
            kind = "row-parallel"
    dims = "x".join(str(d) for d in shape or [])
    text = " ".join(p for p in (kind, f"[{dims}]" if dims else "") if p)
    if why and not kind:
        text = (text + ": " if text else "") + why.split(";")[0][:60]
    return text


def _input_specs(plan) -> list[tuple[list | None, str]]:
    """Per input of load_inputs(), in order: (sharding or None, comment)."""
    args = [a for a in plan.arguments or [] if a.kind in ("input", "cache")]
    if not args and plan.inputs:
        names = {a.name: a for a in plan.arguments or []}
        args = [names[n] for n in plan.inputs if n in names]
    out = []
    for a in args:
        s = a.sharding
        shape = ", ".join(str(d) for d in a.shape or [])
        out.append((s if _plan.is_sharded(s) else None, f"{a.name} {a.dtype or ''}[{shape}]"))
    return out


def _constraint_specs(plan) -> list[tuple[str, list, str]]:
    out = []
    for c in plan.constraints or []:
        module = c.get("module") or c.get("component")
        if module and c.get("sharding") is not None:
            out.append((module, c["sharding"], c.get("why", "")))
    return out


def _guard_specs(plan) -> list[tuple[str, list, str]]:
    """(module name or role, output sharding, comment) for every guard tied to a module."""
    return [(g["module"], g["sharding"], f"{g['rule']}: {g.get('why', '')}")
            for g in plan.guards or [] if g.get("module") and g.get("sharding") is not None]


def _loose_guards(plan) -> list[dict]:
    """The guards no module output stands for (the user adds them by hand)."""
    return [g for g in plan.guards or [] if not g.get("module")]


def _fmt_table(entries: list[tuple[str, str, str]], indent: str = "    ") -> list[str]:
    lines = []
    for key, value, comment in entries:
        line = f"{indent}{key}: {value},"
        lines.append(line + (f"  # {comment}" if comment else ""))
    return lines


def _weight_overrides(plan) -> dict:
    return ((plan.weight_formats or {}).get("overrides")) or {}


def _weight_format_lines(plan) -> list[str]:
    """tt-xla's compile options for the program the plan was priced as: the global
    experimental_weight_dtype for --weight-dtype (tt-xla docs/source/performance.md),
    per-parameter overrides (tt_torch.weight_dtype.apply_weight_dtype_overrides, fnmatch
    globs), and enable_trace when the cost model priced traced dispatch (its default;
    tt-xla's own default is off: pjrt_implementation/inc/api/compile_options.h)."""
    from shard_opt.weights import TT_XLA_NAMES

    formats = plan.weight_formats
    options = {}
    lines = []
    if formats:
        lines.append(f"# Matmul weights stored as block floats on the device (shard-opt --weight-dtype "
                     f"{(plan.weight_dtype or '')}); the model must be bfloat16.")
        if formats["default"] != "bf16":
            options["experimental_weight_dtype"] = TT_XLA_NAMES[formats["default"]]
    if _traced(plan):
        lines.append("# Traced execution: the plan was priced with traced op-to-op gaps (shard-opt's cost model "
                     "default); tt-xla traces only when every non-consteval op runs on device.")
        options["enable_trace"] = "true"
    if options:
        lines.append("torch_xla.set_custom_compile_options({"
                     + ", ".join(f'"{k}": "{v}"' for k, v in options.items()) + "})")
    overrides = _weight_overrides(plan) if formats else {}
    if overrides:
        lines.append("SHARD_OPT_WEIGHT_DTYPES = {")
        lines += [f'    "{k}": "{TT_XLA_NAMES[v]}",' for k, v in overrides.items()]
        lines.append("}")
    return lines


def _traced(plan) -> bool:
    """The plan's cost model priced traced dispatch (``tenstorrent*``, unless
    ``dispatch=untraced`` / ``none`` was asked for)."""
    name = str(plan.cost_model or "")
    return name.startswith("tenstorrent") and "dispatch=" not in name or "dispatch=traced" in name


def _block_text(plan, mesh_name: str, existing: list[str], needs_inputs: bool,
                weights_device: bool = False) -> str:
    shape, axes = _plan.mesh_of(plan)
    n = 1
    for s in shape:
        n *= s
    cost = plan.cost
    mesh_desc = ", ".join(f"{a}={s}" for a, s in zip(axes, shape))
    axes_text = ", ".join('"' + a + '"' for a in axes)
    lines = [
        BEGIN,
        f"# Model {(plan.model or '?')} on a {'x'.join(map(str, shape))} mesh ({mesh_desc})"
        + (f", {plan.system}" if plan.system else "") + ".",
    ]
    if plan.strategy:
        lines.append(f"# Strategy: {plan.strategy}.")
    if cost:
        lines.append(
            f"# Modeled step {_plan.fmt_us(cost.total_us)}, {cost.ccl_count} collectives, "
            f"{_plan.fmt_bytes(cost.ccl_bytes)} moved per device (see the shard-opt report)."
        )
    numerics = plan.numerics or {}
    if numerics and not numerics.get("passed", True):
        lines.append(f"# NUMERICS FAILED: shard-opt --verify-numerics found this plan's sharded results differ from "
                     f"the unsharded ones (max abs err {numerics.get('max_abs_err', 0):.3g}); do not deploy it as it is.")
    verdict = verdict_of(plan)
    if verdict is not None:  # the same words as stderr, the report and -o
        lines += textwrap.wrap("shard-opt: " + verdict.line(), 100, initial_indent="# ", subsequent_indent="#   ")
        if verdict.composites == "off":
            lines += ["# Compile it with tt-xla's composites off, the form tt-mlir compiled and checked:",
                      "# torch.compile(model, backend=\"tt\", options=SHARD_OPT_TORCH_COMPILE_OPTIONS)",
                      f"SHARD_OPT_TORCH_COMPILE_OPTIONS = {{\"{COMPOSITES_OPTION}\": False}}"]
    resized = plan.inputs_resized
    if resized:
        lines.append(f"# Planned for token inputs of {resized['to']} ({resized['flags']}); load_inputs() returns "
                     f"{resized['from']}: the sharding holds for the planned size.")
    if plan.memory_fallback:
        lines.append("# MEMORY FALLBACK: the fastest plan does not fit in DRAM; this one trades speed for memory: "
                     + str(plan.memory_fallback_reason or ""))
    if existing:
        lines.append("# This script already calls mark_sharding on: " + ", ".join(existing[:6])
                     + ("..." if len(existing) > 6 else "") + "; those calls override this plan where they run later.")
    lines += [
        "# Set-up as in tt-xla examples/pytorch/llama.py.",
        'xr.set_device_type("TT")',
        'os.environ["CONVERT_SHLO_TO_SHARDY"] = "1"',
        "xr.use_spmd()",
        f"{mesh_name} = Mesh(np.arange({n}), ({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), "
        f"({axes_text}{',' if len(axes) == 1 else ''}))",
        *_weight_format_lines(plan),
        *(_WEIGHTS_DEVICE_LINES if weights_device else []),
        "",
        "# Partition spec per parameter name, or per role (layer index written *). Parameters",
        "# not listed stay replicated. PyTorch Linear.weight is [out, in].",
        "SHARD_OPT_PARAM_SPECS = {",
    ]
    lines += _fmt_table([(f'"{k}"', _plan.spec_text(s), c) for k, s, c in _param_specs(plan)])
    lines.append("}")
    if needs_inputs:
        lines += ["# Partition spec of each tensor load_inputs() returns, in order (None: replicated).",
                  "SHARD_OPT_INPUT_SPECS = ["]
        for s, c in _input_specs(plan):
            lines.append(f"    {_plan.spec_text(s) if s else 'None'},  # {c}")
        lines.append("]")
    inside = [c for c in plan.constraints or [] if c.get("site") and not (c.get("module") or c.get("component"))]
    if inside:
        lines += ["# The plan also constrains values inside forward(), where no module output can be hooked:",
                  "# after each reshape below, add sharding_constraint_tensor(t, mesh, (None,) * t.dim()) and then",
                  "# sharding_constraint_tensor(t, mesh, SPEC) by hand (tt-xla issue 3643); the modeled step assumes them."]
        lines += [f"#   reshape {c['site']}: SPEC = {_plan.spec_text(c['sharding'])}" for c in inside]
    guards = _guard_specs(plan)
    if guards:
        lines += ["# Guards the plan was priced with (shard-opt's safety rules): each module's output is",
                  "# constrained to its spec, the dims a torch.split / chunk after it cuts kept whole (None),",
                  "# so the split cuts whole data on every device. Written as tt-xla's",
                  "# load_activation_shard_spec(model) returns them ({module: spec}, shard_opt_activation_shard_spec",
                  "# below) and applied with tt-xla's own tt_torch.sharding.sharding_constraint_hook: one",
                  "# sdy.sharding_constraint on the output, which is what was priced (shard_opt_constraint_hook's",
                  "# replicated anchor would gather every dim first: collectives the plan did not price).",
                  "SHARD_OPT_GUARDS = {"]
        for k, s, c in guards:  # the reason above each entry: rule id, the split, what was priced
            lines += textwrap.wrap(c, 96, initial_indent="    # ", subsequent_indent="    # ")
            lines.append(f'    "{k}": {_plan.spec_text(s)},')
        lines.append("}")
    loose = _loose_guards(plan)
    if loose:
        lines += ["# Guards the plan was priced with that no module output stands for: shard-opt cannot hook",
                  "# them. Where a line says the plan gathers there, add it by hand in forward(), on the tensor",
                  "# right before the op named: t = sharding_constraint_tensor(t, mesh, SPEC) (tt_torch.sharding);",
                  "# the modeled step assumes it. The others are whole already in this plan."]
        for g in loose:
            n = g.get("sites", 1)
            lines.append(f"#   {g['rule']}: {g.get('site', '?')}{f' ({n} sites)' if n > 1 else ''}: "
                         f"SPEC = {_plan.spec_text(g.get('sharding') or [])}")
            lines += textwrap.wrap(g.get("why", ""), 100, initial_indent="#     ", subsequent_indent="#     ")
    constraints = _constraint_specs(plan)
    if constraints:
        lines += ["# Sharding constraints on module outputs (a replicated anchor, then the spec:",
                  "# tt-xla issue 3643).",
                  "SHARD_OPT_OUTPUT_CONSTRAINTS = {"]
        lines += _fmt_table([(f'"{k}"', _plan.spec_text(s), c) for k, s, c in constraints])
        lines.append("}")
    lines += [
        "",
        "",
        "def shard_opt_role(name):",
        '    """`model.layers.3.mlp.up_proj.weight` -> `model.layers.*.mlp.up_proj.weight`."""',
        '    return re.sub(r"\\.\\d+\\.", ".*.", "." + name + ".").strip(".")',
        "",
        "",
        f"def {MODEL_HELPER}(model):",
        '    """Move the model to the TT device and mark its sharded parameters."""',
        *(["    apply_weight_dtype_overrides(model, SHARD_OPT_WEIGHT_DTYPES)"] if _weight_overrides(plan) else []),
        "    meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]",
        "    if meta:",
        "        raise RuntimeError(",
        "            f\"load_model() returned a model without weights ({meta[0]} and {len(meta) - 1} more on the meta \"",
        "            \"device): build it with its weights, not under torch.device('meta') or init_empty_weights(), \"",
        "            \"or load them into it (model.load_state_dict(state_dict, assign=True))\")",
        "    model = model.to(torch_xla.device())",
        "    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:",
        "        spec = SHARD_OPT_PARAM_SPECS.get(name, SHARD_OPT_PARAM_SPECS.get(shard_opt_role(name)))",
        "        if spec is not None:",
        f"            xs.mark_sharding(tensor, {mesh_name}, spec)",
    ]
    if guards:
        lines += [
            "    for module, spec in shard_opt_activation_shard_spec(model).items():",
            "        if not getattr(module, \"_tt_activation_constraint_hooked\", False):",
            f"            module.register_forward_hook(sharding_constraint_hook(module, {mesh_name}, spec))",
            "            module._tt_activation_constraint_hooked = True  # tt-xla's test runner then skips it",
        ]
    if constraints:
        lines += [
            "    for name, module in model.named_modules():",
            "        spec = SHARD_OPT_OUTPUT_CONSTRAINTS.get(name, SHARD_OPT_OUTPUT_CONSTRAINTS.get(shard_opt_role(name)))",
            "        if spec is not None:",
            "            module.register_forward_hook(shard_opt_constraint_hook(spec))",
        ]
    lines += ["    return model"]
    if guards:
        lines += [
            "",
            "",
            "def shard_opt_activation_shard_spec(model):",
            '    """{module: output partition spec} for SHARD_OPT_GUARDS, as a tt-forge-models loader\'s',
            "    load_activation_shard_spec(model) returns them (tt-xla's test runner hooks those).\"\"\"",
            "    specs = {}",
            "    for name, module in model.named_modules():",
            "        spec = SHARD_OPT_GUARDS.get(name, SHARD_OPT_GUARDS.get(shard_opt_role(name)))",
            "        if spec is not None:",
            "            specs[module] = spec",
            "    return specs",
        ]
    if constraints:
        lines += [
            "",
            "",
            "def shard_opt_constraint_hook(spec):",
            '    """A forward hook pinning a module\'s (first) output to ``spec``."""',
            "",
            "    def hook(module, args, output):",
            "        out = output[0] if isinstance(output, tuple) else output",
            f"        out = sharding_constraint_tensor(out, {mesh_name}, (None,) * out.dim())",
            f"        out = sharding_constraint_tensor(out, {mesh_name}, spec)",
            "        return (out, *output[1:]) if isinstance(output, tuple) else out",
            "",
            "    return hook",
        ]
    if needs_inputs:
        lines += [
            "",
            "",
            f"def {INPUTS_HELPER}(inputs):",
            '    """Move the example inputs to the TT device and mark the sharded ones."""',
            "    device = torch_xla.device()",
            "    specs = iter(SHARD_OPT_INPUT_SPECS)",
            "",
            "    def place(x):",
            "        if not isinstance(x, torch.Tensor):",
            "            return x",
            "        if x.is_meta:",
            "            raise RuntimeError(f\"load_inputs() returned a meta tensor {list(x.shape)}: return inputs with values\")",
            "        x = x.to(device)",
            "        spec = next(specs, None)",
            "        if spec is not None:",
            f"            xs.mark_sharding(x, {mesh_name}, spec)",
            "        return x",
            "",
            "    if isinstance(inputs, dict):",
            "        return {k: place(v) for k, v in inputs.items()}",
            "    if isinstance(inputs, (tuple, list)):",
            "        return type(inputs)(place(x) for x in inputs)",
            "    return place(inputs)",
        ]
    return "\n".join(lines) + "\n"


def _block_statements(plan, mesh_name: str, existing: list[str], needs_inputs: bool,
                      weights_device: bool = False):
    # The block is generated as text and parsed whole, so tuples such as
    # (("batch", "model"), None) keep their parentheses (libcst's template trap does
    # not apply to a parsed module).
    parsed = cst.parse_module(_block_text(plan, mesh_name, existing, needs_inputs, weights_device))
    body = parsed.body
    first = body[0]
    # libcst keeps a file's opening comments in Module.header: move them onto the
    # block's first statement.
    lead = [cst.EmptyLine(), *parsed.header, *first.leading_lines]
    return [first.with_changes(leading_lines=lead)] + list(body[1:])


# ---------------------------------------------------------------------------------
# Finding and replacing the block
# ---------------------------------------------------------------------------------

def _has_comment(lines, prefix: str) -> bool:
    return any(line.comment is not None and line.comment.value.startswith(prefix) for line in lines)


def _remove_block(module: cst.Module) -> cst.Module:
    body = list(module.body)
    start = next((i for i, s in enumerate(body) if _has_comment(s.leading_lines, BEGIN.split(" (")[0])), None)
    if start is None:
        return module
    end = next((j for j in range(start + 1, len(body)) if _has_comment(body[j].leading_lines, END)), None)
    if end is None:
        footer = [ln for ln in module.footer if not (ln.comment and ln.comment.value.startswith(END))]
        return module.with_changes(body=body[:start], footer=footer)
    nxt = body[end]
    nxt = nxt.with_changes(leading_lines=[ln for ln in nxt.leading_lines
                                          if not (ln.comment and ln.comment.value.startswith(END))])
    return module.with_changes(body=body[:start] + [nxt] + body[end + 1:])


def _insert_block(module: cst.Module, block: list) -> cst.Module:
    body = list(module.body)
    pos = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) or _is_main_guard(stmt):
            break
        if _is_import(stmt) or (i == 0 and _is_docstring(stmt)):
            pos = i + 1
    if pos < len(body):
        nxt = body[pos]
        body[pos] = nxt.with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(END)), *nxt.leading_lines])
        return module.with_changes(body=body[:pos] + block + body[pos:])
    return module.with_changes(body=body + block,
                               footer=[cst.EmptyLine(comment=cst.Comment(END)), *module.footer])


def _is_import(stmt) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def _is_docstring(stmt) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, cst.SimpleString))


def _is_main_guard(stmt) -> bool:
    return isinstance(stmt, cst.If) and "__main__" in cst.Module([]).code_for_node(stmt.test)


def _binds_top_level(module: cst.Module, name: str) -> bool:
    for stmt in module.body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name:
            return True
        if isinstance(stmt, cst.SimpleStatementLine):
            for s in stmt.body:
                targets = []
                if isinstance(s, cst.Assign):
                    targets = [t.target for t in s.targets]
                elif isinstance(s, (cst.AnnAssign, cst.AugAssign)):
                    targets = [s.target]
                elif isinstance(s, (cst.Import, cst.ImportFrom)) and not isinstance(s.names, cst.ImportStar):
                    targets = [a.asname.name if a.asname else a.name for a in s.names]
                for t in targets:
                    if isinstance(t, cst.Name) and t.value == name:
                        return True
    return False


class _MarkShardingFinder(cst.CSTVisitor):
    def __init__(self, module: cst.Module):
        self.module = module
        self.found: list[str] = []

    def visit_Call(self, node: cst.Call) -> None:
        f = node.func
        name = f.attr.value if isinstance(f, cst.Attribute) else f.value if isinstance(f, cst.Name) else ""
        if name == "mark_sharding" and node.args:
            text = self.module.code_for_node(node.args[0].value)
            if text not in self.found:
                self.found.append(text)


def _existing_mark_sharding(module: cst.Module) -> list[str]:
    finder = _MarkShardingFinder(module)
    module.visit(finder)
    return finder.found


WEIGHTS_DEVICE = "SHARD_OPT_WEIGHTS_DEVICE"

_WEIGHTS_DEVICE_LINES = [
    "",
    "# The script builds its model on the meta device (shapes only, which is all shard-opt needs);",
    "# running it needs weights. shard-opt wrote torch.device(SHARD_OPT_WEIGHTS_DEVICE) where the",
    "# script's functions said torch.device(\"meta\") (and device=SHARD_OPT_WEIGHTS_DEVICE for",
    "# device=\"meta\"): the model is built on the CPU with the weights its constructors give it",
    "# (seeded as the script seeds them), then moved to the TT device. To run trained weights, load",
    "# them in load_model (from_pretrained, or model.load_state_dict(state_dict, assign=True)).",
    f'{WEIGHTS_DEVICE} = "cpu"',
]


class _MetaToWeights(cst.CSTTransformer):
    """``torch.device("meta")`` -> ``torch.device(SHARD_OPT_WEIGHTS_DEVICE)`` and
    ``device="meta"`` -> ``device=SHARD_OPT_WEIGHTS_DEVICE`` inside the script's functions,
    so the emitted script builds its model with weights. Left as they are: a function that
    fills a meta skeleton itself (``to_empty`` or ``load_state_dict(..., assign=True)``, as
    tt-xla's streaming tests do), ``load_inputs`` (an input's values matter: ``torch.empty``
    on the CPU would be garbage, so a meta input stops ``shard_opt_inputs`` with a clear
    error) and module-level code (it runs before the block defines the name). ``used``: the script refers to the name (after a rewrite,
    or in a script shard-opt wrote before)."""

    def __init__(self):
        self.depth = 0
        self.keep = [False]  # per enclosing function: it materializes its own meta model
        self.used = False

    def visit_FunctionDef(self, node) -> bool:
        self.depth += 1
        self.keep.append(self.keep[-1] or node.name.value == "load_inputs" or _fills_meta(node))
        return True

    def leave_FunctionDef(self, original, updated):
        self.depth -= 1
        self.keep.pop()
        return updated

    def visit_Name(self, node) -> None:
        if node.value == WEIGHTS_DEVICE:
            self.used = True

    def _rewrite(self) -> bool:
        return self.depth > 0 and not self.keep[-1]

    def leave_Call(self, original, updated):
        f = updated.func
        if (self._rewrite() and isinstance(f, cst.Attribute) and f.attr.value == "device"
                and isinstance(f.value, cst.Name) and f.value.value == "torch"
                and len(updated.args) == 1 and _is_meta(updated.args[0].value) and updated.args[0].keyword is None):
            self.used = True
            return updated.with_changes(args=[updated.args[0].with_changes(value=cst.Name(WEIGHTS_DEVICE))])
        return updated

    def leave_Arg(self, original, updated):
        if self._rewrite() and updated.keyword is not None and updated.keyword.value == "device" and _is_meta(updated.value):
            self.used = True
            return updated.with_changes(value=cst.Name(WEIGHTS_DEVICE))
        return updated


def _is_meta(node) -> bool:
    return isinstance(node, cst.SimpleString) and node.evaluated_value == "meta"


def _fills_meta(fn: cst.FunctionDef) -> bool:
    """The function calls ``to_empty`` or passes ``assign=True``: it puts weights into its
    meta model itself."""
    code = cst.Module([]).code_for_node(fn)
    return ".to_empty(" in code or "assign=True" in code


class _ReturnWrapper(cst.CSTTransformer):
    """Wrap ``return X`` of load_model / load_inputs (top level or class methods)."""

    TARGETS = {"load_model": MODEL_HELPER, "load_inputs": INPUTS_HELPER}

    def __init__(self):
        self.stack: list[str | None] = []  # per enclosing function: helper name or None
        self.class_depth = 0
        self.found_model = self.found_inputs = False
        self.wrapped_model = False

    def visit_ClassDef(self, node) -> bool:
        self.class_depth += 1
        return True

    def leave_ClassDef(self, original, updated):
        self.class_depth -= 1
        return updated

    def visit_FunctionDef(self, node) -> bool:
        helper = None
        if not self.stack and self.class_depth <= 1 and node.name.value in self.TARGETS:
            helper = self.TARGETS[node.name.value]
            if helper == MODEL_HELPER:
                self.found_model = True
            else:
                self.found_inputs = True
        self.stack.append(helper if not self.stack else None)
        return True

    def leave_FunctionDef(self, original, updated):
        self.stack.pop()
        return updated

    def visit_Lambda(self, node) -> bool:
        return False

    def leave_Return(self, original, updated):
        if len(self.stack) != 1 or self.stack[0] is None or updated.value is None:
            return updated
        helper = self.stack[0]
        value = updated.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == helper:
            if helper == MODEL_HELPER:
                self.wrapped_model = True
            return updated
        if isinstance(value, cst.Tuple) and not value.lpar:
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        if helper == MODEL_HELPER:
            self.wrapped_model = True
        return updated.with_changes(value=cst.Call(func=cst.Name(helper), args=[cst.Arg(value=value)]))
