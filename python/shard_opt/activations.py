"""A user's activation shardings: constraints on intermediate values, priced with the plan.

tt-xla shards what no parameter has (the token dim of a DiT's activations: sequence
parallelism) with ``sdy.sharding_constraint`` on intermediates. Its loaders declare them
as ``load_activation_shard_spec(model) -> {module: output partition spec}`` (tt-xla
``tests/runner/testers/torch/dynamic_torch_model_tester.py``,
``_get_activation_shard_spec_function``; the test runner hooks each module's output with
``sharding_constraint_tensor``, ``tests/infra/runners/torch_device_runner.py``
``_register_activation_constraints``, ``None`` meaning replicated); the Wan DiT's own
hooks (``tests/torch/models/wan14b/shared.py``, ``apply_dit_sp_activation_sharding``)
constrain a block's input twice, replicated then split (the reshape workaround).

Here an activation spec entry is ``key -> [spec, ...]`` (one spec, or several applied
back to back in that order), and the key names the value:

- a module name (``proj_out``, ``blocks.0.attn1.to_out.0``): the output of the module
  whose ``.weight`` a ``dot_general`` / ``convolution`` reads, as
  ``shard_opt.module_outputs.Graph.module_output`` finds it (the reader's result, the
  bias add and the unflatten after it: the value a forward hook on that module sees, and
  where shard-opt's own guards are hoisted); matched per role, as the weight spec is
  (every layer's copy of the module);
- ``OP IN->OUT`` (``stablehlo.transpose 1x5120x32760->1x32760x5120``): the result of
  every ``OP`` whose operand 0 and result have those shapes -- a value inside
  ``forward()`` no module returns (the Wan block entry after
  ``flatten(2).transpose(1, 2)``).

A module with no weight read by a matmul / convolution (a rotary-embedding module,
a norm without affine weights) has no output this can find: its entry is reported
unmatched, not silently dropped. ``passes/apply_constraints.py`` inserts the constraints
(``ActivationConstraint`` values in the pass context's ``constraints``, keyed
``activation:KEY``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from shard_opt import ir
from shard_opt.sharding import TensorSharding

PREFIX = "activation:"
_READERS = ("stablehlo.dot_general", "stablehlo.convolution")


@dataclass(frozen=True)
class ActivationConstraint:
    """One activation spec entry: the specs applied back to back to the value ``key`` names."""

    key: str
    specs: tuple[TensorSharding, ...]

    @property
    def rank(self) -> int:
        return self.specs[0].rank

    def body(self) -> str:
        """What a candidate key holds for it (``evaluate.candidate_key``)."""
        return " then ".join(s.body() for s in self.specs)

    def axis_names(self) -> list[list[list[str]]]:
        return [s.axis_names() for s in self.specs]


def is_op_key(key: str) -> bool:
    return key.startswith("stablehlo.") and " " in key and "->" in key


def _shape_text(value) -> str:
    return "x".join(map(str, ir.tensor_type(value.type)[0]))


def role_of(module_name: str) -> str:
    """A module name's role, as its weight's (``blocks.3.attn1`` -> ``blocks.*.attn1``)."""
    from shard_opt.lowered import _LAYER_INDEX

    return _LAYER_INDEX.sub(".*.", "." + module_name + ".").strip(".")


def find_values(module, arguments, key: str) -> list:
    """The values of ``module`` (calls inlined) that activation ``key`` names (see the
    module docstring); empty when it names none."""
    if is_op_key(key):
        name, _, types = key.partition(" ")
        src, _, dst = types.replace(" ", "").partition("->")
        return [op.results[0] for op in ir.ops_in(module.operation, (name,))
                if op.operands and _shape_text(op.operands[0]) == src and _shape_text(op.results[0]) == dst]
    from shard_opt.module_outputs import Graph

    graph = Graph(module, arguments)
    want = role_of(key) + ".weight"
    out = []
    for op in ir.ops_in(module.operation, _READERS):
        w = graph.reader_weight(op)
        if w is None:
            continue
        a = arguments[w]
        if a.name == key + ".weight" or a.role == want or fnmatch.fnmatchcase(a.name, key + ".weight"):
            v = graph.module_output(op)
            if v not in out:
                out.append(v)
    return out


def insert(module, arguments, key: str, constraint: ActivationConstraint, mesh_name: str) -> int:
    """Constrain every value ``key`` names to ``constraint``'s specs, back to back;
    returns how many values were constrained."""
    from shard_opt.errors import UserError
    from shard_opt.sdy import constraint_op

    irm = ir.ir()
    values = find_values(module, arguments, key)
    for value in values:
        rank = len(ir.tensor_type(value.type)[0])
        if constraint.rank != rank:
            raise UserError(f"activation spec {key!r}: a spec of {constraint.rank} dims for a {rank}-dim value "
                            f"({_shape_text(value)}); give one entry per dim")
        where = value.owner
        where = where.operation if hasattr(where, "operation") else where
        first = last = None
        with irm.InsertionPoint.after(where), where.location:
            for s in constraint.specs:
                last = constraint_op(value if last is None else last.result,
                                     TensorSharding(s.dims, mesh_name).to_attr())
                first = first or last
        value.replace_all_uses_except(last.result, first)
    return len(values)
