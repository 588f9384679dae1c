"""A shard-opt process compiling with XLA on the CPU never loads the Tenstorrent plugin.

jax loads every installed PJRT plugin when its first backend starts; jax-tt-plugin's
libtt.so unpacks its runtime from an ELF constructor, and a constructor that fails (two
processes unpacking at once) leaves glibc's loader lock held, so XLA's next compile waits
forever (``shard_opt.ir``, "jax in a CPU process"). These tests run fresh processes, as
the check's XLA child and ``--verify-numerics`` do.
"""

import json
import os
import subprocess
import sys

from conftest import CHILD_CEILING_S
from test_verify import COLUMN_ROW, MLP, plan

# A fresh process: import shard-opt, compile the example MLP for 8 CPU devices, report
# the collectives XLA made and whether libtt.so was ever mapped.
CHILD = r"""
import json, sys
import shard_opt
from shard_opt import verify
collectives = verify.xla_collectives(open(sys.argv[1]).read(), 8)
maps = open("/proc/self/maps").read()
print(json.dumps({"collectives": len(collectives), "libtt": "libtt.so" in maps}))
"""


def _annotated_mlp(tmp_path) -> str:
    """A 2-layer MLP annotated with a column -> row plan through the project's passes (fc1
    split on its output features, fc2 on its input features): XLA reduces fc2's partial sums."""
    annotated, _, _ = plan(MLP, "2x4", COLUMN_ROW)
    path = tmp_path / "mlp.mlir"
    path.write_text(annotated)
    return str(path)


def _run_child(tmp_path, env_extra: dict) -> dict:
    module = _annotated_mlp(tmp_path)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", **env_extra)
    env.pop("SHARD_OPT_TT_CHILD", None)
    # CHILD_CEILING_S only ends a hung child (the bug this file is about) with a failure
    # instead of a hung suite; a passing run takes seconds.
    r = subprocess.run([sys.executable, "-c", CHILD, module], capture_output=True, text=True, env=env,
                       timeout=CHILD_CEILING_S)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_an_xla_compile_does_not_load_the_tenstorrent_plugin(tmp_path):
    got = _run_child(tmp_path, {})
    assert got["libtt"] is False
    assert got["collectives"] >= 1


def test_an_xla_compile_completes_where_the_plugin_could_not_unpack(tmp_path):
    """TMPDIR names a file, so libtt.so's constructor would throw ("failed to create
    tt-metal runtime directory") inside dlopen, as it does when two processes unpack at
    once; before the fix every XLA compile in such a process hung."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    got = _run_child(tmp_path, {"TMPDIR": str(blocker)})
    assert got["libtt"] is False and got["collectives"] >= 1
