"""What ships: tt-mlir's own partitioned program run against the unsharded model
(``shard_opt.ttmlir.numerics``), the choice of plan it drives (``shard_opt.deliverable``) and
the one verdict every output carries (``shard_opt.verdict``).

Real components throughout: tt-mlir compiles every module (jax-tt-plugin, compile-only, a
child process); XLA runs tt-mlir's program on 8 virtual CPU devices and the unsharded module
on one. Skipped, with the reason, only where the plugin is not installed (a dependency: the
README's commands install it).
"""

import dataclasses
import json
import os
import re

import numpy as np
import pytest

from shard_opt.ttmlir import check as ttc
from shard_opt.ttmlir import numerics as num

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "examples", "mlp.mlir")
SCRIPTS = os.path.join(ROOT, "tests", "fixtures", "scripts")
FALCON = os.path.join(SCRIPTS, "falcon_tiny.py")
UNET = os.path.join(SCRIPTS, "unet_resblock_small.py")

USABLE, WHY = ttc.status()
needs_plugin = pytest.mark.skipif(not USABLE, reason=f"tt-mlir check unavailable: {WHY}")

MEGATRON_1X8 = {"fc1.weight": [["model"], []], "fc1.bias": [["model"]], "fc2.weight": [[], ["model"]]}
PLAN_2X4 = {**MEGATRON_1X8, "fc2.bias": [["model"]], "x": [["batch"], [], []]}


def _annotated(path: str, mesh_spec: str, specs: dict, **load) -> tuple[object, object, str]:
    """(model, mesh, the annotated module) of a plan given by argument name or role
    (``layers.*.w``); None in a spec is a whole dim."""
    from shard_opt import frontends
    from shard_opt.annotate import annotate
    from shard_opt.sharding import Mesh, TensorSharding

    model = frontends.load(path, **load)
    mesh = Mesh.parse(mesh_spec)
    shardings = {}
    for a in model.arguments:
        spec = specs.get(a.name, specs.get(a.role))
        if spec is not None:
            shardings[a.index] = TensorSharding.of([[d] if isinstance(d, str) else (d or []) for d in spec])
    return model, mesh, annotate(model, mesh, shardings)


def _program(path: str, mesh_spec: str, specs: dict) -> tuple[str, str]:
    """(the annotated module, tt-mlir's shlo_compiler program of it) for a plan by argument name."""
    from shard_opt import costmodel

    _, mesh, text = _annotated(path, mesh_spec, specs)
    system = costmodel.get_system(costmodel.default_system_for_mesh(mesh.shape))
    (c,) = ttc.compile_all([ttc.Job("t", text, mesh.num_devices)], system, mesh.shape)
    assert c.compiled, c.error
    return text, c.irs["shlo_compiler"]


@pytest.fixture(scope="module")
def megatron():
    return _program(MLP, "1x8", MEGATRON_1X8)


@pytest.fixture(scope="module")
def plan_2x4():
    return _program(MLP, "2x4", PLAN_2X4)


def _without_all_reduce(dump: str) -> str:
    """tt-mlir's program with its all_reduce dropped: each device keeps its partial sum."""
    from shard_opt import ir

    ctx = ir.new_context()
    ctx.allow_unregistered_dialects = True
    module = ir.parse(num.first_module(dump), context=ctx)
    with ctx, ir.ir().Location.unknown():
        (op,) = [o.operation for o in ir.walk_ops(ir.main_func(module)) if o.operation.name == "stablehlo.all_reduce"]
        op.results[0].replace_all_uses_with(op.operands[0])
        op.erase()
    return ir.print_module(module)


@needs_plugin
def test_tt_mlirs_program_of_a_megatron_mlp_computes_the_unsharded_answer(megatron):
    text, dump = megatron
    assert dump.count('"stablehlo.all_reduce"') == 1  # row-parallel fc2's partial sums, reduced by tt-mlir
    (r,) = num.run(text, [("megatron", dump)], 8)
    assert r.status == "passed", r
    assert r.devices == 8 and r.max_rel_err < 1e-5 and r.scale > 1
    assert "shlo_compiler" in r.compared and "unsharded" in r.compared


