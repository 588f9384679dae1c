"""sharding_analysis.md: the playbook's template, filled from the plan, every decision cited."""

import copy
import json
import os
import re

import pytest

from shard_opt import safety
from shard_opt.emit import _plan, citations
from shard_opt.emit.report import megatron_pairs, render_report, write_ccl_chart

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "ttir")
SECTIONS = ["## 1. Model & target", "## 2. Architecture", "## 3. Recommended strategy (summary)",
            "## 4. Per-component design", "## 5. CCL budget", "## 6. Bottlenecks & compiler limitations",
            "## 7. Sources"]


@pytest.fixture()
def plan():
    with open(os.path.join(FIXTURES, "llama_2layer_plan.json")) as f:
        return json.load(f)


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + 1)
    return text[start: nxt if nxt > 0 else len(text)]


def test_template_sections_in_order(plan):
    text = render_report(plan, png_path="r_ccl.png")
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    assert text.startswith("# Sharding analysis - llama-3-8b (2 layers)")
    assert "![Modeled CCL time per component](r_ccl.png)" in text
    assert "![" not in render_report(plan, png_path=None)


def test_budget_total_equals_the_plans_cost(plan):
    budget = _section(render_report(plan, png_path=None), "## 5. CCL budget")
    total = next(line for line in budget.splitlines() if line.startswith("| **Total**"))
    cells = [c.strip() for c in total.strip("|").split("|")]
    assert cells[3] == f"**{plan['cost']['ccl_count']}**"
    assert cells[5].startswith(f"**{plan['cost']['ccl_bytes']}**")
    rows = [line for line in budget.splitlines() if line.startswith("| `")]
    assert sum(int(r.split("|")[4]) for r in rows) == plan["cost"]["ccl_count"]
    assert sum(int(r.split("|")[6]) for r in rows) == plan["cost"]["ccl_bytes"]
    assert "inconsistent" not in budget


def test_budget_flags_a_plan_whose_totals_disagree(plan):
    plan["cost"]["ccl_count"] += 1
    assert "the plan JSON is inconsistent" in render_report(plan, png_path=None)


def test_representative_block_counts_are_multiplied(plan):
    # A plan that lists one layer's collectives with count=N still adds up.
    p = copy.deepcopy(plan)
    p["collectives"] = [c for c in p["collectives"] if c["layer"] != 1]
    for c in p["collectives"]:
        if c["layer"] == 0:
            c["count"] = 2
    budget = _section(render_report(p, png_path=None), "## 5. CCL budget")
    assert f"**{plan['cost']['ccl_count']}**" in budget and f"**{plan['cost']['ccl_bytes']}**" in budget


def test_every_collective_says_where_it_comes_from_and_why(plan):
    appendix = _section(render_report(plan, png_path=None), "## Appendix A")
    for c in plan["collectives"]:
        row = next(line for line in appendix.splitlines() if line.startswith(f"| #{c['op_index']} |"))
        assert c["kind"] in row and c["component"] in row and c["reason"] in row
        assert c["loc"][5:-1].replace('"', "") in row  # loc("file":line:col) -> file:line:col


def test_megatron_pairs_are_marked(plan):
    pairs = {(p["block"], p["axis"]): (p["column"], p["row"]) for p in megatron_pairs(plan)}
    assert pairs[("model.layers.*.mlp", "model")] == (["gate_proj", "up_proj"], ["down_proj"])
    assert pairs[("model.layers.*.self_attn", "model")] == (["q_proj", "k_proj", "v_proj"], ["o_proj"])
    arch = _section(render_report(plan, png_path=None), "## 2. Architecture")
    assert "column-parallel `gate_proj`, `up_proj` → row-parallel `down_proj`" in arch
    assert "LlamaMLP" in arch and "GFLOP" in arch  # from plan["architecture"]


