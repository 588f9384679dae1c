"""tt-mlir numerics: run the program tt-mlir partitioned, and compare it with the unsharded model.

Every tt-mlir compile writes ``export_path/irs/shlo_compiler_<ts>.mlir``: tt-mlir's program
after its StableHLO pipeline (Shardy propagation, its own passes such as the slice
replication of tt-mlir PR 9167, the CCL canonicalization of PR 6843). It is plain
StableHLO: one ``sdy.manual_computation`` over every mesh axis, holding per-device code
and tt-mlir's own explicit collectives. XLA on virtual CPU devices runs it
(``references/ttmlir_offline.md``, "tt-mlir's partitioned program can be run"), once the
module is made XLA's (``runnable``):

- the ``ttcore.*`` argument and result attributes go, of every function (jaxlib's parser
  does not know that dialect);
- each argument takes the sharding the manual computation's ``in_shardings`` give it (and
  each result its ``out_shardings``), so XLA hands every device the slice tt-mlir's
  program expects;
- each channel collective gets ``use_global_device_ids`` (without it XLA reads the groups
  in cross-replica-and-partition mode and refuses them);
- tt-mlir's SDPA (``stablehlo.custom_call @tenstorrent.scaled_dot_product_attention``,
  which XLA cannot run) becomes a call of softmax(Q K^T * scale + mask) V on the device's
  own heads (``sdpa_function``); composites (``tenstorrent.layer_norm``, ``sdy.all_slice``)
  carry their decompositions and run as they are;
- a ``stablehlo.gather`` carrying ``tt.fill_out_of_bounds`` (the masked lookup tt-mlir writes
  for a table split on the dim its lookup indexes: each device looks up its own rows, the
  others read zero, an all_reduce sums them; ``ttir.rows_gather fill_out_of_bounds = true``)
  becomes a call of gather + select (``masked_gather_function``): XLA's gather clamps an
  out-of-table index to the table's edge instead, which read every device's edge row into
  the sum and failed every vocab-split lookup until 2026-12-05.

The same seeded inputs (drawn from the module tt-mlir compiled: token ids inside their
tables, weights scaled by their fan-in, ``verify.random_inputs``) go to that program on N
devices and to the compiled module with every sharding stripped, on one device; every
device's piece of every output is compared with the unsharded result. bf16 / f16
modules are widened to f32 in both programs (``verify.promote_to_f32``) and compared at
the f32 tolerance, so rounding never reads as a wrong answer (``verify`` module docstring).

What a pass covers: tt-mlir's partitioning of the plan (what each device computes, which
partial sums are reduced, which slices are taken). What it does not cover: the TTIR ->
TTNN lowering, TTNN's kernels and the runtime (nothing runs on a device here).

The runs happen in a child process (``Session``): XLA's CPU client holds every device's
buffers, out of the parent's memory. The inputs and the unsharded run are made once for all
the plans of one check and dropped when its Session closes; the child itself is kept for the
next Session with the same device count in this process (``KEEP`` of them at most), which
then skips importing jax and starting XLA's client. The inputs depend only on the reference
(seed 0), never on what the child ran before.
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
from dataclasses import asdict, dataclass

TIMEOUT_ENV = "SHARD_OPT_NUMERICS_TIMEOUT"  # seconds for one Session.run (default 900): a last line of defence
MEMORY_ENV = "SHARD_OPT_NUMERICS_GB"  # the memory a run may take (default DEFAULT_GB)

COVERS = ("tt-mlir's partitioning (its Shardy propagation, StableHLO passes and collectives), "
          "not its TTIR-to-TTNN lowering or the device runtime")


class NotRunnable(Exception):
    """tt-mlir's program cannot be made into one XLA runs (said in words)."""


@dataclass(frozen=True)
class Numerics:
    """``checks.tt_mlir.numerics``: tt-mlir's program against the unsharded model."""

    status: str  # "passed" | "failed" | "not run"
    module: str  # what ran: "the whole model", "the 2-layer copy", ...
    compared: str = ""  # what was compared with what, in words
    why: str | None = None  # not run: why; failed: where the answers differ
    max_abs_err: float | None = None
    max_rel_err: float | None = None  # max_abs_err over the largest magnitude of the reference
    scale: float | None = None  # the largest magnitude of the reference output
    rtol: float | None = None
    atol: float | None = None
    devices: int | None = None
    seed: int = 0
    seconds: float = 0.0
    covers: str = COVERS

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: dict) -> "Numerics":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def words(self) -> str:
        """The verdict, in the words every output uses."""
        where = f" on {self.module}" if self.module != "the whole model" else ""
        if self.status == "passed":
            return (f"numerics passed{where} (max abs err {self.max_abs_err:.3g} at values up to {self.scale:.3g}, "
                    f"rtol {self.rtol:g})")
        if self.status == "failed":
            return (f"numerics FAILED{where} (max abs err {self.max_abs_err:.3g} at values up to "
                    f"{self.scale:.3g}{'; ' + self.why if self.why else ''})")
        return f"numerics not run ({self.why})"