@needs_plugin
def test_a_program_that_drops_its_all_reduce_fails_the_numerics(megatron):
    text, dump = megatron
    (r,) = num.run(text, [("cut", _without_all_reduce(dump))], 8)
    assert r.status == "failed", r
    assert r.max_rel_err > 0.05  # a partial sum read as the whole: O(1) off, not rounding
    assert "elements off" in r.why


@needs_plugin
def test_a_program_that_gathers_pieces_in_the_wrong_order_fails_the_numerics(plan_2x4):
    """The 2x4 plan gathers fc2's output over `model` ([[0,1,2,3],[4,5,6,7]]): swapping two
    devices in those groups puts their pieces at each other's offsets."""
    text, dump = plan_2x4
    groups = "dense<[[0, 1, 2, 3], [4, 5, 6, 7]]>"
    assert groups in dump
    swapped = dump.replace(groups, "dense<[[1, 0, 2, 3], [5, 4, 6, 7]]>")
    good, bad = num.run(text, [("plan", dump), ("swapped", swapped)], 8, first_pass=False)
    assert good.status == "passed" and bad.status == "failed", (good, bad)


@needs_plugin
def test_runs_stop_at_the_first_program_that_passes(megatron):
    text, dump = megatron
    first, second = num.run(text, [("a", dump), ("b", _without_all_reduce(dump))], 8)
    assert first.status == "passed"
    assert second.status == "not run" and "earlier plan passed" in second.why


def test_a_dump_xla_cannot_run_is_said_in_words_not_raised():
    with pytest.raises(num.NotRunnable, match="cannot parse"):
        num.runnable("module { this is not mlir }")


def test_ttcore_attributes_go_from_every_function_not_only_main():
    """tt-mlir puts ``ttcore.*`` on the arguments of its composites' private functions too
    (an SDPA's ``.impl``): a replicated T5 plan's program did not parse once made XLA's,
    and its numerics were never run."""
    ty = "tensor<2x2xf32>"
    attrs = "{ttcore.argument_type = #ttcore.argument_type<input>}"
    text = (f"module {{\n  func.func @main(%a: {ty} {attrs}) -> ({ty} {attrs}) {{\n"
            f"    %0 = call @impl(%a) : ({ty}) -> {ty}\n    return %0 : {ty}\n  }}\n"
            f"  func.func private @impl(%b: {ty} {attrs}) -> ({ty} {attrs}) {{\n"
            f"    %0 = stablehlo.add %b, %b : {ty}\n    return %0 : {ty}\n  }}\n}}\n")
    made = num.runnable(text)
    assert "ttcore" not in made and "@impl" in made


def _sdpa_reference(q, k, v, mask, scale, causal):
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if mask is not None:
        s = s + mask
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("causal,with_mask", [(False, True), (True, False)])
def test_the_sdpa_stand_in_is_grouped_query_attention(causal, with_mask):
    """tt-mlir's SDPA custom_call becomes softmax(QK^T * scale + mask)V on the device's heads,
    each KV head serving Hq/Hkv consecutive query heads (torch's repeat_interleave)."""
    from shard_opt import ir

    q_t, kv_t, m_t, o_t = ("tensor<1x4x16x8xf32>", "tensor<1x2x16x8xf32>", "tensor<1x1x16x16xf32>",
                           "tensor<1x4x16x8xf32>")
    types = [q_t, kv_t, kv_t] + ([m_t] if with_mask else [])
    fn = num.sdpa_function("sdpa", types, o_t, {"is_causal": causal, "scale": 0.25})
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    call = ", ".join(f"%a{i}" for i in range(len(types)))
    text = (f"module {{\n  func.func @main({args}) -> {o_t} {{\n"
            f"    %0 = func.call @\"sdpa\"({call}) : ({', '.join(types)}) -> {o_t}\n"
            f"    return %0 : {o_t}\n  }}\n{fn}}}\n")
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 4, 16, 8), (1, 2, 16, 8), (1, 2, 16, 8)))
    mask = (rng.standard_normal((1, 1, 16, 16)) * 2).astype(np.float32) if with_mask else None
    got = ir.xla_execute(ir.xla_compile(text, 1, shardy=False), [q, k, v] + ([mask] if with_mask else []))
    np.testing.assert_allclose(np.asarray(got[0][0][1]), _sdpa_reference(q, k, v, mask, 0.25, causal),
                               rtol=1e-5, atol=1e-5)


