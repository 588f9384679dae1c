"""Check a plan independently of Shardy's own bookkeeping: numerics and XLA's collectives.

Two cross-checks (references/toolchain.md, "Independent cross-checks on CPU"), both on
XLA's CPU backend with N virtual devices (``XLA_FLAGS=--xla_force_host_platform_device_count=N``
set before jax starts):

``verify_numerics``
    Runs the annotated module (``sdy.mesh`` + ``sdy.sharding`` attributes, the plan)
    sharded on N devices with XLA's Shardy partitioner, and the same module with every
    sharding stripped on one device, on the same seeded random inputs, and compares
    every device's piece of every output with the matching slice of the unsharded
    result. A plan that changes what the program computes fails.

``xla_collectives`` / ``compare_collectives``
    Reads the collectives in XLA's optimized HLO for the plan and matches them against
    the ones Shardy inserted (``ModuleFacts.collectives``), explaining the differences
    that are XLA's own lowering choices rather than disagreements about the plan.

Tolerances (``TOLERANCES``): the check is per element
``|sharded - reference| <= atol * scale + rtol * |reference|`` where ``scale`` is the
largest magnitude in that reference output (at least 1), so ``atol`` is relative to the
output's size, not an absolute number. Sharding changes only the order of
floating-point sums (partial sums per device, then an all-reduce), so errors are a
few rounding steps of the summed terms:

- ``f32`` (eps 1.2e-7): rtol 1e-4, atol 1e-5 -- ~100 ulps. Measured: reorder noise
  stays near 1e-6 of the output scale (MLP column->row on 8 devices 4.3e-7; worst of
  1000 small fuzz programs 4.2e-7, of 100 with 64-512 dims 1.5e-6; a 4-layer T5
  encoder 4.4e-6, a ResnetBlock2D 4e-7), while a missing or doubled partial sum is
  O(1) (the tests' broken plans: 3 and 1.4).
- ``bf16`` and ``f16`` modules are checked **in f32**: both the sharded and the
  unsharded program run with every bf16/f16 type widened to f32 (``promote_to_f32``:
  the same ops, the same ``sdy.sharding``s, so the same collectives) on the same
  bf16-rounded values, at the f32 tolerance. A plan decides which device computes
  what and which partial sums are added where; that does not depend on the element
  type, while bf16 rounding does depend on the order of the sums and compounds with
  depth: compared at bf16, the same program summed in another order drifted 0.035 to
  0.14 of the output scale (a 4-layer T5 encoder, depending on the seed), and a plan
  with a weight all-reduced 8x (last layer of a 4-layer Falcon) was only 0.6 away
  against a bf16 program 0.31 away from its own f32 version: no tolerance separates
  the two. In f32 the correct plans are 3e-6 (T5), 4e-7 (ResnetBlock2D), 7e-7 (Falcon)
  of the scale on 5 seeds and the wrong ones 0.6 to 5.5 (tests/test_verify_bf16.py).
  What this does not see is the bf16 rounding of the partial sums themselves (a device
  that rounds before the all-reduce, as a Tenstorrent CCL does): XLA's CPU backend
  all-reduces bf16 in f32 anyway. A module that is not the same program in f32 (a
  ``bitcast_convert`` of a bf16 value) is compared as it is, at bf16's
  rtol 5e-2, atol 3e-2 (``f16``: 1e-2, 5e-3). ``f64``: 1e-9 both.
- integers and ``i1``: exact.

Inputs: floats are uniform, standard deviation 1 for activations and
``1 / sqrt(fan_in)`` for the weights of matmuls and convolutions (``weight_fan_in``: a
trained or freshly initialised model keeps activations near unit size; standard normal
weights grow them by ``sqrt(fan_in)`` a layer, saturate softmaxes and make the output
hang on rounding: the T5 encoder's bf16 output was then 31% (rms) away from its own f32
output, with the scaled weights 2%); ``i1`` is random; an integer argument that indexes
a table (token ids into an embedding, position ids into a position-embedding table: it
reaches the start indices of a ``stablehlo.gather``, ``dynamic_slice``,
``dynamic_update_slice`` or ``torch_index_select``, ``index_bounds``) is drawn uniformly
from the table's valid range, seeded, so tokens differ and a plan that mixes up rows
fails; any other integer argument (an attention mask, positions that feed no table) is
0: the module does not say what range it may take, and 0 is valid for any index (an
out-of-range one would only exercise XLA's clamping, not the plan). Pass ``inputs=`` to
choose them yourself. Each input goes to the devices split as the compiled program
expects (its parameter shardings), the way a host hands each chip its slice; an
argument marked ``unreduced`` is handed whole to every device, so a plan claiming an
input is a partial sum fails.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from shard_opt import ir
from shard_opt.errors import PassError, UserError

# dtype -> (rtol, atol); see the module docstring for the reasoning.
TOLERANCES: dict[str, tuple[float, float]] = {
    "f64": (1e-9, 1e-9),
    "f32": (1e-4, 1e-5),
    "f16": (1e-2, 5e-3),
    "bf16": (5e-2, 3e-2),
}
_EXACT = (0.0, 0.0)


# ---------------------------------------------------------------------------------
# Numerics
# ---------------------------------------------------------------------------------

@dataclass
class OutputCheck:
    """One output of ``@main`` compared on every device.

    Attributes:
      index: result position.
      shape, dtype: global shape and MLIR element type.
      max_abs_err: largest ``|sharded - reference|`` over all devices' pieces.
      max_rel_err: ``max_abs_err`` divided by the reference's largest magnitude
        (at least 1): a relative error that near-zero entries cannot blow up.
      rtol, atol: the tolerance applied (``atol`` is scaled by that magnitude).
      passed: every element of every device's piece is within tolerance.
      worst_device: the device whose piece differs most (-1 if all are equal).
      bad_elements: elements out of tolerance, summed over devices.
      reference: ``"unsharded"`` (sharded and unsharded compared at the output's
        precision) or ``"f32"`` (a bf16/f16 output: both ran with every bf16/f16 type
        widened to f32, ``promote_to_f32``, and the f32 tolerance applies).
    """

    index: int
    shape: tuple[int, ...]
    dtype: str
    max_abs_err: float
    max_rel_err: float
    rtol: float
    atol: float
    passed: bool
    worst_device: int = -1
    bad_elements: int = 0
    reference: str = "unsharded"


@dataclass
class NumericsResult:
    """The verdict of ``verify_numerics``.

    Attributes:
      passed: every output passed.
      max_abs_err, max_rel_err: the largest over all outputs.
      rtol, atol: the loosest tolerance applied (outputs of several dtypes each use
        their own, see ``outputs``).
      num_devices, seed: how the check ran.
      outputs: one ``OutputCheck`` per result.
      reference: ``"f32"`` when bf16/f16 outputs were checked with the program widened
        to f32, ``"unsharded"`` otherwise.
    """

    passed: bool
    max_abs_err: float
    max_rel_err: float
    rtol: float
    atol: float
    num_devices: int
    seed: int
    outputs: list[OutputCheck] = field(default_factory=list)
    reference: str = "unsharded"

    def __bool__(self) -> bool:
        return self.passed

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        lines = [
            f"numerics {verdict} on {self.num_devices} devices (seed {self.seed}): "
            f"max abs err {self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g} "
            f"(rtol {self.rtol:g}, atol {self.atol:g} x output scale)"
        ]
        if self.reference == "f32":
            lines[0] += "; bf16/f16 widened to f32 in both programs"
        for o in self.outputs:
            if not o.passed:
                lines.append(
                    f"  result #{o.index} {o.dtype}{list(o.shape)}: max abs err {o.max_abs_err:.3g}, "
                    f"{o.bad_elements} elements out of tolerance, worst on device {o.worst_device}"
                )
        return "\n".join(lines)


def numpy_dtype(mlir_type: str):
    """numpy dtype of an MLIR element type (``bf16`` via ml_dtypes, as jax uses)."""
    import ml_dtypes

    table = {
        "f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
        "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8, "i1": np.bool_,
        "ui64": np.uint64, "ui32": np.uint32, "ui16": np.uint16, "ui8": np.uint8,
        "si64": np.int64, "si32": np.int32,
    }
    if mlir_type not in table:
        raise UserError(f"verify: no random inputs for element type {mlir_type}")
    return np.dtype(table[mlir_type])


def tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol) for an MLIR element type; exact for integers and ``i1``."""
    return TOLERANCES.get(dtype, _EXACT)


