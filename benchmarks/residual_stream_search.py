"""The residual-stream rule's search on every shape of ``tests/test_residual_stream.py``.

The test runs the search (seeded with the plan that splits the stream, ``--spec``) on one
shape, Gemma-2's; whether each shape's split stream is found in the propagated module and
priced infinite is tested on all three. This runs the same search and the same assertions
on all three shapes (Gemma-2, Falcon, Qwen3.5; Qwen3.5's search is ~55 s on a loaded 2-core
machine). Exit status 1 if any shape's recommended plan splits the stream.

    python benchmarks/residual_stream_search.py            # gemma2, falcon, qwen3_5
    python benchmarks/residual_stream_search.py falcon
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("SHARD_OPT_CHECK", "0")  # the search, as the test runs it

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from shard_opt import frontends  # noqa: E402
from shard_opt.cli import main as cli  # noqa: E402
from test_residual_stream import CASES, FIXTURES, search_keeps_the_stream_whole  # noqa: E402


def run_cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def main(argv: list[str]) -> int:
    failed = 0
    for case in argv or list(CASES):
        script, layers = CASES[case][:2]
        model = frontends.load(os.path.join(FIXTURES, script), layers=layers, dtype="f32")
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            try:
                search_keeps_the_stream_whole(model, run_cli, Path(d), case)
                verdict = "kept whole"
            except AssertionError as e:
                failed += 1
                verdict = f"FAILED: {e}"
        print(f"{case:8s} {time.perf_counter() - t0:6.1f} s  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
