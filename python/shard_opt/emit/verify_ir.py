"""Check a TTIR or TTNN dump exported by tt-xla against a plan (``shard-opt verify-ir``).

The playbook's phase 7 ("verify against the IR"): after the user runs the sharded
script with IR export on, the TTIR and TTNN dumps must show the collectives the plan
predicted. This reads the dump's CCL ops and aligns them, in program order, with the
plan's collectives.

Op syntax is what tt-mlir's own tests and tt-xla dumps print (generic form), e.g.::

    %138 = "ttir.all_reduce"(%137) <{cluster_axis = 1 : ui32, reduce_type = #ttcore.reduce_type<sum>}> : (tensor<32x3072xbf16>) -> tensor<32x3072xbf16> loc(#loc131)
    %0 = "ttir.all_gather"(%arg0) <{all_gather_dim = 3 : si32, cluster_axis = 1 : ui32}> : (...) -> ...
    %1 = "ttir.reduce_scatter"(%arg0) <{cluster_axis = 1 : ui32, reduce_type = #ttcore.reduce_type<sum>, scatter_dim = 1 : si32}> : ...
    %1 = "ttir.all_to_all"(%arg0) <{concat_dim = 3 : si32, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, split_count = 2 : si32, split_dim = 3 : si32}> : ...
    %0 = "ttir.collective_permute"(%arg0) <{source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>}> : ...
    %0 = "ttir.mesh_partition"(%arg0) <{cluster_axis = 1 : ui32, dim = 0 : si32}> : ...     (sdy.all_slice: a local slice)
    %1 = "ttir.mesh_shard"(%arg0) <{shard_dims = ..., shard_direction = #ttcore.shard_direction<full_to_shard>, ...}>
    %2 = "ttnn.point_to_point"(%arg0, %1) <{receiver_coord = array<i64: 0, 1>, sender_coord = array<i64: 0, 0>}> : ...
    "ttnn.distribute_tensor" / "ttnn.aggregate_tensor" / "ttnn.mesh_shard"                 (host <-> mesh boundary)

``cluster_axis`` indexes the mesh: on ``["batch"=2, "model"=4]``, ``"model"`` is axis 1.
Types in the dump are per device (after tt-mlir's global-to-local pass), so sizes are
compared as per-device element counts; TTNN's workaround that reshapes an all_reduce
operand to 4-D keeps that count.

Counted as equivalent, with the reason:
- all_reduce + all_slice on the same axes in the plan, one reduce_scatter in the dump
  (ShardyCCLCanonicalization, tt-mlir PR 6843);
- an all_reduce split into reduce_scatter + all_gather (tt-mlir before the native
  ttnn.all_reduce of PR 8961);
- all_to_all (and collective_permute) lowered to ``ttnn.point_to_point`` ops
  (tt-mlir TTIRToTTNN.cpp);
- a collective over several mesh axes written as one op per axis;
- all_gather + rms_norm (+ all_slice) fused into ``distributed_rms_norm``
  (FuseDistributedCustomCalls);
- an all_slice with no op in the dump: a local slice, folded into the arguments.

``mesh_shard`` / ``distribute_tensor`` / ``aggregate_tensor`` are the host boundary
(inputs in, outputs out), not CCLs; CCLs inside const-eval functions run once when
the weights are loaded and are reported apart.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field

from shard_opt.plan import PipelinePlan
from shard_opt.emit import _plan
from shard_opt.emit.citations import CITATIONS

_OP = re.compile(r'"(ttir|ttnn)\.([A-Za-z_0-9]+)"\s*\(')
_FUNC = re.compile(r"func\.func\s+(?:public\s+|private\s+)?@([\w.$\-]+)")
_MESHES = re.compile(r'#ttcore\.meshes<\[<"[^"]*"\s*=\s*(\d+(?:x\d+)*)>')
_MESH_SHAPE = re.compile(r"mesh_shape\s+(\d+(?:x\d+)*)>")
_BODY_OPEN = re.compile(r"\{[ \t]*(?:\r?\n)")

KIND_OF_OP = {
    "all_reduce": "all_reduce", "all_reduce_async": "all_reduce",
    "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "all_to_all": "all_to_all", "collective_permute": "collective_permute",
    "point_to_point": "point_to_point", "mesh_partition": "all_slice",
    "mesh_shard": "boundary", "distribute_tensor": "boundary", "aggregate_tensor": "boundary",
    "distributed_rms_norm": "fused_norm", "distributed_layer_norm": "fused_norm",
    "collective_broadcast": "other_ccl", "all_to_all_dispatch": "other_ccl",
    "all_to_all_dispatch_metadata": "other_ccl", "all_to_all_combine": "other_ccl",
    "selective_reduce_combine": "other_ccl",
}
CCL_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
             "point_to_point", "all_slice", "fused_norm", "other_ccl")


def _ref(key: str) -> str:
    return CITATIONS[key][0].split(" (")[0]


@dataclass
class DumpOp:
    """One CCL-related op of the dump."""

    name: str  # ttir.all_reduce
    kind: str  # normalised kind (KIND_OF_OP)
    line: int
    func: str
    attrs: str  # the op's attribute text
    in_shape: tuple[int, ...] = ()
    in_dtype: str = ""
    out_shape: tuple[int, ...] = ()
    out_dtype: str = ""
    cluster_axis: int | None = None
    axes: tuple[int, ...] = ()  # mesh axes it runs over (cluster_axis, or derived from device groups)
    const_eval: bool = False
    count: int = 1  # point_to_point runs: how many ops

    @property
    def elements(self) -> int:
        return math.prod(self.in_shape) if self.in_shape else 0

    def describe(self, axis_names: list[str]) -> str:
        ax = ",".join(axis_names[a] if a < len(axis_names) else str(a) for a in self.axes)
        shape = _plan.shape_text(self.in_shape, self.in_dtype) if self.in_shape else "?"
        extra = f" x{self.count}" if self.count > 1 else ""
        return f"line {self.line} {self.name}{extra} axis {ax or '?'} on {shape}"


@dataclass
class Pairing:
    status: str  # "match", "equivalent", "differs"
    plan: list[int]  # indices into the plan's collectives (program order)
    dump: list[DumpOp]
    note: str = ""


@dataclass
class VerifyResult:
    """What ``verify_ir`` found. ``ok`` is true when every plan collective is matched
    (identically or by a known equivalence) and the dump has no other CCL."""

    ok: bool
    dialect: str
    plan_mesh: list[int]
    dump_mesh: list[int] | None
    axis_names: list[str]
    pairings: list[Pairing] = field(default_factory=list)
    missing: list[tuple[int, dict, list[str]]] = field(default_factory=list)
    extra: list[tuple[DumpOp, list[str]]] = field(default_factory=list)
    boundaries: list[DumpOp] = field(default_factory=list)
    const_eval: list[DumpOp] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plan_collectives: list = field(default_factory=list)  # plan.CollectiveRecord, in program order
    model: str = ""

    @property
    def match(self) -> bool:
        return self.ok


# ---------------------------------------------------------------------------------
# Parsing the dump
# ---------------------------------------------------------------------------------

def _scan_balanced(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket closing the one at ``text[i]``; ``->`` is not a bracket."""
    depth = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "-" and i + 1 < n and text[i + 1] == ">":
            i += 2
            continue
        if ch == '"':
            j = text.find('"', i + 1)
            i = n if j < 0 else j + 1
            continue
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _tensor_types(text: str) -> list[tuple[tuple[int, ...], str]]:
    out = []
    pos = 0
    while True:
        i = text.find("tensor<", pos)
        if i < 0:
            return out
        j = _scan_balanced(text, i + len("tensor"), "<", ">")
        body = text[i + len("tensor<"): j - 1]
        out.append(_parse_tensor(body))
        pos = j


