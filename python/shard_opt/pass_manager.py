"""Python MLIR passes, their registry and a pass manager.

A pass is a small frozen dataclass (the xDSL idiom): ``name`` is its command-line name,
its fields are its options, ``apply(ctx, module)`` rewrites the module in place. So
``add-mesh{shape=2x4 axes=batch,model}`` maps onto ``AddMesh(shape="2x4",
axes="batch,model")`` with no glue.

Pipelines read like MLIR's: ``builtin.module(add-mesh{shape=2x4}, shardy-propagate)``.
A name that is not a shard-opt pass but starts with ``sdy-`` runs as Shardy's own pass
through MLIR's pass manager, so ``sdy-basic-propagate`` works in a pipeline too.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import ClassVar

from shard_opt import ir
from shard_opt.errors import UserError
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
}


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


_ITEM = re.compile(r"\s*([\w.-]+)\s*(\{[^}]*\})?\s*,?")


def parse_pipeline(text: str) -> list:
    """Parse ``builtin.module(a, b{k=v})`` (or just ``a, b``) into pass instances.

    Shardy pass names (``sdy-...``) become ``MlirPass`` entries run by MLIR.
    """
    body = text.strip()
    m = re.fullmatch(r"builtin\.module\((.*)\)", body, re.S)
    if m:
        body = m.group(1)
    passes, pos = [], 0
    while pos < len(body):
        im = _ITEM.match(body, pos)
        if not im or im.end() == pos:
            raise UserError(f"--pass-pipeline: cannot parse near {body[pos:pos + 30]!r}")
        pos = im.end()
        name, opts = im.group(1), im.group(2)
        if name not in _registry() and name.startswith("sdy-"):
            passes.append(MlirPass(name + (opts or "")))
            continue
        options = {}
        if opts:
            for kv in opts[1:-1].split():
                if "=" not in kv:
                    raise UserError(f"--pass-pipeline: option {kv!r} of {name} needs key=value")
                k, v = kv.split("=", 1)
                options[k] = v
        passes.append(get_pass_class(name).from_options(options))
    return passes


@dataclass(frozen=True)
class MlirPass:
    """A pass run by MLIR's own pass manager (Shardy's ``sdy-*`` passes)."""

    spec: str

    @property
    def name(self) -> str:
        return self.spec.split("{")[0]

    def pipeline_text(self) -> str:
        return self.spec

    def apply(self, ctx: PassContext, module) -> None:
        ir.run_pipeline(module, f"builtin.module({self.spec})", name=self.name)


class PassManager:
    """Runs passes in order, optionally printing IR after each (``--mlir-print-ir-after-all``)."""

    def __init__(self, passes, ctx: PassContext | None = None):
        self.passes = list(passes)
        self.ctx = ctx or PassContext()

    def run(self, module) -> PassContext:
        for p in self.passes:
            p.apply(self.ctx, module)
            if self.ctx.print_ir_after_all:
                stream = self.ctx.ir_stream or sys.stderr
                stream.write(f"// -----// IR Dump After {p.name} //----- //\n")
                stream.write(ir.print_module(module) + "\n")
        return self.ctx
