"""Emitters: what shard-opt hands back besides the annotated module.

- ``torch_script.emit_torch``: the user's load script with ``xs.mark_sharding`` written in.
- ``jax_code.emit_jax``: ``PartitionSpec`` per argument for JAX users.
- ``report.render_report`` / ``write_ccl_chart``: ``sharding_analysis.md`` and its chart.
- ``lit_test.emit_lit_test``: a lit + FileCheck test pinning the plan's collectives.
- ``verify_ir.verify_ir``: a TTIR / TTNN dump checked against the plan.
- ``citations``: the sources every report decision cites.

Each works from the plan JSON dict (DESIGN.md "Plan JSON").
"""