def _parse_tensor(body: str) -> tuple[tuple[int, ...], str]:
    head = body.split(",")[0].strip() if not body.startswith("!") else body
    m = re.match(r"((?:(?:\d+|\?)x)*)(.*)", head)
    dims = tuple(int(d) for d in m.group(1).split("x") if d and d != "?")
    elt = m.group(2).strip()
    if elt.startswith("!ttcore.tile<"):
        tm = re.search(r"!ttcore\.tile<[^,]*,\s*(\w+)", body)
        elt = tm.group(1) if tm else elt
    return dims, elt


def _op_extent(text: str, start: int) -> tuple[str, str, int]:
    """(attribute text, signature text, end index) of the op whose operand list opens at start."""
    i = _scan_balanced(text, start, "(", ")")
    attrs = []
    n = len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if text.startswith("<{", i):
            j = _scan_balanced(text, i + 1, "{", "}")
            attrs.append(text[i + 2: j - 1])
            i = j + 1 if j < n and text[j] == ">" else j
        elif text.startswith("{", i):
            j = _scan_balanced(text, i, "{", "}")
            attrs.append(text[i + 1: j - 1])
            i = j
        elif text.startswith("(", i):  # regions
            i = _scan_balanced(text, i, "(", ")")
        else:
            break
    if not text.startswith(":", i):
        return " ".join(attrs), "", i
    i += 1
    while i < n and text[i] in " \t\r\n":
        i += 1
    sig_start = i
    if text.startswith("(", i):
        i = _scan_balanced(text, i, "(", ")")
    while i < n and text[i] in " \t\r\n":
        i += 1
    if text.startswith("->", i):
        i += 2
        while i < n and text[i] in " \t\r\n":
            i += 1
        if text.startswith("(", i):
            i = _scan_balanced(text, i, "(", ")")
        else:
            m = re.match(r"[\w!.]+", text[i:])
            i += m.end() if m else 0
            if i < n and text[i] == "<":
                i = _scan_balanced(text, i, "<", ">")
    return " ".join(attrs), text[sig_start:i], i


