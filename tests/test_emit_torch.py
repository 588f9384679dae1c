"""--emit-torch: the user's load script with the plan's mark_sharding calls written in."""

import copy
import json
import os
import subprocess
import sys
import textwrap

import libcst as cst
import pytest

from shard_opt.emit.torch_script import emit_torch
from shard_opt.errors import UserError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "ttir")

LLAMA_SCRIPT = '''\
"""Load a 2-layer Llama-3-8B-shaped model (random weights) for shard-opt."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

BATCH, SEQ = 2, 128  # prefill shape


def load_model():
    # Same shapes as Llama-3-8B, two decoder layers.
    config = LlamaConfig(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=2,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    return model.eval()


def load_inputs():
    input_ids = torch.randint(0, 128256, (BATCH, SEQ))
    return (input_ids,)


if __name__ == "__main__":
    m = load_model()
    print(m(*load_inputs()).logits.shape)
'''

# A model with Llama's parameter names, built from torch.nn only (fast to construct).
TINY_SCRIPT = '''\
import torch
from torch import nn


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(16, 16, bias=False)
        self.k_proj = nn.Linear(16, 8, bias=False)
        self.v_proj = nn.Linear(16, 8, bias=False)
        self.o_proj = nn.Linear(16, 16, bias=False)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(16, 32, bias=False)
        self.up_proj = nn.Linear(16, 32, bias=False)
        self.down_proj = nn.Linear(32, 16, bias=False)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attn()
        self.mlp = MLP()
        self.input_layernorm = nn.LayerNorm(16, bias=False)


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(64, 16)
        self.layers = nn.ModuleList([Layer(), Layer()])


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()
        self.lm_head = nn.Linear(16, 64, bias=False)


def load_model():
    return LM()


def load_inputs():
    return (torch.zeros(2, 8, dtype=torch.long),)
'''

# Stand-ins for torch_xla: record every mark_sharding call.
STUBS = {
    "torch_xla/__init__.py": "options = {}\n\ndef device():\n    return 'cpu'\n\n"
                             "def set_custom_compile_options(o):\n    options.update(o)\n",
    "torch_xla/runtime.py": "calls = []\n\ndef set_device_type(t):\n    calls.append(('set_device_type', t))\n\n"
                            "def use_spmd():\n    calls.append(('use_spmd',))\n",
    "torch_xla/distributed/__init__.py": "",
    "torch_xla/distributed/spmd.py": textwrap.dedent("""\
        marked = {}

        class Mesh:
            def __init__(self, ids, shape, axis_names):
                self.ids, self.mesh_shape, self.axis_names = list(ids), tuple(shape), tuple(axis_names)

        def mark_sharding(t, mesh, spec):
            marked[id(t)] = (tuple(spec), mesh.mesh_shape, mesh.axis_names)
        """),
}