def _signature(text: str):
    """(argument (shape, dtype) list, result (shape, dtype) list, meshes) of ``@main``."""
    from shard_opt.analysis import meshes_of

    module = ir.parse(text, filename="<verify>")
    func = ir.main_func(module)
    ftype = func.attributes["function_type"].value
    args, results = [], []
    for t in ftype.inputs:
        tt = ir.tensor_type(t)
        if tt is None or ir.is_dynamic(t):
            raise UserError(f"verify: @main argument of type {t} is not a static tensor")
        args.append(tt)
    for t in ftype.results:
        tt = ir.tensor_type(t)
        if tt is None or ir.is_dynamic(t):
            raise UserError(f"verify: @main result of type {t} is not a static tensor")
        results.append(tt)
    return args, results, meshes_of(module)


def _xla_ready(text: str) -> str:
    """A propagated module loses Shardy's explicit collectives (XLA's import rejects
    them); its ops keep Shardy's shardings and XLA moves the data between them."""
    return ir.drop_explicit_collectives(text) if ir.has_explicit_collectives(text) else text


# Ops an index passes through on its way to a gather: the value is the same index (or a
# re-shaped, converted, sliced or offset copy of it).
_INDEX_PASS_THROUGH = {
    "stablehlo.convert", "stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.transpose",
    "stablehlo.slice", "stablehlo.concatenate", "stablehlo.add", "stablehlo.clamp", "stablehlo.select",
    # sharding-only ops of an annotated or propagated module: the identity on the value
    "sdy.sharding_constraint", "sdy.reshard", "sdy.all_gather", "sdy.all_slice", "sdy.all_to_all",
    "sdy.collective_permute", "sdy.all_reduce", "sdy.reduce_scatter",
}


def _int_array(attr) -> list[int]:
    """``array<i64: 1, 16>`` (or a dense i64 attribute) as a list."""
    try:
        return [int(x) for x in attr]
    except TypeError:
        return [int(x) for x in re.findall(r"-?\d+", str(attr).split(":", 1)[-1])]


def _gather_bound(op) -> int | None:
    """Exclusive bound on the start indices of a ``stablehlo.gather``: per operand dim the
    index vector addresses (``start_index_map``), how many starts fit (size - slice + 1;
    the size for a ``collapsed_slice_dims`` dim of slice 1); the smallest if several."""
    m = re.search(r"start_index_map = \[([^\]]*)\]", str(op.attributes["dimension_numbers"]))
    start = [int(x) for x in re.findall(r"\d+", m.group(1))] if m else []
    shape = ir.tensor_type(op.operands[0].type)[0]
    sizes = _int_array(op.attributes["slice_sizes"]) if "slice_sizes" in op.attributes else [1] * len(shape)
    bounds = [shape[d] - sizes[d] + 1 for d in start if d < len(shape) and d < len(sizes)]
    return min(bounds) if bounds else None


