"""Every citation in a report backs the sentence it is attached to.

The report asks for citations by claim (``Citer.for_claim``), and the citer records each
one: the text the marker follows, the claim, the keys. These tests render reports for
several plans the CLI writes for small real runs (``conftest.REAL_RUNS``: Megatron pairs
with two all_reduces per layer, a GPT-2 plan with one pair, a replicated plan with the
loader's spec, the heads rule, convolutions) and check, marker by marker, that the sentence carrying it
states the claim and that every cited source's table entry supports that claim.
"""

import re

import pytest

from shard_opt.emit import citations
from shard_opt.emit.citations import CITATIONS, CLAIMS, Citer, sources_for
from shard_opt.emit.report import megatron_pairs, render_report_with_citations
from shard_opt.plan import Plan

# Real runs (conftest.REAL_RUNS): Megatron pairs with two all_reduces per layer (llama8b),
# a GPT-2 plan with one pair and Conv1D weights (gpt2), a replicated plan beside the
# loader's spec (spec), the heads rule at Qwen3.5's shape (qwen35), convolutions (unet).
FIXTURES = ["llama8b", "gpt2", "spec", "qwen35", "unet"]
MARKER = re.compile(r"(\[\d+\])+")


@pytest.fixture
def _load(real_plan):
    return real_plan


def _two_all_reduces(plan) -> bool:
    """Whether a repeated layer holds two used column -> row pairs and exactly two all_reduces."""
    return (len([p for p in megatron_pairs(plan) if ".*." in p["block"] + "."]) == 2
            and sum(1 for c in plan.collectives if c["kind"] == "all_reduce" and c.get("layer") == 0) == 2)


def _render(plan):
    text, (cite,) = render_report_with_citations(plan, png_path=None)
    return text.split("## 7. Sources")[0], cite


def _markers(body: str, cite: Citer) -> list[tuple[int, object, str]]:
    """(position, use, sentence) for every citation marker in the body.

    The sentence is the text from the previous sentence boundary (". ", a line start or a
    table cell) to the marker. Fails if a marker was not asked for by claim."""
    by_pos = {}
    for use in cite.uses:
        needle = f"{use.about} {use.marker}"
        found = [m.start() for m in re.finditer(re.escape(needle), body)]
        assert found, f"citation for {use.claim!r} not where it was asked for: {needle!r}"
        for start in found:
            by_pos[start + len(use.about) + 1] = use
    out = []
    for m in MARKER.finditer(body):
        assert m.start() in by_pos, f"a marker nobody asked for by claim: {body[max(0, m.start() - 80):m.end()]!r}"
        use = by_pos[m.start()]
        assert m.group(0) == use.marker
        head = body[:m.start()]
        cut = max(head.rfind(". "), head.rfind("\n"), head.rfind("| "))
        out.append((m.start(), use, head[cut + 1:].strip()))
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_each_marker_backs_the_claim_of_its_sentence(name, _load):
    plan = _load(name)
    body, cite = _render(plan)
    marks = _markers(body, cite)
    assert marks
    whys = [g["why"] for g in plan.get("groups") or [] if len(g.get("why") or "") > 20]
    for _pos, use, sentence in marks:
        claim = CLAIMS[use.claim]
        assert re.search(claim.wording, sentence, re.I), (use.claim, sentence)
        for key in use.keys:
            assert use.claim in CITATIONS[key].supports, (key, use.claim, sentence)
        assert use.marker == "".join(f"[{cite.order.index(k) + 1}]" for k in use.keys)
        # A computed fact (the search's own reasons, "Search: ...") never carries a citation.
        assert not sentence.startswith(("Search:", "- **Why:** Search:")), sentence
        assert not any(w in sentence for w in whys), sentence


@pytest.mark.parametrize("name", FIXTURES)
def test_only_listed_sources_are_numbered(name, _load):
    text, (cite,) = render_report_with_citations(_load(name), png_path=None)
    sources = text.split("## 7. Sources")[1]
    listed = re.findall(r"^\| \[(\d+)\] \| ([^|]+) \|", sources, re.M)
    assert [int(n) for n, _ in listed] == list(range(1, len(cite.order) + 1))
    assert [t.strip() for _, t in listed] == [CITATIONS[k].title for k in cite.order]
    used = {k for u in cite.uses for k in u.keys}
    assert used == set(cite.order)  # nothing numbered that the body does not show


@pytest.mark.parametrize("name", FIXTURES)
def test_two_all_reduces_only_with_two_pairs_and_two_per_layer(name, _load):
    plan = _load(name)
    body, cite = _render(plan)
    uses = [u for u in cite.uses if u.claim == "megatron-two-allreduce"]
    assert bool(uses) == _two_all_reduces(plan), name
    if name == "llama8b":
        assert uses  # the run this claim is about: Llama's two pairs, two all_reduces per layer
    if not uses:
        assert not re.search(r"two all[-_ ]reduces", body, re.I)
        return
    # Where it is said, the plan has it: two used pairs in the layer, two all_reduces in layer 0.
    assert len([p for p in megatron_pairs(plan) if ".*." in p["block"] + "."]) == 2
    assert sum(1 for c in plan["collectives"] if c["kind"] == "all_reduce" and c.get("layer") == 0) == 2
    for m in re.finditer(r"two all[-_ ]reduces", body, re.I):
        line = body[body.rfind("\n", 0, m.start()) + 1: body.find("\n", m.end())]
        assert any(u.about in line for u in uses), line


