"""The ``shard-opt`` command line (docs/design.md, "Command-line contract").

``main(args=None)`` takes its arguments as a list so tests drive it in-process.
Exit status: 0 success; 1 user error (one line on stderr); 2 internal error (with the
path of a file that reproduces it); 3 ``--verify-numerics`` found a wrong result (every
output still written, marked failed); 4 the tt-mlir check found no plan it compiles and
whose partitioned program computes the unsharded model's answer (every output written,
marked NOT DELIVERABLE: ``shard_opt.deliverable``). Output files are written only on
success (or exit 3 or 4), all or none, each atomically (a temporary file renamed into place).

Only the standard library, ``shard_opt.errors`` / ``shard_opt.timing`` and the rule
registry (``shard_opt.rules``, for ``--allow``'s help) are imported here at start-up: jax comes with the passes, torch with a load script or zoo model,
matplotlib with ``--report`` (``python -X importtime -m shard_opt.cli --help``).
``SHARD_OPT_TIMINGS=FILE`` writes the wall seconds of each phase as JSON (``timing``).
"""

from __future__ import annotations

import time

_CLI_START = time.perf_counter()  # python's start-up ends here; the rest of "import" follows

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402  (tests patch shard_opt.cli.tempfile)

from shard_opt import timing  # noqa: E402
from shard_opt.errors import PassError, UserError  # noqa: E402

STANDARD_MESHES = {  # references/tenstorrent.md section 1 (tt-xla skill's mesh_shapes.md)
    1: ["1x1"], 2: ["1x2"], 4: ["1x4", "2x2"], 8: ["2x4", "1x8"], 32: ["8x4", "4x8"],
    64: ["8x8"], 128: ["8x16"],  # two and four Galaxies (tt-xla torch_multichip_utils.py; references/serving.md)
}

LONG_FLAGS = (
    "mesh", "devices", "system", "axis-names", "plan-json", "report", "emit-torch", "emit-lit-test",
    "evaluate", "verify-numerics", "layers", "parallelism", "batch", "seq-len", "phase", "dtype",
    "cost-model", "describe", "in-place", "pass-pipeline", "list-passes", "list-systems",
    "mlir-print-ir-after-all", "split-input-file", "allow-collective-permute", "quiet", "propagation",
    "weight-dtype", "no-cache", "spec", "allow", "no-check", "serve",
)
CHECK_ENV = "SHARD_OPT_CHECK"  # "0"/"off": no tt-mlir check unless asked (the test suites set it)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shard-opt",
        description="Find the fastest sharding of a model across a mesh of Tenstorrent chips.",
        epilog="Also: shard-opt verify-ir PLAN.json DUMP.mlir  (check a TTIR/TTNN dump against a plan)",
    )
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="a .mlir file (StableHLO), '-' for stdin, a PyTorch load script .py, or zoo:NAME")
    p.add_argument("--mesh", action="append", default=[], metavar="RxC",
                   help="target mesh; repeat for one plan valid on every listed mesh")
    p.add_argument("--devices", type=int, metavar="N", help="choose among the standard mesh shapes for N chips")
    p.add_argument("--system", metavar="NAME", help="hardware preset (default: the Wormhole system of the mesh's size)")
    p.add_argument("--axis-names", default="batch,model", metavar="A,B", help="mesh axis names (default batch,model)")
    p.add_argument("-o", dest="output", metavar="OUT.mlir", help="write the annotated module here (default stdout)")
    p.add_argument("--plan-json", metavar="PLAN.json", help="write the plan as JSON ('-' for stdout)")
    p.add_argument("--report", metavar="REPORT.md", help="write sharding_analysis.md (with a PNG beside it)")
    p.add_argument("--emit-torch", metavar="OUT.py", help="write the load script with mark_sharding calls")
    p.add_argument("--emit-lit-test", metavar="OUT.mlir", help="write a lit test pinning the plan's collectives")
    p.add_argument("--evaluate", action="store_true", help="no search: price the shardings already in the input")
    p.add_argument("--verify-numerics", action="store_true",
                   help="run unsharded and sharded on virtual XLA CPU devices and compare")
    p.add_argument("--layers", type=int, metavar="N", help="keep N repeated layers of a load script or zoo model")
    p.add_argument("--parallelism", default="tensor,sequence,data", metavar="LIST",
                   help="families the search may use: tensor, sequence, data (default all)")
    p.add_argument("--batch", type=int, metavar="B",
                   help="batch of token inputs (default: a load script's own load_inputs(), a zoo model's 1)")
    p.add_argument("--seq-len", type=int, metavar="S",
                   help="tokens per sequence, or the KV cache length with --phase decode (default: a load "
                        "script's own, a zoo model's 128)")
    p.add_argument("--phase", choices=["prefill", "decode"], default="prefill")
    p.add_argument("--dtype", choices=["bf16", "f32", "f16"], default="bf16", help="dtype of load scripts and zoo models")
    p.add_argument("--weight-dtype", metavar="DTYPE[,ROLE=DTYPE...]",
                   help="matmul weight format on device: bf16 (default), bfp8 or bfp4 (tt-xla's "
                        "experimental_weight_dtype); per role: attention=, mlp= or a parameter-name glob, "
                        "e.g. bfp8,mlp=bfp4; cache=bfp8 stores the KV cache in bfp8")
    p.add_argument("--cost-model", default="tenstorrent", metavar="NAME[:OPTION=VALUE,...]",
                   help="tenstorrent (the tt-xla path, default), tenstorrent-tuned (tt-metal's), alpha-beta, "
                        "autoshard-heuristic; options e.g. tenstorrent:dispatch=untraced")
    p.add_argument("--propagation", choices=["tt-mlir", "sdy"], default="tt-mlir",
                   help="how Shardy runs: tt-mlir's stablehlo-pipeline steps (default) or Shardy's own "
                        "sdy-propagation-pipeline + export (docs/costmodel.md)")
    p.add_argument("--describe", action="store_true", help="print the architecture map and exit")
    p.add_argument("--in-place", action="store_true", help="let --emit-torch overwrite the input script")
    p.add_argument("--pass-pipeline", metavar="PIPELINE",
                   help="run these passes on a .mlir input and print the result, e.g. "
                        "'builtin.module(add-mesh{shape=2x4}, apply-shardings, shardy-propagate)'")
    p.add_argument("--split-input-file", action="store_true",
                   help="with --pass-pipeline: run each '// -----' chunk on its own")
    p.add_argument("--mlir-print-ir-after-all", action="store_true", help="print the IR after each pass to stderr")
    p.add_argument("--list-passes", action="store_true")
    p.add_argument("--list-systems", action="store_true")
    p.add_argument("--allow-collective-permute", action="store_true",
                   help="price collective_permute instead of rejecting it (tt-mlir issue 3370); "
                        "the same as --allow collective-permute")
    from shard_opt.rules import IDS as RULE_IDS  # the rule registry (no jax: its modules import it lazily)

    p.add_argument("--allow", metavar="RULE[,RULE...]",
                   help="turn off compiler-safety rules, one file each in shard_opt/rules/: "
                        + ", ".join(RULE_IDS))
    p.add_argument("--spec", metavar="SPEC.py|SPEC.json",
                   help="your own shard spec (load_shard_spec(model) in a .py, or {name: spec} JSON), priced "
                        "as the loader-spec baseline (and alone with --evaluate)")
    p.add_argument("--no-check", action="store_true",
                   help="skip the tt-mlir check (compiling the plan and baselines with the Tenstorrent "
                        "plugin, offline; default on when jax-tt-plugin is installed; SHARD_OPT_CHECK=0 "
                        "turns it off by default)")
    p.add_argument("--check", action="store_true", help=argparse.SUPPRESS)  # on even under SHARD_OPT_CHECK=0
    p.add_argument("--serve", metavar="isl=I,osl=O[,users=U,...]",
                   help="plan the deployment on --devices N: data-parallel replicas, prefill and decode "
                        "(colocated or on separate sub-meshes), users that fit, TTFT/TPOT and tokens/s "
                        "(users=0: as many as fit; limits ttft_ms=, tpot_ms=; max_batch=)")
    p.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")
    p.add_argument("--no-cache", action="store_true",
                   help="do not read or write the lowering cache for this run (default: $SHARD_OPT_CACHE, "
                        "else $XDG_CACHE_HOME/shard-opt, else ~/.cache/shard-opt; SHARD_OPT_CACHE=off disables it)")
    return p


