"""Issue 22 case 1: every guard the plan was priced with is in the emitted tt-xla script.

A torch.split / chunk of a fused projection's output split on the fused dim miscompiles
unless the dim is gathered first; shard-opt prices that gather (rule fused-split, the
guard ``shardy-propagate`` inserts) and must write it into the user's script, or the
user runs the unguarded split. Three cases, each a small model at hidden 128:

- ``phi3_fused.py``: Phi-3's fused ``qkv_proj`` (sliced into q, k, v) and ``gate_up_proj``
  (chunked in two);
- ``adaln_block.py``: FLUX.1's adaLN modulation linears (``norm1.linear`` chunked in 6,
  ``norm.linear`` in 3);
- ``deltanet_conv.py``: Qwen3.5's linear-attention depthwise ``conv1d`` (its output cut
  back to the sequence and torch.split into Q, K, V).

Each is priced with a column split of the fused weight (``--evaluate --spec``) on 1x8 and
2x4 through the CLI (``--emit-torch``, ``--plan-json``); the plan lists the guards, the
script hooks them, and ``shard_opt.emit.rebuild`` (the module tt-xla builds from the
script, propagated without shard-opt's own guards) has the priced collectives; without
the script's guards table it does not.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap

import pytest

from shard_opt import frontends
from shard_opt.emit import rebuild

HERE = os.path.dirname(__file__)
SCRIPTS = os.path.join(HERE, "fixtures", "scripts")
SPECS = os.path.join(HERE, "fixtures", "specs")
MESHES = ("1x8", "2x4")

# case -> the modules (roles) whose outputs the guards constrain, with their output rank
CASES = {
    "phi3_fused": {"layers.*.self_attn.qkv_proj": 3, "layers.*.mlp.gate_up_proj": 3},
    "adaln_block": {"transformer_blocks.*.norm1.linear": 2, "single_transformer_blocks.*.norm.linear": 2},
    "deltanet_conv": {"layers.*.linear_attn.conv1d": 3},
}
# Without the guards the collectives can land elsewhere than priced: deltanet's conv
# output is gathered after the conv's slice instead of before it. phi3's fused q|k|v and
# gate|up slices are gathered unguarded too: tt-mlir replicates a slice that cuts a split
# dim (its ReplicateNonSplittableValues, mirrored by shardy-propagate), so the harness
# finds the same collectives either way. The adaLN chunks feed broadcasts against whole
# activations, so Shardy gathers them unguarded as well.
GUARD_CHANGES_COLLECTIVES = {"phi3_fused": False, "adaln_block": False, "deltanet_conv": True}


def _run(*args) -> None:
    from shard_opt.cli import main

    code = main([str(a) for a in args])
    assert code == 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(case, mesh) -> (plan, emitted script text), one CLI run each."""
    out = {}
    for case in CASES:
        for mesh in MESHES:
            d = tmp_path_factory.mktemp(f"{case}-{mesh}")
            _run(os.path.join(SCRIPTS, case + ".py"), "--mesh", mesh, "--evaluate",
                 "--spec", os.path.join(SPECS, case + ".json"), "--plan-json", d / "P.json",
                 "--emit-torch", d / "S.py", "-o", d / "A.mlir", "--quiet")
            out[case, mesh] = (json.loads((d / "P.json").read_text()), (d / "S.py").read_text())
    return out


@pytest.fixture(scope="module")
def models():
    """The lowered model of each case (the harness maps the script's tables onto it), loaded
    as the CLI runs above load it (``--spec`` included: the spec only goes into ``meta``, which
    the harness does not read), so the test run's lowering of each script is the runs' own."""
    return {case: frontends.load(os.path.join(SCRIPTS, case + ".py"), spec=os.path.join(SPECS, case + ".json"))
            for case in CASES}


