"""A lit + FileCheck test that pins a plan's collectives (``--emit-lit-test``).

The test is the annotated module itself (the model's StableHLO with ``sdy.mesh`` and
the winning ``sdy.sharding`` attributes) with a RUN line that re-evaluates it::

    // RUN: shard-opt %s --evaluate --mesh 2x4 | FileCheck %s

``--evaluate`` prints the module after Shardy propagation and collective collection,
so every collective is an explicit op stamped with its bytes::

    %9 = sdy.all_reduce {"model"} %8 out_sharding=<@mesh, [{"batch"}, {}]>
           {shard_opt.bytes_per_device = 32768 : i64, shard_opt.group_size = 4 : i64} : tensor<128x64xf32>

The CHECK lines pin the module's totals (``shard_opt.ccl_count`` and ``ccl_bytes``,
so an extra or a missing collective fails), then, after ``CHECK-LABEL: func.func
@main``, each collective in program order: kind, mesh axes, per-device bytes and tensor
type, and a final CHECK-NOT that no collective follows the last one. The totals come
first because the module attributes print before ``@main``. (CHECK-NOT lines between
collectives are avoided: the Python filecheck searches a CHECK-NOT up to the end of
the next positive match, so it would find that match's own op.) Text containing
``[[`` or ``{{`` (FileCheck's variable and regex brackets) is written with
``CHECK{LITERAL}``, which the Python filecheck needs.
"""

from __future__ import annotations

import shlex

from shard_opt.emit import _plan
from shard_opt.plan import Plan

# One regex matching any Shardy collective op (kept free of '[[' so it parses).
_ANY_COLLECTIVE = r"{{sdy\.(all_reduce|all_gather|all_slice|reduce_scatter|all_to_all|collective_permute)}}"

# How each kind prints its axes: opening and closing text around them.
_AXES_BRACKETS = {
    "all_reduce": ("{", "} %"),
    "all_gather": ("[", "] %"),
    "all_slice": ("[", "] %"),
    "reduce_scatter": ("[", "] %"),
    "all_to_all": ("[", "] %"),
}


def _directive(kind: str, text: str) -> str:
    literal = "[[" in text or "{{" in text
    return f"// {kind}{{LITERAL}}: {text}" if literal else f"// {kind}: {text}"


def collective_checks(c, *, pin_annotations: bool = True) -> list[str]:
    """CHECK / CHECK-SAME lines matching one collective's (``plan.CollectiveRecord``) line in
    ``--evaluate`` output."""
    kind = c.kind
    lines = []
    if kind in _AXES_BRACKETS and c.axes:
        open_, close = _AXES_BRACKETS[kind]
        lines.append(_directive("CHECK", f"sdy.{kind} {open_}"))
        for a in c.axes:
            lines.append(_directive("CHECK-SAME", f'"{a}"'))
        lines.append(_directive("CHECK-SAME", close))
    else:
        lines.append(_directive("CHECK", f"sdy.{kind} %"))
    if pin_annotations and c.bytes_per_device is not None:
        lines.append(_directive("CHECK-SAME", f"shard_opt.bytes_per_device = {int(c.bytes_per_device)} : i64"))
    if c.shape is not None and c.dtype:
        lines.append(_directive("CHECK-SAME", f": tensor<{_plan.shape_text(c.shape, c.dtype)}>"))
    return lines


def _run_line(run_args: str) -> str:
    args = shlex.split(run_args or "")
    if "--evaluate" not in args and "-evaluate" not in args:
        args = ["--evaluate"] + args
    return "// RUN: shard-opt %s " + " ".join(shlex.quote(a) for a in args) + " | FileCheck %s"


def _strip_directives(text: str) -> str:
    """Drop RUN / CHECK lines from a module that is itself a generated test."""
    keep = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("// RUN:") or s.startswith("// CHECK") or s.startswith("// shard-opt lit test"):
            continue
        keep.append(line)
    while keep and not keep[0].strip():
        keep.pop(0)
    return "\n".join(keep).rstrip() + "\n"


def emit_lit_test(annotated_module_text: str, plan: Plan, *, run_args: str,
                  pin_annotations: bool = True) -> str:
    """A lit test: the annotated module, a RUN line and CHECK lines for every collective.

    Args:
      annotated_module_text: the module with ``sdy.mesh`` and argument shardings.
      plan: the ``Plan`` (a plan JSON dict is read as one, ``_plan.as_plan``); its
        ``collectives`` (program order) are pinned.
      run_args: extra ``shard-opt`` arguments (e.g. ``--mesh 2x4``); ``--evaluate`` is
        added when absent.
      pin_annotations: also pin what ``collect-collectives`` stamps on the IR: the
        module's ``shard_opt.ccl_count`` / ``ccl_bytes`` and each op's
        ``shard_opt.bytes_per_device``.
    """
    plan = _plan.as_plan(plan)
    shape, axes = _plan.mesh_of(plan)
    cost = plan.cost
    cs = _plan.collectives(plan)
    if any(_plan.multiplicity(c) != 1 for c in cs):
        raise ValueError("emit_lit_test needs the module's own collectives, not a representative block's")
    count, nbytes = _plan.ccl_totals(plan)
    out = [
        _run_line(run_args),
        "",
        f"// shard-opt lit test: the plan for {plan.model or 'this module'} on a "
        f"{'x'.join(map(str, shape))} mesh ({', '.join(axes)}).",
        f"// shard-opt lit test: {count} collectives, {nbytes} bytes per device"
        + (f", modeled {cost.total_us} us" if cost.total_us is not None else "")
        + "; regenerate with --emit-lit-test when the plan changes.",
        "",
    ]
    if pin_annotations:
        out += [
            _directive("CHECK", "module attributes"),
            _directive("CHECK-SAME", f"shard_opt.ccl_bytes = {nbytes} : i64"),
            _directive("CHECK-SAME", f"shard_opt.ccl_count = {count} : i64"),
        ]
    out.append("// CHECK-LABEL: func.func @main")
    for c in cs:
        out.extend(collective_checks(c, pin_annotations=pin_annotations))
    out.append("// CHECK-NOT: " + _ANY_COLLECTIVE)
    out.append("")
    return "\n".join(out) + "\n" + _strip_directives(annotated_module_text)
