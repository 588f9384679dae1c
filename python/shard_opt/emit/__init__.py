"""Emitters: what shard-opt hands back besides the annotated module.

- ``torch_script.emit_torch``: the user's load script with ``xs.mark_sharding`` written in.
- ``report.render_report`` / ``write_ccl_chart``: ``sharding_analysis.md`` and its chart.
- ``lit_test.emit_lit_test``: a lit + FileCheck test pinning the plan's collectives.
- ``verify_ir.verify_ir``: a TTIR / TTNN dump checked against the plan.
- ``citations``: the sources every report decision cites.

Each works from the typed plan, ``shard_opt.plan.Plan`` (docs/design.md, "The plan value and its JSON"), reading its
records as attributes; a plan JSON dict given instead is read as one (``_plan.as_plan``).
"""