def _guards_table(script: str) -> dict:
    return rebuild.read_tables(script).guards


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("case", list(CASES))
def test_the_plan_and_the_script_carry_every_guard(runs, case, mesh):
    plan, script = runs[case, mesh]
    guards = {g["module"]: g for g in plan["guards"]}
    assert set(guards) == set(CASES[case])  # every guard tied to its module, none left loose
    for module, rank in CASES[case].items():
        g = guards[module]
        assert g["rule"] == "fused-split" and len(g["sharding"]) == rank
        assert "all_gather" in g["why"] and "model" in g["why"]  # the gather it was priced with
    table = _guards_table(script)
    assert set(table) == set(CASES[case])
    for module, g in guards.items():
        assert table[module] == tuple(None if not axes else axes[0] if len(axes) == 1 else tuple(axes)
                                      for axes in g["sharding"])
    # tt-xla's own form: the hook, the {module: spec} function, the rule id and why above each entry
    assert "from tt_torch.sharding import sharding_constraint_hook" in script
    assert "def shard_opt_activation_shard_spec(model):" in script
    assert "module.register_forward_hook(sharding_constraint_hook(module, mesh, spec))" in script
    for module in CASES[case]:
        entry = script.index(f'    "{module}": ')
        assert "# fused-split: " in script[script.rindex("SHARD_OPT_GUARDS = {", 0, entry):entry]
    assert not any("could not be tied" in n for n in plan.get("notes", []))


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("case", list(CASES))
def test_the_script_compiles_to_the_priced_collectives(runs, models, case, mesh):
    plan, script = runs[case, mesh]
    assert any(c["kind"] == "all_gather" for c in plan["collectives"])
    result = rebuild.check(script, models[case], plan)
    assert result["equal"], result
    assert sorted(set(result["applied"]["guards"])) == sorted(
        {m.replace("*", str(i)) for m in CASES[case] for i in (0, 1)})
    assert result["not_applied"] == []


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("case", list(CASES))
def test_the_harness_catches_a_missing_guard(runs, models, case, mesh):
    plan, script = runs[case, mesh]
    start = script.index("SHARD_OPT_GUARDS = {")
    stripped = script[:start] + script[script.index("\n}\n", start) + 3:]  # the table removed
    assert "SHARD_OPT_GUARDS = {" not in stripped and _guards_table(stripped) == {}
    result = rebuild.check(stripped, models[case], plan)
    assert result["applied"]["guards"] == []
    if GUARD_CHANGES_COLLECTIVES[case]:
        assert not result["equal"]
        assert any(c["kind"] == "all_gather" for c in result["missing"])
    else:
        assert result["equal"]


def test_the_search_path_writes_its_guards(run_cli, tmp_path, models):
    # no spec: the plan the search finds (small enough to stay replicated on 1x8); its
    # guards are still written (whole already: the constraint keeps them so) and equal
    script_path = os.path.join(SCRIPTS, "phi3_fused.py")
    code, _, err = run_cli(script_path, "--mesh", "1x8", "--plan-json", tmp_path / "P.json",
                           "--emit-torch", tmp_path / "S.py", "-o", tmp_path / "A.mlir", "--quiet")
    assert code == 0, err
    plan = json.loads((tmp_path / "P.json").read_text())
    script = (tmp_path / "S.py").read_text()
    assert {g["module"] for g in plan["guards"]} == set(CASES["phi3_fused"])
    assert set(_guards_table(script)) == set(CASES["phi3_fused"])
    assert rebuild.check(script, models["phi3_fused"], plan)["equal"]


def test_the_harness_command_line(runs, tmp_path, capsys, monkeypatch):
    plan, script = runs["deltanet_conv", "1x8"]
    (tmp_path / "P.json").write_text(json.dumps(plan))
    (tmp_path / "S.py").write_text(script)
    args = [str(tmp_path / "S.py"), "--model", os.path.join(SCRIPTS, "deltanet_conv.py"), "--plan",
            str(tmp_path / "P.json")]
    # `python -m shard_opt.emit.rebuild ...` as runpy runs it (the module executed as __main__,
    # sys.argv its command line), in this process: a child would start Python, torch and XLA
    # again only to run the same lines
    import runpy
    import warnings

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["python -m shard_opt.emit.rebuild", *args])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "found in sys.modules": imported by this test already
        with pytest.raises(SystemExit) as ok:
            runpy.run_module("shard_opt.emit.rebuild", run_name="__main__", alter_sys=True)
    out = capsys.readouterr().out
    assert ok.value.code == 0, out
    assert "2 guard hooks" in out and "equal:" in out
    # the same command's main() with --no-guards
    from shard_opt.emit.rebuild import main

    code = main([*args, "--no-guards"])
    out = capsys.readouterr().out
    assert code == 1 and "missing: 2 x all_gather on model of [2, 256, 67]" in out, out


LOOSE = '''\
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 128)

    def forward(self, x):
        return self.fc(x[..., :64])  # a slice of a model input: no module output to hook


def load_model():
    return Model()


def load_inputs():
    return (torch.randn(2, 16, 96),)
'''


def test_a_guard_no_module_stands_for_is_said_in_words(run_cli, tmp_path):
    (tmp_path / "loose.py").write_text(LOOSE)
    code, _, err = run_cli(tmp_path / "loose.py", "--mesh", "1x8", "--evaluate", "--plan-json",
                           tmp_path / "P.json", "--emit-torch", tmp_path / "S.py", "-o", tmp_path / "A.mlir", "--quiet")
    assert code == 0, err
    plan = json.loads((tmp_path / "P.json").read_text())
    (g,) = plan["guards"]
    assert g["module"] is None and g["rule"] == "fused-split"
    assert "not tied to a module: it is a model input (x)" in g["why"] and "by hand" in g["why"]
    assert "stablehlo.slice of tensor<2x16x96>" in g["site"]
    assert any("could not be tied to a module output" in n for n in plan["notes"])
    script = (tmp_path / "S.py").read_text()
    assert "SHARD_OPT_GUARDS" not in script and "sharding_constraint_hook" not in script
    assert "#   fused-split: stablehlo.slice of tensor<2x16x96> on dim 2: SPEC = (None, None, None)" in script
    assert "not tied to a module: it is a model input (x)" in script
    assert rebuild.read_tables(script).loose == [("fused-split", "stablehlo.slice of tensor<2x16x96> on dim 2",
                                                  (None, None, None))]


