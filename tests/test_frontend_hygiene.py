"""The PyTorch frontend hands on clean modules: nothing but the module on stdout, plain
``dense`` constants (no ``dense_resource`` blobs XLA cannot import) and no ``f64``
(Tenstorrent chips have none).

Real torch.export + torch-mlir + XLA throughout, on models of a few hundred parameters.
"""

import os
import subprocess
import sys
import textwrap

from shard_opt import ir

STDOUT_SCRIPT = '''
import ctypes
import os

import torch
from torch import nn

print("hello at import")
os.write(1, b"raw at import\\n")


def load_model():
    torch.manual_seed(0)
    return nn.Linear(16, 8)


def load_inputs():
    print("hello from load_inputs")
    os.write(1, b"raw from load_inputs\\n")
    ctypes.CDLL(None).printf(b"printf from load_inputs\\n")  # C stdio, buffered on a pipe
    return (torch.randn(4, 16),)
'''


def test_a_load_script_that_prints_does_not_write_into_the_module(tmp_path):
    script = tmp_path / "noisy.py"
    script.write_text(STDOUT_SCRIPT)
    env = dict(os.environ, SHARD_OPT_JOBS="1")
    proc = subprocess.run([sys.executable, "-m", "shard_opt.cli", str(script), "--mesh", "1x2"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("module"), proc.stdout[:200]
    ir.parse(proc.stdout, filename="<stdout>")  # the whole of stdout is the module
    for line in ("hello at import", "raw at import", "hello from load_inputs", "raw from load_inputs",
                 "printf from load_inputs"):
        assert line in proc.stderr, line
        assert line not in proc.stdout, line
