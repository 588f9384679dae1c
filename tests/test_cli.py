"""The command line: outputs, --evaluate, and bad input ending in one clear line."""

import json
import os

import pytest

from conftest import EXAMPLES

MLP = os.path.join(EXAMPLES, "mlp.mlir")

COLUMN_ROW = """module {
  sdy.mesh @mesh = <["batch"=2, "model"=4]>
  func.func @main(%arg0: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<128x64xf32>) -> tensor<128x64xf32> {
    %0 = stablehlo.dot_general %arg2, %arg0, contracting_dims = [1] x [1] : (tensor<128x64xf32>, tensor<256x64xf32>) -> tensor<128x256xf32>
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [1] : (tensor<128x256xf32>, tensor<64x256xf32>) -> tensor<128x64xf32>
    return %1 : tensor<128x64xf32>
  }
}
"""


def test_main_job_prints_an_annotated_module(run_cli, tmp_path):
    plan_path = tmp_path / "plan.json"
    code, out, err = run_cli(MLP, "--mesh", "2x4", "--plan-json", plan_path)
    assert code == 0, err
    assert 'sdy.mesh @mesh = <["batch"=2, "model"=4]>' in out
    assert "sdy.sharding = #sdy.sharding<@mesh" in out
    assert "shard-opt: mlp" in err and "us modeled" in err
    plan = json.loads(plan_path.read_text())
    assert plan["mesh"]["shape"] == [2, 4]


def test_output_file_and_stdin(run_cli, tmp_path, monkeypatch):
    import io

    out_path = tmp_path / "out.mlir"
    monkeypatch.setattr("sys.stdin", io.StringIO(open(MLP).read()))
    code, out, err = run_cli("-", "--mesh", "1x8", "-o", out_path, "--quiet")
    assert code == 0, err
    assert out == "" and err == ""
    assert "sdy.mesh @mesh" in out_path.read_text()


@pytest.mark.parametrize("layout, expected", [
    # column then row: Megatron's one all_reduce
    ({0: '[{"model"}, {}]', 1: '[{}, {"model"}]'}, ["all_reduce"]),
    # both weights column-parallel: the intermediate must be gathered for the second matmul
    ({0: '[{"model"}, {}]', 1: '[{"model"}, {}]'}, None),
    # row then column
    ({0: '[{}, {"model"}]', 1: '[{"model"}, {}]'}, None),
])
def test_evaluate_reports_exactly_what_shardy_produces(run_cli, tmp_path, layout, expected):
    text = COLUMN_ROW.replace('[{"model"}, {}]>}, %arg1', f"{layout[0]}>}}, %arg1").replace(
        '[{}, {"model"}]>}, %arg2', f"{layout[1]}>}}, %arg2")
    src = tmp_path / "in.mlir"
    src.write_text(text)
    plan_path = tmp_path / "plan.json"
    code, out, err = run_cli(src, "--evaluate", "--plan-json", plan_path, "--quiet")
    assert code == 0, err
    printed = [ln.split("= sdy.")[1].split(" ")[0] for ln in out.splitlines()
               if "= sdy." in ln and "sdy.constant" not in ln]
    plan = json.loads(plan_path.read_text())
    assert [c["kind"] for c in plan["collectives"]] == printed
    if expected is not None:
        assert printed == expected
    else:
        assert printed and printed != ["all_reduce"]
    assert plan["search"]["candidates_evaluated"] == 1


@pytest.mark.parametrize("args, message", [
    (["missing.mlir", "--mesh", "2x4"], "missing.mlir"),
    ([MLP, "--mesh", "3x0"], "--mesh '3x0'"),
    ([MLP, "--mesh", "abc"], "--mesh 'abc'"),
    ([MLP, "--mesh", "3x3"], "not one tt-mlir accepts"),
    ([MLP], "no target mesh"),
    ([MLP, "--mesh", "2x4", "--parallelism", "pipeline"], "--parallelism"),
    ([MLP, "--mesh", "2x4", "--system", "no-such-system"], "no-such-system"),
    ([MLP, "--mesh", "2x4", "--bogus"], "unrecognized arguments"),
    ([MLP, "--pass-pipeline", "builtin.module(no-such-pass)"], "unknown pass"),
])
def test_bad_input_is_one_line_and_exit_1(run_cli, tmp_path, args, message):
    out_path = tmp_path / "never.mlir"
    code, out, err = run_cli(*args, "-o", out_path)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("shard-opt: error:"), err
    assert message in err
    assert "Traceback" not in err
    assert not out_path.exists()


