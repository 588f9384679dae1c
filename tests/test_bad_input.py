"""Bad input ends in one clear line (issue 7, "Trust"; docs/errors.md).

Every case in ``CASES`` must end with exit status 1, exactly one stderr line starting
``shard-opt: error:`` that names what went wrong, where, and what to do, no traceback,
and no output file (the run's output directory stays empty, not even a temporary file).
Two inputs are *not* errors, by decision (docs/errors.md): a model with nothing
divisible by the mesh gets a replicated plan with a note; an op Shardy has no sharding
rule for gets a plan with that op replicated.
"""

from __future__ import annotations

import io
import json
import os
import stat

import pytest

from conftest import EXAMPLES

MLP = os.path.join(EXAMPLES, "mlp.mlir")

MATMUL = """module {
  func.func @main(%arg0: tensor<64x128xf32>, %arg1: tensor<128x256xf32>) -> tensor<64x256xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x256xf32>) -> tensor<64x256xf32>
    return %0 : tensor<64x256xf32>
  }
}
"""

ELEMENTWISE = """module {
  func.func @main(%arg0: tensor<16x16xf32>) -> tensor<16x16xf32> {
    %0 = OP
    return %0 : tensor<16x16xf32>
  }
}
"""

DYNAMIC_ARG = """module {
  func.func @main(%arg0: tensor<?x16xf32>, %arg1: tensor<16x32xf32>) -> tensor<?x32xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<?x16xf32>, tensor<16x32xf32>) -> tensor<?x32xf32>
    return %0 : tensor<?x32xf32>
  }
}
"""

DYNAMIC_OP = """module {
  func.func @main(%arg0: tensor<4x16xf32>, %arg1: tensor<2xi64>) -> tensor<?x?xf32> {
    %0 = stablehlo.dynamic_reshape %arg0, %arg1 : (tensor<4x16xf32>, tensor<2xi64>) -> tensor<?x?xf32>
    return %0 : tensor<?x?xf32>
  }
}
"""

# 200000 x 100000 bf16 = 37 GiB of weight: more than an n300 chip's DRAM even split in two.
HUGE = """module {
  func.func @main(%arg0: tensor<200000x100000xbf16> {shard_opt.kind = "param", shard_opt.name = "w.weight"}, %arg1: tensor<8x100000xbf16>) -> tensor<8x200000xbf16> {
    %0 = stablehlo.dot_general %arg1, %arg0, contracting_dims = [1] x [1] : (tensor<8x100000xbf16>, tensor<200000x100000xbf16>) -> tensor<8x200000xbf16>
    return %0 : tensor<8x200000xbf16>
  }
}
"""

MESH_3X3 = """module {
  sdy.mesh @mesh = <["batch"=3, "model"=3]>
  func.func @main(%arg0: tensor<9x9xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}) -> tensor<9x9xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<9x9xf32>
    return %0 : tensor<9x9xf32>
  }
}
"""

NO_MAIN = """module {
  func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> { return %arg0 : tensor<4xf32> }
  func.func @g(%arg0: tensor<4xf32>) -> tensor<4xf32> { return %arg0 : tensor<4xf32> }
}
"""

ODD = """module {
  func.func @main(%arg0: tensor<7x9xf32>, %arg1: tensor<9x5xf32>) -> tensor<7x5xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<7x9xf32>, tensor<9x5xf32>) -> tensor<7x5xf32>
    return %0 : tensor<7x5xf32>
  }
}
"""

# The matmul's output feeds a custom call Shardy has no sharding rule for.
CUSTOM_CALL = MATMUL.replace(
    "    return %0 : tensor<64x256xf32>",
    "    %1 = stablehlo.custom_call @my_unknown_target(%0) : (tensor<64x256xf32>) -> tensor<64x256xf32>\n"
    "    return %1 : tensor<64x256xf32>")

SCRIPT_OK_INPUTS = "import torch\ndef load_inputs():\n    return (torch.zeros(8, 16),)\n"
PLAN = {"schema_version": 1, "model": "m", "mesh": {"shape": [1, 2], "axes": ["batch", "model"]},
        "system": "wh-loudbox", "arguments": [], "collectives": [],
        "cost": {"total_us": 1.0, "compute_us": 1.0, "ccl_us": 0.0, "ccl_count": 0, "ccl_bytes": 0,
                 "memory_per_device_bytes": 0, "fits": True}, "baselines": {}, "search": {}}