def _int_attr(attrs: str, key: str) -> int | None:
    m = re.search(rf"\b{key}\s*=\s*(-?\d+)", attrs)
    return int(m.group(1)) if m else None


def _dense_pairs(attrs: str, key: str) -> list[list[int]]:
    m = re.search(rf"\b{key}\s*=\s*dense<(\[.*?\]\])", attrs)
    if not m:
        return []
    return [[int(x) for x in re.findall(r"-?\d+", g)] for g in re.findall(r"\[([^\[\]]*)\]", m.group(1))]


def _coord(dev: int, mesh: list[int]) -> list[int]:
    out = []
    for s in reversed(mesh):
        out.append(dev % s)
        dev //= s
    return list(reversed(out))


def _axes_from_groups(groups: list[list[int]], mesh: list[int]) -> tuple[int, ...]:
    axes = set()
    for g in groups:
        coords = [_coord(d, mesh) for d in g]
        for k in range(len(mesh)):
            if len({c[k] for c in coords}) > 1:
                axes.add(k)
    return tuple(sorted(axes))


def function_spans(dump_text: str) -> list[tuple[int, str, bool]]:
    """(start offset, name, is const-eval) of each function of a dump, in order. tt-mlir's
    const-eval functions (``@main_const_eval_0``, ``tt.function_type = "const_eval"``) run
    once when the weights are loaded, not per step."""
    out = []
    for fm in _FUNC.finditer(dump_text):
        body = _BODY_OPEN.search(dump_text, fm.end())  # the body's "{" ends its line
        header = dump_text[fm.start(): body.end() if body else fm.end()]
        out.append((fm.start(), fm.group(1),
                    "const_eval" in fm.group(1) or 'tt.function_type = "const_eval"' in header))
    return out