def test_query_heads_not_a_multiple_of_the_kv_heads_have_no_answer():
    """A device given 1 query head over 2 KV heads (heads split past the KV heads'
    count): no attention to compare, said so (tt-mlir issue 8861's pattern)."""
    with pytest.raises(num.NotRunnable, match="1 query heads over 2 KV heads"):
        num.sdpa_function("s", ["tensor<1x1x16x8xf32>", "tensor<1x2x16x8xf32>", "tensor<1x2x16x8xf32>"],
                          "tensor<1x1x16x8xf32>", {})


# ---------------------------------------------------------------------------------
# The defect of the Falcon-7B shape, through the command line: one verdict everywhere
# ---------------------------------------------------------------------------------

# tt-mlir computes each device's positions (RoPE) with a local iota when the tokens are split:
# positions 0..15 on every device instead of its own 16 (references/ttmlir_offline.md)
FALCON_SEQUENCE_SPLIT = {"input_ids": [None, "model"],
                         "transformer.h.*.mlp.dense_h_to_4h.weight": ["model", None],
                         "transformer.h.*.mlp.dense_4h_to_h.weight": [None, "model"]}
FALCON_MEGATRON = {k: v for k, v in FALCON_SEQUENCE_SPLIT.items() if k != "input_ids"}


@pytest.fixture(scope="module")
def falcon_evaluated(tmp_path_factory):
    """`--evaluate` of a Falcon-7B-shaped plan that splits the tokens (1x8, 2 layers), given
    as the annotated module: every output."""
    import contextlib
    import io

    from shard_opt.cli import main

    d = tmp_path_factory.mktemp("falcon")
    _, _, text = _annotated(FALCON, "1x8", FALCON_SEQUENCE_SPLIT, layers=2)
    module = d / "falcon_token_split.mlir"
    module.write_text(text)
    outs = {"plan": d / "p.json", "o": d / "o.mlir", "report": d / "r.md", "lit": d / "t.mlir"}
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(module), "--evaluate", "--check", "--plan-json", str(outs["plan"]), "-o", str(outs["o"]),
                     "--report", str(outs["report"]), "--emit-lit-test", str(outs["lit"])])
    return code, err.getvalue(), outs


@needs_plugin
def test_a_falcon_plan_whose_tt_mlir_program_is_wrong_fails_and_exits_4(falcon_evaluated):
    code, err, outs = falcon_evaluated
    assert code == 4, err
    chk = json.loads(outs["plan"].read_text())["checks"]["tt_mlir"]
    assert chk["compiled"] and chk["numerics"]["status"] == "failed", chk["numerics"]
    assert chk["numerics"]["max_rel_err"] > 0.01
    assert chk["verdict"]["deliverable"] is False
    assert "error: tt-mlir: no deliverable plan" in err.splitlines()[-1]


@needs_plugin
def test_every_output_gives_the_same_verdict(falcon_evaluated):
    code, err, outs = falcon_evaluated
    words = json.loads(outs["plan"].read_text())["checks"]["tt_mlir"]["verdict"]["words"]
    line = f"tt-mlir verdict: {words}"
    assert "numerics FAILED" in words and "NOT DELIVERABLE" in words
    assert line in err
    assert outs["o"].read_text().splitlines()[0] == f"// shard-opt: {line}"
    assert outs["lit"].read_text().splitlines()[0] == f"// shard-opt: {line}"
    report = outs["report"].read_text().splitlines()
    assert any(line in r and r.startswith("> **✗") for r in report[:4]), report[:4]


