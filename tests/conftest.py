"""Shared pytest set-up.

XLA's CPU backend reads XLA_FLAGS once, when jax first initialises: give every test
process 8 virtual devices (numeric cross-checks need as many as the mesh has).
Hypothesis runs derandomized (the ``shard-opt`` profile below).
"""

import os
import tempfile

# Two directories of the run's own, made by the first process (the pytest-xdist processes
# inherit them) and removed when it exits, unless the variable is set already:
# SHARD_OPT_CACHE: the lowering cache is on by default (~/.cache/shard-opt); the suite's
# entries go in a directory of their own. SHARD_OPT_TEST_SHARED: what the run's test
# processes share (``shared_once`` below).
for _var, _prefix in (("SHARD_OPT_CACHE", "shard-opt-test-cache-"),
                      ("SHARD_OPT_TEST_SHARED", "shard-opt-test-shared-")):
    if _var not in os.environ:
        import atexit
        import shutil

        os.environ[_var] = tempfile.mkdtemp(prefix=_prefix)
        atexit.register(shutil.rmtree, os.environ[_var], ignore_errors=True)

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("PYTHONHASHSEED", "0")
# Under pytest-xdist (pyproject's addopts: two test processes, one per core) the search
# evaluates in its own process (shard_opt.parallel): the other test process has the other core.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("SHARD_OPT_JOBS", "1")
# The tt-mlir check (a child process compiling with the Tenstorrent plugin, seconds per run)
# is off by default here; tests/test_ttmlir.py turns it on where it is the subject.
os.environ.setdefault("SHARD_OPT_CHECK", "0")
os.environ.setdefault("SHARD_OPT_TT_DIR", os.path.join(tempfile.gettempdir(), "shard-opt-tt-mlir"))

# No test passes or fails by the clock. CHILD_CEILING_S only ends a child process that hangs
# (a failure, with what it printed, instead of a suite that never ends); every child the
# tests run finishes in seconds to a minute on a loaded 2-core machine. The check's own
# deadlines (a tt-mlir compile, the numerics run of tt-mlir's program) are set to it as well,
# so a test of the check asserts on what the check computes, never on how fast it ran; the
# deadlines themselves are tested with a process made to hang (tests/test_deliverable.py).
CHILD_CEILING_S = 1200
os.environ.setdefault("SHARD_OPT_TT_TIMEOUT", str(CHILD_CEILING_S))
os.environ.setdefault("SHARD_OPT_NUMERICS_TIMEOUT", str(CHILD_CEILING_S))

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests draw the same examples on every machine and every run (a failure is
# reproducible, and the suite does not fail at random on a fresh checkout); a failure
# prints the blob that replays it (@reproduce_failure). HYPOTHESIS_PROFILE=random
# explores new examples on purpose; HYPOTHESIS_PROFILE=seeded with hypothesis' own
# --hypothesis-seed=N draws the examples of seed N (derandomize off, no example database,
# so a seed means the same examples on every machine):
#   HYPOTHESIS_PROFILE=seeded .venv/bin/python -m pytest tests/test_costmodel.py tests/test_fuzz.py --hypothesis-seed=3
# A failing example a seed finds is kept as an @example on its test.
# Per-test @settings override single fields only.
settings.register_profile("shard-opt", derandomize=True, print_blob=True, database=None)
settings.register_profile("random", derandomize=False, print_blob=True)
settings.register_profile("seeded", derandomize=False, print_blob=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "shard-opt"))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


@pytest.fixture
def run_cli(capsys):
    """Run ``shard-opt`` in-process: returns (exit code, stdout, stderr)."""
    from shard_opt.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


# Small real runs whose plans the report and citation tests read (``real_plan``): every
# field is what the search writes, none added by hand.
SCRIPTS = os.path.join(ROOT, "tests", "fixtures", "scripts")
REAL_RUNS = {
    # 2-layer Llama-3-8B: Megatron pairs, two all_reduces per layer, bfp8/bfp4 weights
    "llama8b": ["zoo:llama-3-8b", "--layers", "2", "--mesh", "2x4", "--weight-dtype", "bfp8,mlp=bfp4"],
    # GPT-2 XL, 2 layers: Conv1D weights ([in, out]), a plan that is not robust
    "gpt2": ["zoo:gpt2-xl", "--layers", "2", "--mesh", "2x4"],
    # a small Llama with the loader's own shard spec: loader-spec baseline and comparison
    "spec": [os.path.join(EXAMPLES, "llama_spec_load.py"), "--mesh", "2x4"],
    # Qwen3.5 attention at its own shape: the heads rule and what it cost, reshape sites; one
    # layer (each is a rule's case of its own; two layers doubled every Shardy run of its
    # ~550-plan one-axis baseline: 15.1 -> 6.4 CPU-s)
    "qwen35": [os.path.join(SCRIPTS, "qwen35_attention.py"), "--layers", "1", "--mesh", "1x8"],
    # a UNet res-block: convolutions, no token inputs
    "unet": [os.path.join(SCRIPTS, "unet_resblock.py"), "--mesh", "1x8"],
    # the MLP on a line of 8: its pair closed by a reduce_scatter, then an all_gather
    "mlp": [os.path.join(ROOT, "examples", "mlp.mlir"), "--mesh", "1x8"],
}


