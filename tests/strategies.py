"""Hypothesis strategies: small valid StableHLO programs and random argument shardings.

``programs()`` draws a ``func.func @main`` of f32 tensors with static shapes: 1-4
arguments (created as the ops need them), 1-8 ops among dot_general (plain, with a
weight in either layout, batched, or between two existing values), add / multiply /
maximum, tanh, relu (maximum with a splat constant), reshape, transpose, reduce (add
body) and concatenate, returning one or two values. ``sharded_programs()`` adds a
2x2 or 2x4 mesh (axes ``batch``, ``model``) and a sharding per argument that splits
only dims the axes divide.

The op syntax is the one jaxlib 0.10.2 prints (checked against
``jax.jit(...).lower(...).as_text()``), e.g.::

    %2 = stablehlo.dot_general %0, %arg1, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
    %3 = stablehlo.reduce(%2 init: %cst) applies stablehlo.add across dimensions = [0, 2] : (tensor<2x3x5xf32>, tensor<f32>) -> tensor<3xf32>
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hypothesis import strategies as st

from shard_opt.sharding import Mesh, TensorSharding

# Mostly divisible by 2 and 4, some not. Hypothesis shrinks towards the first entry of
# a sampled_from, so the simplest examples use 4 (shardable), not 1.
DIMS = (4, 8, 2, 6, 3, 1)
MAX_ELEMENTS = 2048
# Model-like sizes, where splitting can beat replication (for the search): 2-D, <= 1 MiB.
BIG_DIMS = (256, 512, 128, 64)
BIG_MAX_ELEMENTS = 2 ** 18
MAX_ARGS = 4
MESHES = ("2x2", "2x4")


def ttype(shape) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


@dataclass
class Program:
    """A generated module: its text and the global shape of each ``@main`` argument."""

    text: str
    arg_shapes: list[tuple[int, ...]]
    ops: list[str] = field(default_factory=list)  # op kinds, for reports
    result_shapes: list[tuple[int, ...]] = field(default_factory=list)
    # 2 * output elements * contracted size, summed over the dot_generals: counted as they
    # are built, from the shapes drawn (not read back from the text)
    matmul_flops: int = 0


@dataclass
class FuzzCase:
    """A program with a mesh, argument shardings (index -> ``TensorSharding``) and the
    results kept split on device (index -> ``TensorSharding``; others are returned whole)."""

    program: Program
    mesh: Mesh
    shardings: dict
    result_shardings: dict = field(default_factory=dict)

    def describe(self) -> str:
        sh = ", ".join(f"%arg{i}={s.axis_names()}" for i, s in sorted(self.shardings.items()))
        res = ", ".join(f"result{i}={s.axis_names()}" for i, s in sorted(self.result_shardings.items()))
        return (f"mesh {self.mesh.spec}; {sh or 'all replicated'}{'; ' + res if res else ''}; "
                f"ops {' '.join(self.program.ops)}")


class _Builder:
    def __init__(self, dims=DIMS, max_elements=MAX_ELEMENTS):
        self.dims = dims
        self.max_elements = max_elements
        self.args: list[tuple[int, ...]] = []
        self.values: list[tuple[str, tuple[int, ...]]] = []  # (SSA name, shape)
        self.lines: list[str] = []
        self.kinds: list[str] = []
        self.n = 0
        self.need_zero = False
        self.matmul_flops = 0

    def new_arg(self, shape) -> str:
        name = f"%arg{len(self.args)}"
        self.args.append(tuple(shape))
        self.values.append((name, tuple(shape)))
        return name

    def emit(self, kind: str, rhs: str, shape, contracted: int = 0) -> str:
        name = f"%{self.n}"
        self.matmul_flops += 2 * math.prod(shape) * contracted
        self.n += 1
        self.lines.append(f"    {name} = {rhs}")
        self.values.append((name, tuple(shape)))
        self.kinds.append(kind)
        return name

    def same_shape(self, shape) -> list[str]:
        return [n for n, s in self.values if s == shape]


def _dims_list(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _factor_shapes(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@st.composite
def programs(draw, min_ops: int = 1, max_ops: int = 8, dims=DIMS, max_elements: int = MAX_ELEMENTS,
             max_rank: int = 3) -> Program:
    """A random valid StableHLO module (see the module docstring); ``dims`` are the
    sizes drawn for new dims, ``max_elements`` caps any value's size."""
    b = _Builder(dims, max_elements)
    rank = draw(st.integers(1, max_rank))
    first = [draw(st.sampled_from(dims)) for _ in range(rank)]
    while math.prod(first) > max_elements:
        first.pop()
    b.new_arg(tuple(first))
    n_ops = draw(st.integers(min_ops, max_ops))
    kinds = ["dot", "dot", "binary", "tanh", "relu", "reshape", "transpose", "reduce", "concat"]
    for _ in range(n_ops):
        kind = draw(st.sampled_from(kinds))
        # Prefer recent values so ops chain; any value may be picked.
        idx = draw(st.integers(0, len(b.values) - 1).map(lambda i, n=len(b.values): n - 1 - i))
        name, shape = b.values[idx]
        elems = math.prod(shape)
        if kind == "dot" and shape and _dot(draw, b, name, shape):
            continue
        if kind == "binary":
            partner = draw(st.sampled_from(b.same_shape(shape)))
            op = draw(st.sampled_from(["add", "multiply", "maximum"]))
            b.emit(op, f"stablehlo.{op} {name}, {partner} : {ttype(shape)}", shape)
        elif kind == "relu":
            zero = b.emit("const", f"stablehlo.constant dense<0.000000e+00> : {ttype(shape)}", shape)
            b.values.pop()  # the constant is not a value to build on
            b.kinds.pop()
            b.emit("relu", f"stablehlo.maximum {name}, {zero} : {ttype(shape)}", shape)
        elif kind == "reshape" and elems > 1:
            factors = draw(st.permutations(_factor_shapes(elems)))
            k = draw(st.integers(1, min(3, len(factors))))
            cuts = sorted(draw(st.lists(st.integers(1, len(factors) - 1), min_size=k - 1, max_size=k - 1,
                                        unique=True))) if k > 1 else []
            bounds = [0, *cuts, len(factors)]
            new = tuple(math.prod(factors[bounds[i]:bounds[i + 1]]) for i in range(len(bounds) - 1))
            b.emit("reshape", f"stablehlo.reshape {name} : ({ttype(shape)}) -> {ttype(new)}", new)
        elif kind == "transpose" and len(shape) >= 2:
            perm = draw(st.permutations(range(len(shape))))
            new = tuple(shape[p] for p in perm)
            b.emit("transpose", f"stablehlo.transpose {name}, dims = {_dims_list(perm)} : "
                                f"({ttype(shape)}) -> {ttype(new)}", new)
        elif kind == "reduce" and len(shape) >= 2:
            dims = sorted(draw(st.lists(st.integers(0, len(shape) - 1), min_size=1,
                                        max_size=len(shape) - 1, unique=True)))
            new = tuple(d for i, d in enumerate(shape) if i not in dims)
            b.need_zero = True
            b.emit("reduce", f"stablehlo.reduce({name} init: %zero) applies stablehlo.add across "
                             f"dimensions = {_dims_list(dims)} : ({ttype(shape)}, tensor<f32>) -> {ttype(new)}", new)
        elif kind == "concat" and shape and elems * 2 <= b.max_elements:
            partner = draw(st.sampled_from(b.same_shape(shape)))
            d = draw(st.integers(0, len(shape) - 1))
            new = tuple(s * 2 if i == d else s for i, s in enumerate(shape))
            b.emit("concat", f"stablehlo.concatenate {name}, {partner}, dim = {d} : "
                             f"({ttype(shape)}, {ttype(shape)}) -> {ttype(new)}", new)
        else:
            b.emit("tanh", f"stablehlo.tanh {name} : {ttype(shape)}", shape)

    results = [b.values[-1]]
    others = [v for v in b.values if v[0] != results[0][0]]
    if others and draw(st.booleans()):
        results.append(draw(st.sampled_from(others)))
    return Program(_render(b, results), list(b.args), list(b.kinds), [s for _, s in results], b.matmul_flops)