def index_bounds(module_text: str) -> dict[int, int]:
    """``{argument index: exclusive upper bound}`` for integer ``@main`` arguments that index a table.

    An argument indexes a table when it reaches, through ``_INDEX_PASS_THROUGH`` ops
    (convert, reshape, broadcast_in_dim, transpose, slice, concatenate, add of an offset,
    clamp, select), the start indices of a ``stablehlo.gather`` (bound: the operand's size
    along the ``start_index_map`` dims, less the slice size - 1), of a ``dynamic_slice`` or
    ``dynamic_update_slice`` (size - slice or update size + 1 along that dim) or the
    index of a ``torch_index_select`` (the size along ``dim``). An argument used by
    several tables gets the smallest bound. Integer arguments that reach none (masks,
    positions with no table) are not in the result.
    """
    module = ir.parse(module_text, filename="<verify>")
    func = ir.main_func(module)
    derived: dict = {}  # value -> set of @main argument indices it is an index copy of
    for i, a in enumerate(func.regions[0].blocks[0].arguments):
        tt = ir.tensor_type(a.type)
        if tt is not None and re.fullmatch(r"[su]?i\d+", tt[1]) and tt[1] != "i1":
            derived[a] = {i}
    bounds: dict[int, int] = {}

    def bound(value, limit) -> None:
        if limit is None:
            return
        for i in derived.get(value, ()):
            bounds[i] = max(1, min(bounds.get(i, limit), limit))

    for op in ir.walk_ops(func):
        o = op.operation
        name = o.name
        if name in _INDEX_PASS_THROUGH:
            srcs = set().union(*(derived.get(v, set()) for v in o.operands))
            tt = ir.tensor_type(o.results[0].type) if len(o.results) == 1 else None
            if srcs and tt is not None and re.fullmatch(r"[su]?i\d+", tt[1]) and tt[1] != "i1":
                derived[o.results[0]] = srcs
        elif name == "stablehlo.gather" and len(o.operands) >= 2:
            bound(o.operands[1], _gather_bound(o))
        elif name in ("stablehlo.dynamic_slice", "stablehlo.dynamic_update_slice"):
            first = 1 if name == "stablehlo.dynamic_slice" else 2
            shape = ir.tensor_type(o.operands[0].type)[0]
            if name == "stablehlo.dynamic_slice":
                sizes = _int_array(o.attributes["slice_sizes"])
            else:
                sizes = ir.tensor_type(o.operands[1].type)[0]
            for d, v in enumerate(list(o.operands)[first:]):
                if d < len(shape) and d < len(sizes):
                    bound(v, shape[d] - sizes[d] + 1)
        elif name == "stablehlo.torch_index_select" and len(o.operands) >= 2:
            shape = ir.tensor_type(o.operands[0].type)[0]
            dim = int(o.attributes["dim"].value)
            bound(o.operands[1], shape[dim] if 0 <= dim < len(shape) else None)
    return bounds


# Ops a weight passes through on its way to a matmul or convolution: the same values.
_WEIGHT_PASS_THROUGH = {
    "stablehlo.convert", "stablehlo.reshape", "stablehlo.transpose", "stablehlo.broadcast_in_dim",
    "sdy.sharding_constraint", "sdy.reshard", "sdy.all_gather", "sdy.all_slice", "sdy.all_to_all",
    "sdy.collective_permute",
}


def _arg_kinds(func) -> list[str]:
    kinds = []
    attrs = func.attributes["arg_attrs"] if "arg_attrs" in func.attributes else None
    n = len(func.regions[0].blocks[0].arguments)
    for i in range(n):
        m = re.search(r'shard_opt\.kind = "([a-z_]+)"', str(attrs[i])) if attrs is not None and i < len(attrs) else None
        kinds.append(m.group(1) if m else "input")
    return kinds


