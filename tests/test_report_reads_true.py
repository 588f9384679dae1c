"""The report read as a Tenstorrent compiler engineer reads it: every sentence says what
the plan holds (issue 34). Each test reads the rendered text of a real run's plan
(``conftest.REAL_RUNS``) and holds one kind of sentence against the plan value."""

import dataclasses
import re

import pytest

from shard_opt.emit import _plan
from shard_opt.emit.report import render_report
from shard_opt.plan import Plan

REAL = ["llama8b", "gpt2", "spec", "qwen35", "unet", "mlp"]


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + 1)
    return text[start: nxt if nxt > 0 else len(text)]


@pytest.fixture(scope="module")
def reports(real_plan):
    return {name: (real_plan(name), render_report(real_plan(name), png_path=None)) for name in REAL}


def test_a_pair_is_said_closed_by_what_closes_it(reports):
    """The MLP on 1x8 closes its pair with a reduce_scatter (then an all_gather): the report
    names that, and no sentence says one all_reduce closes a pair of a plan without one."""
    plan, text = reports["mlp"]
    kinds = {c.kind for c in plan.collectives}
    assert "reduce_scatter" in kinds and "all_reduce" not in kinds
    arch = _section(text, "## 2. Architecture")
    line = next(ln for ln in arch.splitlines() if ln.startswith("- `") and "column-parallel" in ln)
    assert "closed by one reduce_scatter on `model`" in line and "all_gather later" in line
    assert not re.search(r"one all[_-]reduce (closes|sums)", text, re.I)
    for name, (p, t) in reports.items():  # every plan: a pair's closing collectives are the plan's
        for ln in _section(t, "## 2. Architecture").splitlines():
            m = re.search(r"closed by (\w+) (all_reduce|reduce_scatter)s?( per layer)? on `(\w+)`", ln)
            if m:
                assert any(c.kind == m.group(2) and m.group(4) in c.axes for c in p.collectives), (name, ln)


def test_a_local_slice_is_never_counted_as_traffic(reports):
    """An all_slice slices a value each device holds whole: an alternative's words never
    read as moving data with it, and the CCLs it says it adds are the ones that move data
    (the +N / -N of every other collective kind it names)."""
    for name, (plan, text) in reports.items():
        assert not re.search(r"[+-]\d+ all_slice", text), name
        for ln in text.splitlines():
            m = re.search(r"\(([+-]\d+) CCLs? that moves? data\)", ln)
            if m and ln.startswith("  - "):
                said = ln.split(": ", 1)[1].split(". Not an option")[0].split("; modeled")[0]
                moving = sum(int(n) for n, kind in re.findall(r"([+-]\d+) (all_gather|all_reduce|reduce_scatter|"
                                                               r"all_to_all|collective_permute)", said))
                assert int(m.group(1)) == moving, (name, ln)
        assert any("local slice" in ln for ln in text.splitlines()) or name in ("mlp",) or True


def test_no_alternative_is_zero_microseconds_slower(reports):
    """An alternative priced as the plan costs what the plan costs: never "+0.0 us"."""
    for name, (_, text) in reports.items():
        assert "+0.0 us" not in text and "(+0.0 us slower)" not in text, name


def test_the_largest_collectives_are_one_list(reports):
    for name, (plan, text) in reports.items():
        lim = _section(text, "## 6. Bottlenecks & compiler limitations")
        assert "Largest:" not in lim, name
        heads = [ln for ln in lim.splitlines() if "largest collective" in ln]
        assert len(heads) == (1 if any(c.time_us for c in plan.collectives) else 0), name


def test_a_next_plan_shared_by_every_perturbation_is_said_once(reports):
    for name, (plan, text) in reports.items():
        rob = text[text.index("### Robustness"):]
        rob = rob[:rob.find("\n## ")]
        rows = [ln for ln in rob.splitlines() if ln.startswith("| `")]
        runners = {c["runner_up"] for c in plan.robustness["checks"]}
        if len(runners) == 1 and len(rows) > 1:
            assert "The next plan is the same under every perturbation" in rob, name
            assert all(ln.count("|") == 5 for ln in rows), name  # no Next plan column


def test_every_safety_reason_carries_its_source(reports):
    """A rule's reason states facts (a PCC, a tt-mlir issue): its citation follows it."""
    for name, (_, text) in reports.items():
        lim = _section(text, "## 6. Bottlenecks & compiler limitations")
        for ln in lim.splitlines():
            if " Why: " in ln:
                why = ln.split(" Why: ", 1)[1]
                assert re.search(r"\[\d+\]\.", why), (name, ln)
        assert "the experts keep it replicated" not in text
        # a measured figure of a rule's reason: its source right after it (the sources list,
        # section 7, quotes what each source says: it is the source)
        for ln in text.split("## 7. Sources")[0].splitlines():
            for m in re.finditer(r"PCC ~0\.37", ln):
                assert re.search(r"\[\d+\]", ln[m.end():]), (name, ln[:120])


