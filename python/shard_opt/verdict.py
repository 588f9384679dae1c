"""The tt-mlir check's verdict on a plan: one value, one sentence, in every output.

Whether tt-mlir compiled the plan in the form tt-xla hands it over (its composites on, as
``torch.compile(backend="tt")`` does by default, or off: ``tt_enable_composite_ops``
False), and whether the program tt-mlir partitioned computes the unsharded model's
answer (``shard_opt.ttmlir.numerics``). stderr's summary, the plan JSON
(``checks.tt_mlir.verdict``), the report's first lines, the header comment of ``-o`` and
of the lit test, and the emitted script's block all write ``Verdict.line()``, so they
cannot disagree. A value at the bottom of the house: nothing here imports the engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

COMPOSITES_OPTION = "tt_enable_composite_ops"  # tt-xla's torch.compile option (tt_torch/backend/backend.py)


@dataclass(frozen=True)
class Verdict:
    """What the tt-mlir check found for the plan an output carries.

    checked: the check ran (False: ``why`` says why not).
    compiled: tt-mlir compiled the module.
    composites: the form compiled: "on" (tt-xla's composites, its default), "off" (every
      composite flat, ``tt_enable_composite_ops`` False) or "none" (the model has none).
    refused: with composites "off", what tt-mlir said of the composite form.
    numerics: "passed" | "failed" | "not run" (tt-mlir's partitioned program against the
      unsharded model, ``shard_opt.ttmlir.numerics``).
    numerics_on: the module the numerics ran on ("the whole model", "the 1-layer copy").
    why: the compile error, the numerics failure or why they did not run, in words.
    """

    checked: bool
    compiled: bool = False
    composites: str = "none"
    refused: str | None = None
    numerics: str = "not run"
    numerics_on: str = "the whole model"
    why: str | None = None

    @property
    def deliverable(self) -> bool:
        """tt-mlir compiles it and its program is not known to compute a wrong answer."""
        return self.checked and self.compiled and self.numerics != "failed"

    @property
    def verified(self) -> bool:
        return self.deliverable and self.numerics == "passed"

    def words(self) -> str:
        """The verdict in one sentence (without the ``tt-mlir verdict:`` prefix)."""
        if not self.checked:
            return f"not checked ({self.why})"
        if not self.compiled:
            return f"did NOT compile: {self.why}; NOT DELIVERABLE"
        if self.composites == "off":
            form = (f"compiled with composites off ({COMPOSITES_OPTION}=False"
                    + (f"; with them on, tt-mlir refused it: {self.refused}" if self.refused else "") + ")")
        elif self.composites == "on":
            form = "compiled with tt-xla's composites"
        else:
            form = "compiled"
        on = f" on {self.numerics_on}" if self.numerics_on != "the whole model" else ""
        if self.numerics == "passed":
            return f"{form}; numerics passed{on} (tt-mlir's partitioned program computes the unsharded model's answer)"
        if self.numerics == "failed":
            return (f"{form}; numerics FAILED{on}: tt-mlir's partitioned program does not compute the unsharded "
                    f"model's answer ({self.why}); NOT DELIVERABLE")
        return f"{form}; numerics not run ({self.why})"

    def line(self) -> str:
        return f"tt-mlir verdict: {self.words()}"

    def to_json(self) -> dict:
        return {**asdict(self), "deliverable": self.deliverable, "words": self.words()}

    @classmethod
    def from_json(cls, d: dict) -> "Verdict":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def not_checked(why: str) -> Verdict:
    return Verdict(checked=False, why=why)


def of(plan) -> Verdict | None:
    """The verdict a plan carries (``checks.tt_mlir.verdict``), or None (no check ran)."""
    chk = (getattr(plan, "checks", None) or {}).get("tt_mlir") or {}
    v = chk.get("verdict")
    return Verdict.from_json(v) if v else None