TT_TORCH_STUB = textwrap.dedent("""\
    hooked = []

    def sharding_constraint_hook(module, mesh, partition_spec):
        hooked.append((module, tuple(partition_spec), mesh.mesh_shape))

        def hook(mod, args, output):
            return output

        return hook
    """)


def test_the_emitted_script_hooks_every_layer(runs, tmp_path):
    from test_emit_torch import STUBS, run_script

    _, script = runs["phi3_fused", "2x4"]
    for rel, text in {**STUBS, "tt_torch/__init__.py": "", "tt_torch/sharding.py": TT_TORCH_STUB}.items():
        path = tmp_path / "stubs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    path = tmp_path / "emitted.py"
    path.write_text(script + textwrap.dedent("""
        import json as _json
        import tt_torch.sharding as _tts
        _m = load_model()
        _m = shard_opt_model(_m)  # a second call hooks nothing twice
        _names = {id(m): n for n, m in _m.named_modules()}
        _spec = shard_opt_activation_shard_spec(_m)
        print(_json.dumps({"hooked": [[_names[id(m)], list(s), list(shape)] for m, s, shape in _tts.hooked],
                           "spec": sorted(_names[id(m)] for m in _spec),
                           "flag": all(m._tt_activation_constraint_hooked for m in _spec)}))
        """))
    r = run_script(path, [tmp_path / "stubs"])  # `python emitted.py`, in this process
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    want = sorted(m.replace("*", str(i)) for m in CASES["phi3_fused"] for i in (0, 1))
    assert sorted(h[0] for h in res["hooked"]) == want  # each module once, every layer
    assert all(h[1] == [None, None, None] and h[2] == [2, 4] for h in res["hooked"])
    assert res["spec"] == want and res["flag"]


def test_reshape_groups_and_back_dims_on_a_head_split():
    from shard_opt.module_outputs import reshape_groups

    assert reshape_groups([2, 64, 384], [2, 64, 4, 96]) == [([0], [0]), ([1], [1]), ([2], [2, 3])]
    assert reshape_groups([128, 384], [2, 64, 384]) == [([0], [0, 1]), ([1], [2])]
    assert reshape_groups([2, 1, 8], [2, 8]) == [([0, 1], [0]), ([2], [1])]


@pytest.mark.parametrize("case", ["phi3_fused", "deltanet_conv"])
def test_allowing_the_rule_drops_the_guard_and_tt_mlir_still_gathers_the_cut_dim(run_cli, tmp_path, case):
    # --allow fused-split: no guard in front of the slices. tt-mlir replicates a slice that
    # cuts a split dim itself (ReplicateNonSplittableValues, mirrored in shardy-propagate), so
    # the fused dim is gathered anyway: the plan pays for it and does not break the rule
    code, _, err = run_cli(os.path.join(SCRIPTS, case + ".py"), "--mesh", "1x8", "--evaluate",
                           "--spec", os.path.join(SPECS, case + ".json"), "--allow", "fused-split",
                           "--plan-json", tmp_path / "P.json", "-o", tmp_path / "A.mlir", "--quiet")
    assert code == 0, err
    plan = json.loads((tmp_path / "P.json").read_text())
    rows = {r["rule"]: r for r in plan["safety"]}
    assert rows["fused-split"]["allowed"] and not rows["fused-split"]["plan_breaks"]
    assert plan["guards"] == []
    assert any(c["kind"] == "all_gather" and c["axes"] == ["model"] for c in plan["collectives"])


PAD = """module {
  sdy.mesh @mesh = <["batch"=1, "model"=8]>
  func.func @main(%x: tensor<8x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>})
      -> (tensor<8x72xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}) {
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.pad %x, %z, low = [0, 8], high = [0, 0], interior = [0, 0] : (tensor<8x64xf32>, tensor<f32>) -> tensor<8x72xf32>
    return %0 : tensor<8x72xf32>
  }
}"""


def test_a_pad_of_a_split_dim_still_breaks_the_rule_when_it_is_allowed(run_cli, tmp_path):
    """tt-mlir replicates slices, not pads: a pad left on a split dim is what the rule catches."""
    src = tmp_path / "pad.mlir"
    src.write_text(PAD)
    rows = {}
    for allow in ((), ("--allow", "fused-split")):
        code, _, err = run_cli(src, "--evaluate", *allow, "--no-check", "--plan-json", tmp_path / "P.json",
                               "-o", tmp_path / "A.mlir", "--quiet")
        assert code == 0, err
        rows[bool(allow)] = {r["rule"]: r for r in json.loads((tmp_path / "P.json").read_text())["safety"]}
    assert not rows[False]["fused-split"]["plan_breaks"]  # guarded: gathered before the pad
    assert rows[True]["fused-split"]["plan_breaks"]
