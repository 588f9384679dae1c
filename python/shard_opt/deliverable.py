"""Which plan ships: the tt-mlir check of the search's finalists, and the choice it makes.

After the search, ``check_search`` compiles the search's best plan and the next distinct
ones (``FINALISTS``, each on the whole model) with tt-mlir, in the form tt-xla's
``torch.compile(backend="tt")`` hands them over by default: attention, LayerNorm and GELU in
tt-xla's ``tenstorrent.*`` composites (``annotate``). What tt-mlir emits beyond what was
priced is priced too (``checks.tt_mlir.checked_us``, ``shard_opt.ttmlir.check``), and the
program tt-mlir partitioned is run on virtual XLA CPU devices against the unsharded model
(``shard_opt.ttmlir.numerics``). The recommendation is the plan with the lowest checked
cost that compiles in that default form and whose numerics pass, tried in order:

1. the finalists;
2. when none passes, the next ranked candidates (``MORE``) and the baselines the search
   started from (the loader's or user's spec, Megatron), as the search's groups write them;
3. when none passes, the composites-off form (``tt_enable_composite_ops`` False, every
   composite flat) of any of them that tt-mlir refused with composites on: a different
   deliverable, named so in every output (the emitted script sets the option);
4. when the numerics could not run for any of them (a model too large even as a layer
   copy), the first that compiles, its verdict saying so.

When none of those is deliverable, the search's best plan is shown, every output says it is
NOT DELIVERABLE, and the command exits 4 (``cli``). The verdict (``shard_opt.verdict``)
is one value every output writes. ``check_evaluated`` is the same check for ``--evaluate``:
the given plan alone, nothing to choose.

Numerics run on the whole model when its arguments fit the memory a run may take
(``numerics.memory_budget``), else on the 2- or 1-layer copy the search scores (the plan
applied to it by role), and the verdict says which.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

from shard_opt import timing
from shard_opt.annotate import annotate_many, composites_form
from shard_opt.evaluate import Evaluator, constraints_for, shardings_by_role, shardings_for
from shard_opt.verdict import Verdict, not_checked

FINALISTS = 3  # the recommendation and the next distinct plans compiled by the tt-mlir check
MORE = 3  # the next ranked candidates compiled when no finalist is deliverable


@dataclass
class Trial:
    """One plan in one form, as the check compiled it."""

    name: str  # "finalist-0", "candidate-4", "megatron", ... ("-flat": composites off)
    label: str  # in words: "the search's best plan", "finalist 2", ...
    assignment: tuple | None
    evaluation: object  # the plan on the whole model (evaluate.Evaluation, IR kept)
    composites: str = "on"
    text: str = ""  # the module tt-mlir compiled
    compiled: object = None  # ttmlir.check.Compiled
    summary: dict | None = None  # ttmlir.check.summarize's
    numerics: object = None  # ttmlir.numerics.Numerics
    refused: str | None = None  # composites off: what tt-mlir said of the composites-on form
    constraints: dict | None = None  # the plan's constraint sites (evaluate.constraints_for)
    copy_text: str | None = None  # the copy the numerics ran on, annotated with this plan
    copy_compiled: object = None

    @property
    def ok(self) -> bool:
        return bool(self.compiled is not None and self.compiled.compiled)

    @property
    def checked_us(self) -> float:
        us = (self.summary or {}).get("checked_us")
        return math.inf if us is None else us

    def verdict(self, form: str) -> Verdict:
        if self.compiled is None:
            return not_checked("not compiled")
        if not self.compiled.compiled:
            return Verdict(True, False, form, why=_short(self.compiled.error))
        n = self.numerics
        if n is None:
            return Verdict(True, True, form, self.refused, "not run", why="not needed: another plan was chosen")
        why = n.why if n.status != "passed" else None
        return Verdict(True, True, form, self.refused, n.status, n.module, why)


@dataclass
class Checked:
    """What the tt-mlir check decided: the plan to recommend (``assignment``, ``final``,
    the module compiled, ``text``), its ``checks.tt_mlir``, every plan tried, the baselines'
    checks, and the verdict."""

    assignment: tuple
    final: object
    plan_check: dict
    verdict: Verdict
    text: str | None = None  # the module tt-mlir compiled for the recommendation (the -o module)
    trials: list[dict] = field(default_factory=list)
    baselines: dict = field(default_factory=dict)
    note: str | None = None

    @property
    def composites(self) -> str:
        return self.verdict.composites


def _short(error: str | None, n: int = 300) -> str:
    e = " ".join((error or "no error message").split())
    return e if len(e) <= n else e[:n - 3] + "..."


# ---------------------------------------------------------------------------------
# The search's plans
# ---------------------------------------------------------------------------------

def check_search(model, mesh, system, cm, groups, assignment, final, result, baselines, mega, user, setting,
                 stream, progress: bool = True) -> Checked:
    """The tt-mlir check of the search's result (module docstring): ``mega`` and ``user``
    (the loader's spec by role) are the baselines within the compiler-safety rules."""
    from shard_opt.ttmlir import check as ttc

    ok, why = ttc.status()
    if not ok:
        stream.write(f"shard-opt: tt-mlir check skipped: {why}\n")
        return Checked(assignment, final, ttc.skipped(why), not_checked(why))
    with _Run(model, mesh, system, cm, setting, stream, progress) as run:
        return _check_search(run, groups, assignment, final, result, baselines, mega, user)


def _check_search(run, groups, assignment, final, result, baselines, mega, user) -> Checked:
    from shard_opt.build import checkable
    from shard_opt.ttmlir import check as ttc
    from shard_opt.ttmlir import numerics as num

    t0 = time.perf_counter()
    model, mesh, system, cm, stream, progress = run.model, run.mesh, run.system, run.cm, run.stream, run.progress
    with timing.phase("check.finalists"):
        ranked = _ranked(model, groups, assignment, final, result, run.evaluator, FINALISTS)
    first = [Trial(f"finalist-{k}", "the search's best plan" if k == 0 else f"finalist {k + 1}", a, fe)
             for k, (a, fe) in enumerate(ranked)]
    base_evals = {}
    for name, shardings in (("megatron", mega if "megatron" in baselines else None),
                            ("loader-spec", shardings_by_role(model, user) if user is not None else None)):
        if shardings is not None:
            base_evals[name] = run.evaluator.run(shardings, keep_ir=False)
    shown = [Trial(name, f"the {name} baseline", None, ev) for name, ev in base_evals.items()]
    if progress:
        stream.write(f"shard-opt: tt-mlir: compiling {len(first)} finalist{'s' if len(first) > 1 else ''}"
                     f"{' and ' + ', '.join(base_evals) if base_evals else ''} (--no-check skips this)\n")
    with timing.phase("check.compile"):
        tried = run.compile(first + shown, groups)
    if all(t.compiled is not None and ttc.is_startup_error(t.compiled.error) for t in tried):
        why = _short(first[0].compiled.error)
        stream.write(f"shard-opt: WARNING: tt-mlir check: {why}; the plan is shown as found, unchecked\n")
        return Checked(assignment, final, {**ttc.skipped(why), "skipped": False}, not_checked(why))
    # the baselines as written (and their composites-off forms) are compiled for the report;
    # the plans the check may recommend are the search's (an assignment of its groups)
    tried = [t for t in tried if t.assignment is not None]
    chosen = run.pick([t for t in tried if t.composites == "on"])
    if chosen is None:  # 2: the next ranked plans and the search's seeds
        seen = {_plan_key(t.evaluation) for t in tried}
        more = _ranked(model, groups, assignment, final, result, run.evaluator, MORE, skip=seen)
        seeds = _seeds(model, groups, mega if "megatron" in baselines else None, user, run.evaluator,
                       seen | {_plan_key(fe) for _, fe in more})
        second = ([Trial(f"candidate-{len(first) + k}", f"candidate {len(first) + k + 1}", a, fe)
                   for k, (a, fe) in enumerate(more)]
                  + [Trial(f"seed-{name}", f"the search's {name} seed", a, fe) for name, (a, fe) in seeds.items()])
        if second:
            if progress:
                stream.write(f"shard-opt: tt-mlir: no finalist is deliverable; compiling {len(second)} more plans "
                             f"({', '.join(t.label for t in second)})\n")
            with timing.phase("check.compile"):
                added = run.compile(second, groups)
            tried += added
            chosen = run.pick([t for t in added if t.composites == "on"])
    if chosen is None:  # 3: composites off
        chosen = run.pick([t for t in tried if t.composites == "off"])
    if chosen is None:  # 4: nothing measured: the first that compiles, its numerics not run
        chosen = next((t for t in sorted(tried, key=lambda t: (t.composites != "on", t.checked_us))
                       if t.ok and t.numerics is not None and t.numerics.status == "not run"
                       and t.numerics.why != num.NOT_NEEDED), None)
    deliverable = chosen is not None
    shown_trial = chosen or first[0]
    verdict = shown_trial.verdict(_form(shown_trial, model))
    rows = [_row(model, final, t, t is shown_trial) for t in tried]
    note = _note(first[0], shown_trial, tried, deliverable)
    if note:
        stream.write(f"shard-opt: {'WARNING' if deliverable else 'ERROR'}: {note}\n")
    base_checks = {}
    for t in shown:
        chk = t.summary or ttc.summarize(checkable(model, mesh, t.evaluation), t.compiled, system,
                                         facts=t.evaluation.facts, cost_model=cm)
        base_checks[t.name] = {k: chk.get(k) for k in ("compiled", "error", "matches", "checked_us", "extra_ccl_us",
                                                       "missing_ccl_us", "extra_ops_us", "ttnn_ops_per_step")}
        base_checks[t.name]["ttnn"] = chk["stages"].get("ttnn", {})
        base_checks[t.name]["differences"] = chk["differences"]
    check = dict(shown_trial.summary or {})
    check.update({"composites": verdict.composites, "verdict": verdict.to_json(),
                  "numerics": shown_trial.numerics.to_json() if shown_trial.numerics is not None else None,
                  "recommended": shown_trial.label if deliverable else None,
                  "check_seconds": round(time.perf_counter() - t0, 3)})
    a = shown_trial.assignment if shown_trial.assignment is not None else assignment
    return Checked(a, shown_trial.evaluation, check, verdict, shown_trial.text, rows if len(rows) > 1 else [],
                   base_checks, note)


def _form(t: Trial, model) -> str:
    return composites_form(t.text, model.text) if t.composites == "on" else "off"


def _note(best: Trial, chosen: Trial, tried: list[Trial], deliverable: bool) -> str | None:
    """What the check changed, in words: the recommendation is not the search's best plan,
    or nothing tried is deliverable."""
    def what(t: Trial) -> str:
        v = t.verdict(t.composites)
        return v.words().replace("; NOT DELIVERABLE", "")

    if not deliverable:
        compiled = sum(1 for t in tried if t.ok)
        return (f"tt-mlir check: no plan tried is deliverable ({len(tried)} tried, {compiled} compiled); "
                f"the search's best plan: {what(best)}; do not deploy it as it is")
    if chosen is best:
        return None
    return (f"tt-mlir check: the search's best plan ({best.evaluation.score.total_us:.1f} us modeled) is not "
            f"recommended: {what(best)}; {chosen.label} ({chosen.evaluation.score.total_us:.1f} us modeled) is"
            + (f", with tt-xla's composites off" if chosen.composites == "off" else ""))


def _row(model, final, t: Trial, chosen: bool) -> dict:
    s = t.summary or {}
    return {"name": t.name, "label": t.label, "total_us": round(t.evaluation.score.total_us, 3),
            "checked_us": s.get("checked_us"), "composites": t.composites, "compiled": t.ok,
            "matches": s.get("matches", False), "error": t.compiled.error if t.compiled is not None else None,
            "numerics": t.numerics.status if t.numerics is not None else None,
            "recommended": chosen, "ttnn": s.get("stages", {}).get("ttnn", {}),
            "arguments_changed": _changed(model, final.shardings, t.evaluation.shardings)}


class _Run:
    """One check: its evaluator, where its numerics run, and the compiles and runs it makes."""

    def __init__(self, model, mesh, system, cm, setting, stream, progress):
        self.model, self.mesh, self.system, self.cm = model, mesh, system, cm
        self.stream, self.progress = stream, progress
        self.evaluator = Evaluator(model, mesh, system, cm, **setting)  # one prepared module for every plan
        self.devices = math.prod(mesh.shape)
        self._target = None
        self.session = None  # numerics.Session: the inputs and the unsharded run, made once (its child is kept)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.session is not None:
            self.session.close()

    @property
    def target(self):
        """(model, words, why) of ``numerics_target``, found when first asked (it may lower a copy)."""
        if self._target is None:
            self._target = numerics_target(self.model)
        return self._target


    def compile(self, trials: list[Trial], groups) -> list[Trial]:
        """Annotate and compile ``trials`` (composites on); each tt-mlir refuses for a
        composite is compiled again with every composite flat, a trial of its own. Returns
        every trial compiled, summarized."""
        from shard_opt.build import checkable
        from shard_opt.ttmlir import check as ttc

        allow = self.evaluator.allow
        for t in trials:
            t.constraints = constraints_for(groups, t.assignment) if t.assignment else None
        specs = [(t.evaluation.shardings, t.constraints) for t in trials]
        for t, text in zip(trials, annotate_many(self.model, self.mesh, specs, allow, composites="on")):
            t.text = text
        shape = tuple(self.mesh.shape)
        for t, c in zip(trials, ttc.compile_all([ttc.Job(t.name, t.text, self.devices) for t in trials],
                                               self.system, shape)):
            t.compiled = c
        refused = [(t, s) for t, s in zip(trials, specs) if not t.ok and _composite_refusal(t.compiled.error)]
        flat = []
        if refused:
            texts = annotate_many(self.model, self.mesh, [s for _, s in refused], allow, composites="off")
            for (t, _), text in zip(refused, texts):
                flat.append(Trial(t.name + "-flat", t.label, t.assignment, t.evaluation, "off", text,
                                  refused=_short(t.compiled.error, 200), constraints=t.constraints))
            for f, c in zip(flat, ttc.compile_all([ttc.Job(f.name, f.text, self.devices) for f in flat],
                                                  self.system, shape)):
                f.compiled = c
        out = trials + flat
        for t in out:
            t.summary = ttc.summarize(checkable(self.model, self.mesh, t.evaluation), t.compiled, self.system,
                                      facts=t.evaluation.facts, cost_model=self.cm)
        return out

    def pick(self, pool: list[Trial]) -> Trial | None:
        """The first of ``pool``'s compiled trials, by checked cost, whose numerics pass
        (each run until one does); when no numerics can run on this model at all (too large
        even as a copy), the first compiled, its numerics not run."""
        order = sorted((t for t in pool if t.ok), key=lambda t: (t.checked_us, pool.index(t)))
        if not order:
            return None
        self.numerics(order)
        if self.target[0] is None:
            return order[0]
        return next((t for t in order if t.numerics is not None and t.numerics.passed), None)

    def numerics(self, order: list[Trial]) -> None:
        """Run tt-mlir's programs of ``order`` against the unsharded model, in order, until one
        passes (``shard_opt.ttmlir.numerics``; on the copy ``numerics_target`` chose)."""
        from shard_opt.ttmlir import numerics as num
        from shard_opt.ttmlir import store

        target, words, why = self.target
        if target is None:
            for t in order:
                t.numerics = num.not_run(why)
            return
        if target is not self.model:
            self._compile_copies(order, target)
        programs, keys = [], []
        reference = None
        for t in order:
            text, compiled = (t.text, t.compiled) if target is self.model else (t.copy_text, t.copy_compiled)
            dump = (compiled.irs.get("shlo_compiler") if compiled is not None and compiled.compiled else None)
            if dump is None:
                why = ("tt-mlir wrote no shlo_compiler module" if compiled is not None and compiled.compiled
                       else f"tt-mlir did not compile {words}: {_short(compiled.error if compiled else None)}")
                t.numerics = num.not_run(why, words)
                continue
            reference = reference or text
            programs.append((t, dump))
            keys.append(store.numerics_key(reference, dump, self.devices, words))
        todo = []
        for (t, dump), k in zip(programs, keys):
            hit = store.get(k) if not todo else None
            if hit is not None:
                t.numerics = num.Numerics.from_json(hit)
                if t.numerics.passed:
                    return
            else:
                todo.append((t, dump, k))
        if not todo:
            return
        if self.session is None:
            if self.progress:
                self.stream.write(f"shard-opt: tt-mlir numerics: running tt-mlir's programs on {self.devices} XLA "
                                  f"CPU devices against the unsharded model ({words}, ~"
                                  f"{num.memory_needed(_arg_types(target)) / 1e9:.1f} GB)\n")
            self.session = num.Session(reference, self.devices, module=words)
        label = {t.name: t.label + (" (composites off)" if t.composites == "off" else "") for t, _, _ in todo}

        def said(name, r):
            if self.progress:
                self.stream.write(f"shard-opt: tt-mlir numerics: {label[name]}: {r.words()}\n")

        results = self.session.run([(t.name, dump) for t, dump, _ in todo], on_result=said)
        for (t, _, k), r in zip(todo, results):
            t.numerics = r
            if r.status != "not run" or r.why.startswith(("tt-mlir's", "XLA cannot", "jaxlib")):
                store.put(k, r.to_json())  # a verdict on the program, not on this run's process

    def _compile_copies(self, order: list[Trial], copy) -> None:
        """tt-mlir's compile of each plan of ``order`` applied, by role, to the ``copy`` the
        numerics run on (its constraint sites too: a layer's sites are every layer's)."""
        from shard_opt.ttmlir import check as ttc

        todo = [t for t in order if t.copy_compiled is None]
        if not todo:
            return
        for form in {t.composites for t in todo}:
            these = [t for t in todo if t.composites == form]
            specs = [(shardings_by_role(copy, {self.model.arguments[i].role: s
                                               for i, s in t.evaluation.shardings.items()}), t.constraints)
                     for t in these]
            for t, text in zip(these, annotate_many(copy, self.mesh, specs, self.evaluator.allow, composites=form)):
                t.copy_text = text
        compiled = ttc.compile_all([ttc.Job(t.name + "-copy", t.copy_text, self.devices) for t in todo],
                                   self.system, tuple(self.mesh.shape))
        for t, c in zip(todo, compiled):
            t.copy_compiled = c


def _composite_refusal(error: str | None) -> bool:
    """tt-mlir's error names one of tt-xla's composites (it refused the composite form)."""
    e = error or ""
    return any(k in e for k in ("scaled_dot_product_attention", "rms_norm", "layer_norm", "gelu", "composite"))


def _arg_types(model) -> list[tuple[list[int], str]]:
    return [(list(a.shape), a.dtype) for a in model.arguments]


def numerics_target(model):
    """(the model the numerics run on, its name in words, why none) : the whole model when
    its arguments fit ``numerics.memory_budget``, else its 2-layer, else its 1-layer copy
    (the ones the search scores), else none."""
    from shard_opt.ttmlir import numerics as num

    budget = num.memory_budget()
    need = num.memory_needed(_arg_types(model))
    if need <= budget:
        return model, "the whole model", None
    layers = model.num_layers or 0
    if model.with_layers is not None:
        for k in (2, 1):
            if layers > k:
                copy = model.with_layers(k)
                if num.memory_needed(_arg_types(copy)) <= budget:
                    return copy, f"the {k}-layer copy", None
    return None, "the whole model", (f"the model needs about {need / 1e9:.1f} GB to run on XLA's CPU devices and "
                                     f"{budget / 1e9:.1f} GB may be taken ({num.MEMORY_ENV} sets it)"
                                     + ("" if model.with_layers is None else ", its layer copies too"))


def _ranked(model, groups, assignment, final, result, evaluator, count: int, skip: set | None = None) -> list:
    """(assignment, whole-model evaluation) of the search's plan (unless in ``skip``) and the
    next distinct ones, best first by the search's score, ``count`` at most; a plan that breaks
    a safety rule, is priced infinite, or does not fit where the plan fits is left out."""
    out = []
    seen = set(skip or ())
    if _plan_key(final) not in seen:
        out.append((assignment, final))
        seen.add(_plan_key(final))
    ranked = sorted(result.scored.items(), key=lambda kv: (kv[1].key(), kv[0]))
    tried = 0
    for a, s in ranked:
        if len(out) >= count or tried >= 4 * count:
            break
        if a == assignment or not math.isfinite(s.total_us) or s.unsafe or (final.score.fits and not s.fits):
            continue
        tried += 1
        fe = evaluator.run(shardings_for(model, groups, a), constraints=constraints_for(groups, a), keep_ir=True)
        if _plan_key(fe) not in seen:  # another assignment of the same plan (a tie) is not a rival
            seen.add(_plan_key(fe))
            out.append((a, fe))
    return out


def _seeds(model, groups, mega, user, evaluator, seen: set) -> dict:
    """{name: (assignment, evaluation)} of the baselines the search started from (Megatron,
    the loader's spec), as the search's groups write them, not already in ``seen``."""
    from shard_opt.search import assignment_of

    out = {}
    for name, shardings in (("megatron", mega), ("loader-spec", shardings_by_role(model, user) if user else None)):
        if shardings is None:
            continue
        a = assignment_of(groups, shardings)
        fe = evaluator.run(shardings_for(model, groups, a), constraints=constraints_for(groups, a), keep_ir=True)
        if not math.isfinite(fe.score.total_us) or _plan_key(fe) in seen:
            continue
        seen.add(_plan_key(fe))
        out[name] = (a, fe)
    return out


def _plan_key(ev) -> tuple:
    """What a plan is once propagated: the argument shardings Shardy settled on and the
    collectives it inserted (two assignments with the same key are the same program)."""
    return (tuple(sorted((i, s.body()) for i, s in ev.shardings.items() if not s.is_replicated)),
            tuple((c.kind, tuple(c.axes), tuple(c.global_shape)) for c in ev.facts.collectives))


def _changed(model, base: dict, other: dict) -> dict:
    """The arguments whose sharding differs between two plans: name -> other's sharding."""
    out = {}
    for a in model.arguments:
        x, y = base.get(a.index), other.get(a.index)
        bx = x.body() if x is not None and not x.is_replicated else None
        by = y.body() if y is not None and not y.is_replicated else None
        if bx != by:
            out[a.name] = y.axis_names() if y is not None else [[] for _ in a.shape]
    return out


# ---------------------------------------------------------------------------------
# --evaluate: the given plan alone
# ---------------------------------------------------------------------------------

def check_evaluated(model, mesh, system, cm, final, annotated: str, *, stream=None,
                    progress: bool = True) -> Checked:
    """The tt-mlir check of an evaluated plan (``--evaluate``): ``annotated``, the module as
    given (its composites, or none), compiled by tt-mlir and its program run against the
    unsharded model, as a ``Checked`` (its ``plan_check`` the plan's ``checks.tt_mlir``);
    nothing to choose between."""
    from shard_opt.ttmlir import check as ttc

    stream = stream or sys.stderr
    t0 = time.perf_counter()
    ok, why = ttc.status()
    if not ok:
        stream.write(f"shard-opt: tt-mlir check skipped: {why}\n")
        return Checked(None, final, ttc.skipped(why), not_checked(why))
    if progress:
        stream.write("shard-opt: tt-mlir: compiling the evaluated plan (--no-check skips this)\n")
    with _Run(model, mesh, system, cm, {}, stream, progress) as run:
        return _check_evaluated(run, final, annotated, t0)


def _check_evaluated(run, final, annotated: str, t0: float) -> Checked:
    from shard_opt.build import checkable
    from shard_opt.ttmlir import check as ttc

    model, mesh, system, cm, stream, progress = run.model, run.mesh, run.system, run.cm, run.stream, run.progress
    form = composites_form(annotated, model.text)
    t = Trial("evaluated", "the evaluated plan", None, final, "off" if form == "off" else "on", annotated)
    (t.compiled,) = ttc.compile_all([ttc.Job(t.name, annotated, run.devices)], system, tuple(mesh.shape))
    t.summary = ttc.summarize(checkable(model, mesh, final), t.compiled, system, facts=final.facts, cost_model=cm)
    if t.ok:
        if run.target[0] is not None and run.target[0] is not model:
            run._target = (None, "the whole model", "--evaluate runs the numerics on the whole module only, and it "
                           "does not fit the memory a run may take")
        run.numerics([t])
    verdict = t.verdict(form)
    chk = dict(t.summary)
    chk.update({"composites": verdict.composites, "verdict": verdict.to_json(),
                "numerics": t.numerics.to_json() if t.numerics is not None else None,
                "check_seconds": round(time.perf_counter() - t0, 3)})
    note = None if verdict.deliverable else f"tt-mlir check: {verdict.words()}; do not deploy the plan as it is"
    if progress:
        stream.write(ttc.line(chk) + "\n")
    return Checked(None, final, chk, verdict, annotated, note=note)
