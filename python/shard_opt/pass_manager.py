"""Python MLIR passes, their registry and a pass manager.

A pass is a small frozen dataclass (the xDSL idiom): ``name`` is its command-line name,
its fields are its options, ``apply(ctx, module)`` rewrites the module in place. So
``add-mesh{shape=2x4 axes=batch,model}`` maps onto ``AddMesh(shape="2x4",
axes="batch,model")`` with no glue.

Pipelines read like MLIR's: ``builtin.module(add-mesh{shape=2x4}, shardy-propagate)``.
A name that is not a shard-opt pass but starts with ``sdy-`` runs as Shardy's own pass
through MLIR's pass manager, so ``sdy-basic-propagate`` works in a pipeline too (as do
MLIR's ``cse`` / ``canonicalize`` and nested ``func.func(...)`` pipelines). What shard-opt
itself runs is written the same way, as text (``shard_opt.pipelines``), and any pass that
fails leaves a repro (``PassManager``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from typing import ClassVar

from shard_opt import ir
from shard_opt.errors import PassError, UserError
from shard_opt.options import option_value


@dataclass
class PassContext:
    """State shared by the passes of one pipeline run.

    Attributes:
      mesh: the target mesh (set by ``add-mesh`` or by the driver).
      shardings: argument index -> ``TensorSharding`` for ``apply-shardings``.
      result_shardings: result index -> ``TensorSharding`` (results not listed are
        returned replicated).
      constraints: site -> ``TensorSharding`` for ``apply-constraints`` (intermediate
        values, see ``passes/apply_constraints.py``).
      arguments: the frontend's argument list (names and kinds), if any.
      storage: argument index -> the block-float format a weight is stored in on device
        (``shard_opt.weights``); ``collect-collectives`` prices its reads at that size.
      facts: filled by ``collect-collectives``.
      cost: filled by ``annotate-costs``.
      system: hardware preset name for cost passes.
      cost_model: cost model name for cost passes.
      left_flat: a list ``wrap-composites`` appends to: the attentions it left out of
        tt-xla's SDPA composite, and why (None: not asked).
      print_ir_after_all: write the IR to ``ir_stream`` after each pass.
    """

    mesh: object = None
    shardings: dict = field(default_factory=dict)
    result_shardings: dict = field(default_factory=dict)
    constraints: dict = field(default_factory=dict)
    arguments: list = field(default_factory=list)
    storage: dict = field(default_factory=dict)
    facts: object = None
    cost: object = None
    system: str | None = None
    cost_model: str = "tenstorrent"
    left_flat: list | None = None
    print_ir_after_all: bool = False
    ir_stream: object = None


@dataclass(frozen=True)
class ModulePass:
    """Base class: subclasses set ``name`` and implement ``apply``."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def apply(self, ctx: PassContext, module) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "ModulePass":
        fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, raw in options.items():
            if key not in fields:
                known = ", ".join(sorted(fields)) or "none"
                raise UserError(f"pass {cls.name}: unknown option {key!r} (options: {known})")
            f = fields[key]
            kwargs[f.name] = option_value(raw, f, f"pass {cls.name}", key)
        return cls(**kwargs)

    def pipeline_text(self) -> str:
        opts = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v != f.default:
                v = str(v).lower() if isinstance(v, bool) else v
                opts.append(f"{f.name.replace('_', '-')}={v}")
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")


# name -> "module:Class", imported on first use so the CLI starts fast.
_BUILTIN_PASSES = {
    "add-mesh": "shard_opt.passes.add_mesh:AddMesh",
    "apply-shardings": "shard_opt.passes.apply_shardings:ApplyShardings",
    "apply-constraints": "shard_opt.passes.apply_constraints:ApplyConstraints",
    "inline-calls": "shard_opt.passes.inline_calls:InlineCalls",
    "decouple-const-fanout": "shard_opt.passes.decouple_const_fanout:DecoupleConstFanout",
    "unfold-batch-matmul": "shard_opt.passes.unfold_batch_matmul:UnfoldBatchMatmul",
    "mark-fusions": "shard_opt.passes.mark_fusions:MarkFusions",
    "wrap-composites": "shard_opt.passes.wrap_composites:WrapComposites",
    "shardy-propagate": "shard_opt.passes.shardy_propagate:ShardyPropagate",
    "collect-collectives": "shard_opt.passes.collect_collectives:CollectCollectives",
    "annotate-costs": "shard_opt.passes.annotate_costs:AnnotateCosts",
    "insert-guards": "shard_opt.passes.insert_guards:InsertGuards",
    "replicate-non-splittable": "shard_opt.passes.replicate_non_splittable:ReplicateNonSplittable",
    "merge-collectives": "shard_opt.passes.merge_collectives:MergeCollectives",
}

