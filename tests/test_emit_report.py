"""sharding_analysis.md: the playbook's template, filled from the plan, every decision cited."""

import copy
import json
import os
import re

import pytest

from shard_opt.emit import citations
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
        assert phrase in " ".join(citations.CITATIONS[key]) or key in ("tt_xla_3643", "tt_xla_2975"), key


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
