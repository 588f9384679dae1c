"""``--serve``: the deployment search (shard_opt.serve) and its arithmetic (costmodel.serving).

Real lowering of the bundled 2-layer Llama (``examples/llama_load.py``: 4 heads, 2 KV heads,
head_dim 64, vocab 1024), real Shardy, the real cost model; the record is checked against
the phase plans it was computed from, and against hand computations from the config."""

import dataclasses
import json
import math
import os

import pytest

from shard_opt import costmodel
from shard_opt.costmodel import serving as arith
from shard_opt.costmodel.multihost import replica_system
from shard_opt.errors import UserError
from shard_opt.serve import Profile, configurations

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA = os.path.join(ROOT, "examples", "llama_load.py")
# examples/llama_load.py CONFIG: 2 layers, 2 KV heads, head_dim 256 / 4 = 64, bf16 (2 bytes)
KV_PER_TOKEN = 2 * 2 * 2 * 64 * 2


# ---- the profile and bad input ------------------------------------------------------

def test_profile_parses_and_derives_lengths():
    p = Profile.parse("isl=128,osl=64,users=8,tpot_ms=50")
    assert (p.isl, p.osl, p.users, p.tpot_ms, p.ttft_ms) == (128, 64, 8, 50.0, None)
    assert p.context == 192 and p.decode_len == 192 and p.objective == "tokens_per_s_per_user"
    assert Profile.parse("isl=1,osl=1").objective == "tokens_per_s"  # users absent: as many as fit


@pytest.mark.parametrize("text, says", [
    ("isl=128", "osl missing"),
    ("isl=128,osl=abc", "osl='abc' is not a whole number"),
    ("isl=128,osl=64,speed=3", "'speed=3' is not KEY=VALUE"),
    ("isl=128,osl=64,users=-1", "users=-1 must be at least 0"),
    ("isl=0,osl=64", "isl=0 must be at least 1"),
    ("isl=128,osl=64,tpot_ms=0", "tpot_ms=0 must be above 0"),
    ("isl=128,isl=64,osl=2", "isl is given twice"),
])
def test_bad_serve_input_is_one_line_and_exit_1(run_cli, tmp_path, text, says):
    out = tmp_path / "p.json"
    code, stdout, err = run_cli("zoo:llama-3-8b", "--devices", "8", "--serve", text, "--plan-json", out)
    assert code == 1 and stdout == ""
    assert err.count("\n") == 1 and err.startswith("shard-opt: error: --serve") and says in err, err
    assert not out.exists()


@pytest.mark.parametrize("args, says", [
    (["zoo:llama-3-8b", "--serve", "isl=8,osl=8"], "--serve needs --devices N"),
    (["zoo:llama-3-8b", "--devices", "8", "--mesh", "2x4", "--serve", "isl=8,osl=8"], "either --mesh or --devices"),
    (["zoo:llama-3-8b", "--devices", "8", "--phase", "decode", "--serve", "isl=8,osl=8"], "drop --phase"),
    (["examples/mlp.mlir", "--devices", "8", "--serve", "isl=8,osl=8"], "needs a causal language model"),
    (["zoo:llama-3-8b", "--devices", "8", "--serve", "isl=8,osl=8", "--emit-torch", "s.py"],
     "--emit-torch needs a PyTorch load script"),
])
def test_serve_refuses_what_it_cannot_plan_in_one_line(run_cli, args, says):
    code, _, err = run_cli(*args)
    assert code == 1 and err.count("\n") == 1 and says in err, err


def test_a_mesh_tt_mlir_refuses_is_refused_in_one_line_with_its_source(run_cli):
    code, _, err = run_cli(os.path.join(ROOT, "examples", "mlp.mlir"), "--mesh", "16x8", "--system", "wh-galaxy-x4")
    assert code == 1 and err.count("\n") == 1
    assert "16x8 is not one tt-mlir accepts" in err and "ShardingUtils.h" in err