def not_run(why: str, module: str = "the whole model") -> Numerics:
    return Numerics("not run", module, why=why)


# ---------------------------------------------------------------------------------
# tt-mlir's program, made XLA's
# ---------------------------------------------------------------------------------

_SECOND_MODULE = re.compile(r"^(?:#loc\d* = [^\n]*\n)*module\b", re.M)
_CHANNEL_COLLECTIVES = ("stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.reduce_scatter")
SDPA_TARGET = "tenstorrent.scaled_dot_product_attention"


def first_module(dump: str) -> str:
    """tt-mlir's dump file holds its module, sometimes followed by a second one (a cleaned
    copy): the first."""
    starts = [m.start() for m in _SECOND_MODULE.finditer(dump)]
    return dump[:starts[1]] if len(starts) > 1 else dump


def runnable(dump: str) -> str:
    """The ``shlo_compiler`` dump as a module XLA compiles and runs (see the module
    docstring). Raises ``NotRunnable`` when it cannot be."""
    from shard_opt import ir

    _ir = ir.ir()
    ctx = ir.new_context()
    ctx.allow_unregistered_dialects = True  # the ttcore.* attributes, dropped below
    try:
        module = ir.parse(first_module(dump), filename="<tt-mlir shlo_compiler>", context=ctx)
    except Exception as e:  # noqa: BLE001 - the parser's diagnostic is the reason
        raise NotRunnable(f"jaxlib cannot parse tt-mlir's program: {' '.join(str(e).split())[:300]}") from None
    functions: list[str] = []
    with ctx, _ir.Location.unknown():
        func = ir.main_func(module, where="tt-mlir's program")
        manual = [op.operation for op in ir.walk_ops(func) if op.operation.name == "sdy.manual_computation"]
        arg_sh: dict[int, object] = {}
        res_sh: dict[int, object] = {}
        if len(manual) > 1:
            raise NotRunnable(f"tt-mlir's program has {len(manual)} manual computations (expected one)")
        if manual:
            mc = manual[0]
            ins, outs = _per_value(mc.attributes["in_shardings"]), _per_value(mc.attributes["out_shardings"])
            args = list(func.arguments)
            for k, operand in enumerate(mc.operands):
                for j, a in enumerate(args):
                    if a == operand:
                        arg_sh[j] = ins[k]
            ret = list(func.regions[0].blocks[0].operations)[-1]
            for r, v in enumerate(ret.operands):
                for k, res in enumerate(mc.results):
                    if v == res:
                        res_sh[r] = outs[k]
        # every function's argument and result attributes lose ``ttcore.*`` (tt-mlir puts them
        # on the private functions of its composites too, e.g. an SDPA's ``.impl``); @main's
        # take the manual computation's shardings
        for f in module.body.operations:
            if f.operation.name != "func.func":
                continue
            shardings = (arg_sh, res_sh) if f.operation == func.operation else ({}, {})
            for key, sh in zip(("arg_attrs", "res_attrs"), shardings):
                if key in f.operation.attributes:
                    f.operation.attributes[key] = _ir.ArrayAttr.get(
                        [_cleaned(a, sh.get(i)) for i, a in enumerate(f.operation.attributes[key])])
        for op in list(ir.walk_ops(func)):
            o = op.operation
            if o.name in _CHANNEL_COLLECTIVES and "channel_handle" in o.attributes:
                o.attributes["use_global_device_ids"] = _ir.UnitAttr.get()
            elif o.name == "stablehlo.gather" and FILL_OOB in o.attributes:
                name = f"shard_opt.masked_gather.{len(functions)}"
                functions.append(masked_gather_function(name, o))
                call = _ir.Operation.create("func.call", results=[o.results[0].type], operands=list(o.operands),
                                            attributes={"callee": _ir.FlatSymbolRefAttr.get(name)},
                                            ip=_ir.InsertionPoint(o))
                o.results[0].replace_all_uses_with(call.results[0])
                o.erase()
            elif o.name == "stablehlo.custom_call":
                target = _ir.StringAttr(o.attributes["call_target_name"]).value
                if target != SDPA_TARGET:
                    raise NotRunnable(f"tt-mlir's program calls {target}, which XLA cannot run")
                name = f"shard_opt.sdpa.{len(functions)}"
                functions.append(sdpa_function(name, [str(v.type) for v in o.operands], str(o.results[0].type),
                                               _composite_attributes(o)))
                call = _ir.Operation.create("func.call", results=[o.results[0].type], operands=list(o.operands),
                                            attributes={"callee": _ir.FlatSymbolRefAttr.get(name)},
                                            ip=_ir.InsertionPoint(o))
                o.results[0].replace_all_uses_with(call.results[0])
                o.erase()
    text = ir.print_module(module)
    if functions:
        end = text.rstrip().rfind("}")
        text = text[:end] + "".join(functions) + text[end:]
    try:
        ir.parse(text, filename="<tt-mlir program for XLA>")
    except Exception as e:  # noqa: BLE001
        raise NotRunnable(f"tt-mlir's program, made XLA's, does not parse: {' '.join(str(e).split())[:300]}") from None
    return text


