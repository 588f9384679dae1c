"""Issue 23 item 1: the ``--emit-torch`` script of a meta-device load script runs, end to end.

A load script may build its model on the meta device (shard-opt plans from shapes alone),
and so do loaders shard-opt reads without weights. The emitted script is what the user
runs on the hardware, so it must build the model with weights. Two cases, each planned by
the real CLI (``--evaluate``: the spec given is priced, so the plan shards the weights and
has fused-split guards) and its script then run as a program (``python driver.py S.py``, in
this process: ``test_emit_torch.run_script``):

- ``phi3_meta.py``: module-level ``load_model`` / ``load_inputs``, the Phi-3-style model of
  ``phi3_fused.py`` built inside ``with torch.device("meta")``;
- ``forge_llama_meta.py``: a tt-forge-models-style ``ModelLoader`` (``load_model``,
  ``load_inputs`` returning a dict, ``get_mesh_config``, ``load_shard_spec``) building a
  2-layer tiny Hugging Face Llama from its config on the meta device.

The driver calls what the user calls (``load_model()``, ``load_inputs()``, the forward)
and checks: no error; the outputs equal those of the same model built with weights on the
CPU (same seed, no shard-opt code) on the same inputs; every parameter the plan shards got
one ``xs.mark_sharding`` with the plan's spec on the plan's mesh; the inputs went through
``shard_opt_inputs`` (``torch_xla.device()``) and the sharded ones got their spec (both
plans keep these small inputs replicated: ``test_emit_torch`` marks a sharded one); a guard hook
(``tt_torch.sharding.sharding_constraint_hook``) was registered on exactly the modules the
plan's ``guards`` name, with their spec, and ran in the forward.

``torch_xla`` and ``tt_torch`` are not installed here (they need Tenstorrent hardware), so
small stand-ins of the calls the script makes (``STANDINS``) record them on the CPU: test
scaffolding for the absent hardware library, not a mock of any part of shard-opt (the plan,
the script and its helpers are shard-opt's real output). ``mark_sharding`` and the hook
reject what torch_xla / tt-xla reject (a meta tensor, a spec of the wrong rank, a hook on a
module whose output is not a tensor).
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from test_emit_torch import run_script

HERE = os.path.dirname(__file__)
SCRIPTS = os.path.join(HERE, "fixtures", "scripts")
SPECS = os.path.join(HERE, "fixtures", "specs")

STANDINS = {
    "torch_xla/__init__.py": """\
        import torch
        calls = []

        def device():
            calls.append("device")
            return torch.device("cpu")

        def set_custom_compile_options(options):
            calls.append(("set_custom_compile_options", dict(options)))
        """,
    "torch_xla/runtime.py": """\
        from torch_xla import calls

        def set_device_type(t):
            calls.append(("set_device_type", t))

        def use_spmd():
            calls.append(("use_spmd",))
        """,
    "torch_xla/distributed/__init__.py": "",
    "torch_xla/distributed/spmd.py": """\
        marked = []  # (tensor, spec, mesh shape, axis names)

        class Mesh:
            def __init__(self, device_ids, mesh_shape, axis_names):
                self.device_ids, self.mesh_shape, self.axis_names = list(device_ids), tuple(mesh_shape), tuple(axis_names)

        def mark_sharding(t, mesh, spec):
            if t.device.type == "meta":
                raise RuntimeError("mark_sharding on a meta tensor: it has no data to shard")
            if len(spec) != t.dim():
                raise ValueError(f"spec {spec} for a rank-{t.dim()} tensor")
            marked.append((t, tuple(spec), mesh.mesh_shape, mesh.axis_names))
        """,
    "tt_torch/__init__.py": "",
    "tt_torch/sharding.py": """\
        import torch
        hooks = []  # [module, spec, mesh shape, times run]

        def sharding_constraint_hook(module, mesh, partition_spec):
            if not isinstance(module, torch.nn.Module):
                raise TypeError(type(module).__name__)
            record = [module, tuple(partition_spec), mesh.mesh_shape, 0]
            hooks.append(record)

            def hook(mod, args, output):
                if not isinstance(output, torch.Tensor):
                    raise TypeError(f"sharding_constraint_hook expects a Tensor output, got {type(output).__name__}")
                record[3] += 1
                return output  # a sharding constraint does not change the values

            return hook
        """,
}

# The user's call path on the emitted script, then the same model built with weights
# (REFERENCE, plain PyTorch) on the same inputs. Prints one JSON object.
DRIVER = """\
import importlib.util, json, sys
import torch
import torch_xla, torch_xla.distributed.spmd as xs, tt_torch.sharding as tts

spec = importlib.util.spec_from_file_location("emitted", sys.argv[1])
emitted = importlib.util.module_from_spec(spec)
spec.loader.exec_module(emitted)
loader = emitted.ModelLoader() if hasattr(emitted, "ModelLoader") else emitted
model = loader.load_model()
inputs = loader.load_inputs()
args, kwargs = ((), inputs) if isinstance(inputs, dict) else (tuple(inputs), {})
flat = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
with torch.no_grad():
    out = model(*args, **kwargs)
    out = getattr(out, "logits", out)