def test_jax_kernels_are_in_out(plan):
    p = copy.deepcopy(plan)
    p["source"] = "jax"
    for a in p["arguments"]:
        if len(a["shape"]) == 2 and any(a["sharding"]):
            a["sharding"] = list(reversed(a["sharding"]))
    pairs = {p_["block"]: p_ for p_ in megatron_pairs(p)}
    assert pairs["model.layers.*.mlp"]["column"] == ["gate_proj", "up_proj"]


def test_per_component_design_has_choice_why_rejected_and_ccls(plan):
    per = _section(render_report(plan, png_path=None), "## 4. Per-component design")
    mlp = per[per.index("### `model.layers.*.mlp`"): per.index("### `model.layers.*.input_layernorm`")]
    assert "**Chosen sharding:**" in mlp and '`("model", None)` (column-parallel)' in mlp
    assert "**Why:**" in mlp and "Megatron column→row pair" in mlp
    assert "MLP row then column" in mlp and "+905.7 us slower" in mlp  # the search's own alternative
    assert "**CCLs:** 2 in total" in mlp and "layers 0, 1 have the same collectives" in mlp
    strategy = _section(render_report(plan, png_path=None), "## 3. Recommended strategy (summary)")
    for r in plan["search"]["rejected"]:
        assert r["label"] in strategy


def test_citations_are_numbered_and_listed(plan):
    text = render_report(plan, png_path=None)
    body, sources = text.split("## 7. Sources")[0], _section(text, "## 7. Sources")
    used = {int(n) for n in re.findall(r"\[(\d+)\]", body)}
    listed = {int(n) for n in re.findall(r"^\| \[(\d+)\] \|", sources, re.M)}
    assert used == listed == set(range(1, len(listed) + 1))
    assert "1909.08053" in sources and "examples/pytorch/llama.py" in sources
    # Limitations that do not apply are not cited.
    assert "issue 3370" not in sources


def test_memory_fallback_is_loud(plan):
    plan["memory_fallback"] = True
    plan["memory_fallback_reason"] = "the Megatron plan needs 14.2 GiB per chip, DRAM holds 12 GiB"
    head = "\n".join(render_report(plan, png_path=None).splitlines()[:6])
    assert "MEMORY FALLBACK" in head and "14.2 GiB per chip" in head


def test_compiler_limitations_hit(plan):
    p = copy.deepcopy(plan)
    p["mesh"] = {"shape": [1, 32], "axes": ["batch", "model"]}
    p["collectives"].append({"kind": "collective_permute", "axes": ["model"], "shape": [2, 128, 4096],
                             "dtype": "bf16", "bytes_per_device": 1048576, "component": "model.embed_tokens",
                             "layer": None, "time_us": 50.0, "op_index": 150, "loc": "", "producer": "x",
                             "reason": "devices along model swap shards"})
    p["collectives"].append({"kind": "reduce_scatter", "axes": ["model"], "shape": [2, 128, 4096],
                             "dtype": "bf16", "bytes_per_device": 1048576, "component": "model.norm",
                             "layer": None, "time_us": 50.0, "op_index": 151, "loc": "", "producer": "x",
                             "reason": "partial sums"})
    lim = _section(render_report(p, png_path=None), "## 6. Bottlenecks & compiler limitations")
    assert "collective_permute is not lowered" in lim
    assert "1x32 Galaxy mesh hangs" in lim
    assert "bf16 reduce_scatter loses precision" in lim
    sources = _section(render_report(p, png_path=None), "## 7. Sources")
    for ref in ("tt-mlir issue 3370", "tt-metal issue 43749", "tt-metal issues 36749, 37884"):
        assert ref in sources


def test_unsupported_mesh_is_flagged(plan):
    plan["mesh"] = {"shape": [3, 3], "axes": ["batch", "model"]}
    text = render_report(plan, png_path=None)
    assert "**not accepted** by tt-mlir" in text and "is not one tt-mlir accepts" in text


def test_pipeline_plan_renders_each_model(plan):
    text = render_report({"pipeline": [plan, plan], "slowest": plan["model"]}, png_path=None)
    assert text.count("## 5. CCL budget") == 2