def test_configurations_refuse_shapes_with_the_citation():
    galaxy = configurations(32, costmodel.get_system("wh-galaxy"), Profile.parse("isl=8,osl=8,users=32"))
    by = {(c.mode, c.replica_mesh): c for c in galaxy}
    assert "43749" in by[("colocated", (1, 32))].refused  # a Galaxy 1x32 all_reduce hangs
    assert "not a part of wh-galaxy" in by[("colocated", (1, 16))].refused  # no 1x16 line in an 8x4
    assert by[("colocated", (8, 4))].refused is None and by[("colocated", (8, 4))].replicas == 1
    assert by[("colocated", (2, 4))].replicas == 4 and by[("colocated", (1, 1))].replicas == 32
    disagg = by[("disaggregated", (8, 4))]
    assert disagg.prefill_mesh == disagg.decode_mesh == (4, 4) and disagg.cut == (4, 4)  # 4 pairs of 4 links
    quad = configurations(128, costmodel.get_system("wh-galaxy-x4"), Profile.parse("isl=8,osl=8"))
    refused = {c.replica_mesh: c.refused for c in quad if c.mode == "colocated"}
    assert "16x8" in refused[(16, 8)] and "ShardingUtils.h" in refused[(16, 8)]
    one_user = configurations(8, costmodel.get_system("wh-loudbox"), Profile.parse("isl=8,osl=8,users=1"))
    assert {c.replicas for c in one_user} == {1}  # no idle replicas: one user, one replica


# ---- systems past one box -----------------------------------------------------------

def test_multi_galaxy_links_follow_the_mesh_graph_descriptors():
    x2, x4 = costmodel.get_system("wh-galaxy-x2"), costmodel.get_system("wh-galaxy-x4")
    assert x2.chips == 64 and x2.default_mesh == (8, 8) and [a.links for a in x2.links_for((8, 8))] == [1, 1]
    assert [(a.topology, a.links) for a in x2.links_for((4, 16))] == [("line", 4), ("ring", 4)]
    assert x4.chips == 128 and x4.default_mesh == (8, 16) and [a.links for a in x4.links_for((8, 16))] == [1, 1]
    # across hosts one channel: an 8-chip all_gather on the dual mesh is slower than inside a Galaxy
    galaxy = costmodel.get_system("wh-galaxy")
    inside = galaxy.collective_time_us("all_gather", 1 << 20, "batch", (8, 4))
    across = x2.collective_time_us("all_gather", 1 << 20, "batch", (8, 8))
    assert across > inside


def test_replica_sub_meshes_keep_the_links_of_their_axes():
    galaxy = costmodel.get_system("wh-galaxy")  # 8x4: 4 links on the 8-long axis, 3 on the 4-long one
    sub = replica_system(galaxy, (2, 4))
    assert sub.chips == 8 and [a.links for a in sub.links_for((2, 4))] == [4, 3]
    assert [a.links for a in replica_system(galaxy, (1, 8)).links_for((1, 8))] == [3, 4]
    assert replica_system(galaxy, (8, 4)) is galaxy and replica_system(galaxy, (1, 16)) is None
    # a replica that fits in one host of two Galaxies runs on that host's own fabric (4 channels)
    x2 = costmodel.get_system("wh-galaxy-x2")
    assert replica_system(x2, (8, 4), costmodel.get_system("wh-galaxy")) is galaxy


def test_two_galaxies_cut_in_two_run_each_half_inside_a_host():
    """8x8 on two Galaxies (dual_galaxy descriptor: 1 channel per edge) cut in two: each
    4x8 half fits in one Galaxy and keeps its 4 channels; the cut between the halves is the
    hosts' edge, 8 pairs of 1 link; the record says so, with the descriptor as source."""
    from shard_opt.driver import Options
    from shard_opt.serve import Deployer, Request, links_record

    req = Request(source="zoo:llama-3-8b", devices=64, system="wh-galaxy-x2",
                  profile=Profile.parse("isl=128,osl=128,users=64"), options=Options(check=False), quiet=True)
    d = Deployer(req)
    by = {(c.mode, c.replica_mesh): c for c in configurations(64, d.system, req.profile, d.host)}
    whole, cut = by[("colocated", (8, 8))], by[("disaggregated", (8, 8))]
    assert whole.refused is None and cut.refused is None and whole.replicas == 1
    assert (cut.prefill_mesh, cut.cut) == ((4, 8), (8, 1))
    rec = links_record(d, cut)
    assert rec["hosts"] == 2 and rec["decode"]["system"] == "wh-galaxy"
    assert [a["links"] for a in rec["decode"]["axes"]] == [a.links for a in costmodel.get_system(
        "wh-galaxy").links_for((4, 8))]
    assert [a["links"] for a in links_record(d, whole)["prefill"]["axes"]] == [1, 1]
    assert any("dual_galaxy_mesh_graph_descriptor" in s for s in rec["sources"])