class Case:
    """A bad input: how to make it, what the one line must say, whether to add output flags."""

    def __init__(self, make, *words, outputs=True):
        self.make, self.words, self.outputs = make, words, outputs


def _file(name, content):
    def make(d, monkeypatch):
        p = d / name
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        return p
    return make


def mlir(text, *flags, name="in.mlir"):
    return lambda d, mp: [_file(name, text)(d, mp), *flags]


def script(text, *flags):
    return lambda d, mp: [_file("load.py", text)(d, mp), "--mesh", "1x2", *flags]


def args(*a):
    return lambda d, mp: list(a)


def verify_ir(plan, dump=MLP):
    def make(d, mp):
        p = plan
        if p is not None and not isinstance(p, str):
            p = str(_file("plan.json", json.dumps(p) if not isinstance(p, bytes) else p)(d, mp))
        return ["verify-ir", p if p is not None else d / "missing.json", dump]
    return make


def stdin(data: bytes):
    def make(d, mp):
        mp.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        return ["-", "--mesh", "1x2"]
    return make


def truncated(d, mp):
    text = open(MLP).read()
    return [_file("cut.mlir", text[: len(text) // 2])(d, mp), "--mesh", "1x2"]


def readonly_file(d, mp):
    p = d / "ro.mlir"
    p.write_text("keep me\n")
    p.chmod(0o444)
    return [MLP, "--mesh", "1x2", "-o", p]


def readonly_dir(d, mp):
    ro = d / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return [MLP, "--mesh", "1x2", "-o", ro / "out.mlir"]


def directory_input(name):
    def make(d, mp):
        (d / name).mkdir()
        return [d / name, "--mesh", "1x2"]
    return make


CASES = {
    # .mlir input
    "malformed-mlir": Case(mlir("module { func.func @main( }", "--mesh", "1x2"), "cannot parse MLIR", "in.mlir:1:"),
    "not-mlir-at-all": Case(mlir("this is not mlir", "--mesh", "1x2"), "cannot parse MLIR", "StableHLO module"),
    "truncated-mlir": Case(truncated, "cut.mlir:", "cannot parse MLIR", "complete StableHLO module"),
    "unknown-dialect-generic": Case(mlir(ELEMENTWISE.replace("OP", '"foo.bar"(%arg0) : (tensor<16x16xf32>) -> tensor<16x16xf32>'),
                                         "--mesh", "1x2"),
                                    "in.mlir:3:", "unregistered dialect", "lower other dialects to StableHLO"),
    "unknown-dialect-custom": Case(mlir(ELEMENTWISE.replace("OP", "foo.bar %arg0 : tensor<16x16xf32>"), "--mesh", "1x2"),
                                   "in.mlir:3:", "foo.bar", "lower other dialects to StableHLO"),
    "dynamic-shape-argument": Case(mlir(DYNAMIC_ARG, "--mesh", "1x2"),
                                   "in.mlir:2:", "@main argument 0", "tensor<?x16xf32>", "static shapes"),
    "dynamic-shape-op": Case(mlir(DYNAMIC_OP, "--mesh", "1x2"),
                             "in.mlir:3:", "stablehlo.dynamic_reshape", "tensor<?x?xf32>", "static shapes"),
    "empty-file": Case(mlir("", "--mesh", "1x2"), "in.mlir", "empty input"),
    "blank-file": Case(mlir("\n  \n", "--mesh", "1x2"), "in.mlir", "empty input"),
    "binary-file": Case(lambda d, mp: [_file("bin.mlir", bytes(range(256)) * 4)(d, mp), "--mesh", "1x2"],
                        "bin.mlir", "not a text file", "UTF-8"),
    "binary-stdin": Case(stdin(b"\x00\x01\xff\xfe" * 64), "<stdin>", "not a text file"),
    "empty-stdin": Case(stdin(b""), "<stdin>", "empty input"),
    "directory-input": Case(directory_input("models"), "models", "is a directory"),
    "directory-named-mlir": Case(directory_input("dir.mlir"), "dir.mlir", "is a directory"),
    "missing-input": Case(lambda d, mp: [d / "missing.mlir", "--mesh", "1x2"], "missing.mlir", "no such file"),
    "no-main": Case(mlir(NO_MAIN, "--mesh", "1x2"), "in.mlir: no func.func @main", "(@f, @g)",
                    "name the entry function main"),
    # meshes and systems
    "mesh-3x3": Case(args(MLP, "--mesh", "3x3"), "mesh 3x3", "tt-mlir", "choose one of", "2x4"),
    "module-mesh-3x3-evaluate": Case(mlir(MESH_3X3, "--evaluate"), "mesh 3x3", "tt-mlir", "choose one of"),
    "system-lacks-mesh": Case(args(MLP, "--mesh", "2x4", "--system", "n300"), "--system n300", "1x2", "2x4"),
    "galaxy-1x32": Case(args(MLP, "--mesh", "1x32"), "--system wh-galaxy", "8x4, 4x8", "hangs",
                        "tt-metal issue 43749"),
    "devices-3": Case(args(MLP, "--devices", "3"), "--devices 3", "1, 2, 4, 8, 32", "--mesh"),
    "duplicate-axis-names": Case(args(MLP, "--mesh", "2x4", "--axis-names", "a,a"), "--axis-names", "distinct"),
    "evaluate-without-mesh": Case(args(MLP, "--evaluate"), "--evaluate needs a mesh", "--mesh RxC"),
    # memory
    "too-big-for-any-plan": Case(mlir(HUGE, "--mesh", "1x2", name="huge.mlir"),
                                 "huge does not fit on n300", "GiB per device", "--devices"),
    # flags that do not apply or are out of range
    "layers-0": Case(args(MLP, "--mesh", "1x2", "--layers", "0"), "--layers 0", "at least 1"),
    "batch-negative": Case(args(MLP, "--mesh", "1x2", "--batch", "-1"), "--batch -1", "at least 1"),
    "layers-on-mlir": Case(args(MLP, "--mesh", "1x2", "--layers", "2"), "--layers", "drop --layers"),
    "decode-on-mlir": Case(args(MLP, "--mesh", "1x2", "--phase", "decode"), "--phase decode", "drop --phase decode"),
    "emit-torch-on-mlir": Case(lambda d, mp: [MLP, "--mesh", "1x2", "--emit-torch", d / "x.py"],
                               "--emit-torch needs a PyTorch load script", "use -o"),
    "unknown-zoo-model": Case(args("zoo:no-such-model", "--mesh", "1x2"), "zoo:no-such-model", "known:", "llama-3-8b"),
    "unknown-flag": Case(args(MLP, "--mesh", "1x2", "--bogus"), "unrecognized arguments", "--help"),
    # load scripts
    "script-syntax-error": Case(script("def load_model(:\n    pass\n"), "load.py", "SyntaxError", "fix the script"),
    "script-missing-module": Case(script("import no_such_module_xyz\n"), "load.py", "ModuleNotFoundError",
                                  "no_such_module_xyz"),
    "script-no-loader": Case(script("x = 1\n"), "load.py", "load_model()/load_inputs()"),
    "load-model-wrong-type": Case(script("def load_model():\n    return 42\n" + SCRIPT_OK_INPUTS),
                                  "load.py", "load_model() returned int", "torch.nn.Module"),
    "load-inputs-wrong-type": Case(script("import torch\ndef load_model():\n    return torch.nn.Linear(16, 32)\n"
                                          "def load_inputs():\n    return 'hello'\n"),
                                   "load.py", "load_inputs returned str", "tuple of tensors"),
    "load-model-raises": Case(script("def load_model():\n    raise RuntimeError('no weights here')\n" + SCRIPT_OK_INPUTS),
                              "load.py", "RuntimeError", "no weights here"),
    # output paths (the run's own -o/--plan-json are not added: the path is the subject)
    "output-dir-missing": Case(args(MLP, "--mesh", "1x2", "-o", "/nonexistent-dir/x/out.mlir"),
                               "cannot write", "does not exist", outputs=False),
    "output-file-read-only": Case(readonly_file, "cannot write", "ro.mlir", "read-only", outputs=False),
    "output-dir-read-only": Case(readonly_dir, "cannot write", "read-only", outputs=False),
    "output-is-a-directory": Case(lambda d, mp: [MLP, "--mesh", "1x2", "-o", d],
                                  "cannot write", "is a directory", outputs=False),
    # verify-ir
    "verify-ir-missing-plan": Case(verify_ir(None), "cannot read plan", "missing.json", outputs=False),
    "verify-ir-plan-not-json": Case(verify_ir(b"hello"), "plan.json:1", "not valid JSON", "--plan-json", outputs=False),
    "verify-ir-plan-not-a-plan": Case(verify_ir([1, 2]), "not a shard-opt plan", "--plan-json", outputs=False),
    "verify-ir-plan-empty-object": Case(verify_ir({}), "not a shard-opt plan", outputs=False),
    "verify-ir-pipeline-plan": Case(verify_ir({"pipeline": [PLAN, PLAN], "mesh": PLAN["mesh"]}),
                                    "pipeline plan", "one model", outputs=False),
    "verify-ir-missing-dump": Case(verify_ir(PLAN, dump="/nonexistent-dump.mlir"), "cannot read dump", outputs=False),
    "verify-ir-plan-old-schema": Case(verify_ir({k: v for k, v in PLAN.items() if k != "schema_version"}),
                                      "plan.json: plan JSON has no schema_version", "--plan-json", outputs=False),
    "verify-ir-plan-bad-record": Case(verify_ir({**PLAN, "cost": {**PLAN["cost"], "fits": "yes"}}),
                                      "plan.json: plan JSON cost.fits is \"yes\", not bool (Cost)", outputs=False),
    "verify-ir-one-argument": Case(args("verify-ir", MLP), "usage: shard-opt verify-ir", outputs=False),
}


@pytest.fixture(autouse=True)
def _one_job(monkeypatch):
    monkeypatch.setenv("SHARD_OPT_JOBS", "1")  # no worker start-up for the few cases that search


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_1_and_no_output(run_cli, tmp_path, monkeypatch, name):
    case = CASES[name]
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    out.mkdir()
    argv = case.make(inp, monkeypatch)
    if case.outputs:
        argv += ["-o", out / "out.mlir", "--plan-json", out / "plan.json", "--report", out / "report.md"]
    before = _snapshot(tmp_path)
    try:
        code, stdout, err = run_cli(*argv)
    finally:
        for p in (inp / "ro", inp / "ro.mlir"):
            if p.exists():
                p.chmod(0o755 if p.is_dir() else 0o644)
    assert code == 1, err
    assert err.startswith("shard-opt: error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and "Traceback" not in stdout
    for word in case.words:
        assert word in err, f"{word!r} not in {err!r}"
    assert _snapshot(tmp_path) == before, "an output (or temporary) file was written"
    assert stdout == ""


def _snapshot(root) -> dict:
    """Every file under ``root`` with its content: nothing may be created or changed."""
    snap = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                snap[p] = fh.read()
    return snap


def test_read_only_means_no_write_bits_even_for_root(run_cli, tmp_path):
    """As root the OS would let shard-opt replace a read-only file; it still refuses (docs/errors.md)."""
    p = tmp_path / "ro.mlir"
    p.write_text("keep me\n")
    p.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    code, _, err = run_cli(MLP, "--mesh", "1x2", "-o", p)
    p.chmod(0o644)
    assert code == 1 and "read-only" in err
    assert p.read_text() == "keep me\n"


def test_nothing_divisible_is_a_replicated_plan_with_a_note(run_cli, tmp_path):
    """Every dim odd on a 1x2 mesh: a valid plan (replicated), exit 0, and it says why."""
    src = tmp_path / "odd.mlir"
    src.write_text(ODD)
    plan_path = tmp_path / "plan.json"
    code, out, err = run_cli(src, "--mesh", "1x2", "--plan-json", plan_path)
    assert code == 0, err
    assert "Traceback" not in err
    plan = json.loads(plan_path.read_text())
    assert all(a["sharding"] == [[], []] for a in plan["arguments"])
    assert plan["collectives"] == []
    assert plan["strategy"] == "replicated (nothing can be split on this mesh)"
    assert any("nothing to split" in n and "model=2" in n for n in plan["notes"])
    lines = err.splitlines()
    assert lines[0].startswith("shard-opt: WARNING: odd: nothing to split") and "divisible" in lines[0]
    assert lines[1].startswith("shard-opt: odd on 1x2")
    assert 'sdy.sharding<@mesh, [{}, {}]>' in out


def test_divisible_model_has_no_nothing_to_split_note(run_cli, tmp_path):
    plan_path = tmp_path / "plan.json"
    code, _, err = run_cli(MLP, "--mesh", "1x2", "--plan-json", plan_path, "--quiet")
    assert code == 0 and err == ""
    assert "notes" not in json.loads(plan_path.read_text())


def test_op_without_sharding_rule_still_gets_a_plan(run_cli, tmp_path):
    """Shardy accepts an op it has no sharding rule for (an unknown custom_call target):
    no error, a plan; the op itself stays unsharded."""
    src = tmp_path / "cc.mlir"
    src.write_text(CUSTOM_CALL)
    plan_path = tmp_path / "plan.json"
    code, out, err = run_cli(src, "--mesh", "1x2", "--plan-json", plan_path, "--quiet")
    assert code == 0, err
    assert "stablehlo.custom_call @my_unknown_target" in out
    assert "sdy.sharding" not in [ln for ln in out.splitlines() if "custom_call" in ln][0]


def test_op_without_sharding_rule_is_priced_as_replicated(run_cli, tmp_path):
    src = tmp_path / "cc.mlir"
    src.write_text(CUSTOM_CALL)
    plan_path = tmp_path / "plan.json"
    code, _, err = run_cli(src, "--mesh", "1x2", "--plan-json", plan_path, "--quiet")
    assert code == 0, err
    plan = json.loads(plan_path.read_text())
    split = any(any(d) for a in plan["arguments"] for d in a["sharding"])
    # Either nothing feeding the op is split, or the gather in front of it is priced
    # (shardy-propagate's guard-opaque-ops puts a replicated constraint on its operands).
    assert not split or any(c["kind"] == "all_gather" for c in plan["collectives"])


def test_guard_makes_the_gather_in_front_of_an_opaque_op_explicit(run_cli, tmp_path):
    src = tmp_path / "cc.mlir"
    src.write_text(CUSTOM_CALL)
    code, out, err = run_cli(src, "--pass-pipeline",
                             "builtin.module(add-mesh{shape=1x2}, apply-shardings{shardings=1:-/model}, "
                             "shardy-propagate, collect-collectives)")
    assert code == 0, err
    lines = out.splitlines()
    cc = next(i for i, ln in enumerate(lines) if "custom_call @my_unknown_target" in ln)
    assert "sdy.all_gather" in lines[cc - 1]  # gathered right before the opaque op


def test_internal_error_is_one_line_with_a_repro_file(run_cli, monkeypatch):
    import shard_opt.driver

    def boom(*a, **k):
        raise RuntimeError("first line\nsecond line")

    monkeypatch.setattr(shard_opt.driver, "optimize", boom)
    monkeypatch.setenv("SHARD_OPT_JOBS", "1")
    code, _, err = run_cli(MLP, "--mesh", "1x2")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("shard-opt: internal error: RuntimeError: first line second line")
    path = err.split("details and repro: ")[1].rstrip(")\n")
    try:
        text = open(path).read()
        assert "Traceback" in text and "--mesh 1x2" in text
    finally:
        os.unlink(path)


def test_pass_error_keeps_its_repro_path(run_cli, monkeypatch):
    import shard_opt.driver
    from shard_opt.errors import PassError

    def fail(*a, **k):
        raise PassError("shardy-propagate failed: x (repro: /tmp/r.mlir; run ...)", repro_path="/tmp/r.mlir")

    monkeypatch.setattr(shard_opt.driver, "optimize", fail)
    code, _, err = run_cli(MLP, "--mesh", "1x2")
    assert code == 2 and err.count("\n") == 1 and "repro: /tmp/r.mlir" in err


def test_outputs_are_all_or_nothing(run_cli, tmp_path, monkeypatch):
    """If one of several outputs cannot be written at the end, none is left behind."""
    import tempfile

    real = tempfile.mkstemp
    calls = []

    out = tmp_path / "out"
    out.mkdir()

    def flaky(*a, **k):
        if k.get("dir") == str(out):
            calls.append(1)
            if len(calls) == 2:  # the second output
                raise OSError(28, "No space left on device")
        return real(*a, **k)

    monkeypatch.setattr("shard_opt.cli.tempfile.mkstemp", flaky)
    code, _, err = run_cli(MLP, "--mesh", "1x2", "--quiet", "-o", out / "o.mlir", "--plan-json", out / "p.json")
    assert code == 1 and err.count("\n") == 1 and "No space left on device" in err
    assert os.listdir(out) == []