def run_script(script, paths=(), args=()) -> subprocess.CompletedProcess:
    """``python SCRIPT ARGS...`` with ``paths`` first on its import path (PYTHONPATH), run in this
    process: the script executed as ``__main__`` by runpy, what it prints and the traceback
    Python would print for an uncaught exception captured, exit status 1 for one (SystemExit's
    own code). Nothing stays behind: sys.path, sys.argv, os.environ and the modules imported
    from ``paths`` or named torch_xla / tt_torch (the stand-ins, or a failed import of the real
    ones) are restored, so the next script starts as a fresh process would, with torch and the
    libraries already imported (a child would import them again only to run the same lines)."""
    import contextlib
    import io
    import runpy
    import traceback

    script = str(script)
    roots = [os.path.realpath(str(p)) for p in paths] + [os.path.realpath(os.path.dirname(script))]

    def own(name, module):
        if name.split(".")[0] in ("torch_xla", "tt_torch"):
            return True
        f = getattr(module, "__file__", None)
        return bool(f) and any(os.path.realpath(f).startswith(r + os.sep) for r in roots)

    before = set(sys.modules)
    stale = {n: m for n, m in sys.modules.items() if own(n, m)}  # none expected: taken out, put back after
    for n in stale:
        del sys.modules[n]
    out, err, code = io.StringIO(), io.StringIO(), 0
    saved_path, saved_argv, saved_env = list(sys.path), list(sys.argv), dict(os.environ)
    try:
        sys.path[:0] = [str(p) for p in paths] + [os.path.dirname(script)]
        sys.argv = [script, *map(str, args)]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                err.write(traceback.format_exc())
                code = 1
    finally:
        sys.path[:], sys.argv = saved_path, saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        for n in [n for n in sys.modules if n not in before and own(n, sys.modules[n])]:
            del sys.modules[n]
        sys.modules.update(stale)
    return subprocess.CompletedProcess([sys.executable, script, *map(str, args)], code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def plan():
    with open(os.path.join(FIXTURES, "llama_2layer_plan.json")) as f:
        return json.load(f)


def test_emitted_script_parses_and_keeps_the_users_code(plan):
    out = emit_torch(LLAMA_SCRIPT, plan)
    compile(out, "emitted.py", "exec")
    assert "# Same shapes as Llama-3-8B, two decoder layers." in out
    assert "BATCH, SEQ = 2, 128  # prefill shape" in out
    assert 'os.environ["CONVERT_SHLO_TO_SHARDY"] = "1"' in out
    assert "xr.use_spmd()" in out
    assert 'mesh = Mesh(np.arange(8), (2, 4), ("batch", "model"))' in out
    assert "xs.mark_sharding(tensor, mesh, spec)" in out
    assert "return shard_opt_model(model.eval())" in out
    assert "return shard_opt_inputs((input_ids,))" in out
    for imp in ("import torch_xla.runtime as xr", "import torch_xla.distributed.spmd as xs",
                "from torch_xla.distributed.spmd import Mesh", "import numpy as np", "import os"):
        assert imp in out


def test_spec_table_is_compact_and_maps_plan_dims(plan):
    out = emit_torch(LLAMA_SCRIPT, plan)
    table = out[out.index("SHARD_OPT_PARAM_SPECS = {"): out.index("}", out.index("SHARD_OPT_PARAM_SPECS = {")) + 1]
    specs = eval(table.split("=", 1)[1])  # noqa: S307 - our own generated literal
    # 2 layers x 7 projections + lm_head, written as 8 role entries (not 15 lines).
    assert len(specs) == 8
    assert specs["model.layers.*.mlp.up_proj.weight"] == ("model", None)
    assert specs["model.layers.*.mlp.down_proj.weight"] == (None, "model")
    assert specs["lm_head.weight"] == ("model", None)
    inputs = out[out.index("SHARD_OPT_INPUT_SPECS = ["):]
    assert eval(inputs[inputs.index("["): inputs.index("\n]") + 2]) == [("batch", None)]  # noqa: S307


def test_multi_axis_dims_and_rank_one_specs_keep_their_tuples(plan):
    p = copy.deepcopy(plan)
    for a in p["arguments"]:
        if a["name"].endswith("q_proj.weight"):
            a["sharding"] = [["batch", "model"], []]
        if a["name"].endswith("input_layernorm.weight"):
            a["sharding"] = [["model"]]
    out = emit_torch(LLAMA_SCRIPT, p)
    table = out[out.index("SHARD_OPT_PARAM_SPECS = {"): out.index("}", out.index("SHARD_OPT_PARAM_SPECS = {")) + 1]
    specs = eval(table.split("=", 1)[1])  # noqa: S307
    assert specs["model.layers.*.self_attn.q_proj.weight"] == (("batch", "model"), None)
    assert specs["model.layers.*.input_layernorm.weight"] == ("model",)


def test_idempotent_on_its_own_output(plan):
    once = emit_torch(LLAMA_SCRIPT, plan)
    assert emit_torch(once, plan) == once


def test_rerun_with_a_new_plan_replaces_the_block(plan):
    other = copy.deepcopy(plan)
    other["mesh"] = {"shape": [1, 8], "axes": ["batch", "model"]}
    for a in other["arguments"]:
        if a["name"] == "input_ids":
            a["sharding"] = [[], []]
    direct = emit_torch(LLAMA_SCRIPT, other)
    assert emit_torch(emit_torch(LLAMA_SCRIPT, plan), other) == direct
    assert direct.count("# >>> shard-opt") == 1 and "np.arange(8), (1, 8)" in direct


def test_layers_that_disagree_get_one_entry_per_tensor(plan):
    p = copy.deepcopy(plan)
    for a in p["arguments"]:
        if a["name"] == "model.layers.1.mlp.up_proj.weight":
            a["sharding"] = [[], ["model"]]
    out = emit_torch(LLAMA_SCRIPT, p)
    assert '"model.layers.0.mlp.up_proj.weight": ("model", None)' in out
    assert '"model.layers.1.mlp.up_proj.weight": (None, "model")' in out
    assert '"model.layers.*.mlp.up_proj.weight"' not in out


def test_fails_only_at_the_torch_xla_import(plan, tmp_path):
    script = tmp_path / "emitted.py"
    script.write_text(emit_torch(TINY_SCRIPT, plan))
    r = run_script(script)
    assert r.returncode != 0
    assert "ModuleNotFoundError: No module named 'torch_xla'" in r.stderr
    lines = script.read_text().splitlines()
    first_xla = next(i for i, ln in enumerate(lines, 1) if "torch_xla" in ln)
    assert f'line {first_xla}' in r.stderr  # nothing before the first torch_xla import failed


def test_runs_with_torch_xla_and_marks_every_sharded_tensor(plan, tmp_path):
    for rel, text in STUBS.items():
        path = tmp_path / "stubs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    script = tmp_path / "emitted.py"
    script.write_text(emit_torch(TINY_SCRIPT, plan) + textwrap.dedent("""
        import json as _json
        import torch_xla.distributed.spmd as _spmd
        import torch_xla as _tx
        import torch_xla.runtime as _rt
        _m = load_model()
        _x = load_inputs()
        _out = {n: _spmd.marked.get(id(t)) for n, t in _m.named_parameters()}
        _out["input_ids"] = _spmd.marked.get(id(_x[0]))
        print(_json.dumps({"marked": _out, "calls": _rt.calls, "env": os.environ.get("CONVERT_SHLO_TO_SHARDY"),
                           "options": _tx.options}))
        """))
    r = run_script(script, [tmp_path / "stubs"])
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    marked = res["marked"]
    assert res["env"] == "1" and ["use_spmd"] in res["calls"]
    # priced with traced dispatch (the cost model's default): the script asks tt-xla to trace
    assert res["options"] == {"enable_trace": "true"}
    mesh = [[2, 4], ["batch", "model"]]
    for layer in (0, 1):
        p = f"model.layers.{layer}."
        assert marked[p + "self_attn.q_proj.weight"] == [["model", None], *mesh]
        assert marked[p + "self_attn.o_proj.weight"] == [[None, "model"], *mesh]
        assert marked[p + "mlp.down_proj.weight"] == [[None, "model"], *mesh]
        assert marked[p + "input_layernorm.weight"] is None  # replicated: left alone
    assert marked["lm_head.weight"] == [["model", None], *mesh]
    assert marked["model.embed_tokens.weight"] is None
    assert marked["input_ids"] == [["batch", None], *mesh]


def test_model_loader_methods_are_wrapped_but_nested_functions_are_not(plan):
    src = textwrap.dedent('''\
        import torch


        class ModelLoader:
            """tt-forge-models style loader."""

            def load_model(self, dtype_override=None):
                def build():
                    return torch.nn.Linear(4, 4)  # a nested return stays as it is

                return build()

            def load_inputs(self, dtype_override=None, batch_size=1):
                x = torch.zeros(batch_size, 4)
                return x, x
        ''')
    out = emit_torch(src, plan)
    compile(out, "loader.py", "exec")
    assert "return torch.nn.Linear(4, 4)  # a nested return stays as it is" in out
    assert "return shard_opt_model(build())" in out
    assert "return shard_opt_inputs((x, x))" in out  # the tuple keeps its parentheses
    assert emit_torch(out, plan) == out


def test_a_user_mesh_variable_is_not_shadowed(plan):
    src = "mesh = 'the user owns this name'\n\n\ndef load_model():\n    return object()\n"
    out = emit_torch(src, plan)
    assert "shard_opt_mesh = Mesh(" in out and "xs.mark_sharding(tensor, shard_opt_mesh, spec)" in out
    assert "mesh = 'the user owns this name'" in out


def test_existing_mark_sharding_calls_are_noted(plan):
    src = ("import torch_xla.distributed.spmd as xs\n\n\ndef load_model():\n    m = make()\n"
           "    xs.mark_sharding(m.w, MESH, ('model', None))\n    return m\n")
    out = emit_torch(src, plan)
    assert "already calls mark_sharding on: m.w" in out
    assert out.count("import torch_xla.distributed.spmd as xs") == 1


def test_intermediate_constraints_use_tt_torch(plan):
    p = copy.deepcopy(plan)
    p["constraints"] = [{"module": "model.layers.*.self_attn", "sharding": [["batch"], [], []],
                         "why": "keeps the attention output split on batch"}]
    out = emit_torch(LLAMA_SCRIPT, p)
    compile(out, "c.py", "exec")
    assert "from tt_torch.sharding import sharding_constraint_tensor" in out
    assert '"model.layers.*.self_attn": ("batch", None, None),' in out
    assert "module.register_forward_hook(shard_opt_constraint_hook(spec))" in out
    assert emit_torch(out, p) == out
    assert "sharding_constraint_tensor" not in emit_torch(LLAMA_SCRIPT, plan)


def test_guards_are_hooked_with_tt_torch_and_loose_ones_said_in_words(plan):
    p = copy.deepcopy(plan)
    p["guards"] = [
        {"rule": "fused-split", "module": "model.layers.*.self_attn.q_proj", "sharding": [[], [], []],
         "why": "torch.split / chunk / slicing after it (3 slices per call) cut dim 2 of its output "
                "[2, 128, 4096]: kept whole there (priced: all_gather of [2, 128, 4096] on model)"},
        {"rule": "fused-split", "module": None, "site": "stablehlo.slice of tensor<2x128x64> on dim 2",
         "sharding": [["batch"], [], []], "sites": 2,
         "why": "not tied to a module: it is a model input (input_ids). The plan gathers there: add ..."}]
    out = emit_torch(LLAMA_SCRIPT, p)
    compile(out, "g.py", "exec")
    assert "from tt_torch.sharding import sharding_constraint_hook" in out
    table = out[out.index("SHARD_OPT_GUARDS = {"):]
    assert table.index("    # fused-split: torch.split / chunk") < table.index(
        '    "model.layers.*.self_attn.q_proj": (None, None, None),')
    assert "module.register_forward_hook(sharding_constraint_hook(module, mesh, spec))" in out
    assert "def shard_opt_activation_shard_spec(model):" in out
    assert ('#   fused-split: stablehlo.slice of tensor<2x128x64> on dim 2 (2 sites): SPEC = ("batch", None, None)'
            in out)
    assert "#     not tied to a module: it is a model input (input_ids)." in out
    assert emit_torch(out, p) == out
    assert "sharding_constraint_hook" not in emit_torch(LLAMA_SCRIPT, plan)


def test_script_without_load_model_is_a_user_error(plan):
    with pytest.raises(UserError, match="load_model"):
        emit_torch("def main():\n    pass\n", plan)


def test_syntax_error_is_a_user_error(plan):
    with pytest.raises(UserError, match="cannot parse"):
        emit_torch("def load_model(:\n", plan)


def test_block_statements_are_plain_libcst(plan):
    # The generated module round-trips through libcst unchanged.
    out = emit_torch(LLAMA_SCRIPT, plan)
    assert cst.parse_module(out).code == out


def test_reshape_constraints_are_spelled_out_for_the_user(plan):
    # a reshape site has no module output to hook: the script says where and what, by hand
    p = copy.deepcopy(plan)
    p["constraints"] = [{"site": "1x128x256xbf16->1x128x4x64xbf16", "op": "stablehlo.reshape",
                         "sharding": [[], [], ["model"], []]}]
    out = emit_torch(LLAMA_SCRIPT, p)
    compile(out, "c.py", "exec")
    assert "#   reshape 1x128x256xbf16->1x128x4x64xbf16: SPEC = (None, None, \"model\", None)" in out
    assert "register_forward_hook" not in out
    assert emit_torch(out, p) == out


# The loader the scripts below inherit from or import (tt-forge-models loaders subclass
# one another: examples/llama_spec_load.py's ModelLoader adds a spec to llama_load.py's).
BASE_LOADER = TINY_SCRIPT + '''

class BaseLoader:
    def load_model(self, dtype_override=None):
        return load_model()

    def load_inputs(self, dtype_override=None):
        return load_inputs()
'''

INHERITING = {
    # the script's ModelLoader inherits both methods
    "inherited": "from base import BaseLoader\n\n\nclass ModelLoader(BaseLoader):\n"
                 "    def get_mesh_config(self, num_devices):\n        return (2, 4)\n",
    # ... one of them (load_model defined here, load_inputs inherited)
    "half": "from base import BaseLoader, load_model as _build\n\n\nclass ModelLoader(BaseLoader):\n"
            "    def load_model(self, dtype_override=None):\n        return _build()\n",
    # the script imports its ModelLoader
    "imported-class": "from base import BaseLoader as ModelLoader\n",
    # the script imports its functions
    "imported-functions": "from base import load_inputs, load_model\n",
}


@pytest.mark.parametrize("form", list(INHERITING))
def test_inherited_and_imported_loaders_are_wrapped(plan, tmp_path, form):
    from shard_opt.emit.torch_script import emit_target

    for rel, text in STUBS.items():
        path = tmp_path / "stubs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "base.py").write_text(BASE_LOADER)
    src = INHERITING[form]
    loader = "functions" if form == "imported-functions" else "ModelLoader"
    assert emit_target(src, loader=loader)["load_model"] in ("def", "inherited", "subclass", "rebind")
    out = emit_torch(src, plan, loader=loader)
    compile(out, "s.py", "exec")
    assert emit_torch(out, plan, loader=loader) == out  # idempotent
    assert emit_torch(out, plan) == out  # and read from the text alone
    call = ("_m = load_model(); _x = load_inputs()" if loader == "functions"
            else "_l = ModelLoader(); _m = _l.load_model(); _x = _l.load_inputs()")
    script = tmp_path / "emitted.py"
    script.write_text(out + textwrap.dedent(f"""
        import json as _json
        import torch_xla.distributed.spmd as _spmd
        {call}
        print(_json.dumps({{"q": _spmd.marked.get(id(_m.model.layers[0].self_attn.q_proj.weight)),
                           "ids": _spmd.marked.get(id(_x[0]))}}))
        """))
    r = run_script(script, [tmp_path / "stubs", tmp_path])
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["q"] == [["model", None], [2, 4], ["batch", "model"]]
    assert res["ids"] == [["batch", None], [2, 4], ["batch", "model"]]


def test_a_loader_method_that_is_assigned_is_a_user_error(plan):
    from shard_opt.emit.torch_script import emit_target

    src = "from base import BaseLoader, build\n\n\nclass ModelLoader(BaseLoader):\n    load_model = build\n"
    with pytest.raises(UserError, match="ModelLoader.load_model is assigned"):
        emit_target(src)


# A load script whose model is built on the meta device, in three ways: a with-block and a
# device= keyword in its functions (the emitted script builds those on the CPU), a meta
# skeleton the script fills itself (left as it is), and module-level code (left as it is:
# it runs before the block).
META_SCRIPT = '''\
import torch

SKELETON = torch.empty(2, device="meta")


def _norm():
    return torch.nn.LayerNorm(16, device="meta")


def _filled():
    with torch.device("meta"):
        m = torch.nn.Linear(16, 16)
    m.load_state_dict({"weight": torch.ones(16, 16), "bias": torch.zeros(16)}, assign=True)
    return m


def load_model():
    with torch.device("meta"):
        model = LM()
    model.norm = _norm()
    model.filled = _filled()
    return model


def load_inputs():
    return (torch.zeros(2, 8, dtype=torch.long, device="meta"),)
'''


def test_a_meta_model_is_built_with_weights_in_the_emitted_script(plan):
    src = TINY_SCRIPT.replace("def load_model():\n    return LM()\n\n\ndef load_inputs():\n"
                              "    return (torch.zeros(2, 8, dtype=torch.long),)\n", META_SCRIPT)
    out = emit_torch(src, plan)
    assert 'SHARD_OPT_WEIGHTS_DEVICE = "cpu"' in out
    assert "    with torch.device(SHARD_OPT_WEIGHTS_DEVICE):\n        model = LM()" in out
    assert 'nn.LayerNorm(16, device=SHARD_OPT_WEIGHTS_DEVICE)' in out
    assert 'SKELETON = torch.empty(2, device="meta")' in out  # module level
    assert '    with torch.device("meta"):\n        m = torch.nn.Linear(16, 16)' in out  # fills it itself
    assert 'torch.zeros(2, 8, dtype=torch.long, device="meta")' in out  # inputs: no values to invent
    assert emit_torch(out, plan) == out  # idempotent: the block keeps the name it refers to
    assert "SHARD_OPT_WEIGHTS_DEVICE" not in emit_torch(TINY_SCRIPT, plan)  # only when used


def test_a_model_left_on_meta_says_what_to_change(plan, tmp_path):
    for rel, text in STUBS.items():
        path = tmp_path / "stubs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    # to("meta") is not rewritten: shard_opt_model says what is wrong before moving it
    src = TINY_SCRIPT.replace("    return LM()\n", "    return LM().to('meta')\n")
    script = tmp_path / "emitted.py"
    script.write_text(emit_torch(src, plan) + "\nload_model()\n")
    r = run_script(script, [tmp_path / "stubs"])
    assert r.returncode != 0
    assert ("RuntimeError: load_model() returned a model without weights (model.embed_tokens.weight and 17 more "
            "on the meta device): build it with its weights") in r.stderr
    assert "Cannot copy out of meta tensor" not in r.stderr
    src = TINY_SCRIPT.replace("    return (torch.zeros(2, 8, dtype=torch.long),)",
                              "    return (torch.zeros(2, 8, dtype=torch.long, device='meta'),)")
    script.write_text(emit_torch(src, plan) + "\nload_inputs()\n")
    r = run_script(script, [tmp_path / "stubs"])
    assert r.returncode != 0
    assert "RuntimeError: load_inputs() returned a meta tensor [2, 8]: return inputs with values" in r.stderr