def test_chart_is_a_png(plan, tmp_path):
    out = write_ccl_chart(plan, str(tmp_path / "r_ccl.png"))
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    empty = dict(plan, collectives=[])
    with open(write_ccl_chart(empty, str(tmp_path / "empty.png")), "rb") as f:
        assert f.read(4) == b"\x89PNG"


def _references_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.environ.get("SHARD_OPT_REFERENCES"), os.path.join(here, "..", "..", "shared", "references"),
                 "/work/shared/references"):
        if cand and os.path.isdir(cand):
            return cand
    return None


def test_every_citation_is_backed_by_the_reference_notes():
    assert set(citations.EVIDENCE) == set(citations.CITATIONS)
    ref_dir = _references_dir()
    if ref_dir is None:
        pytest.skip("the reference notes live outside this repository (../shared/references, or set "
                    "SHARD_OPT_REFERENCES); without them there is nothing to check the citations against")
    text = ""
    for name in os.listdir(ref_dir):
        with open(os.path.join(ref_dir, name), encoding="utf-8") as f:
            text += f.read()
    for key, phrase in citations.EVIDENCE.items():
        assert phrase in text, f"citation {key}: {phrase!r} not in the reference notes"
        assert phrase in " ".join(citations.CITATIONS[key][:2]) or key in ("tt_xla_3643", "tt_xla_2975"), key


def test_a_row_layer_before_its_column_layer_is_no_pair(plan):
    # o_proj split along its outputs and k/v along their inputs is not Megatron's order.
    p = copy.deepcopy(plan)
    for a in p["arguments"]:
        if a["name"].endswith(("k_proj.weight", "v_proj.weight")):
            a["sharding"] = [[], ["model"]]
        if a["name"].endswith(("q_proj.weight", "o_proj.weight")):
            a["sharding"] = [["model"], []] if a["name"].endswith("o_proj.weight") else [[], []]
    assert "model.layers.*.self_attn" not in {pr["block"] for pr in megatron_pairs(p)}


def test_design_md_minimum_plan_renders():
    minimal = {
        "model": "llama-3-8b", "mesh": {"shape": [2, 4], "axes": ["batch", "model"]}, "system": "wh-loudbox",
        "arguments": [{"index": 1, "name": "model.layers.0.mlp.up_proj.weight", "kind": "param",
                       "shape": [14336, 4096], "dtype": "bf16", "sharding": [["model"], []]}],
        "collectives": [{"kind": "all_reduce", "axes": ["model"], "shape": [128, 4096], "dtype": "bf16",
                         "bytes_per_device": 1048576, "component": "model.layers.0.mlp", "time_us": 88.1}],
        "cost": {"total_us": 0.0, "compute_us": 0.0, "ccl_us": 0.0, "ccl_count": 1, "ccl_bytes": 1048576,
                 "memory_per_device_bytes": 0, "fits": True},
        "baselines": {"replicated": {"total_us": 0.0}}, "search": {"candidates_evaluated": 0, "seconds": 0.0,
                                                                   "exhaustive": False},
    }
    text = render_report(minimal, png_path=None)
    assert all(s in text for s in SECTIONS)
    assert "| **Total** | | | **1** | | **1048576**" in text


def test_report_is_the_same_whatever_the_search_took(plan):
    """No wall-clock figure in the report: two runs of one plan give identical bytes."""
    slow = copy.deepcopy(plan)
    slow["search"]["seconds"] = plan["search"].get("seconds", 0) + 123.4
    assert render_report(plan, png_path="r.png") == render_report(slow, png_path="r.png")


def test_pairs_in_a_model_without_repeated_layers(plan):
    """A single block (``self_attn.q_proj.weight``, no layer index): the pair's block is the
    module holding the projections."""
    p = copy.deepcopy(plan)
    p["arguments"] = [dict(a, name=a["name"].replace("model.layers.0.", "")) for a in p["arguments"]
                      if ".layers.1." not in a["name"]]
    pairs = {pr["block"]: pr for pr in megatron_pairs(p)}
    assert pairs["mlp"]["column"] == ["gate_proj", "up_proj"] and pairs["mlp"]["row"] == ["down_proj"]
    assert pairs["self_attn"]["row"] == ["o_proj"]