def weight_fan_in(module_text: str) -> dict[int, int]:
    """``{argument index: fan-in}`` for the weights of matmuls and convolutions.

    A floating ``@main`` argument of kind ``param`` (``shard_opt.kind``; a module without
    kinds has none) that reaches, through ``_WEIGHT_PASS_THROUGH`` ops (convert, reshape,
    transpose, broadcast_in_dim, sharding ops), an operand of a ``stablehlo.dot_general``
    (fan-in: the product of that operand's contracting dims) or the kernel of a
    ``stablehlo.convolution`` (every kernel dim but the output feature). Used by several,
    the largest fan-in.
    """
    module = ir.parse(module_text, filename="<verify>")
    func = ir.main_func(module)
    kinds = _arg_kinds(func)
    derived: dict = {}
    for i, a in enumerate(func.regions[0].blocks[0].arguments):
        tt = ir.tensor_type(a.type)
        if kinds[i] == "param" and tt is not None and tt[1] in TOLERANCES:
            derived[a] = {i}
    fan: dict[int, int] = {}

    def note(value, k) -> None:
        for i in derived.get(value, ()):
            fan[i] = max(fan.get(i, 1), int(k))

    for op in ir.walk_ops(func):
        o = op.operation
        name = o.name
        if name in _WEIGHT_PASS_THROUGH and len(o.results) == 1 and o.operands:
            if o.operands[0] in derived:
                derived[o.results[0]] = derived[o.operands[0]]
        elif name == "stablehlo.dot_general" and len(o.operands) == 2:
            text = str(o.attributes["dot_dimension_numbers"])
            for side, v in (("lhs", o.operands[0]), ("rhs", o.operands[1])):
                if v not in derived:
                    continue
                shape = ir.tensor_type(v.type)[0]
                m = re.search(side + r"_contracting_dimensions\s*=\s*\[([\d,\s]*)\]", text)
                dims = [int(x) for x in m.group(1).split(",") if x.strip()] if m else []
                note(v, math.prod(shape[d] for d in dims if d < len(shape)))
        elif name == "stablehlo.convolution" and len(o.operands) >= 2 and o.operands[1] in derived:
            v = o.operands[1]
            shape = ir.tensor_type(v.type)[0]
            m = re.search(r"x\[([^\]]*)\]", str(o.attributes["dimension_numbers"])) if "dimension_numbers" in o.attributes else None
            labels = [p.strip() for p in m.group(1).split(",")] if m else []
            out_dim = labels.index("o") if "o" in labels else 0
            note(v, math.prod(shape) // max(1, shape[out_dim]) if shape else 1)
    return fan


# XLA's CPU client aliases a host array it is handed (no copy, on every device that takes
# it whole or a contiguous slice of it) only when the array is aligned to this many bytes;
# numpy aligns to 16, and then every device of a replicated argument gets its own copy
# (measured: a replicated 826 MB f32 array on 8 devices, +6.45 GB at 16-byte alignment,
# +0 at 64: benchmarks/results.md, issue 23 "--verify-numerics memory").
HOST_ALIGNMENT = 64


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised array aligned to ``HOST_ALIGNMENT`` bytes (see there)."""
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    buf = np.empty(n + HOST_ALIGNMENT, np.uint8)
    off = (-buf.ctypes.data) % HOST_ALIGNMENT
    return buf[off:off + n].view(dtype).reshape(shape)


def random_inputs(arg_types, seed: int = 0, bounds: dict[int, int] | None = None,
                  fan_in: dict[int, int] | None = None, *, widen: bool = False) -> list[np.ndarray]:
    """Seeded inputs for ``[(shape, dtype), ...]``: floats uniform with standard deviation 1,
    random i1, and integers
    uniform in ``[0, bounds[i])`` for argument ``i`` (``index_bounds``), 0 without a bound
    (masks and positions with no table).

    A float argument in ``fan_in`` (``weight_fan_in``: a matmul or convolution weight) has
    standard deviation ``1 / sqrt(fan_in[i])``, as PyTorch's default initialisation
    (uniform too: ``kaiming_uniform_``) and trained weights roughly do: each layer then keeps its activations near unit size,
    as a real model's do. Standard normal weights instead grow them by ``sqrt(fan_in)``
    a layer, saturating softmaxes, so the outputs of a deep model hang on rounding (a
    4-layer T5 encoder's bf16 output was 31% (rms) away from its own f32 output).

    Floats are drawn uniform in float32 (a float64 normal draw took 20 s and twice the
    memory for a 0.8 B-parameter model's weights; uniform float32 is several times
    faster) and narrowed array by array; integers come from their own generator per argument (seeded with
    ``(seed, i)``), so the floats are the same with or without bounds.

    ``widen``: a bf16/f16 argument is returned as its values rounded to that type and held
    in f32 (what a program widened by ``promote_to_f32`` takes), so no bf16 copy is kept
    beside the f32 one. Float arrays are aligned for XLA to alias them (``aligned_empty``).
    """
    rng = np.random.default_rng(seed)
    bounds = bounds or {}
    fan_in = fan_in or {}
    out = []
    for i, (shape, dtype) in enumerate(arg_types):
        npd = numpy_dtype(dtype)
        if dtype == "i1":
            out.append(rng.random(shape) < 0.5)
        elif np.issubdtype(npd, np.integer):
            high = int(min(bounds.get(i, 1), np.iinfo(npd).max))
            if high > 1:
                out.append(np.random.default_rng([seed, i]).integers(0, high, size=shape, dtype=npd))
            else:
                out.append(np.zeros(shape, npd))
        else:
            # uniform with the wanted standard deviation: U(-a, a) has sd a / sqrt(3)
            x = aligned_empty(tuple(shape), np.float32)
            rng.random(out=x, dtype=np.float32)  # the same stream as rng.random(shape)
            a = math.sqrt(3.0) / math.sqrt(max(1, fan_in.get(i, 1)))
            x *= np.float32(2 * a)
            x -= np.float32(a)
            if npd == np.float32:
                out.append(x)
            elif widen and dtype in _LOW_PRECISION:
                x[...] = x.astype(npd)  # rounded to bf16/f16, kept in f32
                out.append(x)
            else:
                y = aligned_empty(tuple(shape), npd)
                y[...] = x
                out.append(y)
    return out


# Peak resident memory of a --verify-numerics run per byte of the module's arguments (at
# their own precision). Measured (benchmarks/verify/measure.sh, benchmarks/results.md
# "--verify-numerics memory", 2026-12-02): the 2-layer GPT-J-width model in bf16 on 1x8,
# 1.63 GB of weights, peaks at 4.96 GB (3.0x) with both programs widened to f32: the one
# f32 host copy of the arguments (2x their bf16 bytes), which XLA aliases where it can,
# plus the shards it must copy (row-parallel weights, split on a non-leading dim) and the
# runs' buffers. Was 12.39 GB (7.6x) before the inputs were aligned and held once. The
# factor is 4: the f32 copy (2x) plus, at most, a device copy of every argument (2x, no
# argument aliased), the buffers on top of that being small for weight-bound models. The
# check refuses up front when this times the arguments exceeds what the machine has
# available, instead of being killed.
MEMORY_PER_ARGUMENT_BYTE = 4.0


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_memory(arguments, *, where: str) -> None:
    """Raise a one-line ``UserError`` before the search when ``verify_numerics`` would need
    more memory than the machine has (``MEMORY_PER_ARGUMENT_BYTE`` times the bytes of the
    model's ``arguments``, each with ``shape`` and MLIR ``dtype``)."""
    total = 0
    for a in arguments:
        try:
            total += math.prod(a.shape) * numpy_dtype(a.dtype).itemsize
        except UserError:
            continue
    need, avail = MEMORY_PER_ARGUMENT_BYTE * total, _available_bytes()
    if avail is not None and need > avail:
        raise UserError(
            f"{where}: --verify-numerics needs about {need / 1e9:.1f} GB (~{MEMORY_PER_ARGUMENT_BYTE:g}x the "
            f"{total / 1e9:.2f} GB of weights and inputs: held in f32, plus the shards XLA's CPU backend "
            f"copies to each device) and {avail / 1e9:.1f} GB is available; check the plan on fewer layers "
            f"(--layers N) or drop --verify-numerics")


_LOW_PRECISION = ("bf16", "f16")
_LOW_TYPE = re.compile(r"(?<=[x<\s(,:])(bf16|f16)\b")
_HEX_LOW_CONSTANT = re.compile(r'dense<"0x([0-9A-Fa-f]*)">(\s*:\s*tensor<(?:[0-9?]+x)*)(bf16|f16)>')


def _hex_to_f32(hex_text: str, dtype: str) -> str:
    import ml_dtypes

    raw = np.frombuffer(bytes.fromhex(hex_text), dtype=ml_dtypes.bfloat16 if dtype == "bf16" else np.float16)
    return raw.astype(np.float32).tobytes().hex().upper()


def promote_to_f32(text: str) -> str:
    """The module with every ``bf16`` / ``f16`` tensor type made ``f32`` (hex-encoded dense
    constants of those types re-encoded), so it computes the same program in f32: the
    reference a low-precision plan is held against. Conversions to and from f32 become
    f32 -> f32, the identity."""
    text = _HEX_LOW_CONSTANT.sub(lambda m: f'dense<"0x{_hex_to_f32(m.group(1), m.group(3))}">{m.group(2)}f32>', text)
    return _LOW_TYPE.sub("f32", text)


def _has_low_precision(text: str) -> bool:
    return _LOW_TYPE.search(text) is not None


def verify_numerics(
    module_text: str,
    *,
    num_devices: int,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
    reference: str | None = None,
    inputs=None,
) -> NumericsResult:
    """Run the annotated plan sharded and unsharded and compare every output.

    The sharded result is compared with the unsharded one at the dtype's tolerance
    (``TOLERANCES``); a module with ``bf16`` / ``f16`` values runs both widened to f32
    (``promote_to_f32``) at the f32 tolerance (``NumericsResult.reference`` ``"f32"``),
    unless the widened module does not compile: see the module docstring.

    Args:
      module_text: StableHLO with ``sdy.mesh`` and ``sdy.sharding`` annotations (the
        output of ``add-mesh, apply-shardings``), or a module after
        ``shardy-propagate``: its explicit collectives are dropped before XLA compiles
        it (XLA's import rejects them), so XLA partitions between Shardy's op shardings.
      num_devices: virtual CPU devices to shard over; must equal the mesh's size.
      seed: seeds the random inputs (``random_inputs``: integer arguments that index a
        table are drawn within it, ``index_bounds``; matmul and convolution weights scaled
        by their fan-in, ``weight_fan_in``).
      rtol, atol: override the dtype's tolerance (``TOLERANCES``) for every output.
      reference: unsharded module text to compare against; by default the same
        module with its shardings stripped (``ir.strip_sharding``).
      inputs: global numpy inputs, one per argument, instead of random ones.

    Raises ``UserError`` when the devices are not there, the mesh size differs from
    ``num_devices``, or an argument is not a static tensor; ``PassError`` when XLA
    cannot compile one of the two modules.
    """
    import gc

    arg_types, result_types, meshes = _signature(module_text)
    for mesh in meshes.values():
        if mesh.num_devices not in (1, num_devices):
            raise UserError(
                f"verify: mesh @{mesh.name} ({mesh.spec}) has {mesh.num_devices} devices, "
                f"but num_devices={num_devices}"
            )
    ref_text = reference if reference is not None else ir.strip_sharding(module_text)
    if inputs is not None and len(inputs) != len(arg_types):
        raise UserError(f"verify: {len(inputs)} inputs for {len(arg_types)} arguments")
    out_shapes = [s for s, _ in result_types]
    xla_text = _xla_ready(module_text)

    # Memory (benchmarks/results.md, issue 23): the programs compile before any input is
    # drawn; the inputs are held once, in the precision the programs take (a widened
    # program's bf16 values drawn straight into f32, no bf16 copy beside them), aligned so
    # XLA's CPU client aliases them instead of copying them to each device; the sharded
    # run's executable and device buffers are freed before the reference runs, and of each
    # run only its outputs are kept.
    executables = None
    if _has_low_precision(module_text) or _has_low_precision(ref_text):
        try:
            executables = [ir.xla_compile(promote_to_f32(xla_text), num_devices),
                           ir.xla_compile(promote_to_f32(ref_text), 1, shardy=False)]
        except PassError:
            executables = None  # not the same program in f32 (a bitcast of a bf16 value): as it is
    promoted = executables is not None
    if executables is None:
        executables = [ir.xla_compile(xla_text, num_devices), ir.xla_compile(ref_text, 1, shardy=False)]
    if inputs is not None:
        args = [np.asarray(x, np.float32) if promoted and np.asarray(x).dtype.name in ("bfloat16", "float16") else x
                for x in inputs]
    else:
        args = random_inputs(arg_types, seed, index_bounds(module_text), weight_fan_in(module_text), widen=promoted)
    sharded = ir.xla_execute(executables[0], args, out_shapes)
    executables[0] = None
    # the sharded run's executable and device buffers go before the reference places its
    # own: freed by their last reference here; a young-generation collection takes any
    # cycle the run left (a full one walked every object of the process, torch's and jax's:
    # 0.25-0.6 s per call in a test process; the one after the reference collected nothing
    # in 34 calls and went, benchmarks/results.md)
    gc.collect(1)
    unsharded = [p[0][1] for p in ir.xla_execute(executables[1], args, out_shapes)]
    del args, executables
    if len(sharded) != len(unsharded):
        raise UserError(
            f"verify: the sharded module returns {len(sharded)} results, the reference {len(unsharded)}"
        )

    checks = []
    for i, ((shape, dtype), pieces, ref) in enumerate(zip(result_types, sharded, unsharded)):
        checked = "f32" if promoted and dtype in _LOW_PRECISION else dtype
        r, a = tolerance(checked)
        r = rtol if rtol is not None else r
        a = atol if atol is not None else a
        checks.append(_compare_output(i, tuple(shape), dtype, pieces, ref, r, a,
                                      reference="f32" if checked != dtype else "unsharded"))

    return NumericsResult(
        passed=all(c.passed for c in checks),
        max_abs_err=max((c.max_abs_err for c in checks), default=0.0),
        max_rel_err=max((c.max_rel_err for c in checks), default=0.0),
        rtol=max((c.rtol for c in checks), default=0.0),
        atol=max((c.atol for c in checks), default=0.0),
        num_devices=num_devices,
        seed=seed,
        outputs=checks,
        reference="f32" if any(c.reference == "f32" for c in checks) else "unsharded",
    )


def _compare_output(index, shape, dtype, pieces, ref, rtol, atol, *, reference="unsharded") -> OutputCheck:
    ref64 = np.asarray(ref, dtype=np.float64) if ref.dtype != np.bool_ else ref.astype(np.float64)
    finite = np.isfinite(ref64)
    scale = max(1.0, float(np.max(np.abs(ref64[finite]))) if finite.any() else 1.0)
    max_abs, worst, worst_dev, bad_total = 0.0, -1.0, -1, 0
    for device, (idx, piece) in enumerate(pieces):
        want = ref64[idx]
        got = np.asarray(piece).astype(np.float64)
        if got.ndim == want.ndim and all(g >= w for g, w in zip(got.shape, want.shape)):
            got = got[tuple(slice(0, w) for w in want.shape)]  # an unevenly split dim is padded
        if got.shape != want.shape:
            return OutputCheck(index, shape, dtype, math.inf, math.inf, rtol, atol, False, device, want.size,
                               reference)
        same_nonfinite = (~np.isfinite(want)) & (~np.isfinite(got)) & (
            (np.isnan(want) & np.isnan(got)) | (want == got)
        )
        err = np.where(same_nonfinite, 0.0, np.abs(got - want))
        err = np.where(np.isnan(err), np.inf, err)
        bad = err > atol * scale + rtol * np.abs(np.where(np.isfinite(want), want, 0.0))
        bad_total += int(bad.sum())
        e = float(err.max()) if err.size else 0.0
        max_abs = max(max_abs, e)
        if e > worst:
            worst, worst_dev = e, device
    return OutputCheck(
        index=index, shape=shape, dtype=dtype, max_abs_err=max_abs, max_rel_err=max_abs / scale,
        rtol=rtol, atol=atol, passed=bad_total == 0, worst_device=worst_dev if worst > 0 else -1,
        bad_elements=bad_total, reference=reference,
    )


# ---------------------------------------------------------------------------------
# XLA's collectives
# ---------------------------------------------------------------------------------

HLO_COLLECTIVES = {
    "all-reduce": "all_reduce",
    "all-gather": "all_gather",
    "reduce-scatter": "reduce_scatter",
    "all-to-all": "all_to_all",
    "collective-permute": "collective_permute",
}
_HLO_DTYPE_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
    "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1,
    "s4": 1, "u4": 1,
}
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.+?)\s+(?P<op>[a-z][a-z0-9\-]*)\((?P<args>.*)$")
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([\d,]*)\]")


def _shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every ``dtype[dims]`` array shape in an HLO shape text (tuples flattened)."""
    out = []
    for dt, dims in _ARRAY.findall(text):
        if dt in _HLO_DTYPE_BYTES:
            out.append((dt, tuple(int(d) for d in dims.split(",") if d)))
    return out


def _nbytes(shape) -> int:
    dt, dims = shape
    return math.prod(dims) * _HLO_DTYPE_BYTES.get(dt, 4)


def _split_call(rest: str) -> tuple[str, str]:
    """(operand text, attribute text) of ``a, b), attr=...`` (the part after ``op(``)."""
    depth = 1
    for i, ch in enumerate(rest):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return rest[:i], rest[i + 1:]
    return rest, ""


def _groups(attrs: str, num_devices: int) -> tuple[int, int]:
    """(group size, number of groups) from ``replica_groups=`` or ``source_target_pairs=``."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\((?:[^()]|\([^()]*\))*\))?\s*\{([^}]*)\}", attrs)
    if m:
        sizes = {a: int(s) for a, s in re.findall(r"'([^']+)'=(\d+)", m.group(1))}
        size = 1
        for ref in re.findall(r"'([^']+)'(?::\((\d+)\)(\d+))?", m.group(2)):
            name, _pre, sub = ref
            size *= int(sub) if sub else sizes.get(name, 1)
        total = math.prod(sizes.values()) if sizes else num_devices
        return size, max(1, total // max(1, size))
    m = re.search(r"replica_groups=\[([\d,]+)\]<=", attrs)
    if m:
        dims = [int(d) for d in m.group(1).split(",")]
        return dims[-1], math.prod(dims[:-1]) if len(dims) > 1 else 1
    m = re.search(r"replica_groups=\{(\{[\d,\s]*\}(?:\s*,\s*\{[\d,\s]*\})*)\}", attrs)
    if m:
        groups = re.findall(r"\{([\d,\s]*)\}", m.group(1))
        return len([x for x in groups[0].split(",") if x.strip()]), len(groups)
    if re.search(r"replica_groups=\{\}", attrs):
        return num_devices, 1
    m = re.search(r"source_target_pairs=\{(.*?)\}\}", attrs)
    if m:
        pairs = re.findall(r"\{(\d+),(\d+)\}", m.group(0))
        return len({d for p in pairs for d in p}), 1
    return num_devices, 1


def parse_hlo_collectives(hlo_text: str, num_devices: int) -> list[dict]:
    """The collectives in an HLO module's text, in order (see ``xla_collectives``)."""
    shapes: dict[str, list] = {}
    found = []
    for line in hlo_text.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        name, shape_text, op = m.group("name"), m.group("shape"), m.group("op")
        shapes[name] = _shapes(shape_text)
        base = op[: -len("-start")] if op.endswith("-start") else op
        if base not in HLO_COLLECTIVES:
            continue
        operand_text, attrs = _split_call(m.group("args"))
        operands = []
        for part in _split_top(operand_text):
            inline = _shapes(part)
            if inline:  # old printing: ``f32[4,8]{1,0} %x``
                operands.extend(inline)
            else:
                ref = re.search(r"%?([\w.\-]+)\s*$", part.strip())
                operands.extend(shapes.get(ref.group(1), []) if ref else [])
        group, ngroups = _groups(attrs, num_devices)
        dims = re.search(r"dimensions=\{([\d,]*)\}", attrs)
        found.append({
            "kind": HLO_COLLECTIVES[base],
            "hlo_op": op,
            "name": name,
            "async": op.endswith("-start"),
            "group_size": group,
            "num_groups": ngroups,
            "operand_shapes": [(dt, list(d)) for dt, d in operands],
            "operand_bytes": [_nbytes(s) for s in operands],
            "bytes_per_device": sum(_nbytes(s) for s in operands),
            "result_shape": shape_text.strip(),
            "dimensions": [int(d) for d in dims.group(1).split(",") if d] if dims else [],
            "text": line.strip(),
        })
    return found


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def xla_collectives(module_text: str, num_devices: int) -> list[dict]:
    """Compile the annotated module with XLA's Shardy partitioner; its collectives.

    One dict per collective instruction in the optimized HLO (async ``-start`` forms
    included, their ``-done`` halves not): ``kind`` (the plan-JSON name), ``hlo_op``,
    ``name``, ``async``, ``group_size`` and ``num_groups`` (from ``replica_groups``;
    for collective_permute, the devices named in ``source_target_pairs``),
    ``operand_shapes``, ``operand_bytes`` (per operand, one device), ``bytes_per_device``
    (their sum), ``result_shape``, ``dimensions`` and the HLO ``text`` line.
    """
    executable = ir.xla_compile(_xla_ready(module_text), num_devices, to_run=False)
    return parse_hlo_collectives(ir.xla_optimized_hlo(executable), num_devices)


# ---------------------------------------------------------------------------------
# Shardy vs XLA
# ---------------------------------------------------------------------------------

@dataclass
class Match:
    """One Shardy collective and the XLA collective moving the same tensor.

    ``note`` says how XLA's instruction differs in form (combined with others into
    one tuple instruction, promoted to a wider type), empty if it is identical.
    """

    shardy: dict
    xla: dict
    note: str = ""


@dataclass
class Difference:
    """Collectives that do not pair one to one, and why.

    ``explained`` is true when ``reason`` is a known lowering choice of XLA (the plan
    moves the same data); false when the two partitioners disagree.
    """

    shardy: list = field(default_factory=list)
    xla: list = field(default_factory=list)
    reason: str = ""
    explained: bool = True


@dataclass
class Comparison:
    """``compare_collectives``' verdict.

    Attributes:
      matched: one-to-one pairs of the same kind and tensor.
      differences: everything else, each with a reason.
    """

    matched: list[Match] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        """Every collective is matched or its difference is explained."""
        return all(d.explained for d in self.differences)

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.differences if not d.explained]

    def report(self) -> str:
        verdict = "agree" if self.agrees else "DISAGREE"
        lines = [f"Shardy and XLA {verdict}: {len(self.matched)} collective(s) match one to one, "
                 f"{len(self.differences)} difference(s)"]
        for m in self.matched:
            note = f"  ({m.note})" if m.note else ""
            lines.append(f"  = {_describe(m.shardy)}  <->  XLA {_describe(m.xla)}{note}")
        for d in self.differences:
            tag = "explained" if d.explained else "UNEXPLAINED"
            left = ", ".join(_describe(s) for s in d.shardy) or "-"
            right = ", ".join(_describe(x) for x in d.xla) or "-"
            lines.append(f"  {tag}: Shardy [{left}] vs XLA [{right}]: {d.reason}")
        return "\n".join(lines)