# ---- the arithmetic -----------------------------------------------------------------

def test_kv_and_fit_arithmetic():
    assert arith.kv_bytes_per_token(2, 2, 64, 2) == KV_PER_TOKEN
    assert arith.kv_bytes_per_token(80, 8, 128, 2) == 327680  # Llama-3-70B, bf16
    assert arith.kv_heads_per_chip(8, 4) == 2 and arith.kv_heads_per_chip(8, 32) == 1  # replicated past 8
    f = arith.fit(10_000, 3_000, 1_000, 100.0, 20)
    assert (f.tokens, f.users) == (60, 3)
    assert arith.fit(1_000, 3_000, 0, 100.0, 20).users == 0


def test_steady_state_formulas():
    co = arith.steady_state(disaggregated=False, users=4, osl=11, prefill_ms=5.0, decode_ms=2.0)
    assert co.cycle_ms == 10 * 2.0 + 4 * 5.0 and co.ttft_ms == 2.5 * 5.0  # the wave's mean user waits 2.5 prefills
    assert co.tpot_ms == pytest.approx(2.0 + 1.5 * 5.0 / 10)
    assert co.tokens_per_s_per_replica == pytest.approx(1000 * 4 * 11 / 40.0)
    dis = arith.steady_state(disaggregated=True, users=4, osl=11, prefill_ms=5.0, decode_ms=2.0, handover_ms=1.0)
    assert dis.tpot_ms == 2.0 and dis.cycle_ms == 5.0 + 1.0 + 20.0 and dis.ttft_ms == 6.0 and not dis.prefill_bound
    bound = arith.steady_state(disaggregated=True, users=8, osl=3, prefill_ms=5.0, decode_ms=2.0)
    assert bound.prefill_bound and bound.cycle_ms == 40.0 and bound.ttft_ms == 40.0 - 2 * 2.0


def test_the_kv_handover_crosses_the_cut_in_parallel():
    galaxy = costmodel.get_system("wh-galaxy")
    f = galaxy.fabric
    nbytes = 128 * 327680  # a 128-token prompt of Llama-3-70B (bf16 KV)
    one = arith.handover_us(galaxy, nbytes, pairs=1, links=1)
    four = arith.handover_us(galaxy, nbytes, pairs=4, links=4)
    fixed = f.p2p_startup_us + f.hop_latency_us
    assert one == pytest.approx(fixed + nbytes / (f.p2p_efficiency * f.line_rate_gbps * 1e3))
    assert four - fixed == pytest.approx((one - fixed) / 16)  # 4 pairs of 4 links each
    assert arith.handover_us(galaxy, 0, 4, 4) == 0.0