def test_why_not_megatron_prices_the_baseline(plan):
    p = copy.deepcopy(plan)
    mine = p["cost"]
    p["baselines"]["megatron"] = {"total_us": mine["total_us"] + 50.0, "compute_us": mine["compute_us"] - 10.0,
                                  "ccl_us": mine["ccl_us"] + 60.0, "ccl_count": mine["ccl_count"] + 3,
                                  "ccl_bytes": 4096}
    text = _section(render_report(p, png_path=None), "## 3. Recommended strategy (summary)")
    line = next(ln for ln in text.splitlines() if ln.startswith("**Why not Megatron:**"))
    assert "50.0 us slower per step" in line and f"({mine['ccl_count'] + 3} CCLs, 4.0 KiB per device)" in line
    assert "its collectives cost more than the compute its splits save" in line and re.search(r"\[\d+\]", line)
    p["baselines"]["megatron"] = {"total_us": None, "ccl_count": 35, "ccl_us": None, "compute_us": 1.0}
    text = render_report(p, png_path=None)
    assert "collective_permute" in text and "issue 3370" in _section(text, "## 7. Sources")



def test_a_baseline_that_breaks_a_rule_is_said_so(plan):
    """A baseline priced within the compiler-safety rules (driver._held_to_rules): its row is
    marked, a paragraph gives the rule, what it splits, both figures; one that still breaks
    an inf rule with those splits replicated has no figure within the rules."""
    p = copy.deepcopy(plan)
    mine = p["cost"]["total_us"]
    p["safety"] = safety.report({}, frozenset(), {})  # the rules themselves, not a copy of them
    p["baselines"]["one-axis-heuristic"] = {
        "total_us": mine + 20.0, "ccl_count": 2, "ccl_bytes": 1024, "breaks": ["vocab-gather"],
        "adjusted": [{"argument": "model.embed_tokens.weight", "rule": "vocab-gather", "was": [["model"], []]}],
        "as_written": {"total_us": mine - 5.0, "ccl_count": 4, "fits": True}}
    p["baselines"]["megatron"] = {"total_us": None, "ccl_count": 6, "breaks": ["residual-stream"],
                                  "still_breaks": ["residual-stream"], "as_written": {"total_us": mine + 1.0}}
    text = _section(render_report(p, png_path=None), "## 3. Recommended strategy (summary)")
    row = next(ln for ln in text.splitlines() if ln.startswith("| one-axis-heuristic"))
    assert "⚠ within the rules (breaks `vocab-gather` as written)" in row
    para = next(ln for ln in text.splitlines() if ln.startswith("**⚠ Baseline `one-axis-heuristic`"))
    assert f"As written it is priced {_plan.fmt_us(mine - 5.0)}" in para and f"{_plan.fmt_us(mine + 20.0)}." in para
    assert "`model.embed_tokens.weight` `(\"model\", None)`" in para and re.search(r"\[\d+\]", para)
    para = next(ln for ln in text.splitlines() if ln.startswith("**⚠ Baseline `megatron`"))
    assert "no figure within the rules" in para and "residual" in para
    assert "**Why not Megatron:**" not in text  # no collective_permute story for a figure the rules removed

# ---------------------------------------------------------------------------------
# The plan fields the search adds (fixtures in tests/fixtures/plans/, see make_fixtures.py)
# ---------------------------------------------------------------------------------

PLANS = os.path.join(os.path.dirname(__file__), "fixtures", "plans")
PLAN_FIXTURES = ["llama8b_pairs", "llama8b_norm_stats", "gpt2_xl_2layer", "llama_load_replicated"]


def _fixture(name: str) -> dict:
    with open(os.path.join(PLANS, name + ".json")) as f:
        return json.load(f)