def parse_dump(dump_text: str, mesh: list[int]) -> tuple[list[DumpOp], list[int] | None, str]:
    """Every CCL-related op of a TTIR/TTNN dump, the dump's mesh (if it says) and its dialect."""
    dump_mesh = None
    m = _MESHES.search(dump_text) or _MESH_SHAPE.search(dump_text)
    if m:
        dump_mesh = [int(x) for x in m.group(1).split("x")]
    mesh_for_groups = dump_mesh or mesh
    funcs = function_spans(dump_text)
    func_starts = [f[0] for f in funcs]
    line_starts = [0] + [m.end() for m in re.finditer(r"\n", dump_text)]
    ops: list[DumpOp] = []
    dialects = set()
    for om in _OP.finditer(dump_text):
        dialect, opname = om.group(1), om.group(2)
        dialects.add(dialect)
        kind = KIND_OF_OP.get(opname)
        if kind is None:
            continue
        attrs, sig, _ = _op_extent(dump_text, om.end() - 1)
        types = _tensor_types(sig)
        in_t = types[0] if types else ((), "")
        out_t = types[-1] if types else ((), "")
        func, const_eval = "", False
        k = bisect.bisect_right(func_starts, om.start()) - 1
        if k >= 0:
            func, const_eval = funcs[k][1], funcs[k][2]
        ca = _int_attr(attrs, "cluster_axis")
        axes: tuple[int, ...] = (ca,) if ca is not None else ()
        if not axes and "replica_groups" in attrs:
            axes = _axes_from_groups(_dense_pairs(attrs, "replica_groups"), mesh_for_groups)
        if not axes and "source_target_pairs" in attrs:
            axes = _axes_from_groups(_dense_pairs(attrs, "source_target_pairs"), mesh_for_groups)
        if not axes and opname == "point_to_point":
            s = re.search(r"sender_coord\s*=\s*array<i64:\s*([\d,\s]+)>", attrs)
            r = re.search(r"receiver_coord\s*=\s*array<i64:\s*([\d,\s]+)>", attrs)
            if s and r:
                sc = [int(x) for x in s.group(1).split(",")]
                rc = [int(x) for x in r.group(1).split(",")]
                axes = tuple(k for k in range(min(len(sc), len(rc))) if sc[k] != rc[k])
        ops.append(DumpOp(
            name=f"{dialect}.{opname}", kind=kind, line=bisect.bisect_right(line_starts, om.start()), func=func,
            attrs=attrs, in_shape=in_t[0], in_dtype=in_t[1], out_shape=out_t[0], out_dtype=out_t[1],
            cluster_axis=ca, axes=axes,
            const_eval=const_eval,
        ))
    dialect = "ttnn" if "ttnn" in dialects else "ttir" if "ttir" in dialects else "unknown"
    return ops, dump_mesh, dialect


# ---------------------------------------------------------------------------------
# Aligning the plan with the dump
# ---------------------------------------------------------------------------------