def test_topk_is_chunked_and_a_vocab_split_head_samples_cheaper():
    chunks, width = arith.topk_chunks(128256)
    assert (chunks, width) == (4, 32768)
    assert arith.topk_chunks(128256 // 8) == (1, 16384)
    # the multi-core factory only at a power of two in [8192, 65535): 64128 falls to single-core
    assert arith.topk_us("blackhole", 64128, 32, chunked=False) > 20 * arith.topk_us("blackhole", 32768, 32,
                                                                                      chunked=False)
    # issue 53108's 4 x 32768 multi-core row, reproduced (a calibration point)
    assert 4 * arith.topk_us("blackhole", 32768, 32, chunked=False) == pytest.approx(766, rel=1e-6)
    system, cm = costmodel.get_system("wh-loudbox"), costmodel.get_cost_model("tenstorrent")
    tails = {t.name: t for t in arith.sampling_tail(
        arch="wormhole", vocab=128256, batch=32, vocab_split=8, vocab_axes=("model",), logits_gather_us=363.0,
        mesh_shape=(1, 8), mesh_axes=("batch", "model"), system=system, cost_model=cm)}
    assert tails["topk"].parts["candidates_all_gather_us"] > 0
    assert tails["topk"].total_us < tails["gather"].total_us
    assert tails["gather"].parts["logits_all_gather_us"] == 363.0
    alone = arith.sampling_tail(arch="wormhole", vocab=128256, batch=32, vocab_split=1, vocab_axes=(),
                                logits_gather_us=0.0, mesh_shape=(1, 8), mesh_axes=("batch", "model"),
                                system=system, cost_model=cm)
    assert [t.available for t in alone] == [True, False]


# ---- a real deployment of the small Llama ----------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One --serve run on a Wormhole n300 (2 chips), with the tt-mlir check (as the command
    line runs by default with jax-tt-plugin installed): every output written."""
    from shard_opt.cli import main

    d = tmp_path_factory.mktemp("serve")
    args = [LLAMA, "--devices", "2", "--system", "n300", "--serve", "isl=32,osl=16,users=2", "--quiet",
            "--plan-json", d / "plan.json", "--report", d / "r.md", "-o", d / "m.mlir", "--emit-torch", d / "s.py",
            "--emit-lit-test", d / "t.mlir", "--check"]
    assert main([str(a) for a in args]) == 0
    return d, json.loads((d / "plan.json").read_text())


def _local_bytes(arg, sizes) -> float:
    from shard_opt.facts import dtype_bytes

    n = math.prod(-(-s // math.prod(sizes[x] for x in axes)) for s, axes in zip(arg["shape"], arg["sharding"]))
    return n * dtype_bytes(arg.get("storage") or arg["dtype"])


def _step(plan: dict) -> float:
    return plan["cost"]["checked_us"]


def test_each_phase_goes_through_the_tt_mlir_check(served):
    """The verdict of each phase's plan (deliverable.check_search / check_evaluated, as any
    plan's) is the record's, and the report's deployment section says it."""
    d, plan = served
    r = plan["serving"]
    for key, p in zip(("prefill", "decode"), plan["pipeline"]):
        verdict = p["checks"]["tt_mlir"]["verdict"]
        assert verdict["checked"] and verdict["compiled"]
        assert r[key]["tt_mlir"] == verdict
    line = next(x for x in (d / "r.md").read_text().splitlines() if x.startswith("- **tt-mlir**"))
    assert f"prefill: {r['prefill']['tt_mlir']['words'][:40]}" in line and "; decode: " in line


