"""``ir.new_context`` makes jax's IR context from jaxlib alone (``ir._context_parts``): the
same dialects and the same IR, without importing jax (whose ``ml_dtypes`` import costs each
process ~0.55 CPU-s)."""
import subprocess
import sys

from shard_opt import ir

# Megatron column -> row on a 2x4 mesh (lit_tests/passes/shardy-propagate.mlir's first case)
MODULE = """module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @main(%arg0: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<128x64xf32>) -> (tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
    return %1 : tensor<128x64xf32>
  }
}"""
# dialect namespaces a context may have; "tt" and "no_such" are in neither
NAMESPACES = ("builtin", "func", "stablehlo", "chlo", "mhlo", "sdy", "mpmd", "arith", "tensor", "shape", "math",
              "scf", "cf", "vector", "memref", "gpu", "llvm", "nvvm", "sparse_tensor", "tt", "no_such")
PIPELINE = "builtin.module(sdy-propagation-pipeline)"


def _dialects(ctx) -> set[str]:
    have = set()
    for name in NAMESPACES:
        try:
            ctx.get_dialect_descriptor(name)
            have.add(name)
        except Exception:  # noqa: BLE001 - not registered in this context
            pass
    return have


def _propagated(ctx) -> str:
    module = ir.parse(MODULE, context=ctx)
    ir.run_pipeline(module, PIPELINE, repro=False)
    return str(module)


def test_a_context_has_what_jaxs_has():
    ours, theirs = ir.new_context(), ir.jax_context()
    assert _dialects(ours) == _dialects(theirs)
    assert {"stablehlo", "sdy", "func", "chlo"} <= _dialects(ours)
    assert _propagated(ours) == _propagated(theirs)
    assert "#sdy.sharding_per_value" in _propagated(ours)  # the pipeline ran: the matmuls got shardings


def test_a_context_and_a_shardy_run_do_not_import_jax():
    code = ("import sys\nfrom shard_opt import ir\nctx = ir.new_context()\n"
            f"m = ir.parse({MODULE!r}, context=ctx)\n"
            f"ir.run_pipeline(m, {PIPELINE!r}, repro=False)\n"
            "print(sorted(n for n in ('jax', 'ml_dtypes') if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