FILL_OOB = "tt.fill_out_of_bounds"


def masked_gather_function(name: str, op) -> str:
    """A private function computing a ``stablehlo.gather`` that carries ``tt.fill_out_of_bounds``
    as tt-mlir computes it: a row whose start index lies outside the table reads zeros
    (``ttir.rows_gather`` with ``fill_out_of_bounds = true``), where XLA's gather clamps the
    index into the table. Shardy writes this gather for a table split on the dim its lookup
    indexes: each device looks up its own rows (index minus its offset), the others' rows
    read zero, and an all_reduce sums them. One start index per lookup (``start_index_map``
    of one dim); raises ``NotRunnable`` otherwise."""
    from shard_opt.analysis import _dims

    table_t, index_t, result_t = (str(op.operands[0].type), str(op.operands[1].type), str(op.results[0].type))
    table, _ = _shape(table_t)
    index, iel = _shape(index_t)
    result, rel = _shape(result_t)
    dn = str(op.attributes["dimension_numbers"])
    start = _dims(dn, "start_index_map")
    offset = _dims(dn, "offset_dims")
    ivd = re.search(r"index_vector_dim\s*=\s*(\d+)", dn)
    ivd = int(ivd.group(1)) if ivd else len(index)
    if len(start) != 1 or (ivd < len(index) and index[ivd] != 1):
        raise NotRunnable(f"tt-mlir's program has a zero-filling gather of {len(start)} start indices")
    attrs = ", ".join(f"{k} = {op.attributes[k]}" for k in ("dimension_numbers", "slice_sizes", "indices_are_sorted")
                      if k in op.attributes)
    size = table[start[0]]
    kept = [d for i, d in enumerate(index) if i != ivd]
    batch = [d for d in range(len(result)) if d not in offset]
    ok_t = _ty(index, "i1")
    okk_t = _ty(kept, "i1")
    lines = [
        f"  func.func private @{name}(%t: {table_t}, %i: {index_t}) -> {result_t} {{",
        f'    %g = "stablehlo.gather"(%t, %i) <{{{attrs}}}> : ({table_t}, {index_t}) -> {result_t}',
        f"    %c0 = stablehlo.constant dense<0> : {index_t}",
        f"    %cn = stablehlo.constant dense<{size}> : {index_t}",
        f"    %ge = stablehlo.compare GE, %i, %c0 : ({index_t}, {index_t}) -> {ok_t}",
        f"    %lt = stablehlo.compare LT, %i, %cn : ({index_t}, {index_t}) -> {ok_t}",
        f"    %ok = stablehlo.and %ge, %lt : {ok_t}",
        f"    %okk = stablehlo.reshape %ok : ({ok_t}) -> {okk_t}",
        f"    %m = stablehlo.broadcast_in_dim %okk, dims = [{', '.join(map(str, batch))}] : ({okk_t}) -> {_ty(result, 'i1')}",
        f"    %z = stablehlo.constant dense<0.0> : {result_t}",
        f"    %r = stablehlo.select %m, %g, %z : {_ty(result, 'i1')}, {result_t}",
        f"    return %r : {result_t}",
        "  }",
    ]
    return "\n".join(lines) + "\n"


def _per_value(attr) -> list:
    """``#sdy.sharding_per_value<[<@mesh, ...>, ...]>`` as one ``#sdy.sharding`` per value."""
    from shard_opt import ir

    s = str(attr)
    body = s[s.index("<[") + 2: s.rindex("]>")]
    out, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "<":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                out.append(ir.ir().Attribute.parse("#sdy.sharding" + body[start:i + 1]))
    return out


