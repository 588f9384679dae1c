"""The PyTorch frontend hands on clean modules: nothing but the module on stdout, plain
``dense`` constants (no ``dense_resource`` blobs XLA cannot import) and no ``f64``
(Tenstorrent chips have none).

Real torch.export + torch-mlir + XLA throughout, on models of a few hundred parameters.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from shard_opt import ir
from conftest import CHILD_CEILING_S

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
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=CHILD_CEILING_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("module"), proc.stdout[:200]
    ir.parse(proc.stdout, filename="<stdout>")  # the whole of stdout is the module
    for line in ("hello at import", "raw at import", "hello from load_inputs", "raw from load_inputs",
                 "printf from load_inputs"):
        assert line in proc.stderr, line
        assert line not in proc.stdout, line


# ---------------------------------------------------------------------------------
# dense_resource constants -> plain dense
# ---------------------------------------------------------------------------------

GROUPNORM_SCRIPT = '''
import torch
from torch import nn


def load_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU(),
                         nn.Conv2d(8, 8, 3, padding=1))


def load_inputs():
    torch.manual_seed(1)
    return (torch.randn(1, 8, 8, 8),)
'''

# Constants torch-mlir writes as dense_resource blobs: a bool mask (a ui8 blob), an
# all-equal int64 (a splat once inlined), f32 values and an f64 one (narrowed).
CONSTANTS_SCRIPT = '''
import torch
from torch import nn


class Constants(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        mask = torch.tensor([True, False, True, True])
        same = torch.tensor([3, 3, 3, 3])
        scale = torch.tensor([0.5, 1.5, -2.0, 4.0])
        wide = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
        y = torch.where(mask, self.lin(x) * scale, 0.0)
        return y + same + wide.to(torch.float32)


def load_model():
    torch.manual_seed(0)
    return Constants()


def load_inputs():
    torch.manual_seed(1)
    return (torch.randn(2, 4),)
'''


def load(path: str, dtype: str):
    """The script lowered as ``shard-opt PATH --dtype DTYPE`` lowers it (``frontends.load``
    with the CLI's defaults: one lowering per test run for this test's lowering and its CLI run)."""
    from shard_opt import frontends

    return frontends.load(path, dtype=dtype)


@pytest.fixture(scope="module")
def groupnorm_script(tmp_path_factory):
    """GROUPNORM_SCRIPT in a file of the module's (two tests lower it: one lowering)."""
    return _script(tmp_path_factory.mktemp("groupnorm"), "groupnorm.py", GROUPNORM_SCRIPT)


