"""emit_jax: the plan as jax.sharding code."""

import json
import os
import subprocess
import sys

from shard_opt.emit.jax_code import emit_jax
from conftest import CHILD_CEILING_S

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "ttir")


def _plan():
    with open(os.path.join(FIXTURES, "llama_2layer_plan.json")) as f:
        return json.load(f)


def test_specs_per_argument_in_source():
    code = emit_jax(_plan())
    compile(code, "plan.py", "exec")
    assert 'mesh = jax.make_mesh((2, 4), ("batch", "model"), axis_types=(AxisType.Auto,) * 2)' in code
    assert '"model.layers.0.mlp.up_proj.weight": P("model", None),' in code
    assert '"model.layers.1.mlp.down_proj.weight": P(None, "model"),' in code
    assert '"input_ids": P("batch", None),' in code
    assert '"model.norm.weight": P(None),' in code


def test_multi_axis_dim():
    plan = _plan()
    plan["arguments"][1]["sharding"] = [["batch", "model"], []]
    assert 'P(("batch", "model"), None)' in emit_jax(plan)


def test_code_builds_named_shardings_on_eight_cpu_devices(tmp_path):
    path = tmp_path / "plan.py"
    path.write_text(emit_jax(_plan()) + (
        "\nprint(len(IN_SHARDINGS), IN_SHARDINGS[ARG_NAMES.index('lm_head.weight')].spec, "
        "OUT_SHARDINGS)\n"))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    # run as __main__ after importing shard_opt, which keeps jax off the Tenstorrent plugin
    # (its unpack races other processes and can hang XLA: shard_opt.ir)
    run = f"import shard_opt, runpy; runpy.run_path({str(path)!r}, run_name='__main__')"
    r = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, env=env, timeout=CHILD_CEILING_S)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["22", "P('model',", "None)", "None"]  # the plan records no result shardings