@pytest.mark.parametrize("text, message", [
    ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n", "cannot parse"),
    ("module { func.func @main( }", "cannot parse"),
    ("this is not mlir", "cannot parse"),
])
def test_malformed_mlir(run_cli, tmp_path, text, message):
    src = tmp_path / "bad.mlir"
    src.write_text(text)
    code, out, err = run_cli(src, "--mesh", "2x4", "-o", tmp_path / "o.mlir")
    assert code == 1 and message in err and str(src) in err
    assert err.count("\n") == 1
    assert not (tmp_path / "o.mlir").exists()


def test_unwritable_output(run_cli, tmp_path):
    code, out, err = run_cli(MLP, "--mesh", "2x4", "-o", tmp_path / "no" / "such" / "dir.mlir")
    assert code == 1 and "does not exist" in err


def test_flags_accept_single_dash(run_cli):
    code, out, err = run_cli(MLP, "-mesh", "1x8", "-quiet")
    assert code == 0, err


def test_list_passes_and_systems(run_cli):
    code, out, _ = run_cli("--list-passes")
    assert code == 0 and "shardy-propagate" in out and "collect-collectives" in out
    code, out, _ = run_cli("--list-systems")
    assert code == 0 and "wh-loudbox" in out and "2x4" in out


def test_devices_picks_a_standard_mesh_and_says_why(run_cli, tmp_path):
    plan_path = tmp_path / "plan.json"
    code, out, err = run_cli(MLP, "--devices", "8", "--plan-json", plan_path, "--quiet", "-o", tmp_path / "o.mlir")
    assert code == 0, err
    plan = json.loads(plan_path.read_text())
    assert plan["mesh"]["shape"] in ([2, 4], [1, 8])
    (why,) = [n for n in plan["notes"] if n.startswith("--devices 8")]
    assert "2x4:" in why and "1x8:" in why


def test_pipeline_shares_one_mesh_chosen_for_the_slowest_model(run_cli, tmp_path):
    block = os.path.join(EXAMPLES, "transformer_block.mlir")
    plan_path = tmp_path / "plan.json"
    code, out, err = run_cli(MLP, block, "--mesh", "1x8", "--plan-json", plan_path, "--quiet", "-o", tmp_path / "o.mlir")
    assert code == 0, err
    plan = json.loads(plan_path.read_text())
    assert [p["model"] for p in plan["pipeline"]] == ["mlp", "transformer_block"]
    assert plan["mesh"] == {"shape": [1, 8], "axes": ["batch", "model"]}
    slowest = max(plan["pipeline"], key=lambda p: p["cost"]["total_us"])
    assert plan["slowest"] == slowest["model"]


def test_outputs_get_ordinary_file_modes(run_cli, tmp_path):
    out = tmp_path / "o.mlir"
    code, _, err = run_cli(MLP, "--mesh", "1x8", "-o", out, "--quiet")
    assert code == 0, err
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
    out.chmod(0o640)  # an existing file keeps its mode
    assert run_cli(MLP, "--mesh", "1x8", "-o", out, "--quiet")[0] == 0
    assert out.stat().st_mode & 0o777 == 0o640


def test_emit_torch_on_a_loader_that_subclasses_another(run_cli, tmp_path):
    # examples/llama_spec_load.py's ModelLoader inherits load_model/load_inputs from llama_load.py's;
    # the run (--mesh 1x4 --emit-torch) is the one tests/test_loader_spec.py's baseline test reads
    from test_loader_spec import spec_run_1x4

    _, text, _ = spec_run_1x4(run_cli, tmp_path)
    compile(text, "sharded.py", "exec")
    assert "class ModelLoader(_SmallLlama):" in text and "def load_shard_spec(self, model):" in text
    assert "return shard_opt_model(super().load_model(*args, **kwargs))" in text
    assert "return shard_opt_inputs(super().load_inputs(*args, **kwargs))" in text


def test_emit_torch_fails_before_the_search_when_the_script_cannot_be_rewritten(run_cli, tmp_path, monkeypatch):
    script = tmp_path / "assigned.py"
    script.write_text(
        "import torch\n\n\ndef _build(self):\n    return torch.nn.Linear(64, 64)\n\n\n"
        "class ModelLoader:\n    load_model = _build\n\n    def load_inputs(self):\n"
        "        return (torch.zeros(4, 64),)\n")
    import shard_opt.driver

    def no_search(*a, **k):
        raise AssertionError("the search ran")

    monkeypatch.setattr(shard_opt.driver, "optimize", no_search)
    code, _, err = run_cli(script, "--mesh", "1x2", "--emit-torch", tmp_path / "s.py")
    lines = [ln for ln in err.splitlines() if ln.startswith("shard-opt")]  # torch may warn first
    assert code == 1 and len(lines) == 1, err
    assert f"{script}: --emit-torch: the load script's ModelLoader.load_model is assigned" in lines[0]
    assert not (tmp_path / "s.py").exists()