def test_two_all_reduces_under_a_component_holding_both_pairs(_load):
    """A component holding both pairs of a layer (q/k/v -> o and gate/up -> down in one
    block) with two all_reduces per layer says it in its CCLs line; one holding a single
    pair says one all_reduce closes it."""
    plan = _load("llama8b")

    def rename(s):
        return s.replace(".self_attn.", ".block.").replace(".mlp.", ".block.")

    d = plan.to_json()  # a plan is frozen: the renamed one is built from its edited JSON
    for a in d["arguments"]:
        a["name"] = rename(a["name"])
    for g in d["groups"]:
        g["role"] = rename(g["role"])
    for c in d["collectives"]:
        c["component"] = rename(c["component"] + ".")[:-1]
    for pr in d["pairs"]:
        pr["column"], pr["row"] = [rename(r) for r in pr["column"]], [rename(r) for r in pr["row"]]
    d.pop("architecture")
    body, cite = _render(Plan.from_json(d))
    per = body[body.index("## 4. Per-component design"): body.index("## 5. CCL budget")]
    block = per[per.index("### `model.layers.*.block`"):]
    block = block[: block.find("\n### ", 1)]
    assert "These are Megatron's two all-reduces per transformer layer" in block
    assert sum(1 for u in cite.uses if u.claim == "megatron-two-allreduce") == 2  # here and in section 2
    single = _render(plan)[0]
    attn = single[single.index("### `model.layers.*.self_attn`"):]
    attn = attn[: attn.find("\n### ", 1)]
    assert "One all_reduce per layer closes each column→row pair" in attn
    assert "two all-reduces" not in attn


@pytest.mark.parametrize("name", FIXTURES)
def test_no_megatron_citation_under_a_component_without_a_pair(name, _load):
    """The bug this replaces: "Two all-reduces per transformer layer is Megatron's forward
    cost [4]" under an embedding. A component cites Megatron only when it holds a pair."""
    body, cite = _render(_load(name))
    start, end = body.index("## 4. Per-component design"), body.index("## 5. CCL budget")
    blocks = []
    for m in re.finditer(r"^### ", body[start:end], re.M):
        blocks.append(start + m.start())
    blocks.append(end)
    marks = _markers(body, cite)
    for a, b in zip(blocks, blocks[1:]):
        has_pair = "a Megatron column→row pair on" in body[a:b]
        for pos, use, sentence in marks:
            if a <= pos < b and use.claim.startswith("megatron"):
                assert has_pair, (body[a:body.index("\n", a)], sentence)


def test_for_claim_refuses_what_its_source_does_not_support():
    c = Citer()
    with pytest.raises(ValueError):  # the playbook does not say two all-reduces per layer
        c.for_claim("megatron-two-allreduce", "Each layer pays two all_reduces", via=("playbook",))
    with pytest.raises(ValueError):  # a bare computed fact is not the playbook's rule
        c.for_claim("speed-objective", "split: the modeled step is 70 us shorter this way")
    with pytest.raises(KeyError):
        c.for_claim("no-such-claim", "anything")
    with pytest.raises(KeyError):
        c.for_claim("compiler-limitation", "a rule", via=("no_such_source",))
    assert c.uses == [] and c.order == []
    assert c.sentence("megatron-two-allreduce", "Each layer pays two all-reduces") == "Each layer pays two all-reduces [1]."
    assert c.order == ["megatron"]


def test_every_claim_has_a_source_and_every_source_known_claims():
    for claim in CLAIMS:
        assert sources_for(claim), claim
    for key, src in CITATIONS.items():
        assert src.supports and src.supports <= set(CLAIMS), key
    assert not set(citations.EVIDENCE) & set(citations.VERIFIED_ELSEWHERE)
    assert set(citations.EVIDENCE) | set(citations.VERIFIED_ELSEWHERE) == set(CITATIONS)
    for key, where in citations.VERIFIED_ELSEWHERE.items():  # an address and the date it was read
        assert where.startswith("https://") and "read 20" in where, key


def test_bare_facts_carry_no_citation(_load):
    for name in FIXTURES:
        body, cite = _render(_load(name))
        # what the search computed for this model (its modeled times, speed-ups) is a bare
        # fact: no sentence carrying a marker states one, whatever its wording
        for _, _, sentence in _markers(body, cite):
            assert not re.search(r"\d+(\.\d+)? ?(us|ms)\b|\d+\.\d+x\b", sentence), sentence
        assert not re.search(r"Two all-reduces per transformer layer is Megatron's forward cost", body)
        for line in body.splitlines():
            if line.startswith("| ") and not line.startswith(("| megatron", "| one-axis", "| autoshard", "| loader-spec")):
                assert not MARKER.search(line), line  # table rows state computed figures