def shared_once(key: str, make):
    """``make()`` once per test run, across the run's test processes: the first process to
    ask computes it while holding a lock on ``key`` (another process asking for the same key
    waits for it instead of computing it again) and leaves its pickle in
    ``SHARD_OPT_TEST_SHARED``; the others read that. An exception is not kept (each asker
    raises its own), nor is a value that cannot be pickled (each asker computes its own).
    Returns (value, whether it was computed here)."""
    import fcntl
    import hashlib
    import pickle

    base = os.environ["SHARD_OPT_TEST_SHARED"]
    path = os.path.join(base, hashlib.sha256(key.encode()).hexdigest()[:40])
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path + ".pkl"):
            with open(path + ".pkl", "rb") as f:
                _SHARED_COUNTS["read"] += 1
                return pickle.load(f), False
        value = make()
        _SHARED_COUNTS["made"] += 1
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # a closure, a module object... : not shared
            _SHARED_COUNTS["unpicklable"] += 1
            return value, True
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path + ".pkl")
        return value, True


_SHARED_COUNTS = {"made": 0, "read": 0, "unpicklable": 0}


def pytest_sessionfinish(session):
    """Each test process leaves its ``shared_once`` counts for the summary line."""
    import json

    with open(os.path.join(os.environ["SHARD_OPT_TEST_SHARED"], f"counts-{os.getpid()}.json"), "w") as f:
        json.dump(_SHARED_COUNTS, f)


def pytest_terminal_summary(terminalreporter):
    """One line: how much the run's test processes shared (``shared_once``)."""
    import glob
    import json

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    total = dict.fromkeys(_SHARED_COUNTS, 0)
    for path in glob.glob(os.path.join(os.environ["SHARD_OPT_TEST_SHARED"], "counts-*.json")):
        with open(path) as f:
            for k, v in json.load(f).items():
                total[k] = total.get(k, 0) + v
    terminalreporter.write_line(f"shared by the test processes (lowerings, real plans): {total['made']} made "
                                f"({total['unpicklable']} not picklable, so not shared), {total['read']} read "
                                f"back instead of made again")


@pytest.fixture(scope="session", autouse=True)
def one_tt_mlir_compile_per_module():
    """tt-mlir compiles each distinct module once per test run: the check's ``compile_all``
    answers a module it compiled before (the same text, devices, system and mesh) with that
    result under the new job's name. A result whose compiler never started is not kept, and
    a test that replaces the compiler's child (``_child_command``) always compiles."""
    import dataclasses

    from shard_opt.ttmlir import check as ttc

    real, child = ttc.compile_all, ttc._child_command
    memo: dict = {}

    def compile_all(jobs, system, mesh_shape):
        if ttc._child_command is not child:
            return real(jobs, system, mesh_shape)

        def key(job):
            return job.text, job.devices, getattr(system, "name", id(system)), tuple(mesh_shape)

        todo = list({key(j): j for j in jobs if key(j) not in memo}.values())
        fresh = dict(zip(map(key, todo), real(todo, system, mesh_shape))) if todo else {}
        for k, c in fresh.items():
            if not ttc.is_startup_error(c.error):
                memo[k] = c
        return [dataclasses.replace((memo.get(key(j)) or fresh[key(j)]), name=j.name,
                                    irs=dict((memo.get(key(j)) or fresh[key(j)]).irs)) for j in jobs]

    ttc.compile_all = compile_all
    yield
    ttc.compile_all = real


