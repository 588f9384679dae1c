"""What a propagated module costs, as plain data: collectives, per-op work, memory.

The core extracts ``ModuleFacts`` from a module after Shardy propagation and explicit
collective insertion (``shard_opt.analysis.extract_facts``); cost models
(``shard_opt.costmodel``) turn facts into time. Shapes here are per device (local)
unless named ``global_``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COLLECTIVE_KINDS = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute", "all_slice",
)

DTYPE_BYTES = {
    "f64": 8, "f32": 4, "bf16": 2, "f16": 2, "f8E4M3FN": 1, "f8E5M2": 1,
    "i64": 8, "i32": 4, "i16": 2, "i8": 1, "ui8": 1, "i1": 1, "ui16": 2, "ui32": 4, "ui64": 8,
    "si8": 1, "si16": 2, "si32": 4, "si64": 8, "complex<f32>": 8,
    # Tenstorrent block floats: a 32x32 tile holds 1024 mantissas (1 byte for bfp8, half a
    # byte for bfp4) plus one shared 8-bit exponent per 16 values (64 bytes): 1088 and 576
    # bytes per 1024 values (tt-metal tt_metal/api/tt-metalium/tt_backend_api_types.hpp
    # tile_size(); constants.hpp "1B per BFP8 datum + 4x16B exponent section").
    "bfp8": 1088 / 1024, "bfp4": 576 / 1024,
}


def dtype_bytes(dtype: str | None) -> float:
    """Bytes per element of an MLIR element type (4 for one this table does not know)."""
    return DTYPE_BYTES.get(dtype or "", 4)


@dataclass(frozen=True)
class Collective:
    """One collective Shardy inserted.

    Attributes:
      kind: one of ``COLLECTIVE_KINDS``.
      axes: mesh axes it runs over (for all_gather / all_slice / all_to_all, all axes it
        gathers or slices; for collective_permute, the axes whose assignment changes).
      global_shape: the tensor type printed on the op (global shape).
      dtype: element type.
      in_local_shape: per-device shape of its operand.
      out_local_shape: per-device shape of its result.
      bytes_per_device: bytes of the per-device input (the ``b`` of the tt-metal fits).
      group_size: devices taking part in one group (product of the axes' sizes).
      op_index: position of the op in the function (stable within one module).
      loc: source location of the value it reshards, when the module has one.
      producer: name of the op producing its operand (``stablehlo.dot_general``...).
      reason: short human text: which sharding conflict it resolves.
      origin_arg: the parameter of the op that needs it (the norm whose statistics an
        all_reduce completes, the matmul whose partial sums it sums, the op that reads a
        gathered value), else the parameter nearest upstream of its operand; -1 if none:
        names the component it belongs to.
      cause: what it is for, when known (``norm statistics``, ``row-parallel partial sums``,
        ``attention``...).
    """

    kind: str
    axes: tuple[str, ...]
    global_shape: tuple[int, ...]
    dtype: str
    in_local_shape: tuple[int, ...]
    out_local_shape: tuple[int, ...]
    bytes_per_device: int
    group_size: int
    op_index: int = 0
    loc: str = ""
    producer: str = ""
    reason: str = ""
    origin_arg: int = -1
    cause: str = ""


@dataclass(frozen=True)
class OpWork:
    """Work of one compute op on one device.

    Attributes:
      name: op name (``stablehlo.dot_general``).
      flops: floating-point operations on one device (2*M*N*K for a matmul).
      bytes_in: bytes of its local operands.
      bytes_out: bytes of its local results.
      weight_bytes: the part of ``bytes_in`` that comes straight from parameters.
      dtype: result element type.
      op_index: position in the function.
      kind: what the device runs, a ``shard_opt.kernels`` entry: ``matmul`` (dot_general,
        convolution), a fused group of ``passes/mark_fusions.py`` (``sdpa``, ``norm``,
        ``softmax``, ``rope``, ``activation``, ``linear``, ``conv``), ``gather``,
        ``cache_update``, or ``""`` for any other op.
      fidelity: the storage type of the block-float weight it reads (``bfp8``,
        ``bfp4``), which sets a matmul's math fidelity; None for plain weights.
      kv_len: an attention's keys per (user, head) on one device (the ``Sk`` of its
        scores: the KV-cache positions a decode step reads); 0 where not read.
    """

    name: str
    flops: int
    bytes_in: int
    bytes_out: int
    weight_bytes: int = 0
    dtype: str = "f32"
    op_index: int = 0
    kind: str = ""
    fidelity: str | None = None
    kv_len: int = 0


@dataclass
class ModuleFacts:
    """Everything a cost model needs about one sharded module.

    Attributes:
      mesh_shape, mesh_axes: the mesh.
      collectives: every collective op, in program order.
      ops: compute work per device, in program order.
      arg_local_bytes: per ``@main`` argument, its bytes on one device.
      arg_kinds: per argument, ``param`` / ``buffer`` / ``input`` / ``cache``.
      arg_global_elements: per argument, element count of the global shape.
      arg_local_elements: per argument, element count on one device.
      peak_activation_bytes: a simple upper bound on live activations on one device
        (the largest sum of one op's operands and results).
      violations: the ids of the compiler-safety rules (``shard_opt.rules``) the module
        breaks, each once (``residual-stream``, ``collective-permute``, ...).
      unpriced: those of ``violations`` whose rule only reports (action ``report``): said
        in the report, never priced infinite.
      routed_experts: for a mixture of experts, its router's E, k and tokens per device
        and the share of expert weights read: their ops are priced as routed.
    """

    mesh_shape: tuple[int, ...]
    mesh_axes: tuple[str, ...]
    collectives: list[Collective] = field(default_factory=list)
    ops: list[OpWork] = field(default_factory=list)
    arg_local_bytes: list[int] = field(default_factory=list)
    arg_kinds: list[str] = field(default_factory=list)
    arg_global_elements: list[int] = field(default_factory=list)
    arg_local_elements: list[int] = field(default_factory=list)
    peak_activation_bytes: int = 0
    violations: list[str] = field(default_factory=list)
    unpriced: tuple[str, ...] = ()
    routed_experts: dict | None = None  # a mixture of experts priced as routed (analysis._route_experts)

    @property
    def param_bytes_per_device(self) -> int:
        return sum(b for b, k in zip(self.arg_local_bytes, self.arg_kinds) if k in ("param", "buffer"))

    def axis_size(self, axis: str) -> int:
        return dict(zip(self.mesh_axes, self.mesh_shape))[axis]


@dataclass
class Cost:
    """A cost model's verdict on one module.

    Attributes:
      total_us: modeled time of one forward pass.
      compute_us, ccl_us: its two parts.
      collective_us: per collective in ``ModuleFacts.collectives`` order, its time.
      memory_per_device_bytes: parameters + activations on one device.
      fits: memory fits the system's DRAM.
      score: what the search minimises (equals ``total_us`` for time models; heuristic
        models may score differently).
      layout_us: the part of ``compute_us`` charged for the device ops TTNN runs that no
        priced op stands for (layout and data movement, estimated from the graph:
        ``costmodel/ttnn_ops.py``); ``layout_ops``: how many were estimated.
    """

    total_us: float
    compute_us: float
    ccl_us: float
    collective_us: list[float] = field(default_factory=list)
    memory_per_device_bytes: int = 0
    fits: bool = True
    score: float | None = None
    layout_us: float = 0.0
    layout_ops: float = 0.0

    def __post_init__(self):
        if self.score is None:
            self.score = self.total_us