def _cleaned(attrs, sharding):
    """An argument's or result's attributes without ``ttcore.*``, with ``sharding`` when given."""
    from shard_opt import ir

    _ir = ir.ir()
    d = _ir.DictAttr(attrs)
    kept = {d[j].name: d[j].attr for j in range(len(d)) if not d[j].name.startswith("ttcore.")}
    if sharding is not None:
        kept["sdy.sharding"] = sharding
    return _ir.DictAttr.get(kept)


def _composite_attributes(op) -> dict:
    """``tt.composite_attributes`` of tt-mlir's SDPA custom call: {"is_causal": bool, "scale": float | None}."""
    text = str(op.attributes["tt.composite_attributes"]) if "tt.composite_attributes" in op.attributes else ""
    causal = re.search(r"is_causal\s*=\s*(true|false)", text)
    scale = re.search(r"scale\s*=\s*([-+0-9.eE]+)", text)
    return {"is_causal": bool(causal and causal.group(1) == "true"),
            "scale": float(scale.group(1)) if scale else None}


_TENSOR = re.compile(r"tensor<((?:\d+x)*)([a-z0-9]+)>")


def _shape(t: str) -> tuple[list[int], str]:
    m = _TENSOR.fullmatch(t.strip())
    if m is None:
        raise NotRunnable(f"tt-mlir's SDPA has an operand of type {t}, not a static tensor")
    return [int(d) for d in m.group(1).split("x") if d], m.group(2)


