"""The tt-mlir check: compile plans with the real compiler, offline, and read what it emits.

After the search, the recommended plan's module (``-o``) and the baselines' are compiled
by tt-mlir itself, through the Tenstorrent PJRT plugin (``jax-tt-plugin``) in
compile-only mode, in a child process (``shard_opt.ttmlir.child``: the plugin's client
must own its process's JAX platform), kept alive between calls (``_Child``: its client
starts once per process and environment, not once per call). tt-mlir writes its IR at
every stage; this module reads three of them:

- ``shlo_compiler``: StableHLO after tt-mlir's Shardy steps (the collectives first
  appear here, one per use);
- ``ttir``: the collectives as ``ttir.*`` ops with a ``cluster_axis`` (after CSE);
- ``ttnn``: the program the device runs: every op per step (``forward_device``
  functions) and at load time (``const_eval`` functions, run once when the weights
  are loaded).

Each is matched against the plan's priced collectives with ``verify_ir`` (its
equivalences: a multi-axis collective is one op per axis, all_to_all becomes
point_to_point chains, a collective computed from constants moves to load time);
what tt-mlir runs that the plan did not price is priced with the same cost model
(``checked``: see ``checked_cost``).

Failures of the check itself (no plugin, a crash, a timeout) never fail the run: the
result says ``compiled: false`` with the error, and the run goes on.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from shard_opt.emit import _plan
from shard_opt.emit import verify_ir as vir
from shard_opt.ttmlir import sysdesc

STAGES = ("shlo_compiler", "ttir", "ttnn")
TIMEOUT_ENV = "SHARD_OPT_TT_TIMEOUT"  # seconds per compiled module (default 120)
DIR_ENV = "SHARD_OPT_TT_DIR"  # where the plugin's assets and descriptors live (default: in the cache)
KEEP_ENV = "SHARD_OPT_TT_KEEP"  # set: keep tt-mlir's IR dumps (the plan JSON's checks.tt_mlir.ir_dir says where)

# TTNN ops that are not device work: memory bookkeeping and the host <-> mesh boundary
NOT_DEVICE_OPS = frozenset({
    "deallocate", "get_device", "distribute_tensor", "aggregate_tensor", "mesh_shard", "to_device",
    "from_device", "to_memory_config", "empty",
})
# TTNN ops that move or re-lay data without arithmetic (tt-mlir's TTNN dialect: layout
# conversion, data movement and tensor creation ops)
LAYOUT_OPS = frozenset({
    "to_layout", "typecast", "reshape", "permute", "transpose", "slice_static", "slice_dynamic", "concat",
    "repeat", "repeat_interleave", "pad", "assign", "full", "zeros", "ones", "arange", "constant",
    "rows_gather", "embedding", "squeeze", "unsqueeze", "tilize", "untilize", "to_dtype", "move",
    "reallocate", "sharded_to_interleaved", "interleaved_to_sharded", "prepare_conv2d_weights",
    "prepare_conv2d_bias", "split_query_key_value_and_split_heads", "concatenate_heads", "fill_cache",
    "update_cache", "paged_update_cache", "paged_fill_cache", "scatter", "gather",
})
_SHLO_CCL = re.compile(r'"?\b(?:stablehlo|sdy)\.(all_gather|all_reduce|reduce_scatter|all_to_all|'
                       r'collective_permute|all_slice|collective_broadcast)\b"?')
_TTNN_OP = re.compile(r'"ttnn\.([A-Za-z_0-9]+)"\s*\(')


@dataclass
class Job:
    name: str  # "plan", "megatron", ...
    text: str  # the annotated module (pure StableHLO + sdy)
    devices: int


@dataclass
class Compiled:
    name: str
    compiled: bool
    error: str | None
    seconds: float
    irs: dict[str, str] = field(default_factory=dict)  # stage -> module text
    ir_dir: str | None = None  # where the dumps are kept (SHARD_OPT_TT_KEEP)
    cached: bool = False  # taken from an earlier run's compile of the same module (shard_opt.ttmlir.store)


def status() -> tuple[bool, str]:
    """(usable, why not): the plugin is installed and is the build the descriptors are for."""
    lib = sysdesc.plugin_library()
    if lib is None:
        return False, "the Tenstorrent PJRT plugin is not installed (pip install jax-tt-plugin==0.1.3)"
    if not sysdesc.schema_hash_in_plugin(lib):
        return False, (f"the installed jax-tt-plugin is not {sysdesc.PLUGIN_VERSION}, the build shard-opt writes "
                       f"system descriptors for (its schema hash differs); pip install jax-tt-plugin=="
                       f"{sysdesc.PLUGIN_VERSION}")
    return True, ""


def work_dir() -> str:
    """Where the plugin's runtime assets (~417 MB, unpacked on first use into ``TMPDIR``) and
    the system descriptors are kept: ``$SHARD_OPT_TT_DIR``, else shard-opt's cache directory,
    else a fixed folder in the system's temporary directory (never a fresh one per run)."""
    from shard_opt.frontends import cache

    root = cache.cache_dir()
    d = os.environ.get(DIR_ENV) or (
        os.path.join(root, "tt-mlir") if root else os.path.join(tempfile.gettempdir(), "shard-opt-tt-mlir"))
    os.makedirs(d, exist_ok=True)
    return d


