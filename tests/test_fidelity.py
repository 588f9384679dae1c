"""benchmarks/fidelity.py, its fast part for real: the per-op rows (no lowering) and the JSON.

The layer and end-to-end rows lower Llama 1B-70B (about a minute with a warm cache):
``python benchmarks/fidelity.py`` runs them; benchmarks/results.md holds the table.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "fidelity.py")
KEYS = {"name", "kind", "profile", "modeled_us", "measured_us", "ratio", "source", "use"}


@pytest.fixture(scope="module")
def fidelity():
    name = "benchmarks_fidelity"
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def per_op(tmp_path_factory):
    """The per-op rows, run as a user runs them: (exit code, stdout, JSON rows)."""
    path = tmp_path_factory.mktemp("fidelity") / "rows.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--only", "per-op", "--json", str(path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    rows = json.loads(path.read_text()) if path.exists() else None
    return proc.returncode, proc.stdout + proc.stderr, rows


def test_per_op_rows_pass_or_say_why(per_op):
    code, out, rows = per_op
    assert code == 0, out
    assert "NO REASON GIVEN" not in out
    assert "FAIL" not in out


def test_two_chip_lines_are_priced_at_their_own_rate(per_op):
    """A line of 2 plateaus below the 4-chip fit's rate (costmodel/wormhole.py
    EFFICIENCY): priced at the N=4 rate, the large N=2 transfers came out up to 1.6x
    too fast; at their own, every N=2 LoudBox point is inside."""
    _, _, rows = per_op
    two = [r for r in rows if r["name"].startswith("LoudBox") and "line N=2" in r["name"]]
    assert len(two) == 40
    assert all(0.75 <= r["ratio"] <= 1.25 for r in two), [(r["name"], r["ratio"]) for r in two]


def test_json_schema(per_op):
    _, out, rows = per_op
    assert rows, out
    for r in rows:
        assert set(r) == KEYS, r
        assert r["kind"] in ("per-op", "layer", "end-to-end")
        assert r["use"] in ("calibration", "validation")
        assert isinstance(r["name"], str) and r["name"] and r["source"].startswith(("tt-metal", "tt-xla"))
        assert r["measured_us"] > 0 and r["modeled_us"] > 0
        assert r["ratio"] == pytest.approx(r["modeled_us"] / r["measured_us"], rel=1e-3)
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names))


def test_every_galaxy_layer_op_has_a_row(per_op, fidelity):
    _, _, rows = per_op
    names = {r["name"] for r in rows}
    for op in fidelity.GALAXY_6U_OPS:
        assert f"6U {op.name}" in names
    assert len(fidelity.GALAXY_6U_OPS) == 16


def test_tuned_profile_reproduces_its_calibration_points(per_op):
    """The tuned CCL startup terms were fitted to these kernels (costmodel/wormhole.py
    GALAXY_LLAMA70B_CCLS): the model must give them back (the two all_reduces share one
    fitted point, their mean)."""
    _, _, rows = per_op
    cal = [r for r in rows if r["use"] == "calibration" and r["profile"].startswith("tenstorrent-tuned")
           and ("All" in r["name"] or "ReduceScatter" in r["name"])]
    assert len(cal) == 8
    for r in cal:
        assert r["ratio"] == pytest.approx(1.0, abs=0.01), r


def test_generic_profile_rows_are_its_calibration(per_op):
    _, _, rows = per_op
    generic = [r for r in rows if r["profile"] == "tenstorrent"]
    assert generic and all(r["use"] == "calibration" for r in generic)
    assert any("LoudBox all_reduce ring N=8, 16 KiB" == r["name"] for r in generic)
    anchor = next(r for r in generic if r["name"] == "LoudBox all_reduce ring N=8, 16 KiB")
    assert anchor["ratio"] == pytest.approx(1.0, abs=1e-3)  # an anchor of the fit (wormhole.ANCHORS)


def test_layer_of_tt_metal_ops_within_tolerance(fidelity):
    """The layer row that needs no lowering: tt-metal's 16 ops through the tuned model."""
    report = fidelity.Report()
    fidelity.layer_ops_row(report)
    (row,) = report.rows
    assert row.kind == "layer" and row.measured_us == pytest.approx(166.67, abs=0.01)
    assert row.inside, (row.modeled_us, row.measured_us)


def test_ordering_check_fails_on_an_unpriceable_row(fidelity):
    report = fidelity.Report()
    fidelity._order(report, "x", [("a", (1.0, 1.0)), ("b", (float("inf"), 2.0))])
    assert not report.checks[0].passed