TOKENS_SCRIPT = '''
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def load_model():
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=4)
    with torch.device("meta"):
        return LlamaForCausalLM(cfg)


def load_inputs():
    return (torch.zeros(2, 128, dtype=torch.long),)
'''


def _input_shape(plan: dict) -> list:
    return next(a["shape"] for a in plan["arguments"] if a["name"] == "input_ids")


def test_a_scripts_inputs_are_planned_as_it_returns_them(run_cli, tmp_path):
    script = tmp_path / "tokens.py"
    script.write_text(TOKENS_SCRIPT)
    plan_path = tmp_path / "plan.json"
    code, _, err = run_cli(script, "--mesh", "1x2", "--plan-json", plan_path, "-o", os.devnull)
    assert code == 0, err
    plan = json.loads(plan_path.read_text())
    assert _input_shape(plan) == [2, 128] and (plan["batch"], plan["seq_len"]) == (2, 128)
    assert "inputs_resized" not in plan and "planned as" not in err


def test_batch_and_seq_len_resize_a_scripts_inputs_and_say_so(run_cli, tmp_path):
    script = tmp_path / "tokens.py"
    script.write_text(TOKENS_SCRIPT)
    plan_path, out = tmp_path / "plan.json", tmp_path / "sharded.py"
    code, _, err = run_cli(script, "--mesh", "1x2", "--batch", "1", "--plan-json", plan_path, "-o", os.devnull,
                           "--emit-torch", out)
    assert code == 0, err
    plan = json.loads(plan_path.read_text())
    assert _input_shape(plan) == [1, 128] and plan["batch"] == 1  # --seq-len not given: the script's 128
    assert plan["inputs_resized"] == {"from": [2, 128], "to": [1, 128], "flags": "--batch 1",
                                      "inputs": ["input_ids"]}
    line = f"shard-opt: {script}: token inputs (input_ids) planned as [1, 128] (--batch 1); load_inputs() returns [2, 128]"
    assert line in err.splitlines()
    assert any("planned as [1, 128]" in n for n in plan["notes"])
    text = out.read_text()
    assert "# Planned for token inputs of [1, 128] (--batch 1); load_inputs() returns [2, 128]" in text
    assert "torch.zeros(2, 128, dtype=torch.long)" in text  # the user's code is left as it is


def test_batch_on_inputs_that_are_not_tokens_is_a_warning(run_cli, tmp_path):
    script = os.path.join(os.path.dirname(__file__), "fixtures", "scripts", "layernorm_mlp.py")
    plan_path = tmp_path / "plan.json"
    code, _, err = run_cli(script, "--mesh", "1x2", "--batch", "8", "--plan-json", plan_path, "-o", os.devnull,
                           "--quiet")
    assert code == 0, err
    (line,) = [ln for ln in err.splitlines() if "WARNING" in ln]
    assert "--batch 8 did nothing" in line and "[4, 128, 256]" in line
    assert next(a["shape"] for a in json.loads(plan_path.read_text())["arguments"] if a["kind"] == "input") == [4, 128, 256]


def test_batch_and_seq_len_default_to_the_inputs_own_and_zoo_keeps_1_and_128():
    from shard_opt import frontends
    from shard_opt.cli import build_parser

    ns = build_parser().parse_args(["x.py"])
    assert ns.batch is None and ns.seq_len is None
    mlp = frontends.load("zoo:mlp")
    assert [a.shape for a in mlp.arguments if a.kind == "input"] == [(1, 128, 1024)]


def test_a_numerics_failure_is_exit_3_with_every_output_written_and_marked(run_cli, tmp_path, monkeypatch):
    import shard_opt.verify as verify

    real = verify.verify_numerics

    def wrong(text, *, num_devices, **kw):  # the real run, then a verdict of "does not match"
        res = real(text, num_devices=num_devices, **kw)
        res.passed, res.max_abs_err = False, 3.5
        return res

    monkeypatch.setattr(verify, "verify_numerics", wrong)
    paths = {"-o": tmp_path / "o.mlir", "--plan-json": tmp_path / "p.json", "--report": tmp_path / "r.md",
             "--emit-lit-test": tmp_path / "t.mlir"}
    code, out, err = run_cli(MLP, "--mesh", "1x8", "--verify-numerics", *[x for kv in paths.items() for x in kv])
    assert code == 3, err
    assert all(p.exists() for p in paths.values()) and (tmp_path / "r_ccl.png").exists()
    (line,) = [ln for ln in err.splitlines() if ln.startswith("shard-opt: error:")]
    assert "mlp: the sharded program does not match the unsharded one" in line
    assert "outputs written, marked failed" in line
    plan = json.loads(paths["--plan-json"].read_text())
    assert plan["numerics"]["passed"] is False and plan["numerics"]["max_abs_err"] == 3.5
    assert paths["-o"].read_text().startswith("// shard-opt: NUMERICS FAILED:")
    assert paths["--emit-lit-test"].read_text().startswith("// shard-opt: NUMERICS FAILED:")
    assert "NUMERICS FAILED" in paths["--report"].read_text().split("## 1.")[0]