def _component(per: str, key: str) -> str:
    start = per.index(f"### `{key}`")
    nxt = per.find("\n### ", start + 1)
    return per[start: nxt if nxt > 0 else len(per)]


@pytest.mark.parametrize("name", PLAN_FIXTURES)
def test_fixture_budget_total_is_the_plans_ccl_count(name):
    p = _fixture(name)
    text = render_report(p, png_path=None)
    budget = _section(text, "## 5. CCL budget")
    total = next(line for line in budget.splitlines() if line.startswith("| **Total**"))
    assert total.split("|")[4].strip() == f"**{p['cost']['ccl_count']}**"
    assert "inconsistent" not in budget
    assert all(s in text for s in SECTIONS)


def test_rejected_alternatives_per_component():
    """Problem 1: each group's alternatives, priced on the whole model, under its component:
    option -> why worse, with the delta in time and collectives; never "none evaluated"."""
    p = _fixture("llama_load_replicated")
    per = _section(render_report(p, png_path=None), "## 4. Per-component design")
    assert "none evaluated" not in per
    for g in p["groups"]:
        for a in g.get("alternatives") or []:
            key = "model.layers.*.self_attn" if ".self_attn." in g["role"] else None
            line = next(ln for ln in per.splitlines() if ln.startswith("  - `") and a["reason"] in ln)
            assert f"→ {a['option']}" in line and f"(+{_plan.fmt_us(a['delta_us'])} slower)" in line, line
            assert f"{a['ccl_count']} collectives" in line and f"({a['delta_ccls']:+d} CCL" in line, line
            if key:
                assert line in _component(per, key)
    attn = _component(per, "model.layers.*.self_attn")
    assert "The cheapest alternative priced, `k_proj.weight` → megatron column, is +9.1 us per step." in attn
    # Components the plan priced nothing for say so honestly.
    assert "none priced: the plan JSON lists no alternative" in _component(per, "model.norm")


def test_collectives_are_filed_under_the_component_the_plan_names():
    """Problem 2: a norm's statistics all_reduce is the norm's, even when the value it
    reduces came from the embedding's gather."""
    p = _fixture("llama8b_norm_stats")
    text = render_report(p, png_path=None)
    per = _section(text, "## 4. Per-component design")
    assert "- **CCLs:** none." in _component(per, "model.embed_tokens")
    norm = _component(per, "model.layers.*.input_layernorm")
    assert "**CCLs:** 2 in total" in norm and "norm statistics" in norm
    assert "A norm over a split dim all-reduces its statistics" in norm
    budget = _section(text, "## 5. CCL budget")
    assert "| `model.layers.*.input_layernorm` | all_reduce (norm statistics) | model | 2 |" in budget
    assert "| `model.layers.*.self_attn.o_proj` | all_reduce (row-parallel partial sums) | model | 2 |" in budget
    assert "Per layer: 4 collectives in each of the 2 `model.layers.*` layers; 1 outside them." in budget


def test_structural_pairs_and_conv1d_orientation():
    """GPT-2's Conv1D weights are [in, out]: c_fc split on dim 1 is column-parallel. The
    dataflow's pairs mark the MLP pair used and attention's pair left unsplit."""
    p = _fixture("gpt2_xl_2layer")
    assert megatron_pairs(p) == [{"block": "transformer.h.*.mlp", "axis": "model", "column": ["c_fc"],
                                  "row": ["c_proj"]}]
    text = render_report(p, png_path=None)
    arch = _section(text, "## 2. Architecture")
    assert "- `transformer.h.*.mlp` on `model`: column-parallel `c_fc` → row-parallel `c_proj` (mlp)" in arch
    assert "- `transformer.h.*.attn` (attention): `c_attn` → `c_proj`" in arch
    per = _section(text, "## 4. Per-component design")
    mlp = _component(per, "transformer.h.*.mlp")
    assert '`(None, "model")` (column-parallel)' in mlp and '`("model", None)` (row-parallel)' in mlp
    assert "One all_reduce per layer closes each column→row pair" in mlp
    # The same plan without the recorded pairs: derived from the shardings and the classes.
    old = copy.deepcopy(p)
    del old["baselines"]["megatron"]["pairs"]
    old["baselines"]["megatron"].pop("arguments", None)
    assert megatron_pairs(old) == megatron_pairs(p)