def _ty(shape, el: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + el + ">"


_NEG_INF = {"f32": "0xFF800000", "bf16": "0xFF80", "f16": "0xFC00", "f64": "0xFFF0000000000000"}


def sdpa_function(name: str, operand_types: list[str], result_type: str, attrs: dict) -> str:
    """A private function computing tt-mlir's ``scaled_dot_product_attention`` on one
    device's operands: query [B, Hq, Sq, D], key and value [B, Hkv, Sk, D(v)], an optional
    additive mask broadcastable to [B, Hq, Sq, Sk]; each KV head serves Hq / Hkv
    consecutive query heads (torch's ``repeat_interleave``, tt-xla's GQA); ``scale``
    defaults to 1/sqrt(D); ``is_causal`` masks key positions after the query's (in the
    device's own indices: tt-mlir's SDPA sharding rule keeps the sequence whole)."""
    if len(operand_types) not in (3, 4):
        raise NotRunnable(f"tt-mlir's SDPA has {len(operand_types)} operands (expected query, key, value[, mask])")
    (q, el), (k, _), (v, _) = (_shape(t) for t in operand_types[:3])
    out, _ = _shape(result_type)
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise NotRunnable("tt-mlir's SDPA operands are not rank 4")
    b, hq, sq, d = q
    hkv, sk, dv = k[1], k[2], v[3]
    if hkv == 0 or hq % hkv:
        raise NotRunnable(f"tt-mlir's program runs attention with {hq} query heads over {hkv} KV heads on a "
                          f"device: not a multiple, no answer to compare")
    if el not in _NEG_INF:
        raise NotRunnable(f"tt-mlir's SDPA is in {el}")
    g = hq // hkv
    scale = attrs.get("scale") or 1.0 / math.sqrt(d)
    T = lambda shape: _ty(shape, el)  # noqa: E731
    s_t, row_t = T([b, hq, sq, sk]), T([b, hq, sq])
    args = [f"%q: {T(q)}", f"%k: {T(k)}", f"%v: {T(v)}"]
    lines = []
    for x, shape, last in (("k", k, d), ("v", v, dv)):
        lines += [f"%{x}b = stablehlo.broadcast_in_dim %{x}, dims = [0, 1, 3, 4] : ({T(shape)}) -> "
                  f"{T([b, hkv, g, sk, last])}",
                  f"%{x}r = stablehlo.reshape %{x}b : ({T([b, hkv, g, sk, last])}) -> {T([b, hq, sk, last])}"]
    lines += [f"%s0 = stablehlo.dot_general %q, %kr, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3] "
              f": ({T(q)}, {T([b, hq, sk, d])}) -> {s_t}",
              f"%c = stablehlo.constant dense<{scale!r}> : tensor<{el}>",
              f"%cb = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<{el}>) -> {s_t}",
              f"%s1 = stablehlo.multiply %s0, %cb : {s_t}"]
    last = "%s1"
    if len(operand_types) == 4:
        m, _ = _shape(operand_types[3])
        if len(m) != 4 or any(x not in (1, y) for x, y in zip(m, [b, hq, sq, sk])):
            raise NotRunnable(f"tt-mlir's SDPA mask {operand_types[3]} does not broadcast to {s_t}")
        args.append(f"%m: {T(m)}")
        lines += [f"%mb = stablehlo.broadcast_in_dim %m, dims = [0, 1, 2, 3] : ({T(m)}) -> {s_t}",
                  f"%s2 = stablehlo.add %s1, %mb : {s_t}"]
        last = "%s2"
    ninf = f"stablehlo.constant dense<{_NEG_INF[el]}> : tensor<{el}>"
    if attrs.get("is_causal"):
        i_t, p_t = _ty([b, hq, sq, sk], "i32"), _ty([b, hq, sq, sk], "i1")
        lines += [f"%qi = stablehlo.iota dim = 2 : {i_t}", f"%ki = stablehlo.iota dim = 3 : {i_t}",
                  f"%keep = stablehlo.compare GE, %qi, %ki, SIGNED : ({i_t}, {i_t}) -> {p_t}",
                  f"%ninf_c = {ninf}",
                  f"%ninf_b = stablehlo.broadcast_in_dim %ninf_c, dims = [] : (tensor<{el}>) -> {s_t}",
                  f"%s3 = stablehlo.select %keep, {last}, %ninf_b : {p_t}, {s_t}"]
        last = "%s3"
    lines += [f"%ninf = {ninf}",
              f"%mx = stablehlo.reduce({last} init: %ninf) applies stablehlo.maximum across dimensions = [3] : "
              f"({s_t}, tensor<{el}>) -> {row_t}",
              f"%mxb = stablehlo.broadcast_in_dim %mx, dims = [0, 1, 2] : ({row_t}) -> {s_t}",
              f"%sh = stablehlo.subtract {last}, %mxb : {s_t}",
              f"%e = stablehlo.exponential %sh : {s_t}",
              f"%zero = stablehlo.constant dense<0.0> : tensor<{el}>",
              f"%sum = stablehlo.reduce(%e init: %zero) applies stablehlo.add across dimensions = [3] : "
              f"({s_t}, tensor<{el}>) -> {row_t}",
              f"%sumb = stablehlo.broadcast_in_dim %sum, dims = [0, 1, 2] : ({row_t}) -> {s_t}",
              f"%p = stablehlo.divide %e, %sumb : {s_t}",
              f"%o = stablehlo.dot_general %p, %vr, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] "
              f": ({s_t}, {T([b, hq, sk, dv])}) -> {T([b, hq, sq, dv])}"]
    if [b, hq, sq, dv] != out:
        raise NotRunnable(f"tt-mlir's SDPA result {result_type} is not [B, Hq, Sq, Dv] of its operands")
    body = "\n".join("    " + ln for ln in lines)
    return (f"  func.func private @\"{name}\"({', '.join(args)}) -> {T(out)} {{\n{body}\n"
            f"    return %o : {T(out)}\n  }}\n")


# ---------------------------------------------------------------------------------
# The runs (parent side)
# ---------------------------------------------------------------------------------

def memory_needed(arg_types: list[tuple[list[int], str]]) -> int:
    """Bytes a run is expected to take at its peak: ``verify.MEMORY_PER_ARGUMENT_BYTE``
    times the bytes of the module's arguments (``(shape, MLIR dtype)``; held once in f32,
    plus the shards XLA copies to each device)."""
    from shard_opt import verify

    total = 0
    for shape, dtype in arg_types:
        try:
            total += math.prod(shape) * verify.numpy_dtype(dtype).itemsize
        except Exception:  # noqa: BLE001 - a type numpy has no dtype for: not counted
            continue
    return int(verify.MEMORY_PER_ARGUMENT_BYTE * total)


DEFAULT_GB = 12.0  # half of this machine class's 24 GB (env/machines/python.md)


def memory_budget() -> int:
    """What a run may take: ``SHARD_OPT_NUMERICS_GB`` when set, else ``DEFAULT_GB``. A fixed
    figure, not what the machine has free at the moment: where the numerics run (the whole
    model, a copy, none) decides which plan ships, and a plan must not depend on the load."""
    raw = os.environ.get(MEMORY_ENV, "").strip()
    try:
        return int(float(raw) * 2**30) if raw else int(DEFAULT_GB * 2**30)
    except ValueError:
        return int(DEFAULT_GB * 2**30)


KEEP = 2  # numerics children kept for later Sessions (the most recently used)


# Environment the child never reads, so not part of its key: the deadline and the memory budget
# (read here: Session.run, memory_budget), the cache directory torch sets for itself in this
# process once a frontend has run (the child never imports torch) and pytest's name of the
# running test.
_NOT_THE_CHILDS = (TIMEOUT_ENV, MEMORY_ENV, "TORCHINDUCTOR_CACHE_DIR", "PYTEST_CURRENT_TEST")


class _Child:
    """One numerics child process (``python -m shard_opt.ttmlir.numerics --serve DEVICES``),
    its stderr log and a thread reading its stdout lines (select() on a buffered pipe would
    miss the lines its buffer already holds)."""

    def __init__(self, command: list[str], env: dict):
        import queue

        self.dir = tempfile.mkdtemp(prefix="shard-opt-numerics-child-")
        self.log_path = os.path.join(self.dir, "log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, bufsize=1)
        self.idle = True  # no job's answer outstanding: a later Session may use it
        self.lines: queue.Queue = queue.Queue()

        def read(out=self.proc.stdout, lines=self.lines):
            for line in out:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, message: dict) -> None:
        """One JSON line to the child; ``OSError`` when it has gone."""
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def end(self) -> None:
        """End it (EOF on its stdin; killed if it does not end within 30 s) and remove its files."""
        import shutil

        if self.alive:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        else:
            try:
                self.proc.stdin.close()
            except OSError:  # unwritten bytes to a child that has gone
                pass
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# The children kept between Sessions, by key (command and environment: XLA's host device count
# is fixed when a child starts), least recently used first. A child here is idle, alive when
# put here and holds no reference (its inputs and unsharded run were dropped); a Session takes
# it out while it uses it, so no two Sessions share one.
_kept: dict[tuple, _Child] = {}
_kept_lock = threading.Lock()


def _take(key: tuple) -> _Child | None:
    with _kept_lock:
        child = _kept.pop(key, None)
    if child is not None and not child.alive:  # it died while kept (killed from outside): never reused
        child.end()
        return None
    return child


def _keep(key: tuple, child: _Child) -> None:
    with _kept_lock:
        old = _kept.pop(key, None)  # two Sessions of one key at once: the later is kept
        gone = [old] if old is not None else []
        _kept[key] = child
        while len(_kept) > KEEP:
            gone.append(_kept.pop(next(iter(_kept))))
    for c in gone:
        c.end()


def end_kept() -> None:
    """End every kept child (atexit; a test that needs a fresh child)."""
    with _kept_lock:
        gone = list(_kept.values())
        _kept.clear()
    for c in gone:
        c.end()


def kept_pids() -> list[int]:
    """The process ids of the kept children, least recently used first."""
    with _kept_lock:
        return [c.proc.pid for c in _kept.values()]


atexit.register(end_kept)


class Session:
    """Runs tt-mlir's programs against one unsharded module (``reference``) in a numerics
    child: the inputs and the unsharded run are made once (the first ``run``) and serve
    every program it is given, call after call.

    The child, ``python -m shard_opt.ttmlir.numerics --serve DEVICES``, outlives the Session:
    ``close`` keeps a healthy idle child (at most ``KEEP``, the most recently used, keyed by
    its command and environment, which fix XLA's device count) and a later Session of the
    same key in this process sends it its reference instead of starting a process (importing
    jax and starting XLA's CPU client, seconds). A child that died, was killed by the deadline
    or was left mid-job is never reused. A kept child drops its reference's state when its
    Session closes, ends on EOF on its stdin (this process ending, however it ends) and is
    ended atexit. On its stdin, one JSON message a line: ``{"reference": PATH, "module":
    WORDS}`` (a new reference: the state of the previous one is dropped; ``null``: none), or a
    job ``{"programs": [...], "first_pass": bool}``; on its stdout, one JSON result per program
    and a ``{"done": true}`` line per job."""

    def __init__(self, reference: str, devices: int, *, module: str = "the whole model"):
        self.devices, self.module = devices, module
        self.dir = tempfile.mkdtemp(prefix="shard-opt-numerics-")
        self.jobs = 0
        ref_path = os.path.join(self.dir, "reference.mlir")
        with open(ref_path, "w") as f:
            f.write(reference)
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
               "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
        command = _serve_command(devices)
        self.key = (tuple(command), tuple(sorted((k, v) for k, v in env.items() if k not in _NOT_THE_CHILDS)))
        self.ended: str | None = None
        self.child = _take(self.key)
        self.reused = self.child is not None
        while True:
            if self.child is None:
                self.child = _Child(command, env)
            self.log_start = os.path.getsize(self.child.log_path)  # what this Session's child said, from here
            try:
                self.child.send({"reference": ref_path, "module": module})
                break
            except OSError:
                if not self.reused:
                    self.ended = self._gone()
                    break
                self.child.end()  # a kept child that went since it was taken: a fresh one
                self.child, self.reused = None, False

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.child.proc.pid

    def run(self, programs: list[tuple[str, str]], *, first_pass: bool = True, on_result=None) -> list[Numerics]:
        """One ``Numerics`` per ``(name, shlo_compiler dump)``, in order; with ``first_pass``
        those after the first that passes are not run. ``on_result(name, numerics)`` is told
        each as it comes."""
        import queue

        jobs = []
        for name, dump in programs:
            p = os.path.join(self.dir, f"{self.jobs}-{len(jobs)}.mlir")
            with open(p, "w") as f:
                f.write(dump)
            jobs.append({"name": name, "dump": p})
        self.jobs += 1
        done: list[Numerics] = []
        child = self.child
        if self.ended is None:
            child.idle = False
            try:
                child.send({"programs": jobs, "first_pass": first_pass})
            except OSError:
                self.ended = self._gone()
        limit = float(os.environ.get(TIMEOUT_ENV, "900"))
        deadline = time.monotonic() + limit
        while self.ended is None:
            try:
                line = child.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                child.kill()
                self.ended = f"the XLA run did not end within {limit:g} s ({TIMEOUT_ENV}); killed"
                break
            if line is None:  # the child's stdout closed: it ended
                self.ended = self._gone()
                break
            msg = json.loads(line)
            if msg.get("done"):
                child.idle = True
                break
            r = Numerics.from_json(msg)
            done.append(r)
            if on_result is not None:
                on_result(jobs[len(done) - 1]["name"], r)
        out = list(done)
        for _ in programs[len(done):]:
            if out and out[-1].passed and first_pass:
                out.append(not_run(NOT_NEEDED, self.module))
            else:
                out.append(not_run(self.ended or "the XLA run ended without a result", self.module))
        return out

    def _gone(self) -> str:
        self.child.proc.wait()
        return _death(self.child.proc.returncode, self.child.log_path, self.log_start)

    def close(self) -> None:
        """Remove this Session's files; keep its child for a later Session when it is alive
        and idle (told to drop this reference's state), else end it."""
        import shutil

        child, self.child = self.child, None
        if child is not None:
            if self.ended is None and child.idle and child.alive:
                try:
                    child.send({"reference": None})
                    _keep(self.key, child)
                except OSError:
                    child.end()
            else:
                child.end()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


NOT_NEEDED = "an earlier plan passed; not needed"


def _serve_command(devices: int) -> list[str]:
    return [sys.executable, "-m", "shard_opt.ttmlir.numerics", "--serve", str(devices)]


def run(reference: str, programs: list[tuple[str, str]], devices: int, *, module: str = "the whole model",
        first_pass: bool = True) -> list[Numerics]:
    """tt-mlir's programs (``(name, shlo_compiler dump)``, in the order to try them) run
    against ``reference`` (the annotated module tt-mlir compiled; every program must be a
    partitioning of it) on ``devices`` XLA CPU devices, in one ``Session``."""
    with Session(reference, devices, module=module) as session:
        return session.run(programs, first_pass=first_pass)


def _death(code: int, log_path: str, start: int = 0) -> str:
    """The child's end in words: its exit code or signal and the last line it wrote to its
    log from ``start`` (a kept child's log holds what it said for earlier Sessions too)."""
    how = f"killed by signal {-code}" if code < 0 else f"exited {code}"
    if code == -9:
        how += " (out of memory?)"
    try:
        with open(log_path, errors="replace") as f:
            f.seek(start)
            lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("I1")]
    except OSError:
        lines = []
    return f"the XLA process {how}" + (f": {lines[-1][:300]}" if lines else "")


