"""Baseline plans every plan is compared with, priced by the same cost model.

- ``replicated``: nothing split; every chip runs the whole model.
- ``megatron``: the expert tensor-parallel plan (Megatron-LM, arXiv 1909.08053
  section 3, figures 3-4), as tt-xla writes it for Llama (`examples/pytorch/llama.py`,
  references/tenstorrent.md section 5): q/k/v/gate/up column-parallel
  ``("model", None)``, o/down row-parallel ``(None, "model")``, KV cache split on heads.
  Generalised to other architectures by role name (``ROLE_RULES``; stacked MoE experts
  ``[experts, out, in]`` split on the expert dim: expert parallelism); 2-D weights with no
  known role alternate column, row in argument order (an MLP's fc1, fc2).
- ``autoshard-heuristic``: a re-implementation of the search of tt-mlir's
  AutoShardingPass (tt-mlir PR 7517, references section 7): one mesh axis; per
  argument replicate or split one dim; arguments under 4096 elements replicated;
  exhaustive product when small, otherwise arguments grouped by identical shape, scored
  by its own heuristic (cost model ``autoshard-heuristic``). Beyond our evaluation budget
  the product is searched greedily instead of exhaustively (documented deviation: the
  pass enumerates up to 50,000 configurations).
"""

from __future__ import annotations

import re

from shard_opt.candidates import Group
from shard_opt.lowered import Argument, LoweredModel
from shard_opt.sharding import Mesh, TensorSharding

# (regex on the argument's role, dim of a [out, in] weight to split): column = 0, row = 1.
ROLE_RULES = [
    (r"(q_proj|k_proj|v_proj|query|key|value|qkv|c_attn|in_proj|to_q|to_k|to_v|wq|wk|wv)\.weight$", 0),
    (r"(gate_proj|up_proj|fc1|c_fc|w1|w3|intermediate\.dense|ffn\.net\.0\.proj|mlp\.0)\.weight$", 0),
    (r"(o_proj|out_proj|attention\.output\.dense|attn\.c_proj|to_out\.0|wo)\.weight$", 1),
    (r"(down_proj|fc2|mlp\.c_proj|w2|output\.dense|ffn\.net\.2|mlp\.2)\.weight$", 1),
    (r"(lm_head|embed_out)\.weight$", 0),
    # stacked MoE experts [experts, out, in] (the MoE rewrite's names): expert parallel, whole
    # experts per device (a column split of the packed gate|up would cut across gate and up)
    (r"experts\.(gate_up_proj|down_proj|w1|w2|w3)$", 0),
    (r"(q_proj|k_proj|v_proj|gate_proj|up_proj|fc1|c_fc|query|key|value)\.bias$", 0),
]


def megatron_role_dim(arg: Argument) -> int | None:
    for pattern, dim in ROLE_RULES:
        if re.search(pattern, arg.role):
            return dim
    return None


def megatron_shardings(model: LoweredModel, mesh: Mesh, axis: str | None = None) -> dict[int, TensorSharding]:
    """The Megatron plan on ``axis`` (default: the last mesh axis, tt-xla's "model")."""
    axis = axis or mesh.axes[-1]
    n = mesh.axis_size(axis)
    out: dict[int, TensorSharding] = {}
    unknown_2d = []
    for a in model.arguments:
        rank = len(a.shape)
        dim = None
        if a.kind == "param":
            dim = megatron_role_dim(a)
            if dim is None and rank == 2:
                unknown_2d.append(a)
        elif a.kind == "cache" and rank == 4:
            dim = 1  # (None, "model", None, None): heads (tt-xla llama.py)
        if dim is not None and dim < rank and a.shape[dim] % n == 0:
            out[a.index] = _split(rank, dim, axis)
    if not any(a.kind == "param" and megatron_role_dim(a) is not None for a in model.arguments):
        # no known roles: alternate column / row over the 2-D weights, in order (fc1, fc2...)
        for i, a in enumerate(unknown_2d):
            dim = 0 if i % 2 == 0 else 1
            if a.shape[dim] % n == 0:
                out[a.index] = _split(2, dim, axis)
    return out


def _split(rank: int, dim: int, axis: str) -> TensorSharding:
    return TensorSharding.of([[axis] if d == dim else [] for d in range(rank)])


def replicated_shardings(model: LoweredModel) -> dict[int, TensorSharding]:
    return {a.index: TensorSharding.replicated(len(a.shape)) for a in model.arguments}


def autoshard_groups(model: LoweredModel, mesh: Mesh) -> list[Group]:
    """AutoShardingPass's space: one axis, one dim, args >= 4096 elements, grouped by shape."""
    axis = max(zip(mesh.shape, mesh.axes))[1]  # its single shardable axis: the largest
    n = mesh.axis_size(axis)
    by_shape: dict[tuple, list[Argument]] = {}
    for a in model.arguments:
        elems = 1
        for s in a.shape:
            elems *= s
        if elems >= 4096:
            by_shape.setdefault(a.shape, []).append(a)
    groups = []
    for shape, members in by_shape.items():
        opts = [TensorSharding.replicated(len(shape))]
        opts += [_split(len(shape), d, axis) for d in range(len(shape)) if shape[d] % n == 0]
        if len(opts) > 1:
            groups.append(Group(f"shape {list(shape)}", tuple(m.index for m in members), shape,
                                members[0].kind, tuple(opts), by="shape"))
    return groups