def _script(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _against_eager(path) -> float:
    """Lower the script (f32), run the module on one XLA CPU device with the model's real
    weights, and return the largest |XLA - eager PyTorch| over the output."""
    import importlib.util

    import numpy as np
    import torch

    lm = load(str(path), dtype="f32")
    spec = importlib.util.spec_from_file_location("eager_" + path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.load_model().eval()
    (x,) = mod.load_inputs()
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    args = [state[a.name].detach().numpy() if a.kind != "input" else x.numpy() for a in lm.arguments]
    with torch.no_grad():
        want = model(x).numpy()
    (pieces,) = ir.xla_execute(ir.xla_compile(lm.text, 1, shardy=False), args)
    got = pieces[0][1]
    assert got.shape == want.shape and got.dtype == np.float32
    return float(np.max(np.abs(got.astype(np.float64) - want)))


def test_groupnorm_model_verifies_numerics_on_8_devices(groupnorm_script, run_cli):
    # torch-mlir lowers GroupNorm's channel->group indices as dense_resource<torch_tensor_...>
    # constants; XLA refused the module ("UNIMPLEMENTED: Only dense elements attr are supported").
    path = groupnorm_script
    code, out, err = run_cli(path, "--mesh", "1x8", "--verify-numerics", "--dtype", "f32")
    assert code == 0, err
    assert "numerics PASS" in err
    assert "dense_resource" not in out and "dialect_resources" not in out
    ir.parse(out)


def test_inlined_constants_compute_what_pytorch_computes(tmp_path, groupnorm_script):
    # The blob's bytes land in the right elements (its first 4 bytes are the alignment):
    # a wrong split would still verify against itself, so compare with eager PyTorch.
    for name, path in (("groupnorm.py", groupnorm_script),
                       ("constants.py", _script(tmp_path, "constants.py", CONSTANTS_SCRIPT))):
        lm = load(str(path), dtype="f32")
        assert "dense_resource" not in lm.text and "f64" not in lm.text, name
        assert any(r.startswith("dense_resource -> dense") for r in lm.meta["lowering_rewrites"]), name
        assert _against_eager(path) < 1e-5, name


RESOURCE_MODULE = '''module {
  func.func @main() -> (tensor<4xi1>, tensor<3xi32>, tensor<2xf16>) {
    %0 = stablehlo.constant dense_resource<mask> : tensor<4xi1>
    %1 = stablehlo.constant dense_resource<same> : tensor<3xi32>
    %2 = stablehlo.constant dense_resource<"half.0"> : tensor<2xf16>
    return %0, %1, %2 : tensor<4xi1>, tensor<3xi32>, tensor<2xf16>
  }
}

{-#
  dialect_resources: {
    builtin: {
      mask: "0x0100000001000101",
      same: "0x04000000070000000700000007000000",
      "half.0": "0x02000000003C00C0"
    }
  }
#-}
'''


def test_resource_blobs_decode_bools_splats_and_halves():
    from shard_opt.frontends.rewrites import after_lowering

    # blobs as jaxlib's DenseResourceElementsAttr.get_from_buffer prints them: alignment
    # (1 for bool, 4 for i32, 2 for f16) then the elements, one byte per i1
    out, notes = after_lowering(RESOURCE_MODULE, where="<t>")
    assert notes == ["dense_resource -> dense (3 constants)"]
    assert "dense<[true, false, true, true]> : tensor<4xi1>" in out
    assert "dense<7> : tensor<3xi32>" in out  # a splat
    assert "dense<[1.000000e+00, -2.000000e+00]> : tensor<2xf16>" in out
    assert "dense_resource" not in out and "dialect_resources" not in out
    ir.parse(out)


def test_a_missing_or_short_resource_blob_is_a_clear_error():
    from shard_opt.frontends.rewrites import after_lowering

    missing = RESOURCE_MODULE.replace('      same: "0x04000000070000000700000007000000",\n', "")
    with pytest.raises(RuntimeError, match=r"dense_resource<same>.*no blob"):
        after_lowering(missing, where="<t>")
    short = RESOURCE_MODULE.replace("0x04000000070000000700000007000000", "0x040000000700000007000000")
    with pytest.raises(RuntimeError, match=r"dense_resource<same> blob has 12 bytes.*needs 4 \+ 3 x 4"):
        after_lowering(short, where="<t>")


# ---------------------------------------------------------------------------------
# f64 -> f32
# ---------------------------------------------------------------------------------

LAYERNORM_SCRIPT = '''
import torch
from torch import nn


def load_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64))


def load_inputs():
    torch.manual_seed(1)
    return (torch.randn(2, 8, 32),)
'''


def test_layernorm_lowers_without_f64_and_verifies_on_8_devices(tmp_path, run_cli):
    # torch-mlir computes LayerNorm's statistics in f64 (convert to tensor<2x8x64xf64>,
    # an f64 reduce, dense<1.0e-05> : tensor<1xf64>); Tenstorrent chips have no f64.
    path = _script(tmp_path, "layernorm.py", LAYERNORM_SCRIPT)
    lm = load(str(path), dtype="f32")
    assert "f64" not in lm.text
    assert "i64" in lm.text  # integer literals keep their width
    assert any(r.startswith("f64 -> f32") for r in lm.meta["lowering_rewrites"])
    assert all(a.dtype == "f32" for a in lm.arguments)
    assert _against_eager(path) < 1e-5  # f32 statistics: what eager PyTorch computes on CPU

    code, out, err = run_cli(path, "--mesh", "1x8", "--verify-numerics", "--dtype", "f32")
    assert code == 0, err
    assert "numerics PASS" in err
    assert "f64" not in out


F64_MODULE = """module {
  func.func @main(%arg0: tensor<4xf32>) -> tensor<f32> {
    %0 = stablehlo.constant dense<-1.7976931348623157E+308> : tensor<4xf64>
    %1 = stablehlo.constant dense<[1.0, 2.0, 3.0, 0.5]> : tensor<4xf64>
    %z = stablehlo.constant dense<0.0> : tensor<f64>
    %a = stablehlo.convert %arg0 : tensor<4xf32>
    %2 = stablehlo.convert %a : (tensor<4xf32>) -> tensor<4xf64>
    %3 = stablehlo.add %2, %1 : tensor<4xf64>
    %4 = stablehlo.maximum %3, %0 : tensor<4xf64>
    %5 = stablehlo.reduce(%4 init: %z) applies stablehlo.add across dimensions = [0] : (tensor<4xf64>, tensor<f64>) -> tensor<f64>
    %6 = stablehlo.convert %5 : (tensor<f64>) -> tensor<f32>
    return %6 : tensor<f32>
  }
}
"""


def test_narrowing_retypes_constants_bodies_and_drops_only_the_f64_converts():
    import numpy as np

    from shard_opt.frontends.rewrites import after_lowering

    out, notes = after_lowering(F64_MODULE, where="<t>")
    assert "f64" not in out and notes and notes[0].startswith("f64 -> f32")
    assert "dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 5.000000e-01]> : tensor<4xf32>" in out
    assert "dense<-3.40282347E+38> : tensor<4xf32>" in out  # f64's min is f32's min, not -inf
    assert "(tensor<4xf32>, tensor<f32>) -> tensor<f32>" in out  # the reduce and its body
    assert out.count("stablehlo.convert") == 1  # the f32 -> f32 convert torch-mlir wrote stays
    x = np.array([1.0, -2.0, 0.5, 4.0], np.float32)
    (pieces,) = ir.xla_execute(ir.xla_compile(out, 1, shardy=False), [x])
    assert float(pieces[0][1]) == float(np.sum(x + [1.0, 2.0, 3.0, 0.5]))


def test_an_empty_like_buffer_lowers_to_pure_stablehlo_and_verifies(run_cli):
    # torch.empty_like, then filled through strided slices: torch-mlir writes tensor.empty,
    # which tt-mlir cannot legalize and XLA cannot import; the frontend writes zeros instead
    from shard_opt.frontends.torch_frontend import load_script

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "scripts", "empty_like_fill.py")
    lm = load_script(path, dtype="f32")
    assert "tensor.empty" not in lm.text
    assert any(r.startswith("tensor.empty -> zero stablehlo.constant (1 ") for r in lm.meta["lowering_rewrites"])
    code, out, err = run_cli(path, "--mesh", "1x8", "--parallelism", "tensor", "--verify-numerics", "--no-check")
    assert code == 0, err
    assert "numerics PASS" in err and "tensor.empty" not in out
