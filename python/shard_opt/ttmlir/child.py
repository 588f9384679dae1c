"""The tt-mlir check's child process: compile modules with the Tenstorrent plugin.

Run by ``shard_opt.ttmlir.check`` as ``python -m shard_opt.ttmlir.child JOBS.json`` with
``SHARD_OPT_TT_CHILD=1``, ``JAX_PLATFORMS=tt``, ``TT_COMPILE_ONLY_SYSTEM_DESC`` and
``TMPDIR`` set by the parent. ``JOBS.json`` lists ``{"name", "module", "devices",
"export"}``; for each job, in order, one JSON line goes to stdout: ``{"name", "compiled",
"error", "seconds"}`` (after a first ``{"ready": true}`` once the plugin's client is up). A job that kills the process (tt-mlir aborts or segfaults on some
inputs) leaves no line: the parent sees which one and starts a new child for the rest.
The plugin's own log goes to stderr, which the parent keeps in a file.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        jobs = json.load(f)
    from shard_opt import ir

    ir.tt_backend()  # the plugin's client up (its runtime assets unpacked): the parent may start another child
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    for job in jobs:
        t0 = time.perf_counter()
        with open(job["module"]) as f:
            text = f.read()
        error = None
        try:
            ir.tt_compile(text, job["devices"], job["export"])
        except Exception as e:  # noqa: BLE001 - the plugin's error is the result
            error = " ".join(str(e).split())[:2000] or type(e).__name__
        sys.stdout.write(json.dumps({"name": job["name"], "compiled": error is None, "error": error,
                                     "seconds": round(time.perf_counter() - t0, 3)}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