COMPILE_OPTIONS = "optimization_level=0"  # what ir.tt_compile asks of the plugin (part of a result's key)


def compile_all(jobs: list[Job], system, mesh_shape) -> list[Compiled]:
    """Compile every job with tt-mlir, in the jobs' order: a module compiled before with the
    same plugin and descriptor is taken from the check's store (``shard_opt.ttmlir.store``),
    the others in child processes (``_compile``)."""
    from shard_opt.ttmlir import store

    base = work_dir()
    desc = sysdesc.descriptor_path(system, tuple(mesh_shape), os.path.join(base, "descriptors"))
    keys = [store.compile_key(j.text, desc, COMPILE_OPTIONS) for j in jobs]
    out: list[Compiled | None] = []
    for job, k in zip(jobs, keys):
        hit = store.get(k)
        out.append(Compiled(job.name, hit["compiled"], hit["error"], hit["seconds"], hit["irs"], cached=True)
                   if hit else None)
    todo = [i for i, c in enumerate(out) if c is None]
    if todo:
        fresh = _compile([jobs[i] for i in todo], base, desc)
        for i, c in zip(todo, fresh):
            out[i] = c
            if c.compiled or (c.error and not is_startup_error(c.error) and not c.error.startswith(_NOT_THE_MODULE)):
                store.put(keys[i], {"compiled": c.compiled, "error": c.error, "seconds": c.seconds, "irs": c.irs})
    return out


_NOT_THE_MODULE = ("tt-mlir did not finish", "tt-mlir's compiler process died",
                   "the compiler process ended")  # failures of the process, not tt-mlir's verdict: not kept