def test_loader_comparison():
    p = _fixture("llama_load_replicated")
    text = render_report(p, png_path=None)
    strategy = _section(text, "## 3. Recommended strategy (summary)")
    assert "| loader-spec (the loader's own load_shard_spec [" in strategy
    cmp_ = strategy[strategy.index("### Comparison with the loader's shard spec"):]
    assert "612.8 us with 27 collectives (12 per layer)" in cmp_ and "327.4 us (2.15x) faster" in cmp_
    assert "names a 1x8 mesh; both plans are priced here on 2x4" in cmp_
    assert "**⚠ 2 names in the loader's spec match no tensor**" in cmp_
    assert "`model.layers.*.block_sparse_moe.gate.weight`" in cmp_
    assert "`model.layers.*.self_attn.k_proj.weight` dim 0 (size 128) over `model`+`batch` (8 devices)" in cmp_
    for row in p["loader_comparison"]:
        line = next(ln for ln in cmp_.splitlines() if ln.startswith(f"| `{row['component']}` |"))
        assert f"+{_plan.fmt_us(row['delta_us'])}" in line and f"{row['delta_ccls']:+d}" in line
        assert row["reason"] in line
    assert '| `lm_head` | `("model", "batch")` | replicated |' in cmp_
    sources = _section(text, "## 7. Sources")
    assert "load_shard_spec(model)" in sources and "shardy_sharding.md" in sources
    q = copy.deepcopy(p)
    q["loader_comparison"] = []
    assert "agree on every component" in render_report(q, png_path=None)
    q.pop("loader_comparison")
    q["baselines"].pop("loader-spec")
    assert "Comparison with the loader's shard spec" not in render_report(q, png_path=None)


def test_safety_rules():
    text = render_report(_fixture("llama8b_norm_stats"), png_path=None)
    lim = _section(text, "## 6. Bottlenecks & compiler limitations")
    assert re.search(r"- no collective_permute \[\d+\]: 6 candidates priced infinite \(never chosen\)\. Why: tt-mlir "
                     r"does not lower sdy\.collective_permute", lim)
    assert re.search(r"\*\*⚠ TURNED OFF BY THE USER: the residual stream stays whole on the axis row-parallel matmuls "
                     r"reduce over\*\* \[\d+\]\. Candidates that break it were priced as if it did not apply", lim)
    assert "3 candidates priced in their safe form" in lim
    assert "Checked, removed nothing: an embedding table is not split on the dim its lookup indexes;" in lim
    assert lim.index("Safety rules") < lim.index("Compiler limitations:")
    sources = _section(text, "## 7. Sources")
    assert "PCC ~0.37" in sources and "miscompiles under Shardy" in sources and "issue 3370" in sources
    quiet = _section(render_report(_fixture("llama8b_pairs"), png_path=None), "## 7. Sources")
    assert "PCC ~0.37" not in quiet  # a rule that removed nothing is listed, not cited
    p = _fixture("llama8b_pairs")
    p["safety"][4]["citation"] = "no_such_key"
    assert "no collective_permute (source `no_such_key` is not in shard-opt's citations table)" in \
        render_report(p, png_path=None)


def test_a_rule_that_excludes_and_detects_says_both():
    # the heads rule excludes splits that do not divide the heads and prices infinite a
    # propagated module that splits inside a head
    p = _fixture("llama8b_pairs")
    row = next(r for r in p["safety"] if r["rule"] == "heads")
    row.update(removed=2, priced_infinite=3, plan_breaks=False, allowed=False)
    lim = _section(render_report(p, png_path=None), "## 6. Bottlenecks & compiler limitations")
    assert "attention heads are split whole [" in lim
    assert "5 candidates excluded from the search (2) or priced infinite (never chosen) (3)." in lim
    row.update(removed=0, priced_infinite=3)
    lim = _section(render_report(p, png_path=None), "## 6. Bottlenecks & compiler limitations")
    assert "3 candidates priced infinite (never chosen)." in lim


