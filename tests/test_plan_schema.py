"""The plan as one typed value: ``Plan.to_json`` / ``Plan.from_json`` round-trip real plans,
and a plan JSON of another schema version (or none) is refused with one line."""

import dataclasses
import json
import os

import pytest

from shard_opt import plan as plan_mod
from shard_opt.plan import SCHEMA_VERSION, PipelinePlan, Plan, PlanSchemaError, dumps, plan_from_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "examples", "mlp.mlir")
BLOCK = os.path.join(ROOT, "examples", "transformer_block.mlir")


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Plan JSONs the CLI wrote: a search on two meshes, a pipeline and an --evaluate."""
    from shard_opt.cli import main

    d = tmp_path_factory.mktemp("plans")
    runs = {"mlp@2x4": [MLP, "--mesh", "2x4", "--emit-lit-test", str(d / "mlp@2x4.lit.mlir")],
            "block@1x8": [BLOCK, "--mesh", "1x8"],
            "pipeline@2x4": [MLP, BLOCK, "--mesh", "2x4"]}
    out = {}
    for name, argv in runs.items():
        path = d / f"{name}.json"
        assert main([*argv, "--plan-json", str(path), "-o", str(d / f"{name}.mlir"), "--quiet"]) == 0
        out[name] = json.loads(path.read_text())
    assert main([str(d / "mlp@2x4.mlir"), "--evaluate", "--plan-json", str(d / "evaluate.json"), "--quiet"]) == 0
    out["evaluate"] = json.loads((d / "evaluate.json").read_text())
    out["_dir"] = d
    return out


@pytest.mark.parametrize("name", ["mlp@2x4", "block@1x8", "pipeline@2x4", "evaluate"])
def test_real_plans_round_trip(real, name):
    data = real[name]
    assert data["schema_version"] == SCHEMA_VERSION
    p = plan_from_json(data, where=name)
    assert isinstance(p, PipelinePlan if name.startswith("pipeline") else Plan)
    assert p.to_json() == data  # every key written is a field, and nothing is added or lost
    assert type(p).from_json(p.to_json()) == p
    assert type(p).from_json(json.loads(dumps(p))) == p


@pytest.mark.parametrize("name", ["mlp@2x4", "block@1x8", "pipeline@2x4", "evaluate"])
def test_records_are_dataclasses_written_back_byte_for_byte(real, name):
    """The records under a plan (mesh, arguments, collectives, cost) are read into their
    dataclasses and written back as the run wrote them: the same text, each record's keys
    in the same order, a key the run left out (``storage``, ``cause``, ``checked_us``)
    still left out."""
    text = (real["_dir"] / f"{name}.json").read_text()
    p = plan_from_json(json.loads(text), where=name)
    assert dumps(p) == text
    for sub, data in zip(p.pipeline if isinstance(p, PipelinePlan) else [p], real[name].get("pipeline") or [real[name]]):
        assert isinstance(sub.mesh, plan_mod.MeshRecord) and isinstance(sub.cost, plan_mod.CostRecord)
        assert all(isinstance(a, plan_mod.ArgumentRecord) for a in sub.arguments)
        assert all(isinstance(c, plan_mod.CollectiveRecord) for c in sub.collectives)
        for record, written in [(sub.mesh, data["mesh"]), (sub.cost, data["cost"]),
                                *zip(sub.arguments, data["arguments"]), *zip(sub.collectives, data["collectives"])]:
            assert list(record.to_json()) == list(written), type(record).__name__


def test_a_plan_built_by_a_run_round_trips():
    """``build_plan``'s value (in-process, not read from a file) -> to_json -> from_json ->
    to_json: the same JSON, and an equal value."""
    from shard_opt.driver import Options, optimize
    from shard_opt.frontends import load
    from shard_opt.sharding import Mesh

    model = load(MLP)
    built = optimize(model, Options(meshes=[Mesh.parse("1x8")], check=False, progress=False)).plan
    data = built.to_json()
    again = Plan.from_json(json.loads(json.dumps(data)))
    assert again == built and again.to_json() == data


def test_fields_are_typed_values(real):
    p = Plan.from_json(real["mlp@2x4"])
    assert p.mesh == plan_mod.MeshRecord(shape=[2, 4], axes=["batch", "model"])
    assert p.cost.ccl_count == len(p.collectives) and p.collectives[0].kind and p.arguments[0].name
    assert p.to_json()["cost"]["ccl_count"] == len(p.collectives)
    assert p.safety and p.robustness and p.guards is not None
    assert p.kv_layout is None and "kv_layout" not in p.to_json()
    copy = p.to_json()
    copy["cost"]["total_us"] = -1.0  # to_json is a copy: the plan is unchanged
    assert p.cost.total_us != -1.0
    # one frozen value: its fields, its records and what they hold do not change
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.cost = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.cost.total_us = 1.0
    with pytest.raises(TypeError):
        p.baselines["megatron"]["total_us"] = 1.0
    with pytest.raises((TypeError, AttributeError)):
        p.collectives.append(p.collectives[0])
    assert p.arguments[0].sharding.axis_names() == real["mlp@2x4"]["arguments"][0]["sharding"]


def test_optional_fields_are_left_out_and_notes_append(real):
    p = Plan.from_json(real["mlp@2x4"])
    assert "notes" not in dataclasses.replace(p, notes=None).to_json()
    assert dataclasses.replace(p, notes=["one", "two"]).to_json()["notes"] == ["one", "two"]
    assert p.to_json()["memory_fallback_reason"] is None  # required: written even when null


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.pop("schema_version"), "plan JSON has no schema_version; this shard-opt reads schema_version 1"),
    (lambda d: d.update(schema_version=99), "plan JSON has schema_version 99; this shard-opt reads schema_version 1"),
    (lambda d: d.update(unheard_of=1), "unknown plan JSON key(s) 'unheard_of' for schema_version 1"),
    (lambda d: d.pop("collectives"), "plan JSON lacks 'collectives'"),
    (lambda d: d.update(mesh=[2, 4]), "plan JSON key 'mesh' is list, not dict"),
])
def test_bad_plan_json_is_one_clear_line(real, edit, words):
    data = json.loads(json.dumps(real["mlp@2x4"]))
    edit(data)
    with pytest.raises(PlanSchemaError) as e:
        Plan.from_json(data, where="P.json")
    msg = str(e.value)
    assert msg.startswith("P.json: ") and words in msg and "\n" not in msg


def test_a_pipeline_is_not_one_models_plan(real):
    with pytest.raises(PlanSchemaError, match="a pipeline plan"):
        Plan.from_json(real["pipeline@2x4"])
    with pytest.raises(PlanSchemaError, match="one model's plan"):
        PipelinePlan.from_json(real["mlp@2x4"])


def test_the_schema_lists_every_key_the_driver_writes():
    """Every key of docs/plan.md's table is a field of Plan (and the other way round)."""
    with open(os.path.join(ROOT, "docs", "plan.md")) as f:
        doc = f.read()
    import re

    documented = set(re.findall(r"^\| `([a-z_]+)` \|", doc, re.M))
    fields = {f.name for f in plan_mod.dataclasses.fields(Plan)} | {"schema_version"}
    assert documented == fields


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["arguments"][0].update(shape="4x8"), "plan JSON arguments[0].shape is \"4x8\", not list[int] (Argument)"),
    (lambda d: d["arguments"][1].pop("sharding"), "plan JSON arguments[1] lacks 'sharding' (Argument;"),
    (lambda d: d["collectives"][0].update(bytes_per_device="512"),
     "plan JSON collectives[0].bytes_per_device is \"512\", not int (Collective)"),
    (lambda d: d["collectives"].__setitem__(0, ["all_reduce"]), "plan JSON collectives[0] is list, not an object (Collective)"),
    (lambda d: d["cost"].update(fits=1), "plan JSON cost.fits is 1, not bool (Cost)"),
    (lambda d: d["mesh"].pop("axes"), "plan JSON mesh lacks 'axes' (MeshRecord;"),
    (lambda d: d["mesh"].update(axes=["batch", 4]), "plan JSON mesh.axes is [\"batch\", 4], not list[str] (MeshRecord)"),
    (lambda d: d["collectives"][0].update(bytes=512),
     "plan JSON collectives[0] has unknown key(s) 'bytes' (Collective, schema_version 1)"),
    (lambda d: d["arguments"][0].update(index="0"), "plan JSON arguments[0].index is \"0\", not int (Argument)"),
])
def test_a_bad_record_is_one_clear_line(real, edit, words):
    """A record the emitters read (an argument, a collective, the cost, the mesh) of the
    wrong JSON type, or lacking a key every plan JSON writes, is refused in one line."""
    data = json.loads(json.dumps(real["mlp@2x4"]))
    edit(data)
    with pytest.raises(PlanSchemaError) as e:
        Plan.from_json(data, where="P.json")
    msg = str(e.value)
    assert msg.startswith("P.json: ") and words in msg and "\n" not in msg, msg


def test_a_bad_record_in_a_pipeline_names_its_model(real):
    data = json.loads(json.dumps(real["pipeline@2x4"]))
    data["pipeline"][1]["cost"]["total_us"] = "fast"
    with pytest.raises(PlanSchemaError, match=r"^P.json: pipeline\[1\]: plan JSON cost.total_us is \"fast\""):
        plan_from_json(data, where="P.json")


def test_an_emitter_works_from_a_plan_loaded_from_json(real):
    """The lit test written from a plan read back from its JSON is the one the run wrote."""
    from shard_opt.emit.lit_test import emit_lit_test

    d = real["_dir"]
    p = Plan.from_json(real["mlp@2x4"], where="mlp@2x4.json")
    module = (d / "mlp@2x4.mlir").read_text()
    assert emit_lit_test(module, p, run_args="--mesh 2x4") == (d / "mlp@2x4.lit.mlir").read_text()