# MLIR's own passes a pipeline may name besides Shardy's (``sdy-*``) and nested
# ``func.func(...)`` pipelines: run by MLIR's pass manager (``MlirPass``).
MLIR_PASSES = ("cse", "canonicalize", "symbol-dce", "inline")


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, str]:
    reg = dict(_BUILTIN_PASSES)
    for ep in metadata.entry_points(group="shard_opt.passes"):
        reg.setdefault(ep.name, ep.value)
    return reg


def get_pass_class(name: str):
    target = _registry().get(name)
    if target is None:
        raise UserError(f"unknown pass {name!r}; see shard-opt --list-passes")
    mod, _, attr = target.partition(":")
    return getattr(importlib.import_module(mod), attr)


def list_passes() -> list[tuple[str, str]]:
    out = []
    for name in sorted(_registry()):
        try:
            out.append((name, get_pass_class(name).summary))
        except (ImportError, AttributeError) as e:
            out.append((name, f"(unavailable: {e})"))
    return out


def _items(body: str) -> list[str]:
    """The comma-separated items of a pipeline body, at nesting depth 0 (an item may hold
    ``{options}`` or a nested ``(pipeline)``)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth < 0:
                raise UserError(f"--pass-pipeline: unbalanced {ch!r} near {body[max(0, i - 20):i + 10]!r}")
        elif ch == "," and depth == 0:
            items.append(body[start:i])
            start = i + 1
    if depth:
        raise UserError(f"--pass-pipeline: unbalanced brackets in {body[-40:]!r}")
    items.append(body[start:])
    return [x.strip() for x in items if x.strip()]


_NAME = re.compile(r"([\w.-]+)\s*(.*)", re.S)


def parse_pipeline(text: str) -> list:
    """Parse ``builtin.module(a, b{k=v})`` (or just ``a, b``) into pass instances.

    A registered name is a shard-opt pass (its ``{options}`` its fields); Shardy's passes
    (``sdy-...``), MLIR's ``cse`` / ``canonicalize`` / ``symbol-dce`` / ``inline`` and a
    nested ``func.func(...)`` pipeline become ``MlirPass`` entries run by MLIR. Parsed
    pipelines are kept (their passes are frozen values), so a pipeline run per candidate
    is parsed once.
    """
    return list(_parse(text.strip()))


@functools.lru_cache(maxsize=256)
def _parse(body: str) -> tuple:
    m = re.fullmatch(r"builtin\.module\((.*)\)", body, re.S)
    if m:
        body = m.group(1)
    passes = []
    for item in _items(body):
        nm = _NAME.fullmatch(item)
        if not nm:
            raise UserError(f"--pass-pipeline: cannot parse near {item[:30]!r}")
        name, rest = nm.group(1), nm.group(2).strip()
        if rest and not ((rest[0] == "{" and rest[-1] == "}") or (rest[0] == "(" and rest[-1] == ")")):
            raise UserError(f"--pass-pipeline: cannot parse near {item[:30]!r}")
        if name not in _registry() and (name.startswith("sdy-") or name in MLIR_PASSES or rest.startswith("(")):
            passes.append(MlirPass(item))
            continue
        if rest.startswith("("):
            raise UserError(f"--pass-pipeline: {name} is a shard-opt pass, not an op to nest a pipeline in")
        options = {}
        if rest:
            for kv in rest[1:-1].split():
                if "=" not in kv:
                    raise UserError(f"--pass-pipeline: option {kv!r} of {name} needs key=value")
                k, v = kv.split("=", 1)
                options[k] = v
        passes.append(get_pass_class(name).from_options(options))
    return tuple(passes)


def pipeline_text(passes) -> str:
    """Passes as the pipeline text that parses back to them."""
    return "builtin.module(" + ", ".join(p.pipeline_text() for p in passes) + ")"


@dataclass(frozen=True)
class MlirPass:
    """A pass run by MLIR's own pass manager (Shardy's ``sdy-*`` passes, ``cse``,
    ``canonicalize``, a nested ``func.func(...)`` pipeline). Consecutive ones in a
    pipeline run as one MLIR pipeline (``PassManager``)."""

    spec: str

    @property
    def name(self) -> str:
        return re.split(r"[{(]", self.spec, maxsplit=1)[0]

    def pipeline_text(self) -> str:
        return self.spec

    def apply(self, ctx: PassContext, module) -> None:
        ir.run_pipeline(module, f"builtin.module({self.spec})", name=self.name)


class PassManager:
    """Runs a pipeline's passes in order: shard-opt's own, and MLIR's (consecutive
    ``MlirPass`` entries as one MLIR pipeline). Optionally prints the IR after each
    (``--mlir-print-ir-after-all``).

    Any pass that fails, Python or MLIR, leaves a repro (torch-mlir's
    ``run_pipeline_with_repro_report`` habit): the IR as it was right before that pass,
    with debug info, in a file whose first lines say what failed (a Python pass's
    traceback too), and a ``PassError`` naming the file and the command that reproduces
    it (``shard-opt FILE --pass-pipeline='builtin.module(PASS)'``). The pipeline's input is
    kept (one clone) and the passes before the failing one replayed on it, so a run that
    succeeds pays no more. A ``UserError`` (bad input) passes through as it is.

    Args:
      passes: the passes, or a pipeline's text (``parse_pipeline``).
      ctx: the state the passes share.
      verify: run MLIR's verifier after every MLIR pass (a search turns it off for the
        candidates it only prices).
      name: what the error calls the pipeline's MLIR steps (default each pass's name).
      repro: keep the input for a repro (off for a pipeline run inside a pass: the
        enclosing pipeline's repro covers it).
    """

    def __init__(self, passes, ctx: PassContext | None = None, *, verify: bool = True, name: str | None = None,
                 repro: bool = True):
        self.passes = parse_pipeline(passes) if isinstance(passes, str) else list(passes)
        self.ctx = ctx or PassContext()
        self.verify = verify
        self.name = name
        self.repro = repro

    def _steps(self) -> list[list]:
        """The passes as steps: one shard-opt pass, or a run of consecutive MLIR passes."""
        steps: list[list] = []
        for p in self.passes:
            if isinstance(p, MlirPass) and steps and isinstance(steps[-1][0], MlirPass) \
                    and not self.ctx.print_ir_after_all:
                steps[-1].append(p)
            else:
                steps.append([p])
        return steps

    def _apply(self, step: list, ctx: PassContext, module) -> None:
        if isinstance(step[0], MlirPass):
            text = "builtin.module(" + ", ".join(p.spec for p in step) + ")"
            ir.run_pipeline(module, text, name=self.name or step[0].name, verify=self.verify, repro=False)
        else:
            step[0].apply(ctx, module)

    def run(self, module) -> PassContext:
        before = module.operation.clone() if self.repro else None
        start = dataclasses.replace(self.ctx) if self.repro else None
        steps = self._steps()
        for k, step in enumerate(steps):
            try:
                self._apply(step, self.ctx, module)
            except (UserError, KeyboardInterrupt):
                raise
            except PassError as e:
                if e.repro_path or before is None:
                    raise
                raise self._report(before, start, steps, k, e) from None
            except Exception as e:
                if before is None:
                    raise
                raise self._report(before, start, steps, k, e) from None
            if self.ctx.print_ir_after_all:
                stream = self.ctx.ir_stream or sys.stderr
                for p in step:
                    stream.write(f"// -----// IR Dump After {p.name} //----- //\n")
                stream.write(ir.print_module(module) + "\n")
        return self.ctx

    def _report(self, before, start: PassContext, steps: list, k: int, error: Exception) -> PassError:
        """The ``PassError`` of step ``k`` failing, with its repro written: the IR before
        that step (the steps before it replayed on the pipeline's input)."""
        module, ctx = before.clone(), dataclasses.replace(start, print_ir_after_all=False)
        replayed = True
        try:
            for step in steps[:k]:
                self._apply(step, ctx, module)
        except Exception:  # the replay differs from the run (it should not): the input, and every step
            module, replayed = before, False
        failing = steps[k] if replayed else [p for s in steps[:k + 1] for p in s]
        command = pipeline_text(failing)
        what = ", ".join(p.name for p in steps[k])
        message = " ".join(str(error).split()) if isinstance(error, PassError) else \
            f"{type(error).__name__}: {' '.join(str(error).split())}"
        header = [f"// shard-opt: pass {what} failed: {message}",
                  f"// reproduce: shard-opt FILE --pass-pipeline='{command}'"]
        if not isinstance(error, PassError):
            header += ["// " + line for line in "".join(traceback.format_exception(error)).rstrip().splitlines()]
        fd, path = tempfile.mkstemp(prefix=f"shard-opt-{steps[k][0].name}-", suffix=".mlir")
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(header) + "\n" + module.operation.get_asm(enable_debug_info=True))
        return PassError(f"pass {what} failed: {message} (repro: {path}; run: shard-opt {path} "
                         f"--pass-pipeline='{command}')", repro_path=path)