def test_robustness():
    holds = _section(render_report(_fixture("llama8b_pairs"), png_path=None), "## 3. Recommended strategy (summary)")
    assert "still wins under all 5 perturbations" in holds and "| `ccl x2` (collectives twice as slow) |" in holds
    lost = _section(render_report(_fixture("llama_load_replicated"), png_path=None), "## 3. Recommended strategy")
    assert "**⚠ The recommendation is not robust:** it loses under 1 of 4 perturbations; under `ccl x0.5` " \
           "megatron wins, and the recommendation is 3.0% slower than it." in lost
    assert "| **megatron** | 5.0% | 3.0% | recommended plan |" in lost
    assert "Re-ranked: the 6 distinct plans the search priced." in lost
    old = _section(render_report(json.load(open(os.path.join(FIXTURES, "llama_2layer_plan.json"))), png_path=None),
                   "## 3. Recommended strategy")
    assert "Not checked: the plan JSON records no cost-model perturbations." in old


def test_weight_formats_and_header():
    text = render_report(_fixture("llama8b_pairs"), png_path=None)
    target = _section(text, "## 1. Model & target")
    assert re.search(r"`--weight-dtype bfp8,mlp=bfp4`: 15 matmul weights stored as block floats \(bfp4, bfp8\) \[\d+\]",
                     target)
    arch = _section(text, "## 2. Architecture")
    assert "`gate_proj.weight` 14336x4096xbf16 (bfp4)" in arch and "`q_proj.weight` 4096x4096xbf16 (bfp8)" in arch
    head = text.split("## 1.")[0]
    assert "Shardy propagation run as tt-mlir's StableHLO pipeline runs it" in head
    assert "`tenstorrent` cost profile" in head and "fitted latency model" in head
    assert "StableHLOPipelines.cpp" in _section(text, "## 7. Sources")
    p = _fixture("llama8b_pairs")
    p["propagation"], p["cost_model"] = "sdy", "tenstorrent-tuned"
    text = render_report(p, png_path=None)
    head = text.split("## 1.")[0]
    assert "Shardy's own propagation pipeline" in head and "not tt-mlir's pipeline" in head
    assert "Llama-70B Galaxy decode kernels" in head
    assert "decoder_perf_targets_6u.json" in _section(text, "## 7. Sources")
    assert "StableHLOPipelines.cpp" not in _section(text, "## 7. Sources")


def test_pipeline_header_citation_is_listed():
    p = _fixture("gpt2_xl_2layer")
    text = render_report({"pipeline": [p, _fixture("llama_load_replicated")], "slowest": p["model"]}, png_path=None)
    head, first = text.split("# Sharding analysis - gpt2", 1)
    n = re.search(r"\[(\d+)\]", head).group(1)
    first_sources = first.split("## 7. Sources")[1].split("# Sharding analysis")[0]
    assert re.search(rf"^\| \[{n}\] \| Tenstorrent sharding-analysis playbook \|", first_sources, re.M)


@pytest.mark.parametrize("system, claim", [("p300", "ccl-fits-blackhole"), ("p150", "ccl-fits-blackhole"),
                                           ("bh-loudbox", "ccl-fits-blackhole"), ("n300", "ccl-fits-wormhole"),
                                           ("wh-loudbox", "ccl-fits-wormhole")])
def test_the_architecture_comes_from_the_system_record_not_its_name(system, claim):
    """`--system p300` is Blackhole although "bh" is not in its name: the report cites the
    Blackhole CCL measurements for it."""
    from shard_opt.emit.report import _fits_claim

    assert _fits_claim({"system": system}) == claim
