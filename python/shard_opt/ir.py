"""The IR adapter: the only module that touches jaxlib / jax internals.

jaxlib ships the MLIR Python bindings with the StableHLO and Shardy dialects and
Shardy's passes registered (references/toolchain.md). Everything else in shard-opt
goes through the functions here, so a jaxlib upgrade is fixed in one place.
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading

from shard_opt.errors import PassError, UserError

_lock = threading.Lock()


@functools.cache
def _jax_mlir():
    from jax._src.interpreters import mlir as jmlir  # the one internal import for IR

    return jmlir


def ir():
    """The ``jaxlib.mlir.ir`` module."""
    from jaxlib.mlir import ir as _ir

    return _ir


def new_context():
    """A fresh MLIR context with stablehlo, sdy, func, ... registered."""
    return _jax_mlir().make_ir_context()


@functools.cache
def shared_context():
    """One long-lived context for parsing many candidates (contexts are costly)."""
    return new_context()


def parse(text: str, *, filename: str = "<input>", context=None):
    """Parse module text; a syntax error becomes one ``UserError`` line."""
    _ir = ir()
    ctx = context or shared_context()
    with ctx:
        try:
            return _ir.Module.parse(text)
        except Exception as e:  # jaxlib raises MLIRError with diagnostics
            raise UserError(f"{filename}: cannot parse MLIR: {_first_diagnostic(e)}") from None


def _first_diagnostic(e: Exception) -> str:
    msg = str(e).strip()
    diags = getattr(e, "error_diagnostics", None)
    if diags:
        d = diags[0]
        loc = str(d.location).replace("loc(", "").rstrip(")")
        return f"{loc}: {d.message}"
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln:
            return ln.split("error:", 1)[1].strip()
    return lines[-1] if lines else "unknown error"


def print_module(module, *, debug_info: bool = False) -> str:
    """Module text; ``debug_info`` keeps ``loc(...)`` annotations."""
    with module.context:
        op = module.operation
        if debug_info:
            return op.get_asm(enable_debug_info=True)
        return str(op)


def run_pipeline(module, pipeline: str, *, name: str = "pipeline") -> None:
    """Run an MLIR textual pass pipeline on ``module`` in place.

    On failure the input IR is written to a file and the error names it with the
    command that reproduces the failure (torch-mlir's repro-report habit).
    """
    from jaxlib.mlir import passmanager

    before = print_module(module, debug_info=True)
    with module.context:
        try:
            pm = passmanager.PassManager.parse(pipeline)
            with _lock:
                pm.run(module.operation)
        except Exception as e:
            fd, path = tempfile.mkstemp(prefix=f"shard-opt-{name}-", suffix=".mlir")
            with os.fdopen(fd, "w") as f:
                f.write(before)
            raise PassError(
                f"{name} failed: {_first_diagnostic(e)} (repro: {path}; "
                f"run the pipeline '{pipeline}' on it)",
                repro_path=path,
            ) from None


def clone(module):
    """A deep copy of a module in the same context."""
    with module.context:
        return ir().Module.parse(str(module.operation))


def main_func(module):
    """The public ``func.func @main`` (or the only public function)."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    for f in funcs:
        if f.attributes["sym_name"].value == "main":
            return f
    public = [f for f in funcs if "sym_visibility" not in f.attributes]
    if len(public) == 1:
        return public[0]
    raise UserError("input module has no func.func @main; name the entry function main")


def walk_ops(op):
    """Every operation nested in ``op``, in pre-order."""
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child
                yield from walk_ops(child)


def tensor_type(t):
    """(shape, element type text) of a ranked tensor type, else None."""
    if not isinstance(t, ir().RankedTensorType):
        return None
    return tuple(t.shape), str(t.element_type)


def is_dynamic(t) -> bool:
    return isinstance(t, ir().RankedTensorType) and not t.has_static_shape


def attr(text: str, context=None):
    """Parse an attribute from text in the given (or shared) context."""
    with context or shared_context():
        return ir().Attribute.parse(text)


# ---------------------------------------------------------------------------------
# XLA on CPU: compile and run a StableHLO + sdy module on virtual devices.
# ---------------------------------------------------------------------------------

def xla_backend():
    """The CPU backend (needs XLA_FLAGS=--xla_force_host_platform_device_count=N)."""
    from jax._src import xla_bridge

    return xla_bridge.get_backend("cpu")


def xla_compile(text: str, num_partitions: int):
    """Compile module text with the Shardy partitioner on ``num_partitions`` CPU devices."""
    from jax._src.lib import xla_client as xc

    backend = xla_backend()
    devices = backend.devices()
    if len(devices) < num_partitions:
        raise UserError(
            f"need {num_partitions} CPU devices for XLA checks, have {len(devices)}: set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={num_partitions}"
        )
    opts = xc.CompileOptions()
    build = opts.executable_build_options
    build.num_partitions = num_partitions
    build.num_replicas = 1
    build.use_spmd_partitioning = True
    build.use_shardy_partitioner = True
    import numpy as np

    build.device_assignment = xc.DeviceAssignment.create(
        np.arange(num_partitions).reshape(1, num_partitions)
    )
    dl = xc.DeviceList(tuple(devices[:num_partitions]))
    return backend.compile_and_load(text, dl, opts)