# ---------------------------------------------------------------------------------
# The child
# ---------------------------------------------------------------------------------

def _scale(ref) -> float:
    """The largest finite magnitude of a reference output (what ``max_rel_err`` divides by,
    at least 1: ``verify._compare_output``)."""
    import numpy as np

    x = np.asarray(ref, dtype=np.float64)
    x = x[np.isfinite(x)]
    return max(1.0, float(np.abs(x).max())) if x.size else 1.0


def main(argv: list[str]) -> int:
    """``--serve DEVICES``: the child of a ``Session`` (its messages: ``Session``)."""
    if argv[:1] != ["--serve"] or len(argv) != 2:
        sys.stderr.write("usage: python -m shard_opt.ttmlir.numerics --serve DEVICES\n")
        return 2
    import gc

    devices = int(argv[1])
    reference, state = None, None
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        if "reference" in job:  # a new Session: the previous reference's inputs and run go
            reference, state = job["reference"] and (job["reference"], job["module"]), None
            gc.collect()
            continue
        if reference is None:
            sys.stderr.write("numerics child: a job before its reference\n")
            return 2
        if state is None:
            with open(reference[0]) as f:
                state = _Reference(f.read(), devices, reference[1])
        for prog in job["programs"]:
            with open(prog["dump"]) as f:
                result = state.check(f.read())
            sys.stdout.write(json.dumps(result.to_json()) + "\n")
            sys.stdout.flush()
            if result.passed and job.get("first_pass"):
                break
        sys.stdout.write(json.dumps({"done": True}) + "\n")
        sys.stdout.flush()
    return 0