def _script_verdict(script: str) -> str:
    """The verdict the emitted script's block gives, its wrapped comment lines joined."""
    lines = script.splitlines()
    k = next(i for i, r in enumerate(lines) if r.startswith("# shard-opt: tt-mlir verdict:"))
    out = [lines[k][len("# shard-opt: "):]]
    for r in lines[k + 1:]:
        if not r.startswith("#   "):
            break
        out.append(r[4:])
    return " ".join(out)


@needs_plugin
def test_evaluate_of_a_runs_module_gives_the_runs_verdict(run_cli, tmp_path):
    """The -o module of a search is the module tt-mlir compiled for the recommendation;
    `--evaluate` of it compiles it again and gives the same verdict, word for word."""
    p, o, again = tmp_path / "p.json", tmp_path / "o.mlir", tmp_path / "again.json"
    code, _, err = run_cli(MLP, "--mesh", "2x4", "--check", "--plan-json", p, "-o", o)
    assert code == 0, err
    words = json.loads(p.read_text())["checks"]["tt_mlir"]["verdict"]["words"]
    assert o.read_text().splitlines()[0] == f"// shard-opt: tt-mlir verdict: {words}"
    code, _, err = run_cli(o, "--evaluate", "--check", "--plan-json", again)
    assert code == 0, err
    assert json.loads(again.read_text())["checks"]["tt_mlir"]["verdict"]["words"] == words


@needs_plugin
def test_a_groupnorm_plan_over_an_idle_batch_axis_passes(run_cli, tmp_path):
    """A UNet res-block on 2x4 (convs channel-split on `model`, `batch` idle): XLA reduces the
    GroupNorm statistics over `batch`, tt-mlir computes them on each device; both are the
    unsharded model's answer, and the numerics say so (the old element-count pairing called
    this a likely miscompile)."""
    spec = os.path.join(ROOT, "tests", "fixtures", "specs", "unet_resblock_small.json")
    p, s = tmp_path / "p.json", tmp_path / "s.py"
    code, _, err = run_cli(UNET, "--mesh", "2x4", "--evaluate", "--check", "--spec", spec, "--plan-json", p,
                           "--emit-torch", s)
    assert code == 0, err
    chk = json.loads(p.read_text())["checks"]["tt_mlir"]
    assert chk["numerics"]["status"] == "passed", chk["numerics"]
    assert chk["verdict"]["deliverable"] and chk["verdict"]["numerics"] == "passed"
    assert _script_verdict(s.read_text()) == f"tt-mlir verdict: {chk['verdict']['words']}"


# ---------------------------------------------------------------------------------
# The choice
# ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def falcon_trials():
    """The check's run on the Falcon shape (1x8, 2 layers) and two trials: the token split
    (the wrong program) and a Megatron plan (a right one)."""
    from shard_opt import costmodel, frontends
    from shard_opt.deliverable import Trial, _Run
    from shard_opt.evaluate import shardings_by_role
    from shard_opt.sharding import Mesh, TensorSharding

    model = frontends.load(FALCON, layers=2)
    mesh = Mesh.parse("1x8")
    system = costmodel.get_system("wh-loudbox")
    run = _Run(model, mesh, system, costmodel.get_cost_model("tenstorrent"), {}, open(os.devnull, "w"), False)

    def trial(name, specs):
        by_role = {k: TensorSharding.of([[d] if d else [] for d in v]) for k, v in specs.items()}
        return Trial(name, name, None, run.evaluator.run(shardings_by_role(model, by_role), keep_ir=True))

    return run, [trial("token-split", FALCON_SEQUENCE_SPLIT), trial("megatron", FALCON_MEGATRON)]


