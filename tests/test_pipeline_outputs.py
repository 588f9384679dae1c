"""A pipeline of several INPUTs writes every model's deliverables (README "Pipelines").

Naming: the plan JSON and the report are one file each holding every model; ``-o``,
``--emit-torch`` and ``--emit-lit-test`` write one file per model, the model's name put
before the extension (``pipe.mlir`` -> ``pipe.t5.mlir``), and so do the report's charts
(``pipe_ccl.t5.png``). Three small load scripts stand in for a text encoder, a denoiser
and a VAE.
"""

import json
import os

import pytest

from conftest import EXAMPLES

MLP = os.path.join(EXAMPLES, "mlp.mlir")

SCRIPT = '''"""A small {name} stand-in: two projections."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear({width}, {hidden})
        self.fc2 = nn.Linear({hidden}, {width})

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def load_model():
    torch.manual_seed(0)
    return Net()


def load_inputs():
    return (torch.randn(4, 64, {width}),)
'''

MODELS = {"t5": (64, 256), "unet": (128, 512), "vae": (64, 128)}


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    """One run: ``shard-opt t5.py unet.py vae.py --devices 8`` with every output."""
    from shard_opt.cli import main
    import contextlib
    import io

    d = tmp_path_factory.mktemp("pipe")
    scripts = []
    for name, (width, hidden) in MODELS.items():
        path = d / f"{name}.py"
        path.write_text(SCRIPT.format(name=name, width=width, hidden=hidden))
        scripts.append(str(path))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*scripts, "--devices", "8", "--dtype", "f32", "-o", str(d / "pipe.mlir"),
                     "--plan-json", str(d / "pipe.json"), "--report", str(d / "pipe.md"),
                     "--emit-torch", str(d / "pipe.py"), "--emit-lit-test", str(d / "pipe_test.mlir")])
    return d, code, out.getvalue(), err.getvalue()


def test_every_output_covers_every_model(pipe):
    d, code, out, err = pipe
    assert code == 0, err
    assert out == ""  # -o given: nothing on stdout
    written = sorted(p.name for p in d.iterdir() if p.name not in {f"{m}.py" for m in MODELS})
    expected = sorted(["pipe.json", "pipe.md"]
                      + [f"pipe.{m}.mlir" for m in MODELS] + [f"pipe.{m}.py" for m in MODELS]
                      + [f"pipe_test.{m}.mlir" for m in MODELS] + [f"pipe_ccl.{m}.png" for m in MODELS])
    assert written == expected
    assert not (d / "pipe.mlir").exists() and not (d / "pipe.py").exists()


def test_each_model_file_holds_that_model(pipe):
    d, code, _, err = pipe
    assert code == 0, err
    plan = json.loads((d / "pipe.json").read_text())
    assert [p["model"] for p in plan["pipeline"]] == list(MODELS)
    for p in plan["pipeline"]:
        name = p["model"]
        width, hidden = MODELS[name]
        module = (d / f"pipe.{name}.mlir").read_text()
        assert f"tensor<{hidden}x{width}xf32>" in module and "sdy.mesh @mesh" in module
        mesh = "x".join(map(str, p["mesh"]["shape"]))
        script = (d / f"pipe.{name}.py").read_text()
        assert f"nn.Linear({width}, {hidden})" in script and "SHARD_OPT_PARAM_SPECS" in script
        assert f"# Model {name} on a {mesh} mesh" in script
        lit = (d / f"pipe_test.{name}.mlir").read_text()
        assert "// RUN: shard-opt %s --evaluate" in lit and f"tensor<{hidden}x{width}xf32>" in lit
        assert (d / f"pipe_ccl.{name}.png").read_bytes().startswith(b"\x89PNG")


def test_the_report_covers_every_model_and_says_why_this_mesh(pipe):
    d, code, _, err = pipe
    assert code == 0, err
    plan = json.loads((d / "pipe.json").read_text())
    report = (d / "pipe.md").read_text()
    for name in MODELS:
        assert f"# Sharding analysis - {name}" in report
        assert f"](pipe_ccl.{name}.png)" in report
    choice = plan["mesh_choice"]
    assert choice["devices"] == 8 and choice["slowest"] == plan["slowest"]
    assert [t["mesh"] for t in choice["trials"]] == ["2x4", "1x8"]
    assert choice["chosen"] == "x".join(map(str, plan["mesh"]["shape"]))
    head = report.split("# Sharding analysis - t5")[0]
    assert "Why this mesh" in head and "2x4" in head and "1x8" in head and plan["slowest"] in head
    # and each model's own section 1 says it too
    assert report.count("Why this mesh:") == 1 + len(MODELS)


def test_a_pipeline_on_stdout_prints_every_module(run_cli, tmp_path):
    block = os.path.join(EXAMPLES, "transformer_block.mlir")
    code, out, err = run_cli(MLP, block, "--mesh", "1x8", "--quiet")
    assert code == 0, err
    chunks = out.split("// -----\n")
    assert len(chunks) == 2
    assert "// shard-opt: model mlp" in chunks[0] and "// shard-opt: model transformer_block" in chunks[1]
    assert all("sdy.mesh @mesh" in c for c in chunks)


def test_models_of_one_name_get_numbered_files(run_cli, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    copy = other / "mlp.mlir"
    copy.write_text(open(MLP).read())
    code, out, err = run_cli(MLP, copy, "--mesh", "1x8", "--quiet", "-o", tmp_path / "o.mlir")
    assert code == 0, err
    assert (tmp_path / "o.mlp-1.mlir").exists() and (tmp_path / "o.mlp-2.mlir").exists()


def test_a_pipeline_output_that_cannot_be_written_fails_before_the_search(run_cli, tmp_path):
    block = os.path.join(EXAMPLES, "transformer_block.mlir")
    (tmp_path / "o.mlp.mlir").mkdir()  # the per-model path is a directory
    code, out, err = run_cli(MLP, block, "--mesh", "1x8", "-o", tmp_path / "o.mlir")
    assert code == 1 and err.count("\n") == 1, err
    assert "o.mlp.mlir: it is a directory" in err
    assert not (tmp_path / "o.transformer_block.mlir").exists()


def test_emit_torch_for_a_pipeline_needs_every_input_a_script(run_cli, tmp_path):
    script = tmp_path / "t5.py"
    script.write_text(SCRIPT.format(name="t5", width=64, hidden=256))
    code, out, err = run_cli(script, MLP, "--mesh", "1x8", "--emit-torch", tmp_path / "s.py")
    lines = [ln for ln in err.splitlines() if ln.startswith("shard-opt")]  # torch may warn first
    assert code == 1 and len(lines) == 1, err
    assert "mlp is a mlir input" in lines[0]
    assert not list(tmp_path.glob("s*.py"))