class _Aligner:
    def __init__(self, plan, events: list[DumpOp], axis_names: list[str], mesh: list[int],
                 dialect: str = "ttir"):
        self.plan = plan
        self.dialect = dialect
        self.cs = _plan.collectives(plan)
        self.events = events
        self.axis_names = axis_names
        self.mesh = mesh
        self.pairings: list[Pairing] = []
        self.missing: list[int] = []
        self.extra: list[DumpOp] = []

    def axis_index(self, name: str) -> int:
        if name in self.axis_names:
            return self.axis_names.index(name)
        return -1

    def plan_axes(self, c) -> tuple[int, ...]:
        return tuple(self.axis_index(a) for a in c.axes or [])

    def same(self, c, d: DumpOp) -> bool:
        """Kind and axis agree (one op of a multi-axis collective counts)."""
        return c.kind == d.kind and bool(set(d.axes) & set(self.plan_axes(c)))

    def try_at(self, i: int, j: int) -> tuple[int, int, Pairing] | None:
        """A pairing of plan[i:] with events[j:], or None: (plan used, events used, pairing)."""
        cs, ev = self.cs, self.events
        c = cs[i]
        d = ev[j] if j < len(ev) else None
        pax = self.plan_axes(c)
        # all_reduce + all_slice -> reduce_scatter (PR 6843)
        if (c.kind == "all_reduce" and i + 1 < len(cs) and cs[i + 1].kind == "all_slice"
                and set(cs[i + 1].axes or []) == set(c.axes or [])
                and d is not None and d.kind == "reduce_scatter" and set(d.axes) & set(pax)):
            return 2, 1, Pairing("equivalent", [i, i + 1], [d],
                                 f"all_reduce + all_slice fused into reduce_scatter ({_ref('tt_mlir_6843')})")
        if d is None:
            return None
        # all_reduce -> reduce_scatter + all_gather (before the native all_reduce, PR 8961)
        want = _plan.local_elements(c)
        if (c.kind == "all_reduce" and d.kind == "reduce_scatter" and j + 1 < len(ev)
                and ev[j + 1].kind == "all_gather" and set(d.axes) & set(pax) and set(ev[j + 1].axes) & set(pax)
                and self._decomposed_sizes(want, d, ev[j + 1])):
            return 1, 2, Pairing("equivalent", [i], [d, ev[j + 1]],
                                 "all_reduce lowered as reduce_scatter + all_gather (tt-mlir before the "
                                 f"native all_reduce of {_ref('tt_mlir_8961')})")
        # all_to_all / collective_permute -> point_to_point ops (TTIRToTTNN.cpp)
        if c.kind in ("all_to_all", "collective_permute") and d.kind == "point_to_point":
            return 1, 1, Pairing("equivalent", [i], [d],
                                 f"{c.kind} lowered to {d.count} ttnn.point_to_point ops "
                                 f"({_ref('tt_mlir_all_to_all')})")
        # all_gather (+ all_slice) fused with a norm
        if c.kind == "all_gather" and d.kind == "fused_norm":
            used = 2 if i + 1 < len(cs) and cs[i + 1].kind == "all_slice" else 1
            return used, 1, Pairing("equivalent", list(range(i, i + used)), [d],
                                    f"all_gather + norm fused into {d.name} ({_ref('tt_mlir_fuse_rms_norm')})")
        if self.same(c, d) and (self.dialect != "ttnn" or self._same_size(c, d)):
            group = [d]
            k = j + 1
            covered = set(d.axes)
            while len(pax) > 1 and not set(pax) <= covered and k < len(ev) and self.same(c, ev[k]):
                group.append(ev[k])
                covered |= set(ev[k].axes)
                k += 1
            want = _plan.local_elements(c)
            status, note = "match", ""
            if len(group) > 1:
                status, note = "equivalent", f"one op per mesh axis ({len(group)} ops)"
            if want and d.elements and want != d.elements:
                status = "differs"
                note = (f"per-device size differs: plan {want} elements, dump {d.elements} "
                        f"({_plan.shape_text(d.in_shape, d.in_dtype)})")
            elif c.dtype and d.in_dtype and c.dtype != d.in_dtype:
                note = (note + "; " if note else "") + f"dtype {d.in_dtype} in the dump, {c.dtype} in the plan"
            return 1, len(group), Pairing(status, [i], group, note)
        return None

    def _same_size(self, c, d: DumpOp) -> bool:
        """Per-device sizes agree (or one is unknown). TTNN schedules ops in its own order,
        so there a neighbour of the same kind and axis is not the partner unless its size
        agrees too; TTIR keeps program order, and a size difference there is reported."""
        want = _plan.local_elements(c)
        return not want or not d.elements or want == d.elements

    def _decomposed_sizes(self, want: int, rs: DumpOp, ag: DumpOp) -> bool:
        """reduce_scatter takes the whole local tensor; all_gather takes 1/N of it."""
        if not want or not rs.elements or not ag.elements:
            return True
        n = math.prod(self.mesh[a] for a in rs.axes if a < len(self.mesh)) or 1
        return rs.elements == want and ag.elements * n == want

    def run(self) -> None:
        i = j = 0
        cs, ev = self.cs, self.events
        while i < len(cs):
            got = self.try_at(i, j)
            if got:
                pu, eu, pairing = got
                self.pairings.append(pairing)
                i += pu
                j += eu
                continue
            c = cs[i]
            if c.kind == "all_slice" and (j >= len(ev) or ev[j].kind != "all_slice"):
                self.pairings.append(Pairing("equivalent", [i], [],
                                             "all_slice is a local slice; tt-mlir folded it into the arguments "
                                             f"({_ref('tt_mlir_all_slice')})"))
                i += 1
                continue
            # Skip ahead on whichever side finds a partner sooner.
            k = next((k for k in range(j + 1, min(len(ev), j + 12)) if self.try_at(i, k)), None)
            ell = next((ell for ell in range(i + 1, min(len(cs), i + 12)) if self.try_at(ell, j)), None)
            if k is not None and (ell is None or k - j <= ell - i):
                self.extra.extend(ev[j:k])
                j = k
            elif ell is not None:
                self.missing.extend(range(i, ell))
                i = ell
            else:
                self.missing.append(i)
                i += 1
        self.extra.extend(ev[j:])


