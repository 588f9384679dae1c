"""The tt-mlir check's child process: compile modules with the Tenstorrent plugin.

Run by ``shard_opt.ttmlir.check`` as ``python -m shard_opt.ttmlir.child`` with
``SHARD_OPT_TT_CHILD=1``, ``JAX_PLATFORMS=tt``, ``TT_COMPILE_ONLY_SYSTEM_DESC`` and
``TMPDIR`` set by the parent, and kept alive by it between compiles (one plugin client
start-up for every batch it takes). Once the plugin's client is up it writes
``{"ready": true, "pid": N}``; then it reads batches from stdin, one JSON list of jobs a
line (``{"name", "module", "devices", "export"}``), and for each job, in order, writes
one JSON line to stdout (``{"name", "compiled", "error", "seconds"}``), then
``{"done": true}`` at the end of the batch. It ends at the end of stdin (the parent
closed it, or the parent died). A job that kills the process (tt-mlir aborts or
segfaults on some inputs) leaves no line: the parent sees which one and starts a new
child for the rest. Only these lines go to stdout (the process's own file descriptor 1
is pointed at stderr before the plugin loads); the plugin's log goes to stderr, which
the parent keeps in a file.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    # the protocol's own copy of stdout; everything else written to fd 1 (the plugin's
    # prints) goes to the log instead of between the result lines
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def say(record: dict) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    from shard_opt import ir

    ir.tt_backend()  # the plugin's client up (its runtime assets unpacked): the parent may start another child
    say({"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        for job in json.loads(line):
            t0 = time.perf_counter()
            with open(job["module"]) as f:
                text = f.read()
            error = None
            try:
                ir.tt_compile(text, job["devices"], job["export"])
            except Exception as e:  # noqa: BLE001 - the plugin's error is the result
                error = " ".join(str(e).split())[:2000] or type(e).__name__
            say({"name": job["name"], "compiled": error is None, "error": error,
                 "seconds": round(time.perf_counter() - t0, 3)})
        say({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
