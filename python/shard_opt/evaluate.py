"""Price one candidate: apply its shardings, run real Shardy, read and price the collectives.

``Evaluator`` holds one lowered model on one mesh and memoizes candidates, so a search
revisiting a candidate pays nothing. ``LayeredEvaluator`` prices a deep model from
short copies of it: with ``c1`` and ``c2`` the costs of the 1- and 2-layer models,
an ``L``-layer model costs ``c1 + (L - 1) * (c2 - c1)`` — exact when the repeated
layers are identical, which ``tests/test_search.py`` checks against a whole-model
evaluation.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import re
import time
from dataclasses import dataclass

from shard_opt import ir, parallel
from shard_opt.analysis import arg_shardings
from shard_opt.candidates import Group
from shard_opt.evaluation import Candidate, Evaluation, Score  # noqa: F401  (the engine's values)
from shard_opt.facts import ModuleFacts
from shard_opt.lowered import LoweredModel
from shard_opt import pipelines
from shard_opt.pass_manager import PassContext, PassManager
from shard_opt.weights import WeightFormats, matmul_weight_roles
from shard_opt.sdy import COLLECTIVE_OPS
from shard_opt.sharding import Mesh, TensorSharding


def is_partitioned(module) -> bool:
    """Whether ``module``'s collectives are already explicit ops (``sdy.all_reduce`` ...):
    a module Shardy has partitioned, such as the ``-o`` module of ``--evaluate`` (the
    propagated module, every collective stamped by ``collect-collectives``). Shardy must
    not run on it again: its ``insert-explicit-reshards`` re-inserts the all_reduce of every
    partial sum (a ``dot_general`` whose contracting dim is split keeps its result's
    sharding, so nothing says the ``sdy.all_reduce`` after it already reduced it), and the
    module would be priced with each all_reduce twice."""
    return bool(ir.ops_in(module.operation, COLLECTIVE_OPS))


def prepare(model: LoweredModel, pipeline: str = "tt-mlir",
            weights: WeightFormats | None = None, *, as_written: bool = False) -> tuple[str, dict[int, str]]:
    """``model``'s module as candidates are evaluated from (``pipelines.prepare``: with
    tt-mlir's pipeline its calls inlined first; batched matmuls on every batch dim; its
    fused groups tagged), and the block-float format of each matmul weight ``weights``
    converts. ``as_written``: a partitioned module (``is_partitioned``) is priced as it
    is: the run that partitioned it inlined, unfolded and tagged it already (its fused
    groups were tagged before the collectives went in; tagging again, around them, would
    group differently)."""
    module = ir.parse(model.text, filename=model.name)  # fails early, naming the file
    PassManager(pipelines.prepare(pipeline, as_written=as_written), PassContext(arguments=model.arguments)).run(module)
    storage = {}
    if weights is not None and not weights.is_plain:  # the matmul weights' roles (the fusion tags change none)
        storage = weights.resolve(model.arguments, matmul_weight_roles(module, model.arguments))
    return ir.print_module(module), storage


def group_members(model: LoweredModel) -> dict[tuple, list[int]]:
    """Group key -> argument indices of ``model`` (by role and by shape; see ``Group.key``);
    computed once per model (every candidate asks)."""
    def build():
        out: dict[tuple, list[int]] = {}
        for a in model.arguments:
            out.setdefault((a.role, a.shape, a.kind), []).append(a.index)
            out.setdefault(("shape", a.shape), []).append(a.index)
        return out

    return _per_model(model, "_group_members", build)


def _per_model(model: LoweredModel, key: str, build):
    """``build()``, computed once per model and kept in its meta (every candidate asks),
    for as long as its argument list is the one it was built from (a copy of a model,
    ``dataclasses.replace``, shares its meta)."""
    cached = model.meta.get(key)
    if cached is None or cached[0] is not model.arguments:
        cached = model.meta[key] = (model.arguments, build())
    return cached[1]


def follows_consumer(arg) -> bool:
    """1-D parameters (norm scales, biases) are left open: Shardy gives them the split their
    consumer wants (a column-parallel bias splits with its weight), at no cost."""
    return arg.kind in ("param", "buffer") and len(arg.shape) <= 1


def shardings_for(model: LoweredModel, groups: list[Group], assignment: tuple[int, ...]) -> dict:
    """Argument index -> sharding for ``model``'s arguments: the chosen option, else closed
    and replicated; arguments that follow their consumer are left out (open)."""
    members = group_members(model)
    out = dict(_defaults(model))
    for g, choice in zip(groups, assignment):
        for idx in members.get(g.key(), ()):
            out[idx] = g.options[choice]
    return out


def _defaults(model: LoweredModel) -> dict[int, TensorSharding]:
    """Argument index -> closed and replicated, for the arguments that do not follow their
    consumer; once per model (shardings are immutable: every candidate shares them)."""
    return _per_model(model, "_defaults", lambda: {a.index: TensorSharding.replicated(len(a.shape))
                                                   for a in model.arguments if not follows_consumer(a)})


def constraints_for(groups: list[Group], assignment: tuple[int, ...]) -> dict:
    """Site -> sharding for the constraint sites the assignment constrains (option 0 of a
    site group is no constraint)."""
    return {g.role: g.options[o] for g, o in zip(groups, assignment) if g.by == "site" and o != 0}


# One Shardy run's fixed cost (clone, passes, analysis) in ops of the module: a 15-op
# module's run takes about what 75 ops of a large one take (measured 2026-12-01).
RUN_OVERHEAD_OPS = 60
_OP_LINE = re.compile(r"^\s*(?:%[^=\n]*=\s*)?\"?[a-z_]+\.[a-z_.]+", re.M)


def op_count(text: str) -> int:
    """The operations of a printed module (one per line, nested regions' included):
    deterministic, and what a candidate's propagation time grows with."""
    return len(_OP_LINE.findall(text))


_UIDS = itertools.count()


def memo_key(groups: list[Group], assignment: tuple[int, ...]) -> tuple:
    """What a candidate is across models (the layered scorer's memo): the (group, chosen
    sharding) pairs that are not replicated."""
    return tuple(sorted((g.key(), g.options[o].body()) for g, o in zip(groups, assignment)
                        if not g.options[o].is_replicated))


def candidate_key(model: LoweredModel, shardings: dict[int, TensorSharding], constraints: dict) -> tuple:
    """A candidate on one model: the argument shardings that differ from the default (closed
    and replicated; absent for the arguments that follow their consumer), and the constraints."""
    follow = _followers(model)
    entries = []
    for i, s in shardings.items():
        if i in follow or not s.is_replicated or s.open_dims:
            entries.append((i, s.body()))
    return tuple(sorted(entries)), tuple(sorted((k, v.body()) for k, v in constraints.items()))


def _followers(model: LoweredModel) -> frozenset[int]:
    return _per_model(model, "_followers",
                      lambda: frozenset(a.index for a in model.arguments if follows_consumer(a)))


def shardings_by_role(model: LoweredModel, by_role: dict[str, TensorSharding]) -> dict[int, TensorSharding]:
    """Argument index -> sharding for a plan given per role (``model.layers.*.mlp.up_proj.weight``)
    or per name: listed arguments take theirs, the others are replicated (closed)."""
    out = {}
    for a in model.arguments:
        s = by_role.get(a.name, by_role.get(a.role))
        out[a.index] = s if s is not None else TensorSharding.replicated(len(a.shape))
    return out


@dataclass(frozen=True)
class EvaluatorSpec:
    """An ``Evaluator`` as a picklable value: what a worker process rebuilds it from
    (``shard_opt.parallel`` calls ``build()`` the first time it sees ``uid``). The module
    text is the prepared one, so a worker prepares nothing again."""

    uid: str
    name: str
    text: str
    arguments: tuple
    mesh: Mesh
    system: object
    cost_model: object
    result_shardings: dict
    pipeline: str
    storage: dict
    allow: frozenset

    def build(self) -> "Evaluator":
        model = LoweredModel(self.name, self.text, list(self.arguments))
        return Evaluator(model, self.mesh, self.system, self.cost_model, result_shardings=self.result_shardings,
                         pipeline=self.pipeline, prepared=(self.text, self.storage), allow=self.allow)


@dataclass(frozen=True)
class Task:
    """One unit of work for ``shard_opt.parallel``: the facts of an assignment
    (``kind == "facts"``, ``arg`` the assignment) or a probe (``"probe"``, ``arg`` the
    group and option moved), on the evaluator ``spec`` names."""

    kind: str
    spec: EvaluatorSpec
    groups: list
    arg: tuple


class Evaluator:
    """Evaluates candidates of one model on one mesh.

    Two memos: the facts of each candidate (what Shardy produced: the expensive part)
    and its score under this evaluator's cost model. ``with_cost_model`` gives a view
    that shares the facts, so a baseline priced by another model re-propagates nothing.
    """

    def __init__(self, model: LoweredModel, mesh: Mesh, system, cost_model, *,
                 result_shardings: dict | None = None, pipeline: str = "tt-mlir",
                 weights: WeightFormats | None = None, prepared: tuple[str, dict] | None = None,
                 allow: frozenset[str] = frozenset(), persist: bool = False, as_written: bool = False):
        self.model = model
        # a partitioned module (is_partitioned, --evaluate only): priced as written, with no
        # guards, no propagation, no collectives inserted (they are in it)
        self.as_written = as_written
        self.mesh = mesh
        self.system = system
        self.cost_model = cost_model
        self.result_shardings = result_shardings or {}
        self.pipeline = pipeline  # shardy-propagate's pipeline: "tt-mlir" or "sdy"
        self.allow = frozenset(allow)  # safety rules the user turned off (shard_opt.safety)
        self.facts_memo: dict[tuple, ModuleFacts] = {}
        self.memo: dict[tuple, Score] = {}
        self.stats = {"evaluations": 0, "seconds": 0.0}  # in this process, shared by views
        self.uid = f"{os.getpid()}-{next(_UIDS)}"
        # the module every candidate starts from, prepared once: calls inlined (tt-mlir's
        # pipeline starts with its inliner) and fused groups tagged (passes/mark_fusions.py);
        # and the weights stored as block floats (argument index -> format)
        self.weights = weights or WeightFormats()
        self.text, self.storage = prepared if prepared is not None else prepare(model, pipeline, self.weights,
                                                                               as_written=as_written)
        self._module = None  # parsed from self.text on first use (module())
        self._ops = None  # op_count(self.text), on first use (ops_each)
        # persist: the facts of earlier runs on this module (shard_opt.factcache) start the
        # memo, and persist() writes the memo back
        self.persist_facts = persist
        self._stored, self._stored_seconds = 0, None
        if persist:
            from shard_opt import factcache

            self.facts_memo, self._stored_seconds = factcache.load(self)
            self._stored = len(self.facts_memo)

    def persist(self) -> None:
        """Keep the facts of this run's candidates for the next (when ``persist`` was asked
        and there are new ones)."""
        if self.persist_facts and len(self.facts_memo) > self._stored:
            from shard_opt import factcache

            factcache.save(self, self.facts_memo, self.seconds_each)
            self._stored = len(self.facts_memo)

    def with_cost_model(self, cost_model) -> "Evaluator":
        view = copy.copy(self)
        view.cost_model, view.memo = cost_model, {}
        return view

    def spec(self) -> "EvaluatorSpec":
        """What a worker process needs to rebuild this evaluator (see shard_opt.parallel)."""
        return EvaluatorSpec(self.uid, self.model.name, self.text, tuple(self.model.arguments), self.mesh,
                             self.system, self.cost_model, dict(self.result_shardings), self.pipeline,
                             dict(self.storage), self.allow)

    @property
    def ops_each(self) -> int:
        """What one evaluation here costs, statically: the ops of the prepared module plus
        ``RUN_OVERHEAD_OPS`` (the search's enumeration budget reads this, never a clock)."""
        if self._ops is None:
            self._ops = op_count(self.text) + RUN_OVERHEAD_OPS
        return self._ops

    @property
    def seconds_each(self) -> float | None:
        """Mean seconds of one evaluation here; before any, what an earlier run's took
        (stored with its facts). Only decides whether worker processes pay
        (``shard_opt.parallel``), never which candidates are evaluated."""
        n = self.stats["evaluations"]
        return self.stats["seconds"] / n if n else self._stored_seconds

    def module(self):
        """The prepared module, parsed once, with what every candidate shares
        (``pipelines.shared``: this evaluator's mesh, the guards, tt-mlir's decoupled
        broadcasts). Each candidate runs on a copy (cloning is ten times faster than
        parsing the text again)."""
        if self._module is None:
            module = ir.parse(self.text, filename=self.model.name)
            PassManager(pipelines.shared(self.pipeline, self.allow, as_written=self.as_written),
                        PassContext(mesh=self.mesh, arguments=self.model.arguments)).run(module)
            self._module = module
        return self._module

    def _run_passes(self, shardings: dict[int, TensorSharding], pipeline: str, constraints: dict | None = None):
        """``pipeline`` (``pipelines.candidate`` or ``pipelines.probe``) on a fresh copy of
        the module (its mesh and guards in place), with ``shardings`` and ``constraints``
        to apply: (module, pass context)."""
        module = self.module().operation.clone()
        ctx = PassContext(mesh=self.mesh, shardings=shardings, arguments=self.model.arguments,
                          result_shardings=self.result_shardings, constraints=constraints or {},
                          storage=self.storage)
        PassManager(pipeline, ctx).run(module)
        return module, ctx

    def propagate(self, shardings: dict[int, TensorSharding], *, constraints: dict | None = None,
                  keep_ir: bool = False):
        """Run the pipeline on a fresh copy of the module: (facts, propagated module or None)."""
        t0 = time.perf_counter()
        # candidates that are only priced skip the IR verifier; a kept IR is verified
        pipeline = pipelines.candidate(self.pipeline, verify=keep_ir, annotate=keep_ir, as_written=self.as_written)
        module, ctx = self._run_passes(shardings, pipeline, constraints)
        self.stats["evaluations"] += 1
        self.stats["seconds"] += time.perf_counter() - t0
        return ctx.facts, (module if keep_ir else None)

    def run(self, shardings: dict[int, TensorSharding], *, constraints: dict | None = None,
            keep_ir: bool = False) -> Evaluation:
        """Evaluate one candidate; with ``keep_ir``, also the propagated text, and the
        shardings Shardy chose for the arguments left open."""
        facts, module = self.propagate(shardings, constraints=constraints, keep_ir=keep_ir)
        text = None
        if module is not None:
            text = ir.print_module(module)
            chosen = arg_shardings(ir.main_func(module))
            shardings = {**{i: s for i, s in enumerate(chosen) if s is not None}, **shardings}
        return Evaluation(shardings, self.cost_model.price(facts, self.system), facts, text, dict(self.storage),
                          self.allow)

    def key(self, groups: list[Group], assignment: tuple[int, ...]) -> tuple:
        """What a candidate is on this model: its argument shardings and constraints (so
        the same plan reached through other groups, as a baseline's, is priced once)."""
        return candidate_key(self.model, shardings_for(self.model, groups, assignment),
                             constraints_for(groups, assignment))

    def facts(self, groups: list[Group], assignment: tuple[int, ...]) -> ModuleFacts:
        return self.facts_of(shardings_for(self.model, groups, assignment), constraints_for(groups, assignment))

    def facts_of(self, shardings: dict[int, TensorSharding], constraints: dict | None = None) -> ModuleFacts:
        """The facts of one candidate given as argument shardings (memoized)."""
        key = candidate_key(self.model, shardings, constraints or {})
        if key not in self.facts_memo:
            self.facts_memo[key] = self.propagate(shardings, constraints=constraints)[0]
        return self.facts_memo[key]

    def score(self, groups: list[Group], assignment: tuple[int, ...]) -> Score:
        return self.score_of(shardings_for(self.model, groups, assignment), constraints_for(groups, assignment))

    def score_of(self, shardings: dict[int, TensorSharding], constraints: dict | None = None) -> Score:
        key = candidate_key(self.model, shardings, constraints or {})
        if key not in self.memo:
            facts = self.facts_of(shardings, constraints)
            self.memo[key] = Score.of(self.cost_model.price(facts, self.system), facts, self.allow)
        return self.memo[key]

    def score_by_role(self, by_role: dict[str, TensorSharding], constraints: dict | None = None) -> Score:
        """The score of a plan given per argument role (a loader's spec): listed roles take
        their sharding, every other argument is replicated."""
        return self.score_of(shardings_by_role(self.model, by_role), constraints)

    def screen_many(self, groups: list[Group], assignments: list[tuple[int, ...]]) -> list[Score]:
        """A cheap proxy score for ranking moves; for a single model, the score itself."""
        return self.score_many(groups, assignments)

    def score_many(self, groups: list[Group], assignments: list[tuple[int, ...]]) -> list[Score]:
        """Scores of many candidates; the ones never propagated run in parallel."""
        run_facts_batch([(self, groups, self.unpropagated(groups, assignments))])
        return [self.score(groups, a) for a in assignments]

    def unpropagated(self, groups: list[Group], assignments: list[tuple[int, ...]]) -> dict[tuple, tuple]:
        """{candidate key: assignment} of the candidates never propagated (one per key)."""
        todo = {}
        for a in assignments:
            key = self.key(groups, a)
            if key not in self.facts_memo and key not in todo:
                todo[key] = tuple(a)
        return todo

    def local(self, task: Task):
        """One ``parallel.work`` task computed by this evaluator (memoized)."""
        return self.facts(task.groups, task.arg) if task.kind == "facts" else self.probe(task.groups, *task.arg)

    def probe_many(self, groups: list[Group], moves: list[tuple[int, int]]) -> list[dict[int, int]]:
        spec = self.spec()
        results = parallel.run_batch([Task("probe", spec, groups, m) for m in moves], self.seconds_each,
                                     local=self.local)
        if results is None:
            return [self.probe(groups, gi, o) for gi, o in moves]
        return results

    def probe(self, groups: list[Group], gi: int, option: int) -> dict[int, int]:
        """Which other groups follow when group ``gi`` takes ``option``.

        Only that group is annotated; every other argument is left open, Shardy
        propagates, and each group whose first argument came out with exactly one of
        its options is reported with that option. This is how Megatron pairs (and
        q/k/v -> o chains) are found from the model instead of from a template.
        """
        members = group_members(self.model)
        shardings = {i: groups[gi].options[option] for i in members.get(groups[gi].key(), ())}
        constraints = {groups[gi].role: groups[gi].options[option]} if groups[gi].by == "site" else {}
        module, _ = self._run_passes(shardings, pipelines.probe(self.pipeline), constraints)
        found = arg_shardings(ir.main_func(module))
        follows = {}
        for gj, g in enumerate(groups):
            idx = members.get(g.key(), ())
            if gj == gi or not idx or found[idx[0]] is None or found[idx[0]].is_replicated:
                continue
            if any(a.size is not None for d in found[idx[0]].dims for a in d):
                continue  # a sub-axis: not one of the options
            names = found[idx[0]].axis_names()
            for oj, opt in enumerate(g.options):
                if opt.axis_names() == names:
                    follows[gj] = oj
                    break
        return follows


def run_facts_batch(work: list[tuple["Evaluator", list[Group], dict[tuple, tuple]]]) -> None:
    """Propagate the candidates ``work`` lists ((evaluator, groups, {key: assignment}), as
    ``Evaluator.unpropagated`` gives them) as one batch: this process takes a share, the
    workers the rest (``shard_opt.parallel``); every result lands in its evaluator's memo.
    An evaluator that has not timed a candidate yet times one in-process first, which
    decides whether the workers pay."""
    for ev, groups, todo in work:
        if todo and ev.seconds_each is None:
            key = next(iter(todo))
            ev.facts(groups, todo.pop(key))
    tasks, owners = [], []
    for ev, groups, todo in work:
        spec = ev.spec()
        for key, a in todo.items():
            tasks.append(Task("facts", spec, groups, a))
            owners.append((ev, key))
    if not tasks:
        return
    seconds = sum(len(todo) * (ev.seconds_each or 0.0) for ev, _, todo in work)
    by_uid = {ev.uid: ev for ev, _, _ in work}
    results = parallel.run_batch(tasks, seconds / len(tasks), local=lambda t: by_uid[t.spec.uid].local(t))
    if results is not None:
        for (ev, key), facts in zip(owners, results):
            ev.facts_memo[key] = facts


class LayeredEvaluator:
    """Scores an L-layer model from its 1- and 2-layer versions."""

    def __init__(self, short1: Evaluator, short2: Evaluator, num_layers: int):
        self.e1, self.e2, self.layers = short1, short2, num_layers
        self.memo: dict[tuple, Score] = {}

    def probe_many(self, groups: list[Group], moves: list[tuple[int, int]]) -> list[dict[int, int]]:
        return self.e1.probe_many(groups, moves)

    def persist(self) -> None:
        self.e1.persist()
        self.e2.persist()

    @property
    def ops_each(self) -> int:
        """One candidate's static cost: a run of each short model."""
        return self.e1.ops_each + self.e2.ops_each

    @property
    def seconds_each(self) -> float | None:
        """One candidate's in-process time: a run of each short model."""
        a, b = self.e1.seconds_each, self.e2.seconds_each
        return a + b if a is not None and b is not None else None

    def with_cost_model(self, cost_model) -> "LayeredEvaluator":
        return LayeredEvaluator(self.e1.with_cost_model(cost_model), self.e2.with_cost_model(cost_model),
                                self.layers)

    def screen_many(self, groups: list[Group], assignments: list[tuple[int, ...]]) -> list[Score]:
        """The 1-layer model's scores: a proxy that ranks moves at half the cost."""
        return self.e1.score_many(groups, assignments)

    def score_many(self, groups: list[Group], assignments: list[tuple[int, ...]]) -> list[Score]:
        # both short models' candidates in one batch: a round of 4 candidates is 8 tasks
        run_facts_batch([(e, groups, e.unpropagated(groups, assignments)) for e in (self.e1, self.e2)])
        return [self.score(groups, a) for a in assignments]

    def score(self, groups: list[Group], assignment: tuple[int, ...]) -> Score:
        key = memo_key(groups, assignment)
        if key not in self.memo:
            s1 = self.e1.score(groups, assignment)
            s2 = self.e2.score(groups, assignment)
            self.memo[key] = extrapolate(s1, s2, self.layers, self.e2.system)
        return self.memo[key]

    def score_by_role(self, by_role: dict[str, TensorSharding], constraints: dict | None = None) -> Score:
        s1, s2 = self.e1.score_by_role(by_role, constraints), self.e2.score_by_role(by_role, constraints)
        return extrapolate(s1, s2, self.layers, self.e2.system)


def extrapolate(s1: Score, s2: Score, layers: int, system) -> Score:
    k = layers - 1

    def lin(a, b):
        if math.isinf(a) or math.isinf(b):  # an unsupported collective: stays unpriceable
            return math.inf
        return a + k * (b - a)

    memory = int(lin(s1.memory_bytes, s2.memory_bytes))
    usable = getattr(system, "usable_dram_bytes", None) or 0.9 * system.dram_bytes
    return Score(
        lin(s1.score, s2.score), lin(s1.total_us, s2.total_us), lin(s1.compute_us, s2.compute_us),
        lin(s1.ccl_us, s2.ccl_us), int(round(lin(s1.ccl_count, s2.ccl_count))),
        int(round(lin(s1.ccl_bytes, s2.ccl_bytes))), memory, memory <= usable,
        tuple(sorted(set(s1.unsafe) | set(s2.unsafe))),
    )