def _describe(e: dict) -> str:
    op = e.get("hlo_op", e["kind"])
    return f"{op} {e['dtype']} {e['bytes']} B/device x{e['group_size']}"


_MLIR_TO_HLO_DTYPE = {"i1": "pred", "i8": "s8", "i16": "s16", "i32": "s32", "i64": "s64",
                      "ui8": "u8", "ui16": "u16", "ui32": "u32", "ui64": "u64"}


def _norm_shardy(c, i: int) -> dict:
    get = c.get if isinstance(c, dict) else (lambda k, d=None: getattr(c, k, d))
    dtype = str(get("dtype", "f32") or "f32")
    dtype = _MLIR_TO_HLO_DTYPE.get(dtype, dtype)
    nbytes = int(get("bytes_per_device", 0) or 0)
    # What identifies the resharded value, as far as facts tell: a repeat of all of it
    # is the same value resharded again for another use.
    same_value = (get("kind"), tuple(get("axes", ()) or ()), tuple(get("global_shape", ()) or ()),
                  tuple(get("in_local_shape", ()) or ()), tuple(get("out_local_shape", ()) or ()),
                  get("producer", ""), get("origin_arg", -1), get("loc", ""))
    return {
        "kind": get("kind"), "bytes": nbytes, "dtype": dtype,
        "elements": nbytes // _HLO_DTYPE_BYTES.get(dtype, 4),
        "group_size": int(get("group_size", 0) or 0), "pos": i, "source": c,
        "same_value": same_value if get("global_shape", None) is not None else None,
    }


