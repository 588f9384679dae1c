"""tt-xla's composites in the module handed to tt-mlir (passes/wrap_composites.py)."""

import json
import os
import re

import pytest

from shard_opt import costmodel
from shard_opt.ttmlir import check as ttc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = os.path.join(ROOT, "tests", "fixtures", "scripts", "norm_gelu_block.py")
USABLE, WHY = ttc.status()


def _composites(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(
        r'stablehlo\.composite "([\w.]+)" [^{]*\{(?:composite_attributes = (\{[^}]*\}), )?decomposition', text)}


def test_the_pass_wraps_rms_norm_gelu_and_layer_norm_as_tt_xla_names_them(run_cli):
    code, out, err = run_cli(BLOCK, "--pass-pipeline", "wrap-composites{rms-norm=true}")
    assert code == 0, err
    got = _composites(out)
    assert set(got) == {"tenstorrent.rms_norm", "tenstorrent.gelu_tanh", "tenstorrent.layer_norm"}
    assert got["tenstorrent.rms_norm"] == "{epsilon = 9.99999997E-7 : f32, normalized_shape = dense<256> : tensor<1xi64>}"
    assert got["tenstorrent.layer_norm"] == "{epsilon = 9.99999974E-6 : f32, normalized_shape = dense<512> : tensor<1xi64>}"
    assert got["tenstorrent.gelu_tanh"] == '{approximate = "tanh"}'
    # the decomposition keeps the ops: the norm's rsqrt and the GELU's tanh are in the functions
    assert re.search(r"func\.func private @tenstorrent\.rms_norm\.impl\(.*?\n(.*\n)*?.*stablehlo\.rsqrt", out)
    assert re.search(r"func\.func private @tenstorrent\.gelu_tanh\.impl\(.*?\n(.*\n)*?.*stablehlo\.tanh", out)
    main = out.split("func.func private")[0]
    assert "stablehlo.rsqrt" not in main and "stablehlo.tanh" not in main


@pytest.mark.skipif(not USABLE, reason=f"tt-mlir check unavailable: {WHY}")
def test_the_o_module_carries_the_composites_and_tt_mlir_runs_the_fused_ops(run_cli, tmp_path):
    o = tmp_path / "out.mlir"
    code, _, err = run_cli(BLOCK, "--mesh", "1x8", "--no-check", "-o", o)
    assert code == 0, err
    text = o.read_text()
    # RMSNorm stays flat (tt-mlir fuses it itself; its composite fails on some sharded plans)
    assert set(_composites(text)) == {"tenstorrent.gelu_tanh", "tenstorrent.layer_norm"}
    system = costmodel.get_system(costmodel.default_system_for_mesh((1, 8)))
    (res,) = ttc.compile_all([ttc.Job("block", text, 8)], system, (1, 8))
    assert res.compiled, res.error
    ttnn = set(re.findall(r'"ttnn\.([a-z_]+)"', res.irs["ttnn"]))
    assert {"rms_norm", "layer_norm", "gelu"} <= ttnn
    assert "tanh" not in ttnn and "rsqrt" not in ttnn


def test_evaluate_of_the_o_module_flattens_the_composites_and_prices_the_plan(run_cli, tmp_path):
    """The -o module carries composites; read back, they are flattened (as tt-mlir does before
    propagating), so --evaluate of it prices the plan exactly, collectives and all."""
    o, p, q = tmp_path / "o.mlir", tmp_path / "p.json", tmp_path / "q.json"
    code, _, err = run_cli(BLOCK, "--mesh", "2x4", "--no-check", "-o", o, "--plan-json", p)
    assert code == 0, err
    assert "stablehlo.composite" in o.read_text()
    code, _, err = run_cli(o, "--evaluate", "--no-check", "-o", tmp_path / "e.mlir", "--plan-json", q)
    assert code == 0, err
    plan, again = json.loads(p.read_text()), json.loads(q.read_text())
    assert again["cost"]["total_us"] == plan["cost"]["total_us"]
    assert [(c["kind"], c["axes"], c["shape"]) for c in again["collectives"]] == \
        [(c["kind"], c["axes"], c["shape"]) for c in plan["collectives"]]
