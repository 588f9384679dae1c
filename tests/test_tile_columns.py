"""Rule tile-columns: an activation's last dim crosses devices only in whole 32-wide tiles."""
from __future__ import annotations

import json
import os

from shard_opt.rules import BY_ID, Walk
from shard_opt.rules.tile_columns import unaligned_columns

HEAD = os.path.join(os.path.dirname(__file__), "fixtures", "scripts", "untied_head.py")


def test_a_gather_of_partial_tiles_breaks_the_rule_whole_tiles_do_not():
    rule = BY_ID["tile-columns"]
    assert unaligned_columns((1, 1, 201088), (1, 1, 25136))  # GPT-OSS-20B's head 8 ways: 785.5 tiles
    assert not unaligned_columns((1, 1, 201088), (1, 1, 50272))  # 4 ways: 1571 tiles
    assert not unaligned_columns((1, 1, 256000), (1, 1, 32000))  # Gemma's 8 ways: 1000 tiles
    assert not unaligned_columns((128, 4544), (128, 4544))  # not split
    assert rule.breaks(Walk(gathers=[((1, 1, 25136), (1, 1, 201088))]))
    assert rule.breaks(Walk(slices=[((128, 4544), (128, 568))]))
    assert not rule.breaks(Walk(gathers=[((1, 1, 50272), (1, 1, 201088))]))


def _evaluate(run_cli, tmp_path, mesh):
    plan_path = tmp_path / f"plan-{mesh}.json"
    code, _, err = run_cli(HEAD, "--mesh", mesh, "--spec", HEAD, "--evaluate", "--no-check", "--plan-json", plan_path,
                           "-o", tmp_path / "out.mlir", "--quiet")
    assert code == 0, err
    plan = json.loads(plan_path.read_text())
    return {r["rule"]: r["plan_breaks"] for r in plan["safety"]}, plan


def test_a_vocab_split_head_gathered_in_partial_tiles_is_flagged(run_cli, tmp_path):
    # 896 words on 8 devices: 112 each, the logits gathered from 3.5-tile pieces
    breaks, plan = _evaluate(run_cli, tmp_path, "1x8")
    assert breaks["tile-columns"]
    assert any(c["kind"] == "all_gather" and c["shape"][-1] == 896 for c in plan["collectives"])
    # on 4 devices, 224 each: whole tiles
    breaks, _ = _evaluate(run_cli, tmp_path, "1x4")
    assert not breaks["tile-columns"]