@needs_plugin
def test_a_plan_that_fails_the_numerics_is_passed_over_for_the_next_that_passes(falcon_trials):
    run, (bad, good) = falcon_trials
    trials = run.compile([bad, good], [])
    assert all(t.ok for t in trials), [t.compiled.error for t in trials]
    bad.summary["checked_us"] = 0.0  # the wrong program first, whatever it costs: it is tried first
    chosen = run.pick([bad, good])
    assert chosen is good
    assert bad.numerics.status == "failed" and good.numerics.status == "passed", (bad.numerics, good.numerics)
    assert bad.verdict("none").deliverable is False and good.verdict("none").verified


GQA = os.path.join(SCRIPTS, "gqa_llama.py")


@needs_plugin
def test_numerics_run_on_a_layer_copy_when_the_whole_model_is_too_large(run_cli, tmp_path, monkeypatch):
    """A 3-layer model (the fewest scored from its copies) whose arguments exceed what a run
    may take runs its numerics on the 2-layer copy the search scores (the plan applied by role,
    compiled by tt-mlir too), and the verdict says so."""
    from shard_opt import frontends
    from shard_opt.deliverable import _arg_types

    model = frontends.load(GQA, layers=3)
    whole, copy = (num.memory_needed(_arg_types(m)) for m in (model, model.with_layers(2)))
    assert copy < whole
    monkeypatch.setenv(num.MEMORY_ENV, str((copy + whole) / 2 / 2**30))
    p = tmp_path / "p.json"
    code, _, err = run_cli(GQA, "--layers", "3", "--mesh", "1x8", "--check", "--plan-json", p)
    assert code == 0, err
    chk = json.loads(p.read_text())["checks"]["tt_mlir"]
    assert chk["numerics"]["module"] == "the 2-layer copy" and chk["numerics"]["status"] == "passed", chk["numerics"]
    assert "numerics passed on the 2-layer copy" in chk["verdict"]["words"]


