"""The IR adapter: the only module that touches jaxlib / jax internals.

jaxlib ships the MLIR Python bindings with the StableHLO and Shardy dialects and
Shardy's passes registered (references/toolchain.md). Everything else in shard-opt
goes through the functions here, so a jaxlib upgrade is fixed in one place.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
import threading

from shard_opt.errors import PassError, UserError

_lock = threading.Lock()


# ---------------------------------------------------------------------------------
# jax in a CPU process: no Tenstorrent plugin.
# ---------------------------------------------------------------------------------
# When its first backend starts, jax loads every installed PJRT plugin, whatever
# JAX_PLATFORMS says (jax._src.xla_bridge.discover_pjrt_plugins), so every process that
# compiles with XLA on the CPU dlopen()s jax-tt-plugin's libtt.so too. An ELF constructor
# of libtt.so (0.1.3) unpacks the plugin's tt-metal runtime (417 MB) into
# $TMPDIR/libtt-tt-metal-runtime-assets-<hash>, rewriting every file (unlink, then create
# with O_EXCL) in every process: two processes doing it at once race, and the loser's
# constructor throws ("failed to extract embedded tt-metal runtime archive"). That C++
# exception unwinds out of glibc's dlopen past its unlock, so the main thread keeps
# glibc's loader lock (dl_load_lock) for the rest of the process; jax logs "Jax plugin
# configuration error" and goes on with the CPU backend. jaxlib compiles on a worker
# thread while the main thread waits (BlockUntilReadyWithCancel); the worker's first
# thread_local with a destructor (MLIR's StorageUniquer cache) registers it through
# __cxa_thread_atexit_impl, which takes dl_load_lock: it waits forever, every other XLA
# worker idle. Measured (2026-12-05, 2 cores, load 12-17, the check's XLA child on the
# mlp 1x8 plan in fresh processes, two at a time): before, 8 hangs in 87 runs, each one
# with the plugin's "failed to extract" error and the loader lock held by its main
# thread, and no other run hung; after, 0 in 220 (median 19 s a run, was 41 s); with the
# unpack made to fail on purpose (TMPDIR a file), every compile hung before, none after.
# The plugin also cost each such process the 417 MB rewrite (jax.devices(): 10.9 s with
# it, 5.5 s without, under load).
#
# A shard-opt process that computes on the CPU never needs the plugin (tt-mlir compiles
# in shard_opt.ttmlir.child, which sets SHARD_OPT_TT_CHILD and keeps it): it marks jax's
# plugin discovery as done before jax's first backend starts, so libtt.so is never loaded.


def keep_jax_off_the_tt_plugin() -> None:
    """Keep jax from loading installed PJRT plugins in this process (called by
    ``shard_opt/__init__.py`` in every process but the tt-mlir check's child; see above).

    Does not import jax: if ``jax._src.xla_bridge`` is not imported yet, an import hook marks
    it when it is. A process whose backends already started keeps what it loaded."""
    import sys

    name = "jax._src.xla_bridge"
    if name in sys.modules:
        _mark_plugins_discovered(sys.modules[name])
    elif not any(isinstance(f, _PluginDiscoveryOff) for f in sys.meta_path):
        sys.meta_path.insert(0, _PluginDiscoveryOff(name))


def _mark_plugins_discovered(xla_bridge) -> None:
    if not getattr(xla_bridge, "_backends", None):  # no backend yet: discovery has not run
        xla_bridge._plugins_registered = True


class _PluginDiscoveryOff:
    """A ``sys.meta_path`` finder that lets the real finder load ``name`` and marks its
    plugins as discovered once the module has run; it removes itself then."""

    def __init__(self, name: str):
        self.name = name

    def find_spec(self, fullname, path, target=None):
        import sys

        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _MarkAfterExec(spec.loader, self)
                return spec
        return None


class _MarkAfterExec:
    def __init__(self, loader, finder: _PluginDiscoveryOff):
        self.loader, self.finder = loader, finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        import sys

        self.loader.exec_module(module)
        _mark_plugins_discovered(module)
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)

    def __getattr__(self, attr):  # get_code, get_source, ... of the real loader
        return getattr(self.loader, attr)


@functools.cache
def ir():
    """The ``jaxlib.mlir.ir`` module (imported on the first call; the facts of a search ask a
    million times, and an import statement costs a lookup under the import lock each)."""
    from jaxlib.mlir import ir as _ir

    return _ir


@functools.cache
def _context_parts():
    """What jax's IR contexts are made of, from jaxlib alone: the context class, the upstream
    dialect registry, the registrations that follow and the one thread pool they share.

    jax builds its contexts in ``jax._src.interpreters.mlir.make_ir_context``; importing that
    module imports all of jax, and jax imports ``ml_dtypes``, whose extension registers its
    NumPy loops in ~0.55 CPU-s (measured 2026-12-05: ``python -X importtime -c "import
    ml_dtypes"``, 573 ms; ``perf``: NumPy's ``PyUFunc_AddLoop`` comparing loop tuples). A
    process that only parses and runs passes (every lit test, ``--pass-pipeline``, a run
    without the checks) needs none of it. ``new_context`` makes the same context from the
    jaxlib pieces jax makes it of (jax 0.10.2): 0.14 s to the first context instead of 0.85 s.
    ``tests/test_pass_manager.py::test_a_context_has_what_jaxs_has`` checks it against jax's own."""
    from jaxlib.mlir import ir as _ir
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext  # what jax._src.lib.jax_mlir_ext is
    from jaxlib.mlir.dialects import chlo, mhlo, mpmd, sdy, stablehlo

    class Context(_ir.Context):
        # as jax's JaxIrContext: ir.Context.__init__ would load every dialect linked into
        # the binary; only the registered ones below are loaded
        def __init__(self):
            super(_ir.Context, self).__init__()

    registry = _ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    registers = (sdy.register_dialect, mpmd.register_dialect, mhlo.register_mhlo_dialect,
                 chlo.register_dialect, stablehlo.register_dialect)
    return Context, registry, registers, _ir.ThreadPool()


def jax_context():
    """jax's own IR context (``make_ir_context``), which ``new_context`` stands in for: only
    to check the two agree (``tests/test_context.py``); it imports all of jax."""
    from jax._src.interpreters import mlir as jmlir

    return jmlir.make_ir_context()


def new_context():
    """A fresh MLIR context with stablehlo, sdy, func, ... registered: what jax's
    ``make_ir_context`` makes (``_context_parts``), without importing jax."""
    context_class, registry, registers, pool = _context_parts()
    ctx = context_class()
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    ctx.set_thread_pool(pool)
    for register in registers:
        register(ctx)
    return ctx


@functools.cache
def shared_context():
    """One long-lived context for parsing many candidates (contexts are costly).

    Single-threaded: the modules a search runs are small, and MLIR's per-function thread
    pool cost more than it saved (a 1-layer Llama-3-8B candidate's Shardy pipeline: 38 ms
    threaded, 25 ms not, on 2 cores). Searches parallelise over candidates instead
    (``shard_opt.parallel``)."""
    ctx = new_context()
    ctx.enable_multithreading(False)
    return ctx


def parse(text: str, *, filename: str = "<input>", context=None):
    """Parse module text; a syntax error becomes one ``UserError`` line: ``FILE:LINE:COL: ...; what to do``."""
    _ir = ir()
    ctx = context or shared_context()
    with ctx:
        try:
            return _ir.Module.parse(text)
        except Exception as e:  # jaxlib raises MLIRError with diagnostics
            loc, message = _diagnostic(e, filename)
            hint = next((h for pattern, h in _PARSE_HINTS if pattern.search(message)), _PARSE_HINT)
            raise UserError(f"{loc or filename}: cannot parse MLIR: {message}; {hint}") from None


# What to do about a parse error, by what its diagnostic says (first match wins).
_PARSE_HINTS = (
    (re.compile(r"unregistered dialect|Dialect `[^']*' not found"),
     "shard-opt reads StableHLO (stablehlo, chlo, sdy, func ops): lower other dialects to StableHLO first"),
    (re.compile(r"unknown mesh"), "declare the mesh (sdy.mesh @NAME = <[...]>) or drop the shardings that name it"),
)
_PARSE_HINT = "check that the file is a complete StableHLO module"
# Advice written for mlir-opt users that does not apply to shard-opt.
_MLIR_TOOL_ADVICE = re.compile(r"\s*If this is intended, please use -allow-unregistered-dialect.*$")


def location_text(location, filename: str | None = None) -> str:
    """``loc("-":3:10)`` -> ``FILE:3:10`` (``"-"`` is how MLIR names text parsed from memory)."""
    text = str(location)
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    if filename and text.startswith('"-":'):
        text = filename + text[3:]
    return text


def _diagnostic(e: Exception, filename: str | None = None) -> tuple[str | None, str]:
    """(location, message) of the first error in an MLIR exception, each on one line."""
    diags = getattr(e, "error_diagnostics", None)
    if diags:
        d = diags[0]
        loc, message = location_text(d.location, filename), d.message
    else:
        lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
        errors = [ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln]
        loc, message = None, (errors[0] if errors else lines[-1] if lines else "unknown error")
    message = " ".join(_MLIR_TOOL_ADVICE.sub("", message).split()).rstrip(".")
    return loc, message


def _first_diagnostic(e: Exception, filename: str | None = None) -> str:
    loc, message = _diagnostic(e, filename)
    return f"{loc}: {message}" if loc else message


def print_module(module, *, debug_info: bool = False) -> str:
    """Module text; ``debug_info`` keeps ``loc(...)`` annotations."""
    with module.context:
        op = module.operation
        if debug_info:
            return op.get_asm(enable_debug_info=True)
        return str(op)


_pass_managers: dict = {}  # (pipeline, verify) -> its parsed PassManager, on the shared context


def run_pipeline(module, pipeline: str, *, name: str = "pipeline", verify: bool = True, repro: bool = True) -> None:
    """Run an MLIR textual pass pipeline on ``module`` in place.

    On failure the input IR is written to a file and the error names it with the
    command that reproduces the failure (torch-mlir's repro-report habit). ``verify``
    runs the IR verifier after every pass (MLIR's default); a search turns it off for
    its candidates (it is most of a Shardy run's time) and keeps it for the plan it emits.
    ``repro=False``: no input kept and no file written (a ``PassManager`` running this as
    one of its steps writes the repro itself); the error names the pipeline.

    On the shared context (``shared_context``: every candidate of a search) the parsed
    pass manager is kept per (pipeline, verify) and run again: MLIR initializes a pass
    manager's passes (their pattern sets) on its first run only, a tenth of a candidate's
    Shardy time (llama_load 2x4: 6.3 -> 5.7 ms per candidate, the same facts). One that
    fails is dropped.
    """
    from jaxlib.mlir import passmanager

    with module.context:
        before = module.operation.clone() if repro else None  # for the repro; printed only on failure
        # (a process that never made the shared context does not make one here)
        shared = shared_context.cache_info().currsize and module.context == shared_context()
        key = (pipeline, verify) if shared else None
        try:
            with _lock:
                pm = _pass_managers.get(key) if key else None
                if pm is None:
                    pm = passmanager.PassManager.parse(pipeline)
                    pm.enable_verifier(verify)
                    if key:
                        _pass_managers[key] = pm
                pm.run(module.operation)
        except Exception as e:
            if key:
                _pass_managers.pop(key, None)
            if before is None:
                raise PassError(f"{name} failed: {_first_diagnostic(e)} (in '{pipeline}')") from None
            fd, path = tempfile.mkstemp(prefix=f"shard-opt-{name}-", suffix=".mlir")
            with os.fdopen(fd, "w") as f:
                f.write(before.get_asm(enable_debug_info=True))
            raise PassError(
                f"{name} failed: {_first_diagnostic(e)} (repro: {path}; "
                f"run the pipeline '{pipeline}' on it)",
                repro_path=path,
            ) from None


def main_func(module, where: str = "input module"):
    """The public ``func.func @main`` (or the only public function); ``where`` names the input in the error."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    for f in funcs:
        if f.attributes["sym_name"].value == "main":
            return f
    public = [f for f in funcs if "sym_visibility" not in f.attributes]
    if len(public) == 1:
        return public[0]
    names = ", ".join("@" + f.attributes["sym_name"].value for f in public) or "none"
    raise UserError(f"{where}: no func.func @main and not exactly one public function ({names}); "
                    f"name the entry function main")


def walk_ops(op):
    """Every operation nested in ``op``, in pre-order."""
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child
                yield from walk_ops(child)


def ops_in(op, names=None) -> list:
    """The operations nested in ``op`` (not ``op`` itself), in pre-order, as a list taken
    before the caller changes anything; only those whose name is in ``names`` when given.
    MLIR's own walk: a third of ``walk_ops``' time. Items are ``Operation`` objects (use
    ``.name``, ``.attributes``, ``.operands``; not an OpView's properties)."""
    _ir = ir()
    out = []
    advance = _ir.WalkResult.ADVANCE
    if names is None:
        def visit(o):
            out.append(o)
            return advance
    else:
        def visit(o):
            if o.name in names:
                out.append(o)
            return advance
    top = op.operation
    top.walk(visit, _ir.WalkOrder.PRE_ORDER)
    if out and out[0] == top:
        out.pop(0)
    return out


def tensor_type(t):
    """(shape, element type text) of a ranked tensor type, else None."""
    if not isinstance(t, ir().RankedTensorType):
        return None
    return tuple(t.shape), str(t.element_type)


def is_dynamic(t) -> bool:
    return isinstance(t, ir().RankedTensorType) and not t.has_static_shape


# ---------------------------------------------------------------------------------
# XLA on CPU: compile and run a StableHLO + sdy module on virtual devices.
# ---------------------------------------------------------------------------------
# An independent cross-check of a plan (references/toolchain.md, "Independent
# cross-checks on CPU"): XLA's own Shardy partitioner compiles the annotated module
# for N virtual CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=N, set
# before jax initialises its backends), the executable runs on per-device shards, and
# its optimized HLO shows which collectives XLA actually emits. ``shard_opt.verify``
# builds the checks on these functions; nothing else here knows about plans.

# Ops that only relabel a value's sharding: semantically the identity on the global
# value, so an unsharded reference drops them (Shardy's global view; the explicit
# collectives mark where data moves, not a change of the value).
_SDY_IDENTITY_OPS = {
    "sdy.sharding_constraint", "sdy.reshard", "sdy.all_reduce", "sdy.all_gather",
    "sdy.all_slice", "sdy.reduce_scatter", "sdy.all_to_all", "sdy.collective_permute",
    "sdy.propagation_barrier",
}
_SHARDING_ATTRS = ("sdy.sharding", "sdy.sharding_rule", "mhlo.sharding")
_MODULE_PARTITION_ATTRS = ("mhlo.num_partitions", "mhlo.num_replicas")


def xla_backend():
    """The CPU backend (needs XLA_FLAGS=--xla_force_host_platform_device_count=N; the
    Tenstorrent plugin is kept out: ``keep_jax_off_the_tt_plugin``)."""
    from jax._src import xla_bridge

    return xla_bridge.get_backend("cpu")


def xla_compile(text: str, num_partitions: int, *, shardy: bool = True, to_run: bool = True):
    """Compile module text for ``num_partitions`` CPU devices, Shardy partitioner on.

    Returns XLA's loaded executable. A compile failure raises ``PassError`` naming a
    file that holds the module text. ``to_run=False`` is for an executable that is only
    read (its partitioned HLO), never run: XLA's CPU backend then skips LLVM's
    optimization (``xla_backend_optimization_level=0``), which leaves the HLO passes,
    the SPMD partitioner and so every collective as they are, and takes a full
    Llama-3-8B 2x4 module from 8.7 s to 1.7 s here (benchmarks/results.md).
    """
    from jax._src.lib import xla_client as xc

    backend = xla_backend()
    devices = backend.devices()
    if len(devices) < num_partitions:
        raise UserError(
            f"need {num_partitions} CPU devices for XLA checks, have {len(devices)}: set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={num_partitions} before jax starts"
        )
    opts = _spmd_options(num_partitions, shardy=shardy)
    if not to_run:
        opts.executable_build_options.debug_options.xla_backend_optimization_level = 0
    dl = xc.DeviceList(tuple(devices[:num_partitions]))
    try:
        return backend.compile_and_load(text, dl, opts)
    except Exception as e:
        fd, path = tempfile.mkstemp(prefix="shard-opt-xla-", suffix=".mlir")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "unknown error")
        raise PassError(
            f"XLA failed to compile the module for {num_partitions} devices: {first} (repro: {path})",
            repro_path=path,
        ) from None


def _spmd_options(num_partitions: int, *, shardy: bool = True):
    """XLA compile options for one program over ``num_partitions`` devices (SPMD, Shardy)."""
    import numpy as np
    from jax._src.lib import xla_client as xc

    opts = xc.CompileOptions()
    build = opts.executable_build_options
    build.num_partitions = num_partitions
    build.num_replicas = 1
    build.use_spmd_partitioning = num_partitions > 1
    build.use_shardy_partitioner = shardy
    build.device_assignment = xc.DeviceAssignment.create(np.arange(num_partitions).reshape(1, num_partitions))
    return opts


def xla_optimized_hlo(executable) -> str:
    """The optimized, SPMD-partitioned HLO text of a compiled executable."""
    return "\n".join(m.to_string() for m in executable.hlo_modules())


def _hlo_sharding(op_sharding):
    from jax._src.lib import xla_client as xc

    if op_sharding is None:
        return xc.HloSharding.replicate()
    hlo = op_sharding if isinstance(op_sharding, xc.HloSharding) else xc.HloSharding.from_proto(op_sharding)
    return xc.HloSharding.v3_to_v2_sharding(hlo)


def _piece_indices(hlo, shape, num_devices: int) -> list[tuple]:
    """Per logical device id, the slice of the global array it holds.

    Read straight from the tile assignment; subgroup dims (replicated, unreduced,
    manual) only repeat a tile, so an unreduced piece is located like a replicated
    one (jax's own index map refuses unreduced shardings).
    """
    import numpy as np

    full = tuple(slice(0, d) for d in shape)
    if hlo.is_replicated() or hlo.is_maximal():
        return [full] * num_devices
    dims = list(hlo.tile_assignment_dimensions())
    ids = list(hlo.tile_assignment_devices())
    if not dims or len(dims) < len(shape):
        return [full] * num_devices
    rank = len(shape)
    out = [full] * num_devices
    for pos, dev in enumerate(ids):
        coords = np.unravel_index(pos, dims)[:rank]
        idx = []
        for c, size, tiles in zip(coords, shape, dims[:rank]):
            step = -(-size // tiles)
            idx.append(slice(min(int(c) * step, size), min((int(c) + 1) * step, size)))
        out[dev] = tuple(idx)
    return out


def _device_array(x, devices, op_sharding):
    """``x`` placed on ``devices`` as the compiled program's parameter sharding says."""
    import jax
    import numpy as np
    from jax._src import array as jarray, core, sharding_impls
    from jax._src.lib import xla_client as xc

    hlo = _hlo_sharding(op_sharding)
    sharding = sharding_impls.GSPMDSharding(list(devices), hlo)
    if xc.OpSharding.Type.UNREDUCED not in list(hlo.subgroup_types()) and not hlo.is_unreduced():
        return jax.device_put(x, sharding)
    # An unreduced parameter: jax cannot place it, so hand every device its tile
    # whole, as a host hands over an input (the program then sums the copies).
    index = _piece_indices(hlo, x.shape, len(devices))
    pieces = [jax.device_put(np.ascontiguousarray(x[index[i]]), d) for i, d in enumerate(devices)]
    return jarray.ArrayImpl(core.ShapedArray(x.shape, x.dtype), sharding, pieces, committed=True,
                            _skip_checks=True)


def xla_execute(executable, inputs, output_shapes=None) -> list[list[tuple[tuple, object]]]:
    """Run ``executable`` on global numpy ``inputs``; every device's piece of every output.

    An input may be a callable returning the array: it is called when the input is placed
    on the devices, so a temporary (a widened copy) lives no longer than that.

    Each input is split the way the compiled program expects (XLA's own parameter
    shardings, so the plan's ``sdy.sharding`` is honoured exactly, sub-axes included).
    Returns, per output, ``[(index, array), ...]``: one entry per device, ``index`` a
    tuple of slices locating that device's piece in the global output. A replicated
    output gives every device's copy, so devices that disagree are visible.
    ``output_shapes`` (global shapes, from the module's function type) are needed
    when an output is split unevenly; without them they are inferred from the pieces.
    """
    import jax
    import numpy as np

    # i64 token ids and f64 values must reach XLA at their own width: jax narrows 64-bit
    # arrays to 32 bits unless x64 is on (only the verification path runs XLA)
    jax.config.update("jax_enable_x64", True)
    devices = list(executable.local_devices())
    try:
        in_shardings = list(executable.get_parameter_shardings() or [])
    except Exception:
        in_shardings = []
    if len(in_shardings) != len(inputs):
        in_shardings = [None] * len(inputs)
    # an input may be a callable that makes the array (freed once it is on the devices)
    args = [_device_array(np.asarray(x() if callable(x) else x), devices, s) for x, s in zip(inputs, in_shardings)]
    results = executable.execute_sharded(args)
    per_output = results.disassemble_into_single_device_arrays()
    try:
        out_shardings = list(executable.get_output_shardings() or [])
    except Exception:
        out_shardings = []
    if len(out_shardings) != len(per_output):
        out_shardings = [None] * len(per_output)
    position = {d: i for i, d in enumerate(devices)}
    out = []
    for i, (pieces, s) in enumerate(zip(per_output, out_shardings)):
        hlo = _hlo_sharding(s)
        shape = tuple(output_shapes[i]) if output_shapes else _global_shape(pieces, hlo)
        index = _piece_indices(hlo, shape, len(devices))
        row = []
        for piece in pieces:
            (device,) = piece.devices()
            row.append((index[position[device]], np.asarray(piece)))
        out.append(row)
    return out


def _global_shape(pieces, hlo) -> tuple[int, ...]:
    """Global shape of an output from its per-device pieces and sharding."""
    local = tuple(pieces[0].shape)
    if hlo.is_replicated() or hlo.is_maximal():
        return local
    tiles = hlo.tile_assignment_dimensions()
    return tuple(d * t for d, t in zip(local, tiles))


def strip_sharding(text: str) -> str:
    """The module with every sharding annotation removed: the unsharded program.

    Drops ``sdy.mesh`` declarations, ``sdy.sharding`` / ``mhlo.sharding`` attributes
    on arguments, results and ops, and the module's partition counts; replaces the
    sharding-only ops (``sdy.sharding_constraint``, ``sdy.reshard``, explicit sdy
    collectives) by their operand and ``sdy.constant`` by ``stablehlo.constant``.
    ``sdy.manual_computation`` has per-device bodies and cannot be stripped: a
    ``UserError`` says to pass an unsharded reference instead.
    """
    _ir = ir()
    ctx = shared_context()
    module = parse(text, filename="<verify>", context=ctx)
    with ctx, _ir.Location.unknown():
        for op in list(module.body.operations):
            if op.operation.name == "sdy.mesh":
                op.operation.erase()
        mattrs = module.operation.attributes
        for name in _MODULE_PARTITION_ATTRS:
            if name in mattrs:
                del mattrs[name]
        for fop in module.body.operations:
            if fop.operation.name != "func.func":
                continue
            for key in ("arg_attrs", "res_attrs"):
                if key in fop.attributes:
                    fop.attributes[key] = _without_sharding(fop.attributes[key])
            for op in list(walk_ops(fop)):
                _strip_op(op.operation)
    return print_module(module)


_SDY_EXPLICIT_COLLECTIVES = ("sdy.all_reduce", "sdy.all_gather", "sdy.all_slice", "sdy.reduce_scatter",
                             "sdy.all_to_all", "sdy.collective_permute")


def has_explicit_collectives(text: str) -> bool:
    return any(f"{name} " in text for name in _SDY_EXPLICIT_COLLECTIVES)


def drop_explicit_collectives(text: str) -> str:
    """The module without Shardy's explicit collectives (each replaced by its operand).

    XLA's Shardy import rejects them, and ``sdy.reshard`` too ("op unknown mesh"), in
    a module after ``shardy-propagate``; without them every op keeps the sharding
    Shardy chose and XLA's partitioner moves the data between those shardings.
    """
    _ir = ir()
    ctx = shared_context()
    module = parse(text, filename="<verify>", context=ctx)
    with ctx, _ir.Location.unknown():
        for fop in module.body.operations:
            if fop.operation.name != "func.func":
                continue
            for op in list(walk_ops(fop)):
                op = op.operation
                if op.name not in _SDY_EXPLICIT_COLLECTIVES:
                    continue
                op.results[0].replace_all_uses_with(op.operands[0])
                op.erase()
    return print_module(module)


def _without_sharding(array_attr):
    _ir = ir()
    out = []
    for a in array_attr:
        d = _ir.DictAttr(a)
        kept = {d[j].name: d[j].attr for j in range(len(d)) if d[j].name not in _SHARDING_ATTRS}
        out.append(_ir.DictAttr.get(kept))
    return _ir.ArrayAttr.get(out)


def _strip_op(op) -> None:
    _ir = ir()
    name = op.name
    if name in ("sdy.manual_computation", "sdy.named_computation"):
        raise UserError(
            f"{name} holds per-device code and cannot be run unsharded; pass an unsharded "
            "reference module (verify_numerics(..., reference=TEXT))"
        )
    for key in _SHARDING_ATTRS:
        if key in op.attributes:
            del op.attributes[key]
    if name in _SDY_IDENTITY_OPS:
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
    elif name == "sdy.constant":
        new = _ir.Operation.create(
            "stablehlo.constant", results=[op.results[0].type],
            attributes={"value": op.attributes["value"]}, ip=_ir.InsertionPoint(op),
        )
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()


def tt_backend():
    """The Tenstorrent plugin's client (``JAX_PLATFORMS=tt``; see ``tt_compile``)."""
    import jax  # noqa: F401  (registers the jax_plugins namespace: the "tt" backend)
    from jax._src import xla_bridge

    return xla_bridge.get_backend("tt")


def tt_compile(text: str, num_devices: int, export_path: str) -> None:
    """Compile module text with the Tenstorrent PJRT plugin (compile-only: the process
    runs with ``JAX_PLATFORMS=tt`` and ``TT_COMPILE_ONLY_SYSTEM_DESC``, as
    ``shard_opt.ttmlir.child`` sets them), writing tt-mlir's IR at every stage to
    ``export_path/irs``. tt-mlir's optimizer stays off (``optimization_level`` 0: levels
    1-2 JIT firmware for a mock device, which fails without the RISC-V toolchain's
    headers). Raises whatever the plugin raises."""
    from jax._src.lib import xla_client as xc

    backend = tt_backend()
    devices = backend.devices()
    if len(devices) < num_devices:
        raise RuntimeError(f"the system descriptor has {len(devices)} chips, the module's mesh {num_devices}")
    opts = _spmd_options(num_devices)
    opts.env_option_overrides = [("export_path", export_path), ("optimization_level", 0)]
    backend.compile_and_load(text, xc.DeviceList(tuple(devices[:num_devices])), opts)