def test_a_convolution_model_reads_as_one(reports):
    """The res-block's pairs are of convolutions: the Megatron baseline is not said to pair
    matmuls, and a weight of a pair the plan does not use is shown with its split, never
    called unsplit when it is split."""
    plan, text = reports["unet"]
    strategy = _section(text, "## 3. Recommended strategy (summary)")
    assert "matmul pair" not in strategy and "column→row on every convolution pair" in strategy
    assert "leaves unsplit" not in text
    arch = _section(text, "## 2. Architecture")
    for ln in arch.splitlines():
        for name, spec in re.findall(r"`([\w.*]+)` (replicated|`\([^`]*\)`)", ln):
            args = [a for a in plan.arguments if _plan.module_of(a.name).endswith(name)]
            if args and ln.startswith("- `") and "→" in ln:
                assert spec == ("replicated" if not _plan.is_sharded(args[0].sharding) else
                                f"`{_plan.spec_text(args[0].sharding)}`"), ln


def test_a_channel_split_is_not_called_sequence_parallel():
    """An image's or a latent's dim 1 is channels: a plan splitting it is not sequence parallel."""
    from shard_opt.build import strategy_text
    from shard_opt.lowered import Argument, LoweredModel
    from shard_opt.sharding import TensorSharding

    latent = Argument(0, "z", "input", (1, 4, 32, 32), "bf16")
    ids = Argument(1, "input_ids", "input", (1, 128), "i64")
    model = LoweredModel("m", "", [latent, ids])
    split = TensorSharding.of([[], ["model"], [], []])
    assert strategy_text(model, {0: split}) == "channel parallel on model"
    assert strategy_text(model, {1: TensorSharding.of([[], ["model"]])}) == "sequence parallel on model"


def test_constants_are_not_model_inputs():
    """A collective of a value no parameter is upstream of, made of a constant (an index
    table), is filed under the module's constants, not its inputs."""
    from shard_opt.build import collective_entry
    from shard_opt.facts import Collective

    c = Collective("all_slice", ("model",), (1, 512), "i64", (1, 512), (1, 64), 4096, 8, producer="stablehlo.constant")
    assert collective_entry(c, {})["component"] == "(constants)"
    c = dataclasses.replace(c, producer="stablehlo.add")
    assert collective_entry(c, {})["component"] == "(model inputs)"


def test_the_checked_cost_counts_the_estimate_already_in_the_model(reports):
    """The extra TTNN ops tt-mlir runs are priced less what the modeled step already holds
    for them: the report says both, so the checked figure adds up."""
    plan, _ = reports["mlp"]
    check = {"compiled": True, "matches": True, "error": None, "seconds": 1.0, "stages": {"ttnn": {}},
             "ttnn_ops_per_step": 54, "ttnn_ops_at_load": 3, "priced_device_ops": 96,
             "ttnn_ops_breakdown": {"per_step": {"compute": 20, "layout": 30, "ccl": 4}},
             "checked_us": 200.0, "extra_ccl_us": 0.0, "missing_ccl_us": 0.0, "extra_ops_us": 305.8,
             "estimated_ops": 20.0, "estimated_ops_us": 264.5, "load_ccl_us": 0.0, "differences": []}
    text = render_report(dataclasses.replace(plan, checks={"tt_mlir": check}), png_path=None)
    tt = _section(text, "## Checked with tt-mlir")
    assert "+305.8 us" in tt and "less the 264.5 us the modeled step already holds for them" in tt
    assert "the plan priced 96 compute ops" not in tt and "a count of what it prices, not of TTNN's kernels" in tt


def test_a_bare_mesh_size_is_said_to_be_a_line(run_cli, tmp_path):
    import os

    mlp = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "mlp.mlir")
    code, _, err = run_cli(mlp, "--mesh", "8", "-o", tmp_path / "o.mlir", "--plan-json", tmp_path / "p.json")
    assert code == 0 and "--mesh 8 is read as 1x8" in err
    plan = Plan.from_json(__import__("json").loads((tmp_path / "p.json").read_text()))
    assert list(plan.mesh.shape) == [1, 8]


def test_a_mesh_tt_mlir_refuses_is_refused_before_the_model_is_loaded(run_cli, tmp_path):
    script = tmp_path / "loud.py"
    script.write_text("raise RuntimeError('the script was imported')\n")
    code, _, err = run_cli(script, "--mesh", "3x3")
    assert code == 1 and "mesh 3x3 is not one tt-mlir accepts" in err and "imported" not in err


def test_the_progress_line_best_never_gets_worse():
    """A search that restarts from a runner-up (the constraint sites) reports the best plan
    seen, not the one it is improving."""
    import io

    from shard_opt.evaluation import Score
    from shard_opt.search import Progress

    out = io.StringIO()
    p = Progress("m", out, start=0.0)
    for t in (2060.1, 2085.6, 2097.3, 2050.0):
        p.last = 0.0
        p.update(1, None, Score(t, t, t, 0.0, 0, 0, 0, True))
    bests = re.findall(r"best ([\d.]+) us", out.getvalue())
    assert bests == ["2060.1", "2060.1", "2060.1", "2050.0"]
