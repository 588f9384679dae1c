"""Shared pytest set-up.

XLA's CPU backend reads XLA_FLAGS once, when jax first initialises: give every test
process 8 virtual devices (numeric cross-checks need as many as the mesh has).
Hypothesis runs derandomized (the ``shard-opt`` profile below).
"""

import os
import tempfile

# The lowering cache is on by default (~/.cache/shard-opt): keep the suite's entries in a
# directory of its own, removed when the session ends, unless SHARD_OPT_CACHE says otherwise.
if "SHARD_OPT_CACHE" not in os.environ:
    import atexit
    import shutil

    os.environ["SHARD_OPT_CACHE"] = tempfile.mkdtemp(prefix="shard-opt-test-cache-")
    atexit.register(shutil.rmtree, os.environ["SHARD_OPT_CACHE"], ignore_errors=True)

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("PYTHONHASHSEED", "0")
# The tt-mlir check (a child process compiling with the Tenstorrent plugin, seconds per run)
# is off by default here; tests/test_ttmlir.py turns it on where it is the subject.
os.environ.setdefault("SHARD_OPT_CHECK", "0")
os.environ.setdefault("SHARD_OPT_TT_DIR", os.path.join(tempfile.gettempdir(), "shard-opt-tt-mlir"))

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests draw the same examples on every machine and every run (a failure is
# reproducible, and the suite does not fail at random on a fresh checkout); a failure
# prints the blob that replays it (@reproduce_failure). HYPOTHESIS_PROFILE=random
# explores new examples on purpose. Per-test @settings override single fields only.
settings.register_profile("shard-opt", derandomize=True, print_blob=True, database=None)
settings.register_profile("random", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "shard-opt"))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


@pytest.fixture
def run_cli(capsys):
    """Run ``shard-opt`` in-process: returns (exit code, stdout, stderr)."""
    from shard_opt.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