def _group_p2p(ops: list[DumpOp]) -> list[DumpOp]:
    out: list[DumpOp] = []
    for op in ops:
        if op.kind == "point_to_point" and out and out[-1].kind == "point_to_point":
            run = out[-1]
            run.count += 1
            run.axes = tuple(sorted(set(run.axes) | set(op.axes)))
            continue
        if op.kind == "point_to_point":
            op = DumpOp(**{**op.__dict__})
        out.append(op)
    return out


# ---------------------------------------------------------------------------------
# Likely causes
# ---------------------------------------------------------------------------------

def _missing_causes(c, res: VerifyResult, boundaries: list[DumpOp], extra: list[DumpOp]) -> list[str]:
    out = []
    if res.dump_mesh and list(res.dump_mesh) != list(res.plan_mesh):
        out.append(f"the dump was compiled for mesh {'x'.join(map(str, res.dump_mesh))}, the plan for "
                   f"{'x'.join(map(str, res.plan_mesh))}: tt-mlir folds a CCL over a mesh axis of size 1")
    k = c.kind
    if k == "all_gather" and any("shard_to_full" in b.attrs for b in boundaries):
        out.append("the output is gathered at the host boundary by a shard_to_full mesh_shard / aggregate_tensor, "
                   "not by a device CCL (fine if this is the model output)")
    if k == "all_reduce" and any(e.kind == "reduce_scatter" for e in extra):
        out.append(f"it was fused with a following all_slice into a reduce_scatter ({_ref('tt_mlir_6843')}); the "
                   "extra reduce_scatter below is likely it")
    if k == "all_gather":
        out.append(f"fused with a norm into distributed_rms_norm ({_ref('tt_mlir_fuse_rms_norm')})")
    comp = c.component or "its component"
    out.append(f"the mark_sharding calls for {comp} did not reach the compiler: check that shard_opt_model() ran on "
               "the model before torch.compile and that CONVERT_SHLO_TO_SHARDY=1 was set")
    out.append("tt-mlir propagates with conservativePropagation=true and may settle on other shardings than "
               f"shard-opt's Shardy run ({_ref('tt_mlir_pipeline')}): compare the argument shardings "
               "(ttcore.shard_status, mesh_shard ops) with the plan")
    return out


def _extra_causes(d: DumpOp, res: VerifyResult) -> list[str]:
    out = []
    k = d.kind
    if k == "all_gather":
        out.append("a sharded tensor is gathered where the plan keeps it split: usually a weight whose "
                   "mark_sharding spec differs from the plan, or a sharding lost at the PyTorch->StableHLO boundary")
    if k == "reduce_scatter":
        out.append(f"an all_reduce + all_slice pair fused by ShardyCCLCanonicalization ({_ref('tt_mlir_6843')})")
        if d.in_dtype == "bf16":
            out.append(f"bf16 reduce_scatter loses precision ({_ref('tt_metal_36749_37884')})")
    if k in ("collective_permute", "point_to_point"):
        out.append(f"a reshard between two split layouts; sdy.collective_permute is not lowered "
                   f"({_ref('tt_mlir_3370')}) and all_to_all becomes point_to_point ops ({_ref('tt_mlir_all_to_all')})")
    if k == "all_slice":
        out.append("a local slice of a replicated value (no traffic): a replicated weight split where it is used")
    if k == "all_reduce":
        out.append("a contraction over a split dim the plan did not split: compare the weight shardings")
    out.append("tt-mlir's own propagation (user priority, conservative) or an output sharding constraint inserted "
               f"a reshard shard-opt's plan does not have ({_ref('tt_mlir_pipeline')})")
    if res.dump_mesh and list(res.dump_mesh) != list(res.plan_mesh):
        out.append(f"the dump's mesh {'x'.join(map(str, res.dump_mesh))} is not the plan's "
                   f"{'x'.join(map(str, res.plan_mesh))}")
    return out