def test_a_pipeline_checks_every_model_before_exit_3(run_cli, tmp_path, monkeypatch):
    import shard_opt.verify as verify

    real = verify.verify_numerics
    calls = []

    def first_wrong(text, *, num_devices, **kw):
        res = real(text, num_devices=num_devices, **kw)
        calls.append(res)
        res.passed = len(calls) > 1  # the first model fails, the second passes
        return res

    monkeypatch.setattr(verify, "verify_numerics", first_wrong)
    block = os.path.join(EXAMPLES, "transformer_block.mlir")
    code, out, err = run_cli(MLP, block, "--mesh", "1x8", "--verify-numerics", "--quiet",
                             "--plan-json", tmp_path / "p.json", "-o", tmp_path / "o.mlir")
    assert code == 3 and len(calls) == 2, err
    plan = json.loads((tmp_path / "p.json").read_text())
    assert [p["numerics"]["passed"] for p in plan["pipeline"]] == [False, True]
    assert plan["numerics"] == {"passed": False, "failed": ["mlp"]}
    assert (tmp_path / "o.mlp.mlir").read_text().startswith("// shard-opt: NUMERICS FAILED:")
    assert "NUMERICS FAILED" not in (tmp_path / "o.transformer_block.mlir").read_text()


@pytest.mark.parametrize("source, mesh, layers", [
    ("examples/mlp.mlir", "1x8", []),  # a reshape constraint between fc2 and its bias add (the 2x4 plan has
                                       # none since the tile rows of 2026-12-05)
    # RoPE, attention and norms with the plan's constraints: one layer has each of them (the
    # round trip differs without mark-fusions reading through the constraints, as with four)
    ("tests/fixtures/scripts/gqa_llama.py", "2x4", ["--layers", "1"]),
])
def test_evaluate_on_the_plans_own_module_prices_the_plan(run_cli, tmp_path, source, mesh, layers):
    """Issue 24: the module handed to the user is the module priced. ``--evaluate`` of the
    ``-o`` module gives the plan's collectives and cost (a sharding constraint in the module
    used to hide a matmul's bias add and a rotary embedding from the fusion patterns)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out, plan_path, again = tmp_path / "out.mlir", tmp_path / "plan.json", tmp_path / "again.json"
    code, _, err = run_cli(os.path.join(root, source), "--mesh", mesh, *layers, "-o", out, "--plan-json", plan_path,
                           "--quiet")
    assert code == 0, err
    code, _, err = run_cli(out, "--mesh", mesh, "--evaluate", "--plan-json", again, "--quiet")
    assert code == 0, err
    plan, evaluated = json.loads(plan_path.read_text()), json.loads(again.read_text())
    assert "sdy.sharding_constraint" in out.read_text()
    assert sorted((c["kind"], c["shape"]) for c in evaluated["collectives"]) == \
        sorted((c["kind"], c["shape"]) for c in plan["collectives"])
    assert evaluated["cost"]["total_us"] == plan["cost"]["total_us"]


def test_the_entry_point_collects_garbage_less_often_and_main_as_a_function_does_not():
    """shard-opt as the process sets the collector's young-generation threshold
    (``cli.GC_GEN0_THRESHOLD``); ``main`` called by another program leaves the program's own."""
    import gc
    import subprocess
    import sys

    from shard_opt import cli

    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('threshold', gc.get_threshold()[0], flush=True))\n"
            "from shard_opt.cli import main\nsys.argv = ['shard-opt', '--list-systems']\nmain()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"threshold {cli.GC_GEN0_THRESHOLD}" in out.stdout and cli.GC_GEN0_THRESHOLD != 700
    before = gc.get_threshold()
    try:
        gc.set_threshold(1234, *before[1:])
        assert cli.main(["--list-systems"]) == 0
        assert gc.get_threshold()[0] == 1234
    finally:
        gc.set_threshold(*before)