class _Reference:
    """The child's inputs and the unsharded module's outputs on them (made once)."""

    def __init__(self, reference: str, devices: int, module: str):
        import gc

        from shard_opt import ir, verify
        from shard_opt.errors import PassError

        t0 = time.perf_counter()
        self.devices, self.module = devices, module
        arg_types, self.result_types, _ = verify._signature(reference)
        self.out_shapes = [s for s, _ in self.result_types]
        plain = ir.strip_sharding(reference)
        low = verify._has_low_precision(reference)
        self.widen = low
        exe = None
        self.error = None
        try:
            if low:
                try:
                    exe = ir.xla_compile(verify.promote_to_f32(plain), 1, shardy=False)
                except PassError:
                    self.widen = False  # not the same program in f32 (a bitcast of a bf16 value): compared as it is
            if exe is None:
                exe = ir.xla_compile(plain, 1, shardy=False)
        except PassError as e:
            self.error = f"XLA cannot run the unsharded module: {' '.join(str(e).split())[:300]}"
            return
        self.inputs = verify.random_inputs(arg_types, 0, verify.index_bounds(reference),
                                           verify.weight_fan_in(reference), widen=self.widen)
        self.expected = [p[0][1] for p in ir.xla_execute(exe, self.inputs, self.out_shapes)]
        del exe
        gc.collect()
        self.compared = (f"tt-mlir's partitioned program (its shlo_compiler stage) on {devices} XLA CPU devices "
                         f"against the unsharded module, on the same seeded inputs"
                         + ("; bf16/f16 widened to f32 in both" if self.widen else ""))
        self.shared = time.perf_counter() - t0  # charged to the first program run

    def check(self, dump: str) -> Numerics:
        import gc

        from shard_opt import ir, verify
        from shard_opt.errors import PassError, UserError

        if self.error:
            return not_run(self.error, self.module)
        t1 = time.perf_counter()
        try:
            text = runnable(dump)
            if self.widen:
                text = verify.promote_to_f32(text)
            exe = ir.xla_compile(text, self.devices)
            got = ir.xla_execute(exe, self.inputs, self.out_shapes)
            del exe
            gc.collect()
            if len(got) != len(self.expected):
                raise NotRunnable(f"tt-mlir's program returns {len(got)} results, the module {len(self.expected)}")
        except NotRunnable as e:
            return not_run(str(e), self.module)
        except (PassError, UserError) as e:
            return not_run(f"XLA cannot run tt-mlir's program: {' '.join(str(e).split())[:300]}", self.module)
        checks = []
        for i, ((shape, dtype), pieces, ref) in enumerate(zip(self.result_types, got, self.expected)):
            checked = "f32" if self.widen and dtype in ("bf16", "f16") else dtype
            rtol, atol = verify.tolerance(checked)
            checks.append(verify._compare_output(i, tuple(shape), dtype, pieces, ref, rtol, atol))
        worst = max(checks, key=lambda c: c.max_rel_err)
        bad = [c for c in checks if not c.passed]
        why = None
        if bad:
            c = bad[0]
            why = (f"output {c.index} {list(c.shape)}: {c.bad_elements} elements off"
                   + (f", worst on device {c.worst_device}" if c.worst_device >= 0 else ""))
        seconds = round(time.perf_counter() - t1 + self.shared, 3)
        self.shared = 0.0
        return Numerics("failed" if bad else "passed", self.module, self.compared, why, worst.max_abs_err,
                        worst.max_rel_err, _scale(self.expected[worst.index]), worst.rtol, worst.atol,
                        self.devices, 0, seconds)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