# ---------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------

def verify_ir(plan, dump_text: str) -> VerifyResult:
    """Compare a TTIR/TTNN dump's CCL ops with the plan's collectives.

    Args:
      plan: the ``Plan`` (a plan JSON dict, the ``--plan-json`` file, is read as one:
        ``_plan.as_plan``).
      dump_text: a TTIR or TTNN module as tt-xla exports it.
    """
    plan = _plan.as_plan(plan)
    if isinstance(plan, PipelinePlan):
        raise ValueError("verify-ir checks one model: pass the plan of the model the dump belongs to")
    shape, axes = _plan.mesh_of(plan)
    if len(shape) == 1:  # tt-mlir normalises 1-D meshes to (1, N)
        shape, axes = [1, shape[0]], ["_unused", axes[0]]
    ops, dump_mesh, dialect = parse_dump(dump_text, shape)
    res = VerifyResult(ok=False, dialect=dialect, plan_mesh=list(shape), dump_mesh=dump_mesh,
                       axis_names=list(axes), plan_collectives=_plan.collectives(plan),
                       model=str(plan.model or ""))
    res.boundaries = [o for o in ops if o.kind == "boundary"]
    res.const_eval = [o for o in ops if o.kind != "boundary" and o.const_eval]
    events = _group_p2p([o for o in ops if o.kind != "boundary" and not o.const_eval])
    if not ops:
        res.notes.append("the dump has no CCL or mesh_shard op: was it compiled for one device? Check the mesh "
                         "and that the model was marked with mark_sharding")
    if dump_mesh and list(dump_mesh) != list(shape):
        res.notes.append(f"mesh differs: dump {'x'.join(map(str, dump_mesh))}, plan {'x'.join(map(str, shape))}")
    if any(o.kind == "other_ccl" for o in events):
        res.notes.append("the dump has CCL ops shard-opt does not model (MoE dispatch/combine, broadcast)")
    al = _Aligner(plan, events, list(axes), list(shape), dialect)
    al.run()
    _pair_with_load_time(al, res.const_eval)
    _pair_folded_slices(al)
    _pair_out_of_order(al)
    res.pairings = al.pairings
    res.missing = [(i, al.cs[i], _missing_causes(al.cs[i], res, res.boundaries, al.extra)) for i in al.missing]
    res.extra = [(d, _extra_causes(d, res)) for d in al.extra]
    res.ok = not res.missing and not res.extra and all(p.status != "differs" for p in res.pairings)
    return res


def _pair_with_load_time(al: _Aligner, const_eval: list[DumpOp]) -> None:
    """A plan collective of a value computed from constants only (position ids, a RoPE
    table) runs in the step in the plan and TTIR, but TTNN's const-eval hoists it into a
    function run once at load: the same collective, moved. Pair each missing plan
    collective with a load-time op of its kind and axis, in order, each op once."""
    left = list(const_eval)
    still = []
    for i in al.missing:
        c = al.cs[i]
        j = next((j for j, d in enumerate(left) if al.same(c, d)), None)
        if j is None:
            still.append(i)
            continue
        d = left.pop(j)
        al.pairings.append(Pairing("equivalent", [i], [d], "computed from constants: tt-mlir's const-eval runs it "
                                                             "once at load time, not per step"))
    al.missing = still