def test_the_serving_record_is_its_phase_plans(served):
    _, plan = served
    r = plan["serving"]
    pre, dec = plan["pipeline"]
    assert (pre["phase"], dec["phase"]) == ("prefill", "decode")
    assert (pre["batch"], pre["seq_len"]) == (1, 32)
    assert dec["seq_len"] == 32 + 16 and dec["batch"] == r["users_per_replica"]
    # each phase's step: its plan's, as the tt-mlir check priced it (what tt-mlir emits)
    assert r["prefill"]["priced"] == r["decode"]["priced"] == "checked"
    assert r["prefill"]["step_us"] == _step(pre) and r["decode"]["step_us"] == _step(dec)
    # KV cache: the decode plan's cache arguments, and the formula from the config
    caches = [a for a in dec["arguments"] if a["kind"] == "cache"]
    assert len(caches) == 2 * 2
    tokens = dec["batch"] * dec["seq_len"]
    assert r["kv_bytes_per_token"] == KV_PER_TOKEN == sum(math.prod(a["shape"]) * 2 for a in caches) / tokens
    sizes = dict(zip(dec["mesh"]["axes"], dec["mesh"]["shape"]))
    assert r["kv_bytes_per_token_per_chip"] == pytest.approx(sum(_local_bytes(a, sizes) for a in caches) / tokens)
    weights = sum(_local_bytes(a, sizes) for a in dec["arguments"] if a["kind"] in ("param", "buffer"))
    assert r["memory_per_chip"]["weights"] == int(weights)
    # the decode step: the plan's, its logits all_gather swapped for the chosen sampling tail
    tail = r["decode"]["tail"]
    gather = sum(c["time_us"] * (c.get("count") or 1) for c in dec["collectives"]
                 if c["kind"] == "all_gather" and c["shape"][-1] == 1024)
    assert tail["replaces_us"] == pytest.approx(gather, abs=1e-3)
    chosen = next(o for o in tail["options"] if o["name"] == tail["chosen"])
    assert chosen["total_us"] == min(o["total_us"] for o in tail["options"] if o["total_us"] is not None)
    step = _step(dec) - gather + chosen["total_us"]
    assert r["decode"]["step_with_tail_us"] == pytest.approx(step, abs=2e-3)
    # TTFT, TPOT and tokens/s from the steady state of those steps
    u, osl = r["users_per_replica"], 16
    t_p = _step(pre) / 1e3
    if r["mode"] == "colocated":
        assert r["prefill"]["ttft_ms"] == pytest.approx(t_p, abs=1e-4)
        assert r["ttft_ms"] == pytest.approx((u + 1) / 2 * t_p, abs=1e-4)
        assert r["tpot_ms"] == pytest.approx(step / 1e3 + (u - 1) / 2 * t_p / (osl - 1), abs=1e-4)
        cycle = (osl - 1) * step / 1e3 + u * t_p
    else:
        assert r["tpot_ms"] == pytest.approx(step / 1e3, abs=1e-4)
        cycle = r["ttft_ms"] + (osl - 1) * step / 1e3
    assert r["decode"]["tpot_ms"] == pytest.approx(step / 1e3, abs=1e-4)  # the decode step alone
    assert r["tokens_per_s_per_user"] == pytest.approx(1000 / r["tpot_ms"], rel=1e-3)
    assert r["tokens_per_s"] == pytest.approx(r["replicas"] * 1000 * u * osl / cycle, rel=1e-3)
    assert r["users"] == 2 and r["replicas"] * r["users_per_replica"] >= 2


def test_the_choice_is_the_best_configuration_tried(served):
    _, plan = served
    r = plan["serving"]
    tried = [c for c in r["configurations"] if not c.get("refused")]
    assert len(tried) >= 3 and sum(c["chosen"] for c in r["configurations"]) == 1
    best = max(c["tokens_per_s_per_user"] for c in tried)
    chosen = next(c for c in tried if c["chosen"])
    assert chosen["tokens_per_s_per_user"] == best and chosen["vs_chosen"] == 1.0
    assert {c["mode"] for c in tried} == {"colocated", "disaggregated"}


def _dominates(a: dict, b: dict) -> bool:
    ua, ca, ub, cb = (a["tokens_per_s_per_user"], a["tokens_per_s_per_chip"], b["tokens_per_s_per_user"],
                      b["tokens_per_s_per_chip"])
    return ua >= ub and ca >= cb and (ua, ca) != (ub, cb)


def test_the_chosen_configuration_is_on_the_frontier(served):
    """The record's frontier: every deployable configuration off it is beaten on both axes
    by one on it, none on it is beaten, and the chosen one is on it."""
    _, plan = served
    tried = [c for c in plan["serving"]["configurations"] if not c.get("refused") and not c.get("violates")]
    front = [c for c in tried if c.get("frontier")]
    assert front and next(c for c in tried if c["chosen"]).get("frontier")
    assert not any(_dominates(a, b) for a in front for b in front)
    assert all(any(_dominates(f, c) for f in front) for c in tried if not c.get("frontier"))


def test_frontier_leaves_out_what_cannot_be_deployed():
    from shard_opt.serve import frontier

    def e(u, c, **kw):
        return {"tokens_per_s_per_user": u, "tokens_per_s_per_chip": c, **kw}

    entries = [e(10, 5), e(8, 7), e(9, 4), e(20, 20, violates=["tpot_ms"]), {"refused": "16x8"}, e(8, 7), e(3, 9)]
    # (9, 4) is beaten by (10, 5); the over-the-limit (20, 20) beats all but is not deployable;
    # the two equal (8, 7) beat neither each other nor are beaten
    assert frontier(entries) == [0, 1, 5, 6]