def _dot(draw, b: _Builder, name: str, shape) -> bool:
    """Emit a dot_general with ``name`` as lhs; False if no valid one fits."""
    rank = len(shape)
    c = draw(st.integers(0, rank - 1))
    k = shape[c]
    lhs_free = [d for i, d in enumerate(shape) if i != c]
    style = draw(st.sampled_from(["weight", "weight_t", "batched", "existing"]))
    if style == "batched" and rank == 3 and c != 0:
        bdim = shape[0]
        free = [d for i, d in enumerate(shape) if i not in (0, c)]
        n = draw(st.sampled_from(b.dims))
        rhs_shape = (bdim, k, n)
        rhs = _pick_or_new(draw, b, rhs_shape)
        if rhs is None:
            return False
        out = (bdim, *free, n)
        if math.prod(out) > b.max_elements or bdim * k * n > b.max_elements:
            return False
        b.emit("dot", f"stablehlo.dot_general {name}, {rhs}, batching_dims = [0] x [0], contracting_dims = "
                      f"[{c}] x [1] : ({ttype(shape)}, {ttype(rhs_shape)}) -> {ttype(out)}", out, k)
        return True
    if style == "existing":
        cands = [(n2, s2, j) for n2, s2 in b.values for j, d in enumerate(s2)
                 if d == k and len(lhs_free) + len(s2) - 1 <= 4]
        cands = [x for x in cands if math.prod(lhs_free) * math.prod(x[1]) // k <= b.max_elements]
        if not cands:
            return False
        rhs, rhs_shape, j = draw(st.sampled_from(cands))
        out = tuple(lhs_free + [d for i, d in enumerate(rhs_shape) if i != j])
        b.emit("dot", f"stablehlo.dot_general {name}, {rhs}, contracting_dims = [{c}] x [{j}] : "
                      f"({ttype(shape)}, {ttype(rhs_shape)}) -> {ttype(out)}", out, k)
        return True
    n = draw(st.sampled_from(b.dims))
    transposed = style == "weight_t"
    rhs_shape = (n, k) if transposed else (k, n)
    out = tuple(lhs_free + [n])
    if math.prod(out) > b.max_elements or k * n > b.max_elements or len(out) > 4:
        return False
    rhs = _pick_or_new(draw, b, rhs_shape)
    if rhs is None:
        return False
    j = 1 if transposed else 0
    b.emit("dot", f"stablehlo.dot_general {name}, {rhs}, contracting_dims = [{c}] x [{j}] : "
                  f"({ttype(shape)}, {ttype(rhs_shape)}) -> {ttype(out)}", out, k)
    return True


def _pick_or_new(draw, b: _Builder, shape) -> str | None:
    existing = b.same_shape(tuple(shape))
    if existing and (len(b.args) >= MAX_ARGS or draw(st.booleans())):
        return draw(st.sampled_from(existing))
    if len(b.args) >= MAX_ARGS:
        return None
    return b.new_arg(shape)


def _render(b: _Builder, results) -> str:
    args = ", ".join(f"%arg{i}: {ttype(s)}" for i, s in enumerate(b.args))
    rtypes = [ttype(s) for _, s in results]
    rsig = rtypes[0] if len(rtypes) == 1 else "(" + ", ".join(rtypes) + ")"
    body = []
    if b.need_zero:
        body.append("    %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>")
    body += b.lines
    body.append(f"    return {', '.join(n for n, _ in results)} : {', '.join(rtypes)}")
    return "module {\n  func.func @main(" + args + ") -> " + rsig + " {\n" + "\n".join(body) + "\n  }\n}\n"


def _one_sharding(draw, shape, mesh: Mesh) -> TensorSharding:
    sizes = dict(zip(mesh.axes, mesh.shape))
    free = list(mesh.axes)
    dims = []
    for d in shape:
        options = []  # splits first: the simplest examples are sharded ones
        for a in free:
            if d % sizes[a] == 0:
                options.append([a])
        if len(free) == 2 and d % (sizes[free[0]] * sizes[free[1]]) == 0:
            options += [list(free), list(reversed(free))]
        options.append([])
        axes = draw(st.sampled_from(options))
        free = [a for a in free if a not in axes]
        dims.append(axes)
    return TensorSharding.of(dims)


@st.composite
def shardings_for(draw, arg_shapes, mesh: Mesh) -> dict:
    """Per argument, a ``TensorSharding`` splitting only dims its axes divide (or none)."""
    out = {}
    for i, shape in enumerate(arg_shapes):
        if draw(st.integers(0, 4)) == 4:
            continue  # no annotation: Shardy decides
        out[i] = _one_sharding(draw, shape, mesh)
    return out


@st.composite
def sharded_programs(draw, min_ops: int = 1, max_ops: int = 8, **sizes) -> FuzzCase:
    """A program (``sizes``: ``programs``' dims / max_elements / max_rank), a 2x2 or
    2x4 mesh, random divisible argument shardings, and now and then a result kept
    split on device (a KV cache's case)."""
    program = draw(programs(min_ops, max_ops, **sizes))
    mesh = Mesh.parse(draw(st.sampled_from(MESHES)))
    shardings = draw(shardings_for(program.arg_shapes, mesh))
    results = {}
    for i, shape in enumerate(program.result_shapes):
        if draw(st.integers(0, 3)) == 3:
            results[i] = _one_sharding(draw, shape, mesh)
    return FuzzCase(program, mesh, shardings, results)


def lowered_model(program: Program, name: str = "fuzz"):
    """The program as a ``LoweredModel``: ``%arg0`` an input, the rest parameters."""
    from shard_opt.lowered import Argument, LoweredModel

    args = [Argument(i, "x" if i == 0 else f"w{i}", "input" if i == 0 else "param", tuple(s), "f32")
            for i, s in enumerate(program.arg_shapes)]
    return LoweredModel(name=name, text=program.text, arguments=args, source="mlir")


def search_plan(program: Program, mesh_spec: str = "2x4"):
    """Run the whole search (``shard_opt.driver.optimize``) on a program: (mesh, annotated text)."""
    from shard_opt.driver import Options, optimize

    mesh = Mesh.parse(mesh_spec)
    outcome = optimize(lowered_model(program), Options(meshes=[mesh], progress=False, baselines=False))
    return mesh, outcome.annotated_text