def _norm_xla(xla: list[dict]) -> list[dict]:
    """One entry per tensor moved: a combined (tuple) all-reduce / all-gather /
    reduce-scatter becomes one entry per operand, marked ``combined``."""
    out = []
    for i, x in enumerate(xla):
        shapes = [(dt, tuple(d)) for dt, d in x.get("operand_shapes", [])]
        dtype = shapes[0][0] if shapes else "f32"
        if x["kind"] in ("all_reduce", "all_gather", "reduce_scatter") and len(shapes) > 1:
            for shape in shapes:
                b = _nbytes(shape)
                out.append({**x, "bytes": b, "dtype": shape[0], "elements": math.prod(shape[1]),
                            "pos": i, "combined": len(shapes), "source": x})
        else:
            b = int(x.get("bytes_per_device", 0))
            out.append({**x, "bytes": b, "dtype": dtype,
                        "elements": sum(math.prod(sh[1]) for sh in shapes),
                        "pos": i, "combined": 1, "source": x})
    return out


def compare_collectives(shardy_collectives, xla_collectives_list) -> Comparison:
    """Match Shardy's collectives against the ones XLA compiled for the same plan.

    ``shardy_collectives``: ``ModuleFacts.collectives`` (or dicts with ``kind``,
    ``bytes_per_device``, ``group_size``, ``dtype``); ``xla_collectives_list``: the
    output of ``xla_collectives``. Pairs by kind and per-device operand (same bytes,
    and the same group size where that is comparable), then explains what is left
    with XLA's known lowering choices:

    - XLA combines several all-reduces (all-gathers, reduce-scatters) into one tuple
      instruction: each operand is matched on its own; the match notes ``combined``.
    - XLA's CPU backend reduces bf16/f16 partial sums in f32 (``to_apply=
      %add.clone_promoted``): the same elements at twice the bytes.
    - XLA's CPU backend lowers a reduce-scatter as all-reduce + dynamic-slice.
    - XLA fuses an all-reduce and the slice after it (Shardy's all_reduce + all_slice)
      into one reduce-scatter.
    - XLA gathers a multi-axis all_gather one mesh axis at a time (a chain of
      all-gathers whose group sizes multiply to Shardy's).
    - Shardy's all_to_all followed by an all_gather of its result: XLA gathers from
      the original layout in one all-gather.
    - The same value resharded again for another use (every field of the fact
      repeats): XLA's common-subexpression elimination keeps one collective.
    - ``all_slice`` is a local slice: XLA emits no collective for it.

    Anything else is an unexplained difference: XLA's partitioner moved other data
    (or its algebraic simplifier removed a collective Shardy kept).
    """
    sh = [_norm_shardy(c, i) for i, c in enumerate(shardy_collectives)]
    xl = _norm_xla(list(xla_collectives_list))
    result = Comparison()
    used_s: set[int] = set()
    used_x: set[int] = set()

    def pairs(pred_s, pred_x):
        """Greedily pair unused entries, Shardy in program order."""
        for i, s in enumerate(sh):
            if i in used_s or not pred_s(s):
                continue
            j = next((j for j, x in enumerate(xl) if j not in used_x and pred_x(s, x)), None)
            if j is not None:
                used_s.add(i)
                used_x.add(j)
                yield sh[i], xl[j]

    def same_group(s, x):
        return s["kind"] == "collective_permute" or not s["group_size"] or s["group_size"] == x["group_size"]

    def combined(x):
        return f"XLA combined {x['combined']} collectives into one {x['hlo_op']}" if x["combined"] > 1 else ""

    # 1. one to one.
    for s, x in pairs(lambda s: True,
                      lambda s, x: x["kind"] == s["kind"] and x["bytes"] == s["bytes"] and same_group(s, x)):
        result.matched.append(Match(s, x, combined(x)))

    # 2. the same elements reduced in a wider type.
    for s, x in pairs(lambda s: True,
                      lambda s, x: x["kind"] == s["kind"] and x["elements"] == s["elements"]
                      and x["dtype"] != s["dtype"] and same_group(s, x)):
        note = (f"XLA's CPU backend reduces {s['dtype']} in {x['dtype']} "
                f"({x['bytes']} B instead of {s['bytes']} B)")
        result.matched.append(Match(s, x, "; ".join(n for n in (note, combined(x)) if n)))

    # 3. reduce-scatter = all-reduce + dynamic-slice on XLA's CPU backend.
    for s, x in pairs(lambda s: s["kind"] == "reduce_scatter",
                      lambda s, x: x["kind"] == "all_reduce" and x["elements"] == s["elements"]):
        result.differences.append(Difference(
            [s], [x], "XLA lowers the reduce-scatter as an all-reduce followed by a local "
            "dynamic-slice (the same partial sums are reduced)"))

    # 4. all_reduce (+ all_slice) fused by XLA into one reduce-scatter.
    for s, x in pairs(lambda s: s["kind"] == "all_reduce",
                      lambda s, x: x["kind"] == "reduce_scatter" and x["elements"] == s["elements"]):
        group = [s]
        k = next((k for k, t in enumerate(sh) if k not in used_s and t["kind"] == "all_slice"
                  and t["pos"] > s["pos"]), None)
        if k is not None:
            used_s.add(k)
            group.append(sh[k])
        result.differences.append(Difference(
            group, [x], "XLA fused the all-reduce and the slice after it into one reduce-scatter"))

    # 5. a multi-axis all_gather done one axis at a time.
    for i, s in enumerate(sh):
        if i in used_s or s["kind"] != "all_gather":
            continue
        chain = _gather_chain(s, xl, used_x)
        if chain:
            used_s.add(i)
            used_x.update(chain)
            sizes = " then ".join(str(xl[j]["group_size"]) for j in chain)
            result.differences.append(Difference(
                [s], [xl[j] for j in chain], f"XLA gathers one mesh axis at a time (groups of {sizes})"))

    # 6. all_to_all then all_gather of the result: XLA gathers both axes at once.
    for i, s in enumerate(sh):
        if i in used_s or s["kind"] != "all_to_all":
            continue
        k = next((k for k in range(i + 1, len(sh)) if k not in used_s and sh[k]["kind"] == "all_gather"
                  and sh[k]["elements"] == s["elements"]), None)
        if k is None:
            continue
        g = sh[k]
        want = s["group_size"] * g["group_size"]
        j = next((j for j, x in enumerate(xl) if j not in used_x and x["kind"] == "all_gather"
                  and x["elements"] == s["elements"] and x["group_size"] in (want, g["group_size"])), None)
        if j is not None:
            used_s.update((i, k))
            used_x.add(j)
            result.differences.append(Difference(
                [s, g], [xl[j]], "Shardy moves an axis with all_to_all and then gathers; XLA gathers "
                "straight from the argument's layout in one all-gather"))

    # 7. the same value resharded twice (once per use): XLA's CSE keeps one.
    matched_values = [m.shardy["same_value"] for m in result.matched] + [
        s["same_value"] for d in result.differences for s in d.shardy]
    for i, s in enumerate(sh):
        if i in used_s or s["same_value"] is None:
            continue
        if s["same_value"] in matched_values:
            used_s.add(i)
            result.differences.append(Difference(
                [s], [], f"a repeat of an earlier {s['kind']} of the same value (Shardy reshards it "
                "once per use); XLA's CSE keeps one"))

    # 8. same tensor, different groups: a real disagreement, but show them side by side.
    for s, x in pairs(lambda s: s["kind"] != "all_slice",
                      lambda s, x: x["kind"] == s["kind"] and x["elements"] == s["elements"]):
        result.differences.append(Difference(
            [s], [x], f"same tensor but groups of {s['group_size']} (Shardy) vs {x['group_size']} (XLA)",
            explained=False))

    # 9. all_slice: local.
    for i, s in enumerate(sh):
        if i not in used_s and s["kind"] == "all_slice":
            used_s.add(i)
            result.differences.append(Difference(
                [s], [], "all_slice is a local slice of a replicated value: no collective in XLA"))

    # 10. what is left disagrees.
    left_x = [x for j, x in enumerate(xl) if j not in used_x]
    for i, s in enumerate(sh):
        if i in used_s:
            continue
        same_kind = [x for x in left_x if x["kind"] == s["kind"]]
        why = (f"XLA's {s['kind']}s move other sizes ({', '.join(str(x['bytes']) for x in same_kind)} B)"
               if same_kind else f"XLA emitted no {s['kind']} for it (its partitioner chose another "
               "layout, or its algebraic simplifier removed the collective)")
        result.differences.append(Difference([s], [], why, explained=False))
    for x in left_x:
        result.differences.append(Difference(
            [], [x], "XLA's partitioner inserted a collective that Shardy's plan does not have",
            explained=False))
    return result


def _gather_chain(s: dict, xl: list[dict], used: set[int]) -> list[int] | None:
    """Indices of XLA all-gathers that together do Shardy's all_gather ``s``: the first
    gathers Shardy's operand, each next one gathers the previous result."""
    for j, x in enumerate(xl):
        if j in used or x["kind"] != "all_gather" or x["elements"] != s["elements"]:
            continue
        chain, size = [j], x["group_size"]
        elements = x["elements"] * x["group_size"]
        while s["group_size"] and size < s["group_size"]:
            k = next((k for k, y in enumerate(xl) if k not in used and k not in chain
                      and y["kind"] == "all_gather" and y["elements"] == elements), None)
            if k is None:
                break
            chain.append(k)
            size *= xl[k]["group_size"]
            elements *= xl[k]["group_size"]
        if len(chain) > 1 and size == s["group_size"]:
            return chain
    return None