def _normalise(argv: list[str]) -> list[str]:
    """Accept ``-flag`` as ``--flag`` (the *-opt habit)."""
    out = []
    for a in argv:
        name = a[1:].split("=", 1)[0]
        if a.startswith("-") and not a.startswith("--") and name in LONG_FLAGS:
            a = "-" + a
        out.append(a)
    return out


def main(args: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if args is None else args)
    started = time.perf_counter()
    timing.reset()
    if args is None:  # the process's entry point: python's start-up and this module's imports
        collect_garbage_less_often()
        age = timing.process_age()
        timing.add("import", (age - (time.perf_counter() - started)) if age is not None else started - _CLI_START)
    code = 2
    try:
        code = _main(argv)
    finally:
        path = os.environ.get(timing.ENV)
        if path:
            timing.write_json(path, exit_status=code, main_s=round(time.perf_counter() - started, 4),
                              wall_s=_wall(started, args is None))
    if args is None:
        _exit(code)
    return code


# Python's cyclic garbage collector, young generation: a collection after this many new
# container objects (Python's default, 700, collects every few milliseconds while torch.export
# and the search build graphs and facts, and each gen-2 pass scans the whole heap). Measured
# 2026-12-05 (one core, SHARD_OPT_CHECK=0, fresh cache; /usr/bin/time): examples/llama_load.py
# --mesh 2x4: 12.7-13.4 -> 11.9-12.0 CPU-s, peak RSS 654 -> 713 MB; zoo:llama-3-8b (32 layers)
# --mesh 2x4: 35.1 -> 32.6 CPU-s, 726 -> 776 MB. The test processes use the same threshold
# (tests/conftest.py).
GC_GEN0_THRESHOLD = 70_000


def collect_garbage_less_often() -> None:
    """Set when shard-opt is the process (its entry point), not when ``main`` is called as
    a library function: the collector's settings are the embedding program's."""
    import gc

    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])


def _exit(code: int) -> None:
    """End the process now: flush, wait for threads, run the atexit handlers (worker
    shutdown, logging), then ``os._exit``. Skips the interpreter's teardown of every module
    and object, which with torch and jax loaded takes a second or more of a warm run."""
    import atexit
    import threading

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (| head): nothing more to say
            pass
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _wall(started: float, whole_process: bool) -> float:
    """Seconds since the process started (an entry-point run) or since ``main`` began."""
    age = timing.process_age() if whole_process else None
    return round(age if age is not None else time.perf_counter() - started, 4)