@needs_plugin
def test_a_model_too_large_for_any_numerics_ships_its_compiled_plan_unverified(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv(num.MEMORY_ENV, "0.000001")
    p = tmp_path / "p.json"
    code, _, err = run_cli(MLP, "--mesh", "2x4", "--check", "--plan-json", p)
    assert code == 0, err
    v = json.loads(p.read_text())["checks"]["tt_mlir"]["verdict"]
    assert v["deliverable"] and v["compiled"] and v["numerics"] == "not run"
    assert num.MEMORY_ENV in v["why"] and "needs about" in v["why"]


def test_a_composites_off_deliverable_tells_the_script_how_to_compile(run_cli, tmp_path):
    """A plan that ships in its composites-off form (tt-mlir refused it with tt-xla's
    composites on): the emitted script's block says so and sets tt-xla's option."""
    from shard_opt.emit.torch_script import emit_torch
    from shard_opt.plan import Plan
    from shard_opt.verdict import Verdict

    p = tmp_path / "p.json"
    code, _, err = run_cli(GQA, "--layers", "1", "--mesh", "1x8", "--no-check", "--plan-json", p)
    assert code == 0, err
    plan = Plan.from_json(json.loads(p.read_text()))
    refused = "INTERNAL: 'ttir.scaled_dot_product_attention' op Query and result must have the same type"
    v = Verdict(True, True, "off", refused=refused, numerics="passed")
    plan = dataclasses.replace(plan, checks={"tt_mlir": {"verdict": v.to_json()}})  # a plan is frozen
    script = emit_torch(open(GQA).read(), plan)
    assert 'SHARD_OPT_TORCH_COMPILE_OPTIONS = {"tt_enable_composite_ops": False}' in script
    assert 'torch.compile(model, backend="tt", options=SHARD_OPT_TORCH_COMPILE_OPTIONS)' in script
    assert "Query and result must have the same type" in _script_verdict(script)
    assert _script_verdict(script) == v.line()
    compile(script, "s.py", "exec")  # still Python


def test_a_numerics_run_that_hangs_is_ended_by_its_deadline_and_said(monkeypatch):
    """The deadline is a last line of defence, tested with a process made to hang: the
    programs it did not run are "not run", with why, and nothing raises."""
    import sys

    monkeypatch.setattr(num, "_serve_command", lambda *a: [sys.executable, "-c", "import time; time.sleep(600)"])
    monkeypatch.setenv(num.TIMEOUT_ENV, "1")
    with num.Session("module {}", 8) as session:
        (r,) = session.run([("p", "module {}")])
        again = session.run([("q", "module {}")])
        pid = session.pid
    assert r.status == "not run" and "did not end within 1 s" in r.why and num.TIMEOUT_ENV in r.why
    assert again[0].status == "not run"  # the session is over: later programs are said so too
    assert pid not in num.kept_pids()  # a killed child is never reused


def test_a_numerics_child_that_dies_is_said_with_its_last_line(monkeypatch):
    import sys

    monkeypatch.setattr(num, "_serve_command", lambda *a: [
        sys.executable, "-c", "import sys; sys.stdin.readline(); sys.stderr.write('MemoryError: no room\\n'); sys.exit(1)"])
    with num.Session("module {}", 8) as session:
        (r,) = session.run([("p", "module {}")])
        pid = session.pid
    assert r.status == "not run" and "exited 1" in r.why and "MemoryError: no room" in r.why
    assert pid not in num.kept_pids()


# ---------------------------------------------------------------------------------
# One numerics child for the Sessions of one device count in a process
# ---------------------------------------------------------------------------------

# Another reference, of other shapes than the MLP's (other inputs, another answer); as its own
# "program" it runs replicated on every device.
SMALL_DOT = """module {
  func.func @main(%x: tensor<8x16xf32>, %w: tensor<16x4xf32>) -> tensor<8x4xf32> {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
        : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
"""


def _zombie_or_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_ended(pid: int) -> None:
    """Until ``pid`` has ended (CHILD_CEILING_S only ends a test that would otherwise hang)."""
    import time

    from conftest import CHILD_CEILING_S

    t0 = time.monotonic()
    while not _zombie_or_gone(pid):
        assert time.monotonic() - t0 < CHILD_CEILING_S, f"process {pid} did not end"
        time.sleep(0.05)


@needs_plugin
def test_sessions_of_one_device_count_share_a_child_and_answer_as_a_fresh_child_does(megatron):
    """The second and third Sessions use the first one's child (no jax import, no XLA start);
    the megatron plan checked after another reference gives the Numerics a fresh child gave
    (same inputs: same scale, same errors to the last bit). A child killed while kept is not
    reused: the next Session starts another and answers the same."""
    import signal

    text, dump = megatron
    programs = [("megatron", dump), ("cut", _without_all_reduce(dump))]

    def same(results):  # all but the time taken
        return [dataclasses.replace(r, seconds=0.0) for r in results]

    num.end_kept()
    with num.Session(text, 8) as s:
        fresh, first = s.run(programs, first_pass=False), s.pid
        assert not s.reused
    assert num.kept_pids() == [first] and not _zombie_or_gone(first)  # close kept it alive
    assert not os.path.exists(s.dir)  # and removed the Session's files
    with num.Session(SMALL_DOT, 8) as s:
        (other,) = s.run([("small", SMALL_DOT)])
        assert s.reused and s.pid == first
    assert other.status == "passed" and other.scale != fresh[0].scale, other  # its own inputs, not the MLP's
    with num.Session(text, 8) as s:
        again = s.run(programs, first_pass=False)
        assert s.reused and s.pid == first
    assert [r.status for r in fresh] == ["passed", "failed"]
    assert same(again) == same(fresh)
    from conftest import CHILD_CEILING_S

    (kept,) = [c for c in num._kept.values() if c.proc.pid == first]
    os.kill(first, signal.SIGKILL)
    # until this process has reaped it (what Session sees): /proc shows a killed multi-threaded
    # process as a zombie while its other threads still exit, and the pipe to it still takes
    # a line then, so waiting on /proc let a Session take it as alive (seen once in CI)
    kept.proc.wait(timeout=CHILD_CEILING_S)
    with num.Session(text, 8) as s:
        killed = s.run(programs, first_pass=False)
        assert not s.reused and s.pid != first
    assert same(killed) == same(fresh)


def test_a_kept_child_ends_when_its_parent_does(tmp_path):
    """A parent that ends without its atexit handlers (killed) closes the kept child's stdin:
    the child ends on that EOF instead of outliving it."""
    import subprocess
    import sys

    from conftest import CHILD_CEILING_S

    script = ("import os, sys\nfrom shard_opt.ttmlir import numerics as num\n"
              "s = num.Session(sys.argv[1], 8)\npid = s.pid\ns.close()\n"
              "assert num.kept_pids() == [pid]\nprint(pid, flush=True)\nos._exit(0)\n")
    r = subprocess.run([sys.executable, "-c", script, SMALL_DOT], capture_output=True, text=True,
                       timeout=CHILD_CEILING_S)
    assert r.returncode == 0, r.stderr[-2000:]
    _wait_ended(int(r.stdout.split()[-1]))


# ---------------------------------------------------------------------------------
# A vocab-split lookup: tt-mlir's masked gather (tt.fill_out_of_bounds), run as tt-mlir runs it
# ---------------------------------------------------------------------------------

HEAD = os.path.join(SCRIPTS, "untied_head.py")


def test_the_masked_gather_reads_zero_rows_outside_the_table():
    """A gather carrying ``tt.fill_out_of_bounds`` reads zeros for a start index outside the
    table (tt-mlir's ``ttir.rows_gather fill_out_of_bounds = true``), where XLA's own gather
    would clamp the index to the table's edge."""
    from shard_opt import ir

    t_t, i_t, r_t = "tensor<4x2xf32>", "tensor<1x4xi64>", "tensor<1x4x2xf32>"
    gather = (f'%0 = "stablehlo.gather"(%t, %i) <{{dimension_numbers = #stablehlo.gather<offset_dims = [2], '
              f'collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, slice_sizes = '
              f'array<i64: 1, 2>}}> {{tt.fill_out_of_bounds}} : ({t_t}, {i_t}) -> {r_t}')
    text = (f"module {{\n  func.func @main(%t: {t_t}, %i: {i_t}) -> {r_t} {{\n    {gather}\n"
            f"    return %0 : {r_t}\n  }}\n}}\n")
    made = num.runnable(text)
    assert "shard_opt.masked_gather.0" in made
    table = np.arange(8, dtype=np.float32).reshape(4, 2) + 1
    got = np.asarray(ir.xla_execute(ir.xla_compile(made, 1, shardy=False),
                                    [table, np.array([[-1, 0, 3, 5]], dtype=np.int64)])[0][0][1])
    np.testing.assert_array_equal(got[0], [[0, 0], [1, 2], [7, 8], [0, 0]])


@needs_plugin
def test_a_vocab_split_lookup_computes_the_unsharded_answer():
    # the embedding split 8 ways on its vocabulary: tt-mlir looks each device's rows up with
    # out-of-table rows zero and all-reduces them (vocab-gather allows a row lookup's split)
    text, dump = _program(HEAD, "1x8", {"embed_tokens.weight": ["model", None]})
    assert "tt.fill_out_of_bounds" in dump and dump.count('"stablehlo.all_reduce"') == 1
    (r,) = num.run(text, [("vocab", dump)], 8)
    assert r.status == "passed", r
    # the same program read with XLA's clamping gather: every device adds a row it does not own
    (r,) = num.run(text, [("clamped", dump.replace("{tt.fill_out_of_bounds}", ""))], 8)
    assert r.status == "failed", r