REFERENCE
with torch.no_grad():
    want = ref(*args, **kwargs)
    want = getattr(want, "logits", want)
names = {id(t): n for n, t in [*model.named_parameters(), *model.named_buffers()]}
names.update({id(t): f"input{i}" for i, t in enumerate(flat)})
modules = {id(m): n for n, m in model.named_modules()}
print(json.dumps({
    "equal": bool(torch.equal(out, want)), "max_abs": float((out - want).abs().max()),
    "marked": [[names.get(id(t), "?"), [list(a) if isinstance(a, tuple) else a for a in s], list(shape), list(axes)]
               for t, s, shape, axes in xs.marked],
    "hooks": [[modules.get(id(m), "?"), list(s), list(shape), runs] for m, s, shape, runs in tts.hooks],
    "devices": torch_xla.calls.count("device"),
    "calls": [c for c in torch_xla.calls if c != "device"],
    "inputs_on": sorted({t.device.type for t in flat}),
}))
"""

CASES = {
    "phi3_meta": dict(
        flags=["--mesh", "2x4", "--spec", os.path.join(SPECS, "phi3_fused.json")],
        reference="import phi3_fused\nref = phi3_fused.load_model()",
    ),
    "forge_llama_meta": dict(
        flags=["--mesh", "1x4"],  # the loader's own load_shard_spec
        reference=("from transformers import LlamaConfig, LlamaForCausalLM\n"
                   "from forge_llama_meta import CONFIG\n"
                   "torch.manual_seed(0)\nref = LlamaForCausalLM(LlamaConfig(**CONFIG)).eval()"),
    ),
}


def _spec(sharding) -> list:
    """A plan's per-dim axes as the partition spec mark_sharding gets (JSON-shaped)."""
    return [None if not axes else axes[0] if len(axes) == 1 else list(axes) for axes in sharding]


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    root = tmp_path_factory.mktemp("standins")
    for rel, text in STANDINS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module", params=list(CASES))
def run(request, standins, tmp_path_factory):
    """(plan, the driver's JSON) for one case: the CLI plans it and emits the script, the
    driver runs the script with the stand-ins."""
    from shard_opt.cli import main

    case = request.param
    d = tmp_path_factory.mktemp(case)
    code = main([os.path.join(SCRIPTS, case + ".py"), *CASES[case]["flags"], "--evaluate",
                 "--plan-json", str(d / "P.json"), "--emit-torch", str(d / "S.py"), "-o", str(d / "A.mlir"),
                 "--quiet"])
    assert code == 0
    driver = d / "driver.py"
    driver.write_text(DRIVER.replace("REFERENCE\n", CASES[case]["reference"] + "\n"))
    # `python driver.py S.py` with the stand-ins and the fixture scripts on its path, in this
    # process (test_emit_torch.run_script: nothing it imports from there stays behind)
    r = run_script(driver, [standins, SCRIPTS], [d / "S.py"])
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((d / "P.json").read_text()), json.loads(r.stdout.strip().splitlines()[-1])


def test_the_script_runs_and_computes_what_the_model_with_weights_does(run):
    _, res = run
    assert res["equal"], f"max abs difference {res['max_abs']}"
    assert ["use_spmd"] in res["calls"] and ["set_device_type", "TT"] in res["calls"]


def test_every_sharded_parameter_is_marked_with_the_plans_spec(run):
    plan, res = run
    mesh = [plan["mesh"]["shape"], plan["mesh"]["axes"]]
    want = sorted([a["name"], _spec(a["sharding"]), *mesh] for a in plan["arguments"]
                  if a.get("kind", "param") in ("param", "buffer") and any(a["sharding"]))
    got = sorted(m for m in res["marked"] if not m[0].startswith("input"))
    assert want and got == want  # each once, nothing else marked


def test_every_input_is_placed_and_the_sharded_ones_marked(run):
    plan, res = run
    inputs = [a for a in plan["arguments"] if a.get("kind") in ("input", "cache")]
    assert res["devices"] >= 2 and res["inputs_on"] == ["cpu"]  # the model's move and the inputs'
    want = sorted([f"input{i}", _spec(a["sharding"])] for i, a in enumerate(inputs) if any(a["sharding"]))
    assert sorted(m[:2] for m in res["marked"] if m[0].startswith("input")) == want


def test_the_guards_are_hooked_on_the_modules_the_plan_names(run):
    from shard_opt.emit._plan import role

    plan, res = run
    guards = {g["module"]: _spec(g["sharding"]) for g in plan["guards"] if g.get("module")}
    assert guards
    assert sorted({role(h[0]) for h in res["hooks"]}) == sorted(guards)
    assert len(res["hooks"]) == len(guards) * plan["num_layers"]  # every layer's module, once
    for name, spec, shape, runs in res["hooks"]:
        assert spec == guards[role(name)] and shape == plan["mesh"]["shape"] and runs == 1