def test_serve_outputs_are_written_per_phase(served):
    d, plan = served
    for key in ("prefill", "decode"):
        assert "sdy.mesh" in (d / f"m.{key}.mlir").read_text()
        assert (d / f"t.{key}.mlir").exists() and (d / f"r_ccl.{key}.png").exists()
    assert (d / "r_frontier.png").stat().st_size > 1000
    report = (d / "r.md").read_text()
    assert report.startswith("# Deployment - `llama_load` on 2 chips (n300)")
    assert "| ISL | OSL | users | TTFT (ms) | TPOT (ms) | t/s/u | t/s |" in report
    assert "![tokens/s/user against tokens/s per chip](r_frontier.png)" in report
    script = d / ("s.py" if plan["serving"]["mode"] == "colocated" else "s.decode.py")
    assert "mark_sharding" in script.read_text() or "SHARD_OPT" in script.read_text()
    from shard_opt.plan import plan_from_json

    back = plan_from_json(plan)
    assert back.serving == plan["serving"] and len(back.pipeline) == 2


def test_users_are_limited_by_dram(tmp_path):
    """A chip with 12 MiB of DRAM: users=0 serves as many as fit, and the count is the free
    bytes over the KV cache of one user (the config's formula) -- not the batch cap."""
    from shard_opt.driver import Options
    from shard_opt.serve import Request, deploy

    tiny = dataclasses.replace(costmodel.get_system("n150"), name="test-12mib", dram_bytes=12 * 2**20)
    costmodel.register_system(tiny)
    # the served fixture's lengths and depth (no --layers: the 1-layer copy, then the
    # example's own 2 layers), so the prefill and the 1-user decode lowerings are the ones
    # it made (a test run lowers a script once per set of load arguments)
    profile = Profile.parse("isl=32,osl=16,max_batch=512")
    dep = deploy(Request(source=LLAMA, devices=1, system="test-12mib", profile=profile,
                         options=Options(check=False), quiet=True))
    r = dep.record
    m = r["memory_per_chip"]
    per_user = KV_PER_TOKEN / 1 * profile.context  # one chip: the cache is not split
    assert r["kv_bytes_per_token_per_chip"] == KV_PER_TOKEN
    expect = int((m["usable"] - m["weights"] - m["activations"]) // KV_PER_TOKEN) // profile.context
    assert r["max_users_per_replica"] == expect
    assert 1 <= r["users_per_replica"] <= expect < 512  # DRAM, not max_batch, limits the users
    assert m["kv_cache"] == pytest.approx(r["users_per_replica"] * per_user)
    assert any(line.startswith("memory:") for line in r["limits"])
    # asking for more users than fit refuses the configuration, saying how many fit, and no
    # configuration left means the request is refused in one UserError: the deployer's own
    # arithmetic (settle -> figures) and choice (choose) on this deployment's phase figures,
    # asked for 50 users more than fit (a second deploy would lower and search that batch only
    # to reach the same arithmetic; price()'s users= branch is the served fixture's)
    from shard_opt.serve import Deployer

    more = Deployer(Request(source=LLAMA, devices=1, system="test-12mib",
                            profile=Profile.parse(f"isl=32,osl=16,users={expect + 50}"),
                            options=Options(check=False), quiet=True))
    c = dataclasses.replace(dep.config, refused=None, figures={})
    more.settle(c, expect + 50, dep.config.prefill, dep.config.decode)
    assert c.refused and c.refused.startswith(
        f"{expect + 50} users of {profile.context} tokens per replica do not fit: {expect} do"), c.refused
    with pytest.raises(UserError, match=rf"can serve this model \(1x1 \(colocated\): {expect + 50} users "
                                        rf"of {profile.context} tokens per replica do not fit: {expect} do"):
        more.choose([c])