def _pair_folded_slices(al: _Aligner) -> None:
    """An all_slice the in-order pass took as folded into the arguments (no op) may still
    be in the dump further on, as a ``mesh_partition``: pair the two, each once."""
    for p in al.pairings:
        if p.dump or len(p.plan) != 1 or al.cs[p.plan[0]].kind != "all_slice":
            continue
        c = al.cs[p.plan[0]]
        j = next((j for j, d in enumerate(al.extra) if d.kind == "all_slice" and al.same(c, d)), None)
        if j is not None:
            p.dump = [al.extra.pop(j)]
            p.note = f"all_slice lowered to {p.dump[0].name} (a local slice, no traffic)"


def _pair_out_of_order(al: _Aligner) -> None:
    """TTNN schedules ops in its own order (a collective can move past its neighbours), so
    the in-order alignment can leave a plan collective "missing" and its op "extra": pair
    each missing one with an extra op of the same kind, axis and per-device size, wherever
    it is in the dump."""
    still = []
    for i in al.missing:
        c = al.cs[i]
        want = _plan.local_elements(c)
        j = next((j for j, d in enumerate(al.extra) if al.same(c, d)
                  and (not want or not d.elements or want == d.elements)), None)
        if j is None:
            still.append(i)
            continue
        d = al.extra.pop(j)
        al.pairings.append(Pairing("equivalent", [i], [d], f"the same collective at another place in the "
                                                             f"program (line {d.line})"))
    al.missing = still


def _plan_desc(i: int, c) -> str:
    axes = ",".join(c.axes or [])
    shape = _plan.shape_text(c.shape, c.dtype)
    where = f" [{c.component}]" if c.component else ""
    return f"#{i if c.op_index is None else c.op_index} {c.kind} {{{axes}}} {shape}{where}"


def format_result(result: VerifyResult) -> str:
    """Human-readable verdict, one line per pairing, causes for every mismatch."""
    r = result
    names = r.axis_names
    mesh = "x".join(map(str, r.plan_mesh))
    dmesh = "x".join(map(str, r.dump_mesh)) if r.dump_mesh else "not stated"
    n_dump = sum(d.count for p in r.pairings for d in p.dump) + sum(d.count for d, _ in r.extra)
    lines = [f"verify-ir: {r.dialect.upper()} dump vs plan {r.model or '?'} (plan mesh {mesh}, dump mesh {dmesh})"]
    n_match = sum(1 for p in r.pairings if p.status == "match")
    n_eq = sum(1 for p in r.pairings if p.status == "equivalent")
    verdict = "MATCH" if r.ok else "MISMATCH"
    lines.append(f"{verdict}: {len(r.plan_collectives)} plan collectives, {n_dump} dump CCL ops; {n_match} identical, "
                 f"{n_eq} equivalent, {sum(1 for p in r.pairings if p.status == 'differs')} differ, "
                 f"{len(r.missing)} missing, {len(r.extra)} extra")
    for p in r.pairings:
        left = "; ".join(_plan_desc(i, r.plan_collectives[i]) for i in p.plan)
        right = "; ".join(d.describe(names) for d in p.dump) or "(no op)"
        tag = {"match": "ok   ", "equivalent": "equiv", "differs": "DIFF "}[p.status]
        lines.append(f"  {tag} {left} <-> {right}" + (f"  ({p.note})" if p.note else ""))
    for i, c, causes in r.missing:
        lines.append(f"  MISSING {_plan_desc(i, c)}: not in the dump. Likely causes:")
        lines += [f"      - {x}" for x in causes]
    for d, causes in r.extra:
        lines.append(f"  EXTRA {d.describe(names)}: not in the plan. Likely causes:")
        lines += [f"      - {x}" for x in causes]
    if r.boundaries:
        lines.append(f"  boundary: {len(r.boundaries)} mesh_shard / distribute_tensor / aggregate_tensor ops move "
                     "inputs and outputs between host and mesh; they are not CCLs")
    if r.const_eval:
        lines.append(f"  const-eval: {len(r.const_eval)} CCL ops in const-eval functions run once at load time, "
                     "not per step: " + "; ".join(d.describe(names) for d in r.const_eval[:5]))
    for n in r.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)
