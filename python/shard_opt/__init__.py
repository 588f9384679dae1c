"""shard-opt: find the fastest sharding of a model across a mesh of Tenstorrent chips."""

import os as _os

__version__ = "0.1.0"

# shard-opt computes on the CPU (Shardy in-process, XLA's CPU client for --verify-numerics).
# The Tenstorrent PJRT plugin (jax-tt-plugin, a dependency for the tt-mlir check) registers
# a "tt" backend at priority 500 that fails on a machine without chips ("No chips detected")
# and would take every jax call with it: pin this process to the CPU before jax starts. The
# tt-mlir check compiles in a child process of its own (shard_opt.ttmlir.child), which sets
# SHARD_OPT_TT_CHILD and picks the "tt" platform.
if not _os.environ.get("SHARD_OPT_TT_CHILD"):
    _os.environ["JAX_PLATFORMS"] = "cpu"
    # ...and keep jax from loading the plugin at all: loading it can leave glibc's loader
    # lock held, and XLA's next compile then waits forever (shard_opt.ir says how).
    from shard_opt import ir as _ir

    _ir.keep_jax_off_the_tt_plugin()