def _compile(jobs: list[Job], base: str, desc: str) -> list[Compiled]:
    """Compile every job with tt-mlir in compiler children (``_Child``: at most two at a
    time, each starting the plugin's client once and kept alive for later calls; a new one
    after a job that killed its child). Results in the jobs' order."""
    assets = os.path.join(base, "assets")
    os.makedirs(assets, exist_ok=True)
    run_dir = tempfile.mkdtemp(prefix="run-", dir=base)
    env = {**os.environ, "SHARD_OPT_TT_CHILD": "1", "JAX_PLATFORMS": "tt", "TT_COMPILE_ONLY_SYSTEM_DESC": desc,
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("XLA_FLAGS", None)
    specs = []
    for k, job in enumerate(jobs):
        path = os.path.join(run_dir, f"{k}-{job.name}.mlir")
        with open(path, "w") as f:
            f.write(job.text)
        specs.append({"name": job.name, "module": path, "devices": job.devices,
                      "export": os.path.join(run_dir, f"{k}-{job.name}")})
    per_job = float(os.environ.get(TIMEOUT_ENV, "120"))
    results: dict[int, dict] = {}
    try:
        # two children at most, each compiling its share in order (tt-mlir is single-threaded,
        # and this machine class has two cores)
        from shard_opt import parallel

        # one child the first time, while it unpacks the assets (then kept for every run); a
        # second only when its share of compiling outlasts a client's start-up (both may be
        # kept children: the pool keeps two)
        unpacked = any(n.startswith(ASSETS_PREFIX) for n in os.listdir(assets))
        big = sum(len(j.text) for j in jobs) / 2 > SECOND_CHILD_BYTES
        n_children = max(1, min(2 if unpacked and big else 1, parallel.jobs(), len(specs)))
        shares = [list(range(i, len(specs), n_children)) for i in range(n_children)]
        if n_children == 1:
            _run_children(shares[0], specs, env, base, per_job, results)
        else:
            threads = [threading.Thread(target=_run_children, args=(share, specs, env, base, per_job, results))
                       for share in shares]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        out = []
        for k, spec in enumerate(specs):
            r = results[k]
            irs = _read_irs(spec["export"]) if r["compiled"] else {}
            keep = os.path.join(spec["export"], "irs") if os.environ.get(KEEP_ENV) else None
            out.append(Compiled(spec["name"], bool(r["compiled"]), r.get("error"), r.get("seconds", 0.0), irs, keep))
        return out
    finally:
        if not os.environ.get(KEEP_ENV):
            import shutil

            shutil.rmtree(run_dir, ignore_errors=True)


STARTUP_ERROR = "tt-mlir's client did not start"  # a failure of the check, not of the module


def is_startup_error(error: str | None) -> bool:
    return bool(error) and error.startswith(STARTUP_ERROR)


def _child_command() -> list[str]:
    return [sys.executable, "-m", "shard_opt.ttmlir.child"]


# A second compiler child pays only when half the modules take longer to compile than its
# client takes to start: measured here, a full Llama-3-8B module (460 KB of text) compiles in
# 2.6-3.3 s and a client starts in 3.2 s (1.4 s of it importing jax); a 1-layer copy (27 KB)
# in 0.1 s.
SECOND_CHILD_BYTES = 400_000
ASSETS_PREFIX = "libtt-"  # the plugin's unpacked runtime assets: TMPDIR/libtt-tt-metal-runtime-assets-<hash>
START_S = 30  # seconds a new child has to bring its plugin client up, on top of its jobs' time


def _keep_assets(tmp: str, assets: str, link_back: bool = False) -> None:
    """Move assets a child unpacked (not linked) into the kept folder, once. ``link_back``
    (the child lives on, idle): leave a link where they were, so the paths its client holds
    still lead to them."""
    for name in os.listdir(tmp):
        path = os.path.join(tmp, name)
        if name.startswith(ASSETS_PREFIX) and not os.path.islink(path) and os.path.isdir(path):
            try:
                os.rename(path, os.path.join(assets, name))
            except OSError:  # another run kept the same assets first
                continue
            if link_back:
                os.symlink(os.path.join(assets, name), path)


# ---------------------------------------------------------------------------------
# The compiler children, kept alive for the life of this process
# ---------------------------------------------------------------------------------

MAX_KEPT = 2  # idle compiler children kept per process (the most recently used; each holds jax and the plugin)
_STARTING = threading.Lock()  # held while a child's client starts: two clients initialising at once race on
#                               unpacking the plugin's runtime archive ("failed to extract embedded tt-metal
#                               runtime archive")
_POOL = threading.Lock()
_IDLE: list["_Child"] = []  # least recently used first
STARTED: list[int] = []  # the pid of every compiler child this process started (tests count them)


def _child_key(env: dict, base: str) -> tuple:
    """What a child's start fixes: its command, the work folder (its ``TMPDIR`` and the
    assets) and its environment (the system descriptor, ``TT_*``, ``JAX_*``, ``LD_*``, ...).
    Left out: ``SHARD_OPT_*`` (the child reads only ``SHARD_OPT_TT_CHILD``, set in ``env``)
    and ``PYTEST_*`` (pytest renames the running test in it)."""
    return (tuple(_child_command()), base,
            frozenset((k, v) for k, v in env.items() if not k.startswith(("SHARD_OPT_", "PYTEST_"))
                      or k == "SHARD_OPT_TT_CHILD"))


class _Child:
    """One compiler child (``shard_opt.ttmlir.child``) and its own folder under the work
    folder: ``tmp`` (its ``TMPDIR``: the plugin's client writes its system descriptor there,
    and two clients sharing one would race; it holds links to the kept assets) and ``log``
    (its stderr). Its stdin is a pipe from this process: when this process ends, for any
    reason, the child reads the end of its input and ends too."""

    def __init__(self, key: tuple, env: dict, base: str):
        import queue

        self.key, self.base = key, base
        self.assets = os.path.join(base, "assets")
        children = os.path.join(base, "children")
        os.makedirs(children, exist_ok=True)
        _sweep(children)
        self.dir = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=children)
        self.tmp = os.path.join(self.dir, "tmp")
        os.makedirs(self.tmp)
        for name in os.listdir(self.assets):
            if name.startswith(ASSETS_PREFIX):
                os.symlink(os.path.join(self.assets, name), os.path.join(self.tmp, name))
        self.log_path = os.path.join(self.dir, "log")
        self.pid = None
        self.started = time.monotonic()
        self.lines: queue.Queue = queue.Queue()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(_child_command(), env={**env, "TMPDIR": self.tmp}, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, cwd=self.dir, text=True)
        STARTED.append(self.proc.pid)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip().startswith("{"):
                try:
                    self.lines.put(json.loads(line))
                except ValueError:
                    pass
        self.lines.put(None)  # the end of its output: the child ended

    def next(self, deadline: float):
        """The child's next record; None when it ended, "timeout" past ``deadline``."""
        import queue

        try:
            return self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return "timeout"

    def send(self, jobs: list[dict]) -> bool:
        try:
            self.proc.stdin.write(json.dumps(jobs) + "\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def kill(self) -> int:
        self.proc.kill()
        return self.proc.wait()

    def close(self) -> None:
        """End the child (the end of its input; killed if it does not end in 10 s), keep
        any assets it unpacked, remove its folder."""
        import shutil

        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        try:
            _keep_assets(self.tmp, self.assets)
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def _sweep(children: str) -> None:
    """Remove the folders of children whose parent process is gone (it ended without
    closing them: killed, or ``os._exit``)."""
    import shutil

    for name in os.listdir(children):
        try:
            os.kill(int(name.split("-", 1)[0]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(children, name), ignore_errors=True)
        except (ValueError, OSError):
            pass


def _take(key: tuple) -> "_Child | None":
    """An idle kept child started with ``key`` (the most recently used), if one is alive."""
    with _POOL:
        for i in range(len(_IDLE) - 1, -1, -1):
            if _IDLE[i].key == key and _IDLE[i].proc.poll() is None:
                return _IDLE.pop(i)
    return None


def _give_back(child: _Child) -> None:
    """Keep ``child`` for a later call; close the least recently used beyond ``MAX_KEPT``."""
    with _POOL:
        _IDLE.append(child)
        old = [_IDLE.pop(0) for _ in range(max(0, len(_IDLE) - MAX_KEPT))]
    for c in old:
        c.close()


def close_children() -> None:
    """End every kept compiler child (at exit; tests that need a fresh one)."""
    with _POOL:
        old = list(_IDLE)
        _IDLE.clear()
    for c in old:
        c.close()


atexit.register(close_children)


def _start(env: dict, base: str, per_job: float, n_jobs: int) -> tuple[_Child | None, str | None]:
    """A new child with its plugin client up, and its pid read: (child, None), or (None,
    why) when it ended, or did not come up within ``START_S`` + its jobs' time, first."""
    with _STARTING:
        child = _Child(_child_key(env, base), env, base)
        r = child.next(time.monotonic() + START_S + per_job * n_jobs)
        if isinstance(r, dict) and r.get("ready"):
            child.pid = r.get("pid")
            _keep_assets(child.tmp, child.assets, link_back=True)  # unpacked once, kept for every child
            return child, None
        if r == "timeout":
            child.kill()
            why = f"tt-mlir did not finish within {per_job:.0f} s ({TIMEOUT_ENV} sets the limit)"
        else:
            why = _death(child.proc.wait(), child.log_path)
        child.close()
        return None, why


def _run_children(todo: list[int], specs: list[dict], env: dict, base: str, per_job: float,
                  results: dict) -> None:
    """Compile ``specs[k]`` for each k in ``todo`` in a kept child of ``env`` (a new one if
    none is idle); a job that kills the child is recorded as failed and a new child takes
    the rest. A child whose client never comes up is tried once more, then every job left
    is ``STARTUP_ERROR``."""
    key = _child_key(env, base)
    todo = list(todo)
    starts = 0  # children whose plugin client never came up (not any job's fault)
    while todo:
        child = _take(key)
        reused = child is not None
        if child is None:
            child, why = _start(env, base, per_job, len(todo))
            if child is None:
                # the client died starting (seen when another run unpacks the plugin's assets at
                # the same time): once more, then every job left fails as unchecked, none as rejected
                starts += 1
                if starts < 2:
                    continue
                for k in todo:
                    results[k] = {"name": specs[k]["name"], "compiled": False, "seconds": 0.0,
                                  "error": f"{STARTUP_ERROR}: {why or 'no result'}"}
                return
        log_from = os.path.getsize(child.log_path)
        # as a fresh child's always was: START_S + per_job for each job from its start; a kept
        # child's client is up: per_job for each job from now
        deadline = (time.monotonic() if reused else child.started + START_S) + per_job * len(todo)
        crashed = None
        done = 0
        if child.send([specs[k] for k in todo]):
            while True:
                r = child.next(deadline)
                if r == "timeout":
                    child.kill()
                    crashed = f"tt-mlir did not finish within {per_job:.0f} s ({TIMEOUT_ENV} sets the limit)"
                    break
                if r is None or r.get("done"):
                    break
                if "name" in r and done < len(todo):
                    results[todo[done]] = r
                    done += 1
        else:
            r = None
        if isinstance(r, dict) and r.get("done") and done == len(todo):
            _give_back(child)
            return
        if crashed is None:
            if child.proc.poll() is None:  # a batch that ended short, the child still up: not to be trusted
                child.kill()
            crashed = _death(child.proc.wait(), child.log_path, log_from)
        child.close()
        todo = todo[done:]
        if not todo:  # it ended after its last result
            return
        if reused and not done and not crashed.startswith("tt-mlir did not finish"):
            continue  # a kept child found dead before its first result: maybe not this job's doing, a new one tries it
        # the job in progress killed the child
        results[todo[0]] = {"name": specs[todo[0]]["name"], "compiled": False, "seconds": 0.0,
                            "error": crashed or "the compiler process ended without a result"}
        todo = todo[1:]


def _death(code: int, log_path: str, offset: int = 0) -> str:
    """What ended a child, in words: its signal or exit status and the last error line
    of its log from ``offset`` (the start of the batch it died in)."""
    how = f"signal {-code}" if code < 0 else f"exit status {code}"
    last = ""
    try:
        with open(log_path, errors="replace") as f:
            f.seek(offset)
            lines = [ln.strip() for ln in f if ln.strip() and "INFO|" not in ln]
        last = next((ln for ln in reversed(lines) if "error" in ln.lower() or "fatal" in ln.lower()),
                    lines[-1] if lines else "")
    except OSError:
        pass
    return f"tt-mlir's compiler process died ({how})" + (f": {last[:300]}" if last else "")


def _read_irs(export: str) -> dict[str, str]:
    d = os.path.join(export, "irs")
    out = {}
    try:
        names = os.listdir(d)
    except OSError:
        return out
    for stage in STAGES:
        # shlo_compiler_<ts>.mlir, not shlo_compiler_cleaned_<ts>; ttnn_<ts>, not ttnn_runtime_<ts>
        hits = sorted(n for n in names if re.fullmatch(rf"{stage}_\d+\.mlir", n))
        if hits:
            with open(os.path.join(d, hits[-1])) as f:
                out[stage] = f.read()
    return out


# ---------------------------------------------------------------------------------
# Reading what tt-mlir emitted
# ---------------------------------------------------------------------------------

def shlo_collectives(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in _SHLO_CCL.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if "=" not in text[line_start:m.start()] and not text[line_start:m.start()].strip().startswith('"'):
            continue  # not an op (e.g. an attribute mentioning the name)
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return dict(sorted(counts.items()))


def ccl_counts(ops: list, *, const_eval: bool) -> dict[str, int]:
    counts: dict[str, int] = {}
    for o in ops:
        if o.kind == "boundary" or o.const_eval != const_eval:
            continue
        counts[o.kind] = counts.get(o.kind, 0) + 1
    return dict(sorted(counts.items()))


def _matches(pattern: re.Pattern, text: str):
    """(match, whether it lies in a const-eval function: run once at load) of each match of
    ``pattern`` in a dump."""
    import bisect

    spans = vir.function_spans(text)
    starts = [s for s, _, _ in spans]
    for m in pattern.finditer(text):
        k = bisect.bisect_right(starts, m.start()) - 1
        yield m, k >= 0 and spans[k][2]


def ttnn_op_counts(text: str) -> dict[str, dict[str, int]]:
    """{"per_step" | "at_load": {"compute", "layout", "ccl"}: count} of a TTNN module's device
    ops (``NOT_DEVICE_OPS`` left out)."""
    out = {"per_step": {"compute": 0, "layout": 0, "ccl": 0}, "at_load": {"compute": 0, "layout": 0, "ccl": 0}}
    for m, at_load in _matches(_TTNN_OP, text):
        name = m.group(1)
        if name in NOT_DEVICE_OPS:
            continue
        where = "at_load" if at_load else "per_step"
        kind = vir.KIND_OF_OP.get(name)
        cls = "ccl" if kind and kind != "boundary" else "layout" if name in LAYOUT_OPS else "compute"
        out[where][cls] += 1
    return out


# The fused kernels held side by side (``checks.tt_mlir.kernels``): tt-mlir's op name in TTIR
# and TTNN -> the fused group shard-opt prices it as (passes/mark_fusions.py).
KERNELS = {"scaled_dot_product_attention": "sdpa", "scaled_dot_product_attention_decode": "sdpa",
           "rms_norm": "norm", "layer_norm": "norm", "softmax": "softmax"}
_FUSED_OP = re.compile(r'"(ttir|ttnn)\.(' + "|".join(sorted(KERNELS, key=len, reverse=True)) + r')"\s*\(')

# Why TTNN's attention is not TTIR's: at optimization_level 0 (tt-xla's default, and the level
# the offline check compiles at) tt-mlir's TTNNDecomposition rewrites every
# ttnn.scaled_dot_product_attention into transpose + matmul + scale + mask + softmax + matmul;
# only with the optimizer on (level >= 1, an op model of the device) does it keep the ones the
# op model validates (tt-mlir lib/Dialect/TTNN/Transforms/Decomposition/
# SDPADecompositionPattern.h: "When validationConfig is std::nullopt, decomposition is
# unconditional"; TTNNPipelines.cpp passes it only when optimizerPassEnabled).
SDPA_AT_LEVEL_0 = ("TTNN runs each of TTIR's {n} scaled_dot_product_attention as matmul + softmax + matmul: at "
                   "optimization_level 0 tt-mlir decomposes every one (SDPADecompositionPattern, no op-model "
                   "validation); shard-opt prices the fused SDPA kernel that optimization_level >= 1 keeps")


def fused_kernels(text: str) -> dict[str, int]:
    """{tt-mlir op name: count} of the fused kernels (``KERNELS``) a TTIR or TTNN module runs per step
    (const-eval functions left out)."""
    out: dict[str, int] = {}
    for m, at_load in _matches(_FUSED_OP, text):
        if not at_load:
            out[m.group(2)] = out.get(m.group(2), 0) + 1
    return out


def skipped(why: str) -> dict:
    """``checks.tt_mlir`` of a run whose check could not start (no plugin, another build)."""
    return {"compiled": False, "skipped": True, "error": why, "matches": False, "stages": {},
            "ttnn_ops_per_step": None, "ttnn_ops_at_load": None, "differences": [f"not checked: {why}"]}


def summarize(plan, result: Compiled, system, *, facts=None, cost_model=None) -> dict:
    """The plan JSON's ``checks.tt_mlir`` for ``plan`` compiled as ``result`` (its numerics
    and verdict apart: ``shard_opt.deliverable``); ``facts``, the priced module's
    ``ModuleFacts``, give the priced device ops to hold TTNN's against."""
    from shard_opt.costmodel.ttnn_ops import class_counts

    priced_ops = len(facts.ops) if facts is not None else None
    priced_classes = class_counts(facts) if facts is not None else None
    out = {"compiled": result.compiled, "error": result.error, "seconds": result.seconds, "cached": result.cached,
           "stages": {},
           **({"ir_dir": result.ir_dir} if result.ir_dir else {}),
           "collectives_at_load": {}, "ttnn_ops_per_step": None, "ttnn_ops_at_load": None,
           "matches": False, "differences": []}
    if not result.compiled:
        out["differences"] = [f"tt-mlir rejected the module: {result.error}"]
        return out
    shape, _ = _plan.mesh_of(plan)
    if len(shape) == 1:
        shape = [1, shape[0]]
    if "shlo_compiler" in result.irs:
        out["stages"]["shlo_compiler"] = shlo_collectives(result.irs["shlo_compiler"])
    verdicts = {}
    for stage in ("ttir", "ttnn"):
        text = result.irs.get(stage)
        if text is None:
            out["differences"].append(f"tt-mlir wrote no {stage.upper()} module")
            continue
        ops, _, _ = vir.parse_dump(text, list(shape))
        out["stages"][stage] = ccl_counts(ops, const_eval=False)
        at_load = ccl_counts(ops, const_eval=True)
        if at_load:
            out["collectives_at_load"][stage] = at_load
        verdicts[stage] = vir.verify_ir(plan, text)
    if "ttnn" in result.irs:
        counts = ttnn_op_counts(result.irs["ttnn"])
        out["ttnn_ops_per_step"] = sum(counts["per_step"].values())
        out["ttnn_ops_at_load"] = sum(counts["at_load"].values())
        out["ttnn_ops_breakdown"] = counts
    out["kernels"] = {"priced": _priced_kernels(facts) if facts is not None else None,
                      **{st: fused_kernels(result.irs[st]) for st in ("ttir", "ttnn") if st in result.irs}}
    n_sdpa = out["kernels"].get("ttir", {}).get("scaled_dot_product_attention", 0)
    notes = []
    if n_sdpa and not out["kernels"].get("ttnn", {}).get("scaled_dot_product_attention"):
        notes.append(SDPA_AT_LEVEL_0.format(n=n_sdpa))
    if notes:
        out["kernel_notes"] = notes
    if priced_ops is not None:
        out["priced_device_ops"] = priced_ops
    if priced_classes is not None:
        out["priced_op_classes"] = dict(priced_classes)
    ttir = verdicts.get("ttir")
    ttnn_diffs = ttnn_vs_ttir(out, shape) if ttir is not None and "ttnn" in out["stages"] else []
    out["matches"] = len(verdicts) == 2 and all(v.ok for v in verdicts.values()) and not ttnn_diffs
    out["differences"] += differences(verdicts) + ttnn_diffs
    if ttir is not None:
        out.update(checked_cost(plan, ttir, out, system, cost_model, ttnn=verdicts.get("ttnn")))
    return out


def _priced_kernels(facts) -> dict[str, int]:
    """{fused group: count} of the priced module's fused kernels (the groups ``KERNELS`` names)."""
    out: dict[str, int] = {}
    for op in facts.ops:
        if op.kind in set(KERNELS.values()):
            out[op.kind] = out.get(op.kind, 0) + 1
    return out


def ttnn_vs_ttir(summary: dict, mesh_shape) -> list[str]:
    """TTNN's collectives against TTIR's, by kind, after TTNN's lowering: a TTIR
    all_to_all on an axis of N devices is N(N-1) point_to_point ops per group of the axis
    (tt-mlir ``TTIRToTTNN.cpp``), an all_slice can become a mesh_partition or nothing, and
    a collective TTNN's const-eval moved to load time still counts. The TTIR module is
    matched to the plan in program order (``verify_ir``); TTNN schedules ops in its own
    order, so it is held against TTIR by counts."""
    ttir = dict(summary["stages"].get("ttir", {}))
    want: dict[str, int] = {}
    total = 1
    for n in mesh_shape:
        total *= n
    for kind, n in ttir.items():
        if kind == "all_to_all":
            continue
        if kind != "all_slice":
            want[kind] = want.get(kind, 0) + n
    got = dict(summary["stages"].get("ttnn", {}))
    for kind, n in summary["collectives_at_load"].get("ttnn", {}).items():
        got[kind] = got.get(kind, 0) + n
    got.pop("all_slice", None)
    if ttir.get("all_to_all"):
        sizes = {n for n in mesh_shape if n > 1}
        p2p_per_a2a = sorted({n * (n - 1) * (total // n) for n in sizes})
        p2p = got.pop("point_to_point", 0)
        # each all_to_all is one of the per-axis chain lengths: the count must be a sum of them
        if not _sum_of(p2p, ttir["all_to_all"], p2p_per_a2a):
            return [f"TTNN: {p2p} point_to_point ops for TTIR's {ttir['all_to_all']} all_to_all (each lowers to "
                    f"one of {', '.join(map(str, p2p_per_a2a))} point_to_point ops)"]
    out = []
    for kind in sorted(set(want) | set(got)):
        if want.get(kind, 0) != got.get(kind, 0):
            out.append(f"TTNN: {got.get(kind, 0)} {kind} (per step and at load) where TTIR has {want.get(kind, 0)}")
    return out


def _sum_of(total: int, count: int, parts: list[int]) -> bool:
    """Is ``total`` a sum of exactly ``count`` terms, each one of ``parts``? (The sums
    reachable after each term, kept as a set: linear in ``count``, where trying every
    sequence of terms took 2**count steps and never ended on a full model's 64 all_to_alls.)"""
    reachable = {0}
    for _ in range(count):
        reachable = {s + p for s in reachable for p in parts if s + p <= total}
        if not reachable:
            return False
    return total in reachable


def differences(verdicts: dict) -> list[str]:
    """Every difference between the plan and tt-mlir's IR, in words."""
    out = []
    for stage, v in verdicts.items():
        names = v.axis_names
        for i, c, _ in v.missing:
            out.append(f"{stage.upper()}: the plan prices {c.kind} {{{','.join(c.axes or [])}}} on "
                       f"{_plan.shape_text(c.shape, c.dtype)}"
                       f"{' [' + c.component + ']' if c.component else ''} that tt-mlir does not run")
        for d, _ in v.extra:
            out.append(f"{stage.upper()}: tt-mlir runs {d.describe(names)} that the plan does not price")
        for p in v.pairings:
            if p.status == "differs":
                out.append(f"{stage.upper()}: {p.note}")
    return out


def checked_cost(plan, ttir, summary: dict, system, cost_model=None, ttnn=None) -> dict:
    """What tt-mlir runs, priced with the plan's own cost model where the plan did not:
    ``extra_ccl_us`` for each per-step TTIR collective the plan lacks (an all_to_all as
    the point_to_point chain TTNN lowers it to), minus ``missing_ccl_us`` for each priced
    collective tt-mlir does not run; ``extra_ops_us`` for the TTNN device ops beyond the
    ones the plan priced, each at the shortest kernel plus the op-to-op gap (the cost
    model's ``unpriced_op_us``, docs/costmodel.md 2.6): most of them are layout and data
    movement (reshape, to_layout, typecast, permute) the compute model has no op for;
    minus ``estimated_ops_us``, the same ops as the plan's cost estimated them from the
    graph without the check (``costmodel/ttnn_ops.py``: the count read here replaces the
    estimate); minus ``load_ccl_us`` for each priced collective TTNN's const-eval runs once
    at load instead of per step. ``checked_us`` = the plan's ``total_us`` + all of them."""
    shape, axes = _plan.mesh_of(plan)
    names = list(axes)
    extra = 0.0
    for d, _ in ttir.extra:
        if d.kind not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"):
            continue
        axis = [names[a] for a in d.axes if a < len(names)] or None
        if axis is None:
            continue
        nbytes = _plan.dtype_bytes(d.in_dtype) * (d.elements or 0)
        extra += system.collective_time_us(d.kind, nbytes, axis, tuple(shape), axis_names=tuple(names),
                                           allow_collective_permute=True)
    missing = sum(float(c.time_us or 0.0) for _, c, _ in ttir.missing)
    ops_us, est_ops, est_us = 0.0, 0.0, 0.0
    priced = summary.get("priced_device_ops")
    if priced is not None and summary.get("ttnn_ops_per_step") is not None:
        # the plan's own cost model's profile and gap (tenstorrent: generic, traced)
        if hasattr(cost_model, "unpriced_op_us"):
            per_op = cost_model.unpriced_op_us(system)
        else:
            c = system.compute_profile(getattr(cost_model, "compute_profile", "generic"))
            per_op = c.kernel_floor_us + c.dispatch_us.get(getattr(cost_model, "dispatch", "traced"), 0.0)
        ttnn_ccl = summary["ttnn_ops_breakdown"]["per_step"]["ccl"]
        beyond = summary["ttnn_ops_per_step"] - ttnn_ccl - priced
        ops_us = max(0, beyond) * per_op
        classes = summary.get("priced_op_classes")
        if classes is not None and getattr(cost_model, "charges_layout_ops", lambda: False)():
            from shard_opt.costmodel.ttnn_ops import estimated_from_counts

            est_ops = estimated_from_counts(classes)
            est_us = est_ops * per_op
    load = 0.0
    if ttnn is not None:
        cs = ttnn.plan_collectives
        load = sum(float(cs[i].time_us or 0.0) for p in ttnn.pairings if "const-eval" in p.note for i in p.plan)
    total = float(plan.cost.total_us)
    return {"extra_ccl_us": round(extra, 3), "missing_ccl_us": round(missing, 3), "extra_ops_us": round(ops_us, 3),
            "estimated_ops": round(est_ops, 1), "estimated_ops_us": round(est_us, 3),
            "load_ccl_us": round(load, 3),
            "checked_us": round(total + extra - missing + ops_us - est_us - load, 3)}


def line(check: dict, name: str = "plan") -> str:
    """The one stderr line of a plan's check: the verdict, then what tt-mlir runs."""
    from shard_opt.verdict import Verdict

    v = Verdict.from_json(check["verdict"]) if check.get("verdict") else None
    head = f"shard-opt: {name}: {v.line()}" if v is not None else f"shard-opt: {name}: tt-mlir verdict: not checked"
    if not check.get("compiled"):
        return head
    st = check["stages"]
    ttnn = ", ".join(f"{k} x{n}" for k, n in st.get("ttnn", {}).items()) or "no CCL"
    same = "matches the priced collectives" if check["matches"] else \
        f"DIFFERS from the priced collectives ({len(check['differences'])} differences, see the report)"
    extra = f"; checked {check['checked_us']} us" if "checked_us" in check else ""
    took = "compiled before (kept)" if check.get("cached") else f"compile {check['seconds']:.1f} s"
    if "check_seconds" in check:
        took += f", the check {check['check_seconds']:.1f} s"
    return (f"{head}\nshard-opt: {name}: tt-mlir ({took}) {same}; TTNN per step: {ttnn}, "
            f"{check['ttnn_ops_per_step']} device ops ({check['ttnn_ops_at_load']} at load){extra}")