@pytest.fixture(scope="session", autouse=True)
def one_lowering_per_script():
    """A load script is lowered once per test run for each set of load arguments (the
    product never caches scripts, ``frontends/cache.py``: what one lowers to may depend on
    files no key sees; in a test run the fixture scripts do not change). The key holds the
    script's path and bytes, the arguments, and the bytes of a ``spec`` file; a script that
    fails is not kept (it fails again). Each call returns its own copy (its own ``meta``,
    ``arguments`` list and short copies), free to edit, as a fresh lowering would be. A
    JSON spec file is not in the key (the lowering without it, its entry in ``meta``)."""
    import copy
    import dataclasses
    import hashlib

    from shard_opt.frontends import shard_spec
    from shard_opt.frontends import torch_frontend as tf

    real = tf.load_script
    memo: dict = {}

    def digest(path):
        try:
            with open(path, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return None

    def load_script(path, **kw):
        spec = kw.get("spec")
        # a JSON spec file is data, read without the model: the script lowers as it does
        # without one and the file's entry takes the loader's place in ``meta`` (as
        # load_script puts it there), so every JSON spec shares one lowering
        json_spec = spec is not None and str(spec).endswith(".json")
        lowered_with = {**kw, "spec": None} if json_spec else kw
        key = (os.path.abspath(path), digest(path), digest(spec) if spec and not json_spec else None,
               tuple(sorted((k, v) for k, v in lowered_with.items() if k != "spec")))
        if key[1] is None:
            return real(path, **kw)
        entry = shard_spec.load_spec_file(spec) if json_spec else None  # a bad file: load_script's error
        if key not in memo:
            # kept without its re-lowering closure (``_fresh`` gives each copy this fixture's)
            def lower():
                model = real(path, **lowered_with)
                return dataclasses.replace(model, with_layers=None), model.with_layers is not None

            memo[key] = shared_once(f"lowering {key!r}", lower)[0]
        model = _fresh(*memo[key], path, kw)
        if json_spec:
            model.meta["shard_spec"] = entry
        return model

    def _fresh(model, relowers, path, kw):
        copies: dict = {}

        def with_layers(k):
            if k not in copies:
                copies[k] = load_script(path, **{**kw, "layers": k})
            return copies[k]

        return dataclasses.replace(model, arguments=list(model.arguments), meta=copy.deepcopy(model.meta),
                                   architecture=copy.deepcopy(model.architecture),
                                   with_layers=with_layers if relowers else None)

    tf.load_script = load_script
    yield
    tf.load_script = real


@pytest.fixture(scope="session")
def real_plan(tmp_path_factory):
    """``real_plan(name)``: the ``Plan`` the CLI writes for ``REAL_RUNS[name]`` (run once a
    test run, in-process, by whichever test process asks first); each call returns a fresh
    copy, free to edit."""
    import json

    from shard_opt.cli import main
    from shard_opt.plan import plan_from_json

    d = tmp_path_factory.mktemp("real-plans")
    cache: dict[str, str] = {}

    def get(name: str):
        if name not in cache:
            def run() -> str:  # one run per test run, not per test process (shared_once)
                path = d / f"{name}.json"
                code = main([*REAL_RUNS[name], "--plan-json", str(path), "-o", str(d / f"{name}.mlir"), "--quiet"])
                assert code == 0, f"{name}: shard-opt exited {code}"
                return path.read_text()

            cache[name] = shared_once(f"real plan {name}", run)[0]
        return plan_from_json(json.loads(cache[name]), where=name)

    return get


# ---------------------------------------------------------------------------------------
# The last lines of a failing run: one per failed test, what kind of failure and why
# (.ci/run's log ends with them; pytest's own short summary above is cut to the width).
# HUNG: a child process outlived CHILD_CEILING_S and was killed (a hang, never slowness: every
# child finishes in well under a minute); CRASHED: a child died on a signal; FAILED / ERROR
# (in a fixture): an assertion or an exception, with its first line.
# ---------------------------------------------------------------------------------------
_FAILURES: list = []


def pytest_runtest_logreport(report):
    if report.failed:
        _FAILURES.append(report)


def _why(report) -> tuple[str, str]:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr)
    text = str(report.longrepr)
    first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "no message")
    if "TimeoutExpired" in text:
        kind = "HUNG"
    elif "died on signal" in text or "Fatal Python error" in text or "Segmentation fault" in text:
        kind = "CRASHED"
    else:
        kind = "ERROR" if report.when != "call" else "FAILED"
    where = "" if report.when == "call" else f" (in {report.when})"
    return kind, f"{first[:400]}{where}"


def pytest_unconfigure(config):
    if not _FAILURES or os.environ.get("PYTEST_XDIST_WORKER"):  # the controlling process says it
        return
    tr = config.pluginmanager.get_plugin("terminalreporter")
    write = tr.write_line if tr is not None else print
    write(f"shard-opt tests: {len(_FAILURES)} failed; one line each (kind, test, why):")
    for report in _FAILURES:
        kind, why = _why(report)
        write(f"{kind} {report.nodeid}: {why}")



def pytest_collection_finish(session):
    """A test process makes many short-lived objects (a Shardy run's facts, a lowering's
    graph) and keeps a large heap (lowerings, MLIR modules): with Python's default
    thresholds its garbage collector ran a full collection every few seconds, each a scan
    of that heap, about 8% of the process's CPU (gc.callbacks over four heavy files).
    Collections a hundred times rarer cost a little memory, nothing else (what the tests
    compute does not depend on when a cycle is freed). The threshold is the product's own
    (``shard_opt.cli.GC_GEN0_THRESHOLD``, set when shard-opt is the process)."""
    import gc

    from shard_opt.cli import GC_GEN0_THRESHOLD

    gc.set_threshold(GC_GEN0_THRESHOLD, 10, 10)