def _main(argv: list[str]) -> int:
    try:
        if argv and argv[0] == "verify-ir":
            return _verify_ir(argv[1:])
        return _run(_normalise(argv))
    except UserError as e:
        sys.stderr.write(f"shard-opt: error: {_one_line(e)}\n")
        return 1
    except PassError as e:
        sys.stderr.write(f"shard-opt: internal error: {_one_line(e)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("shard-opt: interrupted\n")
        return 130
    except Exception as e:  # an internal error: keep the traceback in a file, not on screen
        import traceback

        fd, path = tempfile.mkstemp(prefix="shard-opt-crash-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write("shard-opt " + " ".join(argv) + "\n\n" + traceback.format_exc())
        sys.stderr.write(f"shard-opt: internal error: {type(e).__name__}: {_one_line(e)} "
                         f"(details and repro: {path})\n")
        return 2


def _one_line(e: BaseException) -> str:
    """The contract is one line on stderr: fold whatever newlines a message carries."""
    return " ".join(str(e).split())


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()

    def fail(message):  # argparse's own errors become one UserError line
        raise UserError(f"{message} (see shard-opt --help)")

    parser.error = fail
    return parser.parse_args(argv)


def _prepare_xla(ns) -> None:
    """``--verify-numerics`` needs as many virtual CPU devices as the largest mesh; XLA reads
    the flag once, when jax starts, so it is set before anything imports jax's backend (the
    tt-mlir check's numerics set their own, in their child: ``shard_opt.ttmlir.numerics``)."""
    if ns.verify_numerics or _check_wanted(ns):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # no C++ info lines on stderr
    if not ns.verify_numerics:
        return
    want = max([32 if ns.devices == 32 else (ns.devices or 1)] +
               [_device_count(m) for m in ns.mesh])
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={max(want, 8)}".strip()


def _device_count(spec: str) -> int:
    n = 1
    for part in spec.lower().split("x"):
        n *= int(part) if part.isdigit() else 1
    return n


def _run(argv: list[str]) -> int:
    ns = _parse(argv)
    _prepare_xla(ns)
    if ns.no_cache:
        from shard_opt.frontends import cache

        with cache.disabled():
            return _run_parsed(ns)
    return _run_parsed(ns)


def _run_parsed(ns) -> int:
    out = sys.stdout
    if ns.list_passes:
        from shard_opt.pass_manager import list_passes

        for name, summary in list_passes():
            out.write(f"  {name:26s} {summary}\n")
        return 0
    if ns.list_systems:
        from shard_opt import costmodel

        for system in costmodel.list_systems():
            out.write(system.describe() + "\n")
        return 0
    if not ns.inputs:
        raise UserError("no INPUT given: pass a .mlir file, '-', a load script .py or zoo:NAME (see shard-opt --help)")

    axes = tuple(a.strip() for a in ns.axis_names.split(",") if a.strip())
    if not axes or len(set(axes)) != len(axes) or not all(re.fullmatch(r"[A-Za-z_][\w.-]*", a) for a in axes):
        raise UserError(f"--axis-names {ns.axis_names!r}: give distinct names (letters, digits, _ . -), one per mesh "
                        f"dim, e.g. batch,model")
    with timing.phase("import"):
        from shard_opt import costmodel
        from shard_opt.candidates import PARALLELISM
        from shard_opt import safety
        from shard_opt.sharding import Mesh
        from shard_opt.weights import WeightFormats

    meshes = [Mesh.parse(m, axes) for m in ns.mesh]
    parallelism = tuple(p.strip() for p in ns.parallelism.split(",") if p.strip())
    bad = [p for p in parallelism if p not in PARALLELISM]
    if bad or not parallelism:
        raise UserError(f"--parallelism {ns.parallelism!r}: use a comma list of {', '.join(PARALLELISM)}")
    weights = WeightFormats.parse(ns.weight_dtype)
    costmodel.get_cost_model(ns.cost_model)  # an unknown model or option fails before any work
    allow = safety.parse_allow(ns.allow) | ({"collective-permute"} if ns.allow_collective_permute else set())
    for flag in ("layers", "batch", "seq_len", "devices"):
        v = getattr(ns, flag)
        if v is not None and v < 1:
            raise UserError(f"--{flag.replace('_', '-')} {v}: must be at least 1")
    if ns.devices and meshes:
        raise UserError("give either --mesh or --devices, not both")
    if ns.serve is not None:
        return _serve(ns, axes, parallelism, weights, allow)
    if ns.devices and ns.devices not in STANDARD_MESHES:
        raise UserError(f"--devices {ns.devices}: standard systems have {', '.join(map(str, STANDARD_MESHES))} chips; "
                        f"pass one of those, or --mesh RxC")
    _check_outputs(ns, [_input_name(i) for i in ns.inputs])

    if ns.pass_pipeline:
        return _run_pipeline(ns, meshes)
    for spec, m in zip(ns.mesh, meshes):
        m.check_supported()  # a mesh tt-mlir refuses is refused before any model is lowered
        if "x" not in spec.lower() and not ns.quiet:  # a bare N: say how it was read
            sys.stderr.write(f"shard-opt: --mesh {spec} is read as {m.spec}: a line of {m.num_devices} chips on "
                             f"the '{m.axes[-1]}' axis (tt-mlir's meshes are 2-D; write --mesh {m.spec} to say so)\n")

    with timing.phase("import"):
        from shard_opt import frontends
        from shard_opt.frontends import cache

    cache.reset_stats()
    with timing.phase("lower"):
        # background: a zoo model's copies for the search are lowered beside the model itself
        models = [frontends.load(i, layers=ns.layers, batch=ns.batch, seq_len=ns.seq_len, phase=ns.phase,
                                 dtype=ns.dtype, spec=ns.spec, background=not ns.describe) for i in ns.inputs]
    from shard_opt.lowered import PendingModel

    # a zoo model still lowering in the background (PendingModel) is not waited for here
    lowered = [None if isinstance(m, PendingModel) else m for m in models]
    _say_inputs(ns, lowered)
    names = [m.name if m is not None else _input_name(i) for i, m in zip(ns.inputs, lowered)]
    if names != [_input_name(i) for i in ns.inputs]:
        _check_outputs(ns, names)  # the per-model paths, named as the models came out
    if ns.emit_torch:  # before the search: fail fast
        for source, m in zip(ns.inputs, lowered):
            if m is None:
                raise UserError(f"--emit-torch needs a PyTorch load script input; {_input_name(source)} is a zoo "
                                f"input (for .mlir the annotated module is the deliverable: use -o)")
            _check_torch_source(m)
    if ns.verify_numerics:  # before the search: a check that cannot fit in memory says so now
        from shard_opt import verify

        for m in lowered:
            if m is not None:
                verify.check_memory(m.arguments, where=m.name)
    if ns.describe:
        from shard_opt.frontends.describe import format_architecture

        for m in models:
            if not m.architecture:
                raise UserError(f"{m.name}: no architecture map for a {m.source} input (--describe needs a load script or zoo model)")
            out.write(format_architecture(m.architecture) + "\n")
        return 0
    with timing.phase("import"):
        from shard_opt.driver import Options, evaluate_existing

    opts = Options(meshes=meshes, system=ns.system, cost_model=ns.cost_model, parallelism=parallelism,
                   allow_collective_permute="collective-permute" in allow, progress=not ns.quiet,
                   propagation=ns.propagation, weights=weights, allow=frozenset(allow),
                   check=_check_wanted(ns))
    from shard_opt.build import Extras, build_pipeline_plan, build_plan

    chosen = None
    if ns.evaluate:
        if len(models) > 1:
            raise UserError("--evaluate takes one INPUT")
        with timing.phase("optimize"):
            outcomes = [evaluate_existing(models[0], opts)]
        extras = [Extras()]
        main_text = outcomes[0].propagated_text
    else:
        if not meshes and not ns.devices:
            raise UserError("no target mesh: pass --mesh RxC (e.g. --mesh 2x4) or --devices N")
        _refuse_partitioned(models)
        with timing.phase("optimize"):
            outcomes, extras, chosen = _optimize_all(models, opts, ns)
        main_text = outcomes[0].annotated_text

    if ns.verify_numerics:
        with timing.phase("verify"):
            extras = [dataclasses.replace(e, **_verify_numerics(o)) for o, e in zip(outcomes, extras)]
    # each model's plan, built once, with what the run adds after the search (build.Extras)
    plans = [build_plan(o.parts, e) for o, e in zip(outcomes, extras)]
    failed = [o for o, p in zip(outcomes, plans) if p.numerics and not p.numerics["passed"]]
    plan_json = plans[0] if len(plans) == 1 else build_pipeline_plan(
        plans, chosen["slowest"], why=chosen["why"], choice=chosen["choice"],
        failed=[o.model.name for o in failed] if ns.verify_numerics else None)

    with timing.phase("emit"):
        _emit_outputs(ns, outcomes, plans, plan_json, main_text)
    if not ns.quiet:
        for p in plans:
            sys.stderr.write(summary_line(p) + "\n")
        line = cache_line([m.source for m in models])
        if line:
            sys.stderr.write(line + "\n")
    undeliverable = _not_deliverable(plans)
    if failed:  # docs/design.md: exit 3, the outputs written and marked failed
        wrong = "; ".join(f"{p.model}: the sharded program does not match the unsharded one "
                          f"(max abs err {p.numerics['max_abs_err']:.3g}, max rel err "
                          f"{p.numerics['max_rel_err']:.3g})" for p in plans if p.numerics and not p.numerics["passed"])
        sys.stderr.write(f"shard-opt: error: numerics: {wrong}; outputs written, marked failed "
                         f"(plan numerics.passed false); check the plan with --evaluate or report it\n")
        return 3
    if undeliverable:  # exit 4: the tt-mlir check found no plan it compiles and computes right
        what = "; ".join(f"{p.model}: {v.words()}" for p, v in undeliverable)
        sys.stderr.write(f"shard-opt: error: tt-mlir: no deliverable plan: {what}; outputs written, marked NOT "
                         f"DELIVERABLE (plan checks.tt_mlir.verdict.deliverable false)\n")
        return 4
    return 0


SERVE_KEYS = ["prefill", "decode"]  # a --serve run's per-phase output names (as a pipeline's models)


def _serve(ns, axes, parallelism, weights, allow) -> int:
    """``--serve``: plan the deployment (``shard_opt.serve``). Outputs are a pipeline's, one
    per phase (``pipe.prefill.mlir``, ``pipe.decode.mlir``); the plan JSON holds both plans
    and the ``serving`` record; the report opens with the deployment and its frontier chart;
    ``--emit-torch`` writes the replica's script (one colocated, one per phase disaggregated)."""
    with timing.phase("import"):
        from shard_opt.serve import Profile, Request, deploy

    profile = Profile.parse(ns.serve)
    if len(ns.inputs) != 1:
        raise UserError(f"--serve plans one model; {len(ns.inputs)} INPUTs given: pass one")
    given = [f for f, v in (("--mesh", ns.mesh), ("--phase", ns.phase != "prefill"), ("--batch", ns.batch),
                            ("--seq-len", ns.seq_len), ("--evaluate", ns.evaluate),
                            ("--verify-numerics", ns.verify_numerics), ("--pass-pipeline", ns.pass_pipeline),
                            ("--describe", ns.describe)) if v]
    if given:
        raise UserError(f"--serve chooses the meshes, phases, batch and lengths itself: drop {', '.join(given)}")
    if not ns.devices:
        raise UserError("--serve needs --devices N: the chips to deploy on (e.g. --devices 32)")
    source = ns.inputs[0]
    if not (source.startswith("zoo:") or source.endswith(".py")):
        raise UserError(f"{source}: --serve needs a causal language model it can lower for prefill and decode: "
                        f"a zoo:NAME or a PyTorch load script .py")
    if ns.emit_torch and not source.endswith(".py"):
        raise UserError(f"--emit-torch needs a PyTorch load script input; {_input_name(source)} is a zoo input "
                        f"(for zoo models the annotated modules are the deliverable: use -o)")
    _check_outputs(ns, SERVE_KEYS)
    for path in ([ns.emit_torch] if ns.emit_torch else []) + (
            [_frontier_path(ns.report)] if ns.report and ns.report != "-" else []):
        _check_writable(path)
        if path == ns.emit_torch and not ns.in_place and _same_file(path, source):
            raise UserError(f"--emit-torch {path} would overwrite the input script; add --in-place to allow it")
    from shard_opt.driver import Options

    opts = Options(cost_model=ns.cost_model, parallelism=parallelism,
                   allow_collective_permute="collective-permute" in allow, progress=not ns.quiet,
                   propagation=ns.propagation, weights=weights, allow=frozenset(allow), check=_check_wanted(ns))
    req = Request(source=source, devices=ns.devices, system=ns.system, profile=profile, options=opts, axes=axes,
                  layers=ns.layers, dtype=ns.dtype, spec=ns.spec, quiet=ns.quiet)
    with timing.phase("optimize"):
        dep = deploy(req)
    from shard_opt.build import build_pipeline_plan

    outcomes = [dep.prefill, dep.decode]
    plans = [o.plan for o in outcomes]
    plan = build_pipeline_plan(plans, plans[1].model, serving=dep.record)
    if dep.config.mode == "colocated":  # one copy of the weights serves both phases: one script
        torch_files = [((dep.decode, plans[1]), ns.emit_torch)] if ns.emit_torch else []
    else:
        torch_files = [((o, p), per_model_path(ns.emit_torch, k)) for o, p, k in zip(outcomes, plans, SERVE_KEYS)] \
            if ns.emit_torch else []
    with timing.phase("emit"):
        _emit_outputs(ns, outcomes, plans, plan, None, keys=SERVE_KEYS, torch_files=torch_files)
    if not ns.quiet:
        for p in plans:
            sys.stderr.write(summary_line(p) + "\n")
        sys.stderr.write(serve_line(dep.record) + "\n")
        line = cache_line([source.startswith("zoo:") and "zoo" or "pytorch"])
        if line:
            sys.stderr.write(line + "\n")
    undeliverable = _not_deliverable(plans)
    if undeliverable:  # exit 4, as any plan: the tt-mlir check found no plan of a phase it compiles and computes right
        what = "; ".join(f"{k} ({p.model}): {v.words()}" for (p, v), k in
                         ((x, SERVE_KEYS[plans.index(x[0])]) for x in undeliverable))
        sys.stderr.write(f"shard-opt: error: tt-mlir: no deliverable plan: {what}; outputs written, marked NOT "
                         f"DELIVERABLE (plan checks.tt_mlir.verdict.deliverable false)\n")
        return 4
    return 0


def serve_line(r: dict) -> str:
    """One line: the deployment chosen and the runner-up it beat."""
    key = r["objective"]
    mode = r["mode"]
    where = (f"{r['replicas']}x {r['replica_mesh']}" if mode == "colocated" else
             f"{r['replicas']}x {r['replica_mesh']} (prefill {r['prefill']['mesh']} | decode {r['decode']['mesh']})")
    line = (f"shard-opt: serve: {r['devices']} chips ({r['system']}): {mode} {where}, {r['users']} users "
            f"({r['users_per_replica']} per replica, up to {r['max_users']} fit); TTFT {r['ttft_ms']:.2f} ms, "
            f"TPOT {r['tpot_ms']:.2f} ms, {r['tokens_per_s_per_user']:.2f} t/s/u, {r['tokens_per_s']:.1f} t/s "
            f"(each phase alone: TTFT {r['prefill']['ttft_ms']:.2f} ms, TPOT {r['decode']['tpot_ms']:.2f} ms)")
    rivals = sorted((c for c in r["configurations"] if not c.get("chosen") and c.get("vs_chosen")),
                    key=lambda c: -c["vs_chosen"])
    if rivals:
        c = rivals[0]
        line += (f"; next best {c['mode']} {c['replicas']}x {c['replica_mesh']} at {c['vs_chosen']:.3f}x "
                 f"the {key.replace('tokens_per_s_per_user', 't/s/u').replace('tokens_per_s', 't/s')}")
    return line


def _not_deliverable(plans) -> list:
    """(plan, verdict) of each model whose tt-mlir check found nothing deliverable."""
    from shard_opt.verdict import of as verdict_of

    out = []
    for p in plans:
        v = verdict_of(p)
        if v is not None and v.checked and not v.deliverable:
            out.append((p, v))
    return out


_UNCACHED = {"mlir": "a .mlir input needs no lowering", "jax": "a JAX function is lowered every run",
             "pytorch": "a load script is lowered every run"}


def cache_line(sources: list[str] = ()) -> str | None:
    """Where the cache lives: what this run took from it, or, when the inputs are not
    lowered through it (.mlir, load scripts), why not and what it keeps."""
    from shard_opt.frontends import cache

    root = cache.cache_dir()
    if not root:
        return None
    home = os.path.expanduser("~")
    shown = "~" + root[len(home):] if home not in ("", "/") and (root + "/").startswith(home + "/") else root
    if not (cache.stats["hits"] or cache.stats["misses"]):
        why = next((_UNCACHED[s] for s in sources if s in _UNCACHED), None)
        return (f"shard-opt: cache: {shown} keeps every model's evaluated candidates and the lowerings of zoo: "
                f"models (no lowering kept: {why})") if why else None
    n, size = cache.usage(root)
    loads = cache.stats["hits"] + cache.stats["misses"]
    mb = size / 2**20
    return (f"shard-opt: cache: {shown} ({n} entr{'y' if n == 1 else 'ies'}, {mb:.{1 if mb < 10 else 0}f} MB; "
            f"{cache.stats['hits']} of {loads} lowerings reused); --no-cache to skip")


def _say_inputs(ns, models) -> None:
    """On stderr, before the search: a load script's token inputs resized by --batch /
    --seq-len (not with --quiet), or those flags doing nothing (a WARNING, always)."""
    from shard_opt.frontends import resized_text

    for source, m in zip(ns.inputs, models):
        meta = (m.meta if m is not None else None) or {}
        if meta.get("inputs_resized") and not ns.quiet:
            sys.stderr.write(f"shard-opt: {resized_text(meta['inputs_resized'], source)}\n")
        if meta.get("inputs_not_resized"):
            sys.stderr.write(f"shard-opt: WARNING: {source}: {meta['inputs_not_resized']}\n")


def _input_name(source: str) -> str:
    """The name a frontend gives the model of INPUT (``LoweredModel.name``), known before
    lowering it so the per-model output paths are checked before any work."""
    if source.startswith("zoo:"):
        return source[4:]
    if source == "-":
        return "stdin"
    return os.path.splitext(os.path.basename(source))[0]


def file_keys(names: list[str]) -> list[str]:
    """What each model of a pipeline is called in its output file names: its name, made
    safe for a path (``[A-Za-z0-9_.-]``); models of one name are numbered ``-1``, ``-2``..."""
    safe = [re.sub(r"[^\w.-]", "_", n) or "model" for n in names]
    seen: dict[str, int] = {}
    out = []
    for s in safe:
        seen[s] = seen.get(s, 0) + 1
        out.append(f"{s}-{seen[s]}" if safe.count(s) > 1 else s)
    return out


def per_model_path(path: str, key: str) -> str:
    """A pipeline model's own output file: its key before the extension (``pipe.mlir`` ->
    ``pipe.t5.mlir``, ``pipe`` -> ``pipe.t5``); ``-`` (stdout) stays ``-``."""
    if path == "-":
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.{key}{ext}"


def _chart_path(report: str) -> str:
    """The report's chart: ``R.md`` -> ``R_ccl.png``."""
    return os.path.splitext(report)[0] + "_ccl.png"


def _frontier_path(report: str) -> str:
    """A --serve report's frontier chart: ``R.md`` -> ``R_frontier.png``."""
    return os.path.splitext(report)[0] + "_frontier.png"


def _output_paths(ns, names: list[str]) -> list[str]:
    """Every file the run will write (not stdout). One model: each flag's path (and the
    report's chart). A pipeline: the plan JSON and the report as given, holding every
    model; ``-o``, ``--emit-torch``, ``--emit-lit-test`` and the charts one per model."""
    single = [p for p in (ns.plan_json, ns.report) if p and p != "-"]
    each = [p for p in (ns.output, ns.emit_torch, ns.emit_lit_test) if p and p != "-"]
    if ns.report and ns.report != "-":
        each.append(_chart_path(ns.report))
    if len(names) <= 1:
        return single + each
    return single + [per_model_path(p, k) for p in each for k in file_keys(names)]


def _check_outputs(ns, names: list[str]) -> None:
    """Before any work: every output path can be written, and --emit-torch overwrites no
    input script unless --in-place."""
    if ns.emit_torch and not ns.in_place:
        keys = file_keys(names) if len(names) > 1 else [None]
        for source, key in zip(ns.inputs, keys):
            path = ns.emit_torch if key is None else per_model_path(ns.emit_torch, key)
            if _same_file(path, source):
                raise UserError(f"--emit-torch {path} would overwrite the input script; add --in-place to allow it")
    for path in _output_paths(ns, names):
        _check_writable(path)


def _numerics_failed(plan) -> str | None:
    """What a plan's failed ``--verify-numerics`` check found, or None (passed, or not run)."""
    n = plan.numerics
    if not n or n.get("passed", True):
        return None
    return (f"the sharded program does not match the unsharded one on {n.get('num_devices')} devices "
            f"(max abs err {n.get('max_abs_err', 0):.3g}, max rel err {n.get('max_rel_err', 0):.3g})")


def _marked(text: str, plan) -> str:
    """A module or lit test says on its first lines the tt-mlir check's verdict on its plan
    (the words stderr, the report and the script give) and, when --verify-numerics failed,
    so."""
    from shard_opt.verdict import of as verdict_of

    why = _numerics_failed(plan)
    verdict = verdict_of(plan)
    head = f"// shard-opt: {verdict.line()}\n" if verdict is not None else ""
    if why:
        head += f"// shard-opt: NUMERICS FAILED: {plan.model}: {why}\n"
    return head + text


def _emit_outputs(ns, outcomes, plans, plan_json, main_text, keys=None, torch_files=None) -> None:
    """Every deliverable the flags ask for, written all or none (``_write_all``). A pipeline
    (several outcomes) writes each model's module, script and lit test to its own file
    (``per_model_path``); the plan JSON and the report hold every model. ``keys``: the
    models' names in file names (default ``file_keys``); ``torch_files``: the scripts to
    write, ((outcome, plan), path), instead of one per model (``--serve``)."""
    out = sys.stdout
    files: list[tuple[str, str | bytes]] = []
    from shard_opt.plan import dumps

    pipeline = len(outcomes) > 1
    serving_run = getattr(plan_json, "serving", None) is not None
    keys = keys or (file_keys([o.model.name for o in outcomes]) if pipeline else [None])

    def each(path: str):
        for o, p, key in zip(outcomes, plans, keys):
            yield (o, p), (path if key is None else per_model_path(path, key))

    if ns.plan_json:
        files.append((ns.plan_json, dumps(plan_json)))
    if ns.report:
        from shard_opt.emit.report import render_report, write_ccl_chart

        charts = list(each(_chart_path(ns.report))) if ns.report != "-" else []
        pngs = [os.path.basename(png) for _, png in charts]
        serving = getattr(plan_json, "serving", None)
        frontier = _frontier_path(ns.report) if serving and ns.report != "-" else None
        files.append((ns.report, render_report(plan_json, png_path=(pngs if pipeline else pngs[0]) if pngs else None,
                                               frontier_png=os.path.basename(frontier) if frontier else None)))
        files += [(png, _chart_bytes(write_ccl_chart, p)) for (_, p), png in charts]
        if frontier:
            from shard_opt.emit.report import write_frontier_chart

            files.append((frontier, _chart_bytes(write_frontier_chart, plan_json)))
    if ns.emit_torch:
        files += [(path, _emit_torch(o, p)) for (o, p), path in (torch_files if torch_files is not None
                                                                  else each(ns.emit_torch))]
    if ns.emit_lit_test:
        from shard_opt.emit.lit_test import emit_lit_test

        run_args = " ".join(f"--mesh {m}" for m in ns.mesh) if ns.mesh else ""
        files += [(path, _marked(emit_lit_test(o.annotated_text, p, run_args=run_args), p))
                  for (o, p), path in each(ns.emit_lit_test)]
    modules = [_marked(main_text, plans[0])] if not pipeline else [
        _marked(f"// shard-opt: model {o.model.name}{f' ({k})' if serving_run else ''}\n{o.annotated_text}", p)
        for o, p, k in zip(outcomes, plans, keys)]
    if ns.output:
        files += [(path, text) for (_, path), text in zip(each(ns.output), modules)]
    for data in [d for p, d in files if p == "-"]:
        out.write(data)
    _write_all({p: d for p, d in files if p != "-"})
    if not ns.output and ns.plan_json != "-":
        text = "// -----\n".join(m if m.endswith("\n") else m + "\n" for m in modules)
        out.write(text)


def _optimize_all(models, opts, ns):
    """One model or a pipeline; one mesh, several (one plan for all), or --devices N: the
    outcomes kept, what each plan gets from the choice (``build.Extras``: the mesh
    ``--devices`` chose and why), and the choice itself (None without ``--devices``)."""
    from shard_opt.build import Extras
    from shard_opt.driver import optimize
    from shard_opt.sharding import Mesh

    axes = tuple(a.strip() for a in ns.axis_names.split(","))
    if ns.devices:
        shapes = [Mesh.parse(s, axes) for s in STANDARD_MESHES[ns.devices]]
    else:
        shapes = [None]
    trials = []
    for shape in shapes:
        o = opts if shape is None else _with_meshes(opts, [shape])
        outs = [optimize(m, o) for m in models]
        slowest = max(outs, key=lambda x: x.plan.cost.total_us or float("inf"))
        trials.append((slowest.plan.cost.total_us or float("inf"), shape, outs, slowest))
    best = min(trials, key=lambda t: t[0])
    _, shape, outs, slowest = best
    for o in outs:  # replicated by necessity, not because splits lost: said loudly
        if o.parts.explanation.nothing_to_split:
            sys.stderr.write(f"shard-opt: WARNING: {o.model.name}: {o.parts.explanation.nothing_to_split}\n")
    chosen = {"slowest": slowest.model.name, "why": None, "choice": None}
    extras = [Extras() for _ in outs]
    if len(trials) > 1:
        parts = [f"{t[1].spec}: slowest model {t[0]:.1f} us" for t in trials]
        why = (f"--devices {ns.devices}: chose {shape.spec} (best for the slowest model, "
               f"{slowest.model.name}); " + "; ".join(parts))
        # the same in fields, for the report: each standard shape and its slowest model's step
        choice = {"devices": ns.devices, "chosen": shape.spec, "slowest": slowest.model.name,
                  "trials": [{"mesh": t[1].spec, "slowest": t[3].model.name,
                              "slowest_us": t[0] if t[0] != float("inf") else None} for t in trials]}
        chosen.update(why=why, choice=choice)
        extras = [Extras(notes=(why,), mesh_choice=choice) for _ in outs]
    return outs, extras, chosen


def _refuse_partitioned(models) -> None:
    """A search starts from the module before partitioning: one whose collectives are
    explicit (``--evaluate``'s ``-o`` module) would be propagated again, and Shardy would
    reduce its partial sums twice (``evaluate.is_partitioned``)."""
    from shard_opt.sdy import COLLECTIVE_OPS

    for m in models:
        text = getattr(m, "text", None) if getattr(m, "source", None) == "mlir" else None
        if text and any(f"{op} " in text for op in COLLECTIVE_OPS):
            raise UserError(f"{m.name}: the module's collectives are already explicit (a partitioned module, "
                            f"such as the -o module of --evaluate); search from the module before partitioning, "
                            f"or price this one with --evaluate")


def _with_meshes(opts, meshes):
    import dataclasses

    return dataclasses.replace(opts, meshes=meshes)


def _run_pipeline(ns, meshes) -> int:
    """``--pass-pipeline``: run passes on a .mlir input, like an ``*-opt`` tool."""
    from shard_opt import frontends, ir
    from shard_opt.pass_manager import PassContext, PassManager, parse_pipeline

    if len(ns.inputs) != 1:
        raise UserError("--pass-pipeline takes one INPUT")
    passes = parse_pipeline(ns.pass_pipeline)
    source = ns.inputs[0]
    if ns.split_input_file:
        from shard_opt.frontends.mlir_frontend import read_text

        text = read_text(source)
        chunks = [(c, []) for c in text.split("\n// -----")]
    else:
        model = frontends.load(source, layers=ns.layers, batch=ns.batch, seq_len=ns.seq_len,
                               phase=ns.phase, dtype=ns.dtype)
        chunks = [(model.text, model.arguments)]
    outputs = []
    for chunk, arguments in chunks:
        module = ir.parse(chunk, filename=source)
        ctx = PassContext(mesh=meshes[0] if meshes else None, arguments=arguments,
                          system=ns.system, cost_model=ns.cost_model,
                          print_ir_after_all=ns.mlir_print_ir_after_all)
        PassManager(passes, ctx).run(module)
        outputs.append(ir.print_module(module) + "\n")
    text = "// -----\n".join(outputs)
    if ns.output:
        _write_atomic(ns.output, text)
    else:
        sys.stdout.write(text)
    return 0


def _read_text(source: str, what: str) -> str:
    """A ``verify-ir`` input (plan or dump); unreadable or non-UTF-8 input is a ``UserError``."""
    try:
        if source == "-":
            return sys.stdin.read()
        with open(source, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"cannot read {what} {source}: {e.strerror}; check the path") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{source}: not a text file (offset {e.start} is not UTF-8); give the {what} as text") from None


def _verify_numerics(o) -> dict:
    """Run a plan sharded and unsharded on virtual XLA devices, and compare the collectives
    XLA's own partitioner compiled with the ones shard-opt priced: the plan's ``numerics``
    and ``xla_crosscheck`` (``build.Extras`` fields). Every model is checked; one whose
    numerics failed (``passed`` false) ends the run with exit 3 after writing the outputs,
    marked."""
    from shard_opt import verify

    n = 1
    for s in o.plan.mesh.shape:
        n *= s
    res = verify.verify_numerics(o.annotated_text, num_devices=n)
    numerics = {"passed": res.passed, "max_abs_err": res.max_abs_err, "max_rel_err": res.max_rel_err,
                "rtol": res.rtol, "atol": res.atol, "num_devices": res.num_devices, "seed": res.seed,
                "reference": res.reference}
    sys.stderr.write(f"shard-opt: numerics: {o.model.name}: {res.summary()}\n")
    comparison = verify.compare_collectives(o.plan.collectives, verify.xla_collectives(o.annotated_text, n))
    xla = {"agrees": comparison.agrees, "matched": len(comparison.matched),
           "differences": [{"explained": d.explained, "reason": d.reason} for d in comparison.differences]}
    sys.stderr.write("shard-opt: XLA partitioner: " + comparison.report().replace("\n", "\nshard-opt:   ") + "\n")
    return {"numerics": numerics, "xla_crosscheck": xla}


def _emit_torch(outcome, plan) -> str:
    model = outcome.model
    _check_torch_source(model)
    from shard_opt.emit.torch_script import emit_torch

    with open(model.script_path) as f:
        return _in_script(model, emit_torch, f.read(), plan, loader=model.meta.get("loader"))


def _check_torch_source(model) -> None:
    """Before the search: the input is a load script and the emitter finds where to write
    the plan into it (``torch_script.emit_target``), so --emit-torch cannot fail at the end."""
    if not model.script_path:
        raise UserError(f"--emit-torch needs a PyTorch load script input; {model.name} is a {model.source} input "
                        f"(for .mlir the annotated module is the deliverable: use -o)")
    from shard_opt.emit.torch_script import emit_target

    with open(model.script_path) as f:
        _in_script(model, emit_target, f.read(), loader=model.meta.get("loader"))


def _in_script(model, fn, *args, **kwargs):
    """An emitter's UserError names the script it is about."""
    try:
        return fn(*args, **kwargs)
    except UserError as e:
        where = model.script_path or model.name
        if model.script_path and not os.path.relpath(where).startswith(".."):
            where = os.path.relpath(where)
        raise UserError(f"{where}: --emit-torch: {e}") from None


def _chart_bytes(write_chart, plan) -> bytes:
    fd, tmp = tempfile.mkstemp(suffix=".png")
    os.close(fd)
    try:
        write_chart(plan, tmp)
        with open(tmp, "rb") as f:
            return f.read()
    finally:
        os.unlink(tmp)


def _check_wanted(ns) -> bool:
    """The tt-mlir check runs unless --no-check, or SHARD_OPT_CHECK=0 without --check."""
    if ns.no_check:
        return False
    if ns.check:
        return True
    return os.environ.get(CHECK_ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def _same_file(a: str, b: str) -> bool:
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def _check_writable(path: str) -> None:
    """Fail before any work if ``path`` cannot be written.

    A file or directory with no write permission bit is read-only here even for root
    (who the OS would let write it): the user marked it so, shard-opt does not overwrite it.
    """
    d = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(d):
        raise UserError(f"cannot write {path}: directory {d} does not exist; create it or choose another path")
    if os.path.isdir(path):
        raise UserError(f"cannot write {path}: it is a directory; give a file path")
    for target, what in ((path, "the file"), (d, f"directory {d}")):
        if os.path.exists(target) and not (os.access(target, os.W_OK) and os.stat(target).st_mode & 0o222):
            raise UserError(f"cannot write {path}: {what} is read-only; choose a writable path")


def _write_atomic(path: str, data) -> None:
    _write_all({path: data})


def _mode_for(path: str) -> int:
    """An existing file keeps its mode; a new one gets the usual 0666 less the umask
    (mkstemp's temporary file is 0600)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _write_all(files: dict) -> None:
    """Write every file or none: each goes to a temporary file beside it, then all are renamed into place."""
    staged, current = [], None
    try:
        for current, data in files.items():
            d = os.path.dirname(os.path.abspath(current))
            fd, tmp = tempfile.mkstemp(dir=d, prefix=".shard-opt-", suffix=".tmp")
            staged.append((tmp, current))
            with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
                f.write(data)
            os.chmod(tmp, _mode_for(current))
        for tmp, current in staged:
            os.replace(tmp, current)
    except OSError as e:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise UserError(f"cannot write {current}: {e.strerror}; choose a writable path") from None


def _as_written(b: dict, c) -> str:
    """`` (within the rules; 1.65x as written, breaks vocab-gather)`` for a baseline priced
    under the compiler-safety rules it breaks as written (the driver's ``_held_to_rules``)."""
    if not b.get("breaks"):
        return ""
    t = (b.get("as_written") or {}).get("total_us")
    written = f"{t / c.total_us:.2f}x as written" if t else "unpriceable as written"
    return f" (within the rules; {written}, breaks {', '.join(b['breaks'])})"


def summary_line(plan) -> str:
    c = plan.cost
    kinds: dict[str, int] = {}
    for col in plan.collectives:
        kinds[col.kind] = kinds.get(col.kind, 0) + 1
    slices = kinds.pop("all_slice", 0)  # a local slice: no data moves, not a CCL
    ccls = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "none"
    if slices:
        ccls += f" (and {slices} local all_slice{'s' if slices > 1 else ''}: no data moves)"
    mesh = "x".join(map(str, plan.mesh.shape))
    line = (f"shard-opt: {plan.model} on {mesh} ({plan.system}): {plan.strategy}; "
            f"{c.total_us} us modeled, CCLs: {ccls}")
    base = plan.baselines or {}
    ratios = [f"{k} {b['total_us'] / c.total_us:.2f}x" + _as_written(b, c) for k, b in base.items()
              if b.get("total_us") and c.total_us]
    if ratios:
        line += "; speed-up vs " + ", ".join(ratios)
    checked = [f"{k} {b['checked_us'] / c.checked_us:.2f}x" for k, b in base.items()
               if b.get("checked_us") and c.checked_us]
    if checked:  # both priced from what tt-mlir emits (the tt-mlir check)
        line += "; checked vs " + ", ".join(checked)
    s = plan.search or {}
    if s.get("candidates_evaluated", 0) > 1:
        line += f"; {s['candidates_evaluated']} candidates in {s['seconds']:.1f} s"
    from shard_opt.verdict import of as verdict_of

    verdict = verdict_of(plan)
    if verdict is not None:
        line += f"; {verdict.line()}"
    return line


def _verify_ir(argv: list[str]) -> int:
    if len(argv) != 2:
        raise UserError("usage: shard-opt verify-ir PLAN.json DUMP.mlir")
    import json

    from shard_opt.emit.verify_ir import format_result, verify_ir
    from shard_opt.plan import Plan, PlanSchemaError

    plan_path, dump_path = argv
    try:
        data = json.loads(_read_text(plan_path, what="plan"))
    except json.JSONDecodeError as e:
        raise UserError(f"{plan_path}:{e.lineno}: not valid JSON; pass the file written by --plan-json") from None
    if isinstance(data, dict) and data.get("pipeline"):
        raise UserError(f"{plan_path}: a pipeline plan; verify-ir checks one model: save the model's entry of "
                        f"\"pipeline\", with the pipeline's \"schema_version\", as its own file and pass that")
    if not isinstance(data, dict) or not {"mesh", "collectives"} <= data.keys():
        raise UserError(f"{plan_path}: not a shard-opt plan (no mesh and collectives); pass the file written by "
                        f"--plan-json")
    try:
        plan = Plan.from_json(data, where=plan_path)
    except PlanSchemaError as e:
        raise UserError(str(e)) from None
    result = verify_ir(plan, _read_text(dump_path, what="dump"))
    sys.stdout.write(format_result(result) + "\n")
    return 0 if getattr(result, "ok", getattr(result, "match", False)) else 1


if __name__ == "__main__":
    sys.exit(main())
