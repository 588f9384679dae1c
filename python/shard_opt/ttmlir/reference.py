"""XLA's SPMD partitioner as the tt-mlir check's reference for reductions, in a child process.

The check holds tt-mlir's TTIR against the reductions XLA makes for the same module
(``check.missing_reductions``). XLA's compile runs in its own process, with a deadline:
in-process, jaxlib's ``CompileAndLoad`` was seen to wait forever on a run that had just
compiled with tt-mlir (3 of about 30 runs here, 2026-12-02; every XLA worker thread idle,
the call blocked in ``BlockUntilReadyWithCancel``, on a module it compiles in ~1 s on its
own; once in a child too). A child that overstays is killed and started once more; if that
one overstays as well, the check says XLA gave no verdict.

Parent side: ``start(text, devices)`` returns a running ``Reference``; ``Reference.result()``
waits (``SHARD_OPT_XLA_TIMEOUT`` seconds per try, default 45: a full Llama-3-8B module takes
~1.7 s here, plus ~3 s to import jax) and returns XLA's collectives
(``verify.xla_collectives``) or the reason there are none, in words. The child is
``python -m shard_opt.ttmlir.reference MODULE DEVICES OUT.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

TIMEOUT_ENV = "SHARD_OPT_XLA_TIMEOUT"


@dataclass
class Reference:
    proc: subprocess.Popen
    out_path: str
    dir: str
    devices: int

    def result(self, retry: bool = True) -> list[dict] | str:
        """XLA's collectives, or why there are none (a failed compile, a crash, the deadline
        twice)."""
        import shutil

        timeout = float(os.environ.get(TIMEOUT_ENV, "45"))
        try:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                if retry:
                    with open(os.path.join(self.dir, "module.mlir")) as f:
                        return start(f.read(), self.devices).result(retry=False)
                return f"XLA did not partition the module within {timeout:g} s, twice ({TIMEOUT_ENV}); killed"
            if not os.path.exists(self.out_path):
                with open(os.path.join(self.dir, "log")) as f:
                    tail = [ln.strip() for ln in f.read().splitlines() if ln.strip()][-1:] or ["no output"]
                return f"XLA's child process exited {self.proc.returncode}: {tail[0][:300]}"
            with open(self.out_path) as f:
                return json.load(f)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def close(self) -> None:
        """No verdict wanted: the child stopped, its files gone."""
        import shutil

        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def start(text: str, devices: int) -> Reference:
    """XLA partitioning ``text`` over ``devices`` CPU devices, started in a child process."""
    d = tempfile.mkdtemp(prefix="shard-opt-xla-")
    module = os.path.join(d, "module.mlir")
    with open(module, "w") as f:
        f.write(text)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    out = os.path.join(d, "out.json")
    with open(os.path.join(d, "log"), "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "shard_opt.ttmlir.reference", module, str(devices), out],
                                env=env, stdout=subprocess.DEVNULL, stderr=log)
    return Reference(proc, out, d, devices)


def main(argv: list[str]) -> int:
    from shard_opt import verify
    from shard_opt.errors import PassError, UserError

    module, devices, out = argv[0], int(argv[1]), argv[2]
    with open(module) as f:
        text = f.read()
    try:
        result = verify.xla_collectives(text, devices)
    except (UserError, PassError) as e:
        result = str(e)
    tmp = out + ".part"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
