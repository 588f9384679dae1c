"""Architecture map of a PyTorch model: module tree, parameter shapes, FLOPs per module.

The playbook's phase 2 ("map the architecture": ``named_modules``,
``named_parameters``) as data. FLOPs come from ``torch.utils.flop_counter.FlopCounterMode``
active while ``torch.export`` traces the forward on fake tensors (the frontend's own
export), so a 70B model is counted without allocating or computing anything, and the
count is of exactly what is lowered (a dense MoE is counted as lowered: see rewrites). FLOPs are for the
example inputs (batch, sequence, phase) the model was lowered with.

``architecture()`` returns::

    {"model": "LlamaForCausalLM", "param_count": 8030261248, "flops": 2.1e12,
     "repeated": {"path": "model.layers", "count": 32},
     "modules": [{"path": "model.layers.0.self_attn.q_proj", "class": "Linear",
                  "depth": 4, "params": {"weight": [[4096, 4096], "bf16"]},
                  "param_count": 16777216, "flops": 4294967296}, ...],
     "flops_error": None}
"""

from __future__ import annotations

import torch
from torch import nn


def count_flops(model: nn.Module, inputs, *, input_names=None, keyword=None, kwargs=None, forward=None):
    """(module path -> FLOPs, total FLOPs) of one forward, counted while torch.export traces it.

    The trace runs on fake tensors (no compute, no weights): the same trace the
    PyTorch frontend lowers, so the count matches the lowered module (``lower_program``
    counts during its own export and passes the result in).
    """
    from shard_opt.frontends.torch_trace import TorchProgram, trace_program

    names = input_names or [f"input{i}" for i in range(len(inputs))]
    prog = TorchProgram(model, list(inputs), list(names), keyword=keyword, kwargs=dict(kwargs or {}),
                        forward=forward)
    _, flops = trace_program(prog, where=type(model).__name__, count_flops=True)
    return flops


def _dtype(t: torch.Tensor) -> str:
    from shard_opt.frontends.torch_trace import TORCH_TO_MLIR

    return TORCH_TO_MLIR.get(t.dtype, str(t.dtype))


def architecture(model: nn.Module, inputs, *, input_names=None, keyword=None, kwargs=None, forward=None,
                 flops: tuple[dict, int] | None = None) -> dict:
    """The module tree of ``model`` with parameter shapes and FLOPs (see module docstring).

    ``flops``: a ``(per-module, total)`` pair already counted (by the frontend's export);
    without it the forward is traced once more to count.
    """
    from shard_opt.frontends.torch_trace import find_repeated_blocks

    err = None
    if flops is None:
        try:
            flops = count_flops(model, inputs, input_names=input_names, keyword=keyword,
                                kwargs=kwargs, forward=forward)
        except Exception as e:  # report the map without FLOPs rather than fail
            err = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            flops = ({}, None)
    flops, total = flops
    modules = []
    for path, m in model.named_modules():
        own = {n: [list(p.shape), _dtype(p)] for n, p in m.named_parameters(recurse=False)}
        modules.append({
            "path": path,
            "class": type(m).__name__,
            "depth": 0 if not path else path.count(".") + 1,
            "params": own,
            "param_count": sum(p.numel() for p in m.parameters()),
            "flops": flops.get(path, 0) if not err else None,
        })
    # containers without a forward of their own (ModuleList) sum their children
    by_path = {m["path"]: m for m in modules}
    for m in modules:
        if m["flops"] == 0 and m["class"] in ("ModuleList", "ModuleDict", "ParameterList"):
            prefix = m["path"] + "."
            m["flops"] = sum(c["flops"] or 0 for c in modules
                             if c["path"].startswith(prefix) and c["depth"] == m["depth"] + 1)
    del by_path
    found = find_repeated_blocks(model)
    return {
        "model": type(model).__name__,
        "param_count": sum(p.numel() for p in model.parameters()),
        "flops": total,
        "repeated": {"path": found[0], "count": len(found[1])} if found else None,
        "modules": modules,
        "flops_error": err,
    }


def _num(n) -> str:
    if n is None:
        return "?"
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def format_architecture(arch: dict, *, max_depth: int | None = None) -> str:
    """Human text for ``--describe``: the tree, repeated blocks shown once with ``xN``."""
    lines = [
        f"{arch['model']}: {_num(arch['param_count'])} parameters, "
        f"{_num(arch['flops'])} FLOPs per forward" + (f" (FLOPs unavailable: {arch['flops_error']})"
                                                       if arch.get("flops_error") else "")
    ]
    rep = arch.get("repeated")
    rep_prefix = rep["path"] + "." if rep else None
    for mod in arch["modules"]:
        path = mod["path"]
        if max_depth is not None and mod["depth"] > max_depth:
            continue
        if rep_prefix and path.startswith(rep_prefix):
            rest = path[len(rep_prefix):]
            idx = rest.split(".", 1)[0]
            if idx.isdigit() and int(idx) > 0:
                continue
            if idx == "0" and "." not in rest:
                lines.append("  " * mod["depth"] + f"{rep_prefix}0..{rep['count'] - 1} "
                             f"({mod['class']} x{rep['count']}, each as below)")
                path_label = path
            else:
                path_label = path
        else:
            path_label = path or "(root)"
        shapes = ", ".join(f"{n} {'x'.join(map(str, s)) or 'scalar'} {d}" for n, (s, d) in mod["params"].items())
        lines.append(
            "  " * mod["depth"] + f"{path_label} ({mod['class']}): params {_num(mod['param_count'])}, "
            f"FLOPs {_num(mod['flops'])}" + (f" [{shapes}]" if shapes else "")
        )
    if arch.get("rewrites"):
        lines.append("rewritten before lowering (shard_opt.frontends.rewrites): " + ", ".join(arch["rewrites"]))
    return "\n".join(lines)
