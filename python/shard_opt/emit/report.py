"""``sharding_analysis.md``: the plan explained, in the Tenstorrent playbook's template.

Sections follow the sharding-analysis skill's template (tt-xla
``.claude/skills/sharding-model-analysis/assets/sharding_analysis_template.md``):
1 model & target, 2 architecture (Megatron column->row pairs marked), 3 recommended
strategy with the rejected alternatives, 4 per-component design (chosen sharding, why,
rejected alternatives, each collective with where it comes from and why), 5 the CCL
budget (its total equals the plan's ``cost.ccl_count`` / ``ccl_bytes``), 6 bottlenecks
and compiler limitations, 7 sources. An appendix lists every collective in program
order. Every figure comes from the plan; every non-trivial decision cites
``shard_opt.emit.citations``.

``write_ccl_chart`` draws the one picture: modeled CCL time per component, split by
collective kind (matplotlib, Agg backend).
"""

from __future__ import annotations

import os
from collections import OrderedDict

from shard_opt.emit import _plan
from shard_opt.emit.citations import Citer

SOURCE_NAMES = {"pytorch": "PyTorch load script", "jax": "JAX function", "mlir": "StableHLO module",
                "zoo": "shard-opt model zoo"}
INPUTS_COMPONENT = "(model inputs)"


# ---------------------------------------------------------------------------------
# Components: parameters and collectives grouped by module, layers collapsed
# ---------------------------------------------------------------------------------

def component_key(name_or_module: str | None, *, is_param_name: bool = False) -> str:
    """The report's component for a parameter name or a module path.

    Inside a repeated layer a projection belongs to its block
    (``model.layers.*.mlp.up_proj`` -> ``model.layers.*.mlp``); a module sitting directly
    in the layer (a norm) or outside the layers is its own component.
    """
    if not name_or_module or name_or_module.startswith("("):
        return name_or_module or INPUTS_COMPONENT
    r = _plan.role(name_or_module)
    if is_param_name:
        r = r.rsplit(".", 1)[0] if "." in r else r
    parent = r.rsplit(".", 1)[0] if "." in r else ""
    if "*" in parent and not parent.endswith("*"):
        return parent
    return r


def _arg_component(a: dict) -> str:
    if a.get("kind") in ("input", "cache"):
        return INPUTS_COMPONENT
    return component_key(a["name"], is_param_name=True)


def _coll_component(c: dict) -> str:
    comp = c.get("component")
    if not comp or comp.startswith("("):
        return comp or INPUTS_COMPONENT
    return component_key(comp)


def _components(plan: dict) -> "OrderedDict[str, dict]":
    comps: OrderedDict[str, dict] = OrderedDict()

    def get(key):
        return comps.setdefault(key, {"args": [], "collectives": [], "layers": set()})

    for a in plan.get("arguments") or []:
        entry = get(_arg_component(a))
        entry["args"].append(a)
        layer = _plan.layer_of(a["name"])
        if layer is not None:
            entry["layers"].add(layer)
    for c in _plan.collectives(plan):
        entry = get(_coll_component(c))
        entry["collectives"].append(c)
        if c.get("layer") is not None:
            entry["layers"].add(c["layer"])
    return comps


# ---------------------------------------------------------------------------------
# Architecture map (optional plan["architecture"]) and Megatron pairs
# ---------------------------------------------------------------------------------

def _flatten_architecture(arch) -> dict[str, dict]:
    """path -> {"class", "flops"} from a module tree (nested ``children``) or a flat list."""
    out: dict[str, dict] = {}

    def visit(node, prefix):
        if not isinstance(node, dict):
            return
        name = node.get("name", "")
        path = node.get("path")
        if path is None:
            path = f"{prefix}.{name}" if prefix and name else (name or prefix)
        out[path] = {"class": node.get("class") or node.get("type"), "flops": node.get("flops")}
        for child in node.get("children") or []:
            visit(child, path)

    if isinstance(arch, list):
        for node in arch:
            visit(node, "")
    elif isinstance(arch, dict):
        if isinstance(arch.get("modules"), list):
            for node in arch["modules"]:
                visit(node, "")
        else:
            visit(arch, "")
    return out


def _component_arch(plan: dict, key: str) -> tuple[str | None, int | None]:
    """(class name, FLOPs of one instance) of a component, when the plan has a map."""
    arch = _flatten_architecture(plan.get("architecture"))
    if not arch:
        return None, None
    for path, info in arch.items():
        if _plan.role(path) == key:
            return info.get("class"), info.get("flops")
    return None, None


def megatron_pairs(plan: dict) -> list[dict]:
    """Column->row pairs: in one block, 2-D weights split on an axis along their output
    dim (column) and weights split on the same axis along their input dim (row).

    The block is the module holding the projections (``model.layers.*.mlp`` for
    ``model.layers.*.mlp.up_proj.weight``, ``mlp`` for ``mlp.up_proj.weight`` in a model
    without repeated layers). PyTorch ``Linear.weight`` is ``[out, in]``; JAX kernels are
    ``[in, out]``. The column layers must come before the row layers in argument
    (definition) order, as q/k/v before o_proj and gate/up before down_proj.
    """
    out_dim = 1 if plan.get("source") == "jax" else 0
    blocks: OrderedDict[str, dict] = OrderedDict()
    seen = set()
    for a in plan.get("arguments") or []:
        if a.get("kind", "param") not in ("param", "buffer") or len(a.get("shape") or []) != 2:
            continue
        r = _plan.role(a["name"])
        if r in seen:
            continue
        seen.add(r)
        module = r.rsplit(".", 1)[0] if "." in r else r
        block = module.rsplit(".", 1)[0] if "." in module else component_key(module)
        s = a.get("sharding") or [[], []]
        out_axes, in_axes = s[out_dim], s[1 - out_dim]
        leaf = module[len(block) + 1:] if module.startswith(block + ".") else module
        b = blocks.setdefault(block, {})
        order = a.get("index", len(seen))
        if len(out_axes) == 1 and not in_axes:
            b.setdefault(out_axes[0], {"column": [], "row": []})["column"].append((order, leaf))
        elif len(in_axes) == 1 and not out_axes:
            b.setdefault(in_axes[0], {"column": [], "row": []})["row"].append((order, leaf))
    pairs = []
    for block, by_axis in blocks.items():
        for axis, cr in by_axis.items():
            cols, rows = cr["column"], cr["row"]
            if cols and rows and max(o for o, _ in cols) < min(o for o, _ in rows):
                pairs.append({"block": block, "axis": axis, "column": [n for _, n in cols],
                              "row": [n for _, n in rows]})
    return pairs


# ---------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------

def _spec_cell(sharding) -> str:
    if not _plan.is_sharded(sharding):
        return "replicated"
    return f"`{_plan.spec_text(sharding)}`"


def _tensor_cell(shape, dtype) -> str:
    return f"`{_plan.shape_text(shape, dtype)}`"


def _signature(c: dict) -> tuple:
    return (c["kind"], tuple(c.get("axes") or []), tuple(c.get("shape") or []), c.get("bytes_per_device"))


def _layers_text(layers) -> str:
    layers = sorted(layers)
    if not layers:
        return ""
    if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 2:
        return f"{layers[0]}-{layers[-1]}"
    return ", ".join(map(str, layers))


def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _loc_text(loc: str | None) -> str:
    if not loc:
        return ""
    loc = loc.strip()
    if loc.startswith("loc(") and loc.endswith(")"):
        loc = loc[4:-1]
    return loc.replace('"', "")


class _Report:
    def __init__(self, plan: dict, png_path: str | None):
        self.plan = plan
        self.png_path = png_path
        self.cite = Citer()
        self.shape, self.axes = _plan.mesh_of(plan)
        self.sizes = dict(zip(self.axes, self.shape))
        self.cost = plan.get("cost") or {}
        self.comps = _components(plan)
        self.pairs = megatron_pairs(plan)
        self.colls = _plan.collectives(plan)
        self.lines: list[str] = []

    def w(self, *lines: str) -> None:
        self.lines.extend(lines)

    # -- header ------------------------------------------------------------------
    def header(self) -> None:
        p = self.plan
        self.w(f"# Sharding analysis - {p.get('model', 'model')}", "")
        self.w("> Generated by shard-opt from its plan JSON. Every figure is computed (real Shardy "
               f"propagation {self.cite.cite('shardy')} priced by the `{p.get('cost_model', 'tenstorrent')}` "
               "cost model), none typed in.", "")
        if p.get("memory_fallback"):
            self.w("> **⚠ MEMORY FALLBACK.** The fastest plan does not fit in device DRAM, so this plan "
                   "shards for memory and is slower than the speed-optimal one "
                   f"{self.cite.cite('playbook')}. Reason: "
                   f"{_md(p.get('memory_fallback_reason') or 'not given')}.", "")

    # -- 1 ---------------------------------------------------------------------------
    def model_and_target(self) -> None:
        p = self.plan
        n = 1
        for s in self.shape:
            n *= s
        self.w("## 1. Model & target", "")
        self.w(f"- Model / variant: {p.get('model', '?')}"
               + (f" ({p['num_layers']} repeated layers analysed)" if p.get("num_layers") else ""))
        src = SOURCE_NAMES.get(p.get("source"), p.get("source") or "?")
        self.w(f"- Input: {src}" + (f" `{p['script']}`" if p.get("script") else ""))
        run = [f"dtype {p['dtype']}" if p.get("dtype") else None,
               f"phase {p['phase']}" if p.get("phase") else None,
               f"batch {p['batch']}" if p.get("batch") is not None else None,
               f"sequence length {p['seq_len']}" if p.get("seq_len") is not None else None]
        run = [r for r in run if r]
        if run:
            self.w("- Workload: " + ", ".join(run))
        mesh_desc = ", ".join(f"`{a}`={s}" for a, s in zip(self.axes, self.shape))
        shape_t = tuple(self.shape) if len(self.shape) != 1 else (1, self.shape[0])
        from shard_opt.sharding import TT_MLIR_SUPPORTED_MESHES  # a table, no jaxlib import

        supported = shape_t in TT_MLIR_SUPPORTED_MESHES
        self.w(f"- Devices and mesh: {n} chips as a {'x'.join(map(str, self.shape))} mesh ({mesh_desc})"
               + (f" on `{p['system']}`" if p.get("system") else "")
               + f"; a standard shape for {n} chips {self.cite.cite('tt_xla_mesh_shapes')}, "
               + ("accepted" if supported else "**not accepted**")
               + f" by tt-mlir {self.cite.cite('tt_mlir_4668')}.")
        for m in p.get("meshes") or []:
            if list(m.get("shape") or []) != list(self.shape):
                self.w(f"- Also valid on: {'x'.join(map(str, m['shape']))} ({', '.join(m.get('axes') or [])})")
        params = [a for a in p.get("arguments") or [] if a.get("kind", "param") in ("param", "buffer")]
        total = sum(_numel(a.get("shape")) * _plan.dtype_bytes(a.get("dtype")) for a in params)
        mem = self.cost.get("memory_per_device_bytes")
        fits = self.cost.get("fits")
        self.w(f"- Parameters: {len(params)} tensors, {_plan.fmt_bytes(total)} in total"
               + (f"; modeled memory per device {_plan.fmt_bytes(mem)}" if mem else "")
               + ("" if fits is None else (", fits in DRAM" if fits else ", **does not fit in DRAM**")) + ".")
        self.w("")

    # -- 2 ---------------------------------------------------------------------------
    def architecture(self) -> None:
        self.w("## 2. Architecture", "")
        has_arch = bool(_flatten_architecture(self.plan.get("architecture")))
        head = "| Component | Module | Layers | Parameters (shape, chosen spec) |"
        sep = "|---|---|---|---|"
        if has_arch:
            head += " FLOPs per instance |"
            sep += "---|"
        self.w(head, sep)
        for key, comp in self.comps.items():
            if not comp["args"]:
                continue
            cls, flops = _component_arch(self.plan, key)
            seen, cells = set(), []
            for a in comp["args"]:
                r = _plan.role(a["name"])
                if r in seen:
                    continue
                seen.add(r)
                leaf = r[len(key) + 1:] if r.startswith(key + ".") else r
                cells.append(f"`{leaf}` {_plan.shape_text(a.get('shape'), a.get('dtype'))} {_spec_cell(a.get('sharding'))}")
            row = (f"| `{key}` | {cls or ''} | {_layers_text(comp['layers']) or '-'} | "
                   + "<br>".join(cells) + " |")
            if has_arch:
                row += f" {_flops_text(flops)} |"
            self.w(row)
        self.w("")
        if self.pairs:
            self.w("Megatron column→row pairs (the intermediate between them is never gathered; one "
                   f"all_reduce closes each pair) {self.cite.cite('megatron')}:", "")
            for pr in self.pairs:
                self.w(f"- `{pr['block']}` on `{pr['axis']}`: column-parallel "
                       + ", ".join(f"`{c}`" for c in pr["column"]) + " → row-parallel "
                       + ", ".join(f"`{r}`" for r in pr["row"]))
        else:
            self.w("No Megatron column→row pair in this plan.")
        self.w("")

    # -- 3 ---------------------------------------------------------------------------
    def strategy(self) -> None:
        p, c = self.plan, self.cost
        self.w("## 3. Recommended strategy (summary)", "")
        count, nbytes = _plan.ccl_totals(p)
        text = (f"**{(p.get('strategy') or 'See the per-component design').rstrip('.')}.** Modeled step "
                f"{_plan.fmt_us(c.get('total_us'))} (compute {_plan.fmt_us(c.get('compute_us'))}, collectives "
                f"{_plan.fmt_us(c.get('ccl_us'))}), {count} collectives moving {_plan.fmt_bytes(nbytes)} per device. "
                f"The objective is speed: parallel compute for the fewest and smallest collectives, memory only "
                f"as a loud fallback {self.cite.cite('playbook')}.")
        if self.pairs:
            text += (" Weights follow Megatron-style column→row pairs "
                     f"{self.cite.cite('megatron', 'tt_xla_llama')}.")
        if any(_plan.is_sharded(a.get("sharding")) for a in p.get("arguments") or []
               if a.get("kind") in ("input", "cache")):
            text += " Model inputs are split at the boundary, which costs nothing (each chip receives its slice)."
        if "sequence" in (p.get("strategy") or ""):
            text += f" Sequence parallelism follows {self.cite.cite('sequence_parallel')}."
        self.w(text, "")
        base = p.get("baselines") or {}
        if base:
            self.w("| Plan | Modeled step | vs recommended | CCLs | CCL bytes / device |", "|---|---|---|---|---|")
            self.w(f"| **recommended** | {_plan.fmt_us(c.get('total_us'))} | 1.00x | {_ccl_cells(c)} |")
            for name, b in base.items():
                t = (b or {}).get("total_us")
                label = name
                if name == "autoshard-heuristic":
                    label = f"autoshard-heuristic (tt-mlir AutoShardingPass's heuristic {self.cite.cite('tt_mlir_7517')})"
                elif name == "megatron":
                    label = f"megatron (column→row on every Linear) {self.cite.cite('megatron')}"
                self.w(f"| {label} | {_plan.fmt_us(t)} | {_ratio(t, c.get('total_us'))} | {_ccl_cells(b or {})} |")
            self.w("")
            why_not = self._why_not_megatron(base.get("megatron"))
            if why_not:
                self.w(why_not, "")
        s = p.get("search") or {}
        if s:
            n = s.get("candidates_evaluated", "?")
            # No wall-clock time here: the report is byte-identical across runs (the plan JSON's
            # search.seconds and the summary line on stderr carry it).
            self.w(f"Search: {n} candidate{'' if n == 1 else 's'} evaluated with real Shardy propagation "
                   f"({'exhaustive' if s.get('exhaustive') else 'not exhaustive'}).", "")
        rejected = s.get("rejected") or []
        if rejected:
            self.w("Rejected alternatives (whole model, as evaluated by the search):", "")
            self.w("| Alternative | Modeled step | Slower by | CCLs | CCL bytes / device | Changed |",
                   "|---|---|---|---|---|---|")
            for r in sorted(rejected, key=lambda r: r.get("total_us") or 0):
                self.w(self._rejected_row(r))
            self.w("")

    def _why_not_megatron(self, mega: dict | None) -> str | None:
        """One sentence on why the Megatron baseline lost, from its priced cost."""
        if not mega:
            return None
        t, mine = mega.get("total_us"), self.cost.get("total_us")
        if t is None and mega.get("ccl_count") is not None:
            # the cost model prices only collective_permute as infinite (JSON null)
            return (f"**Why not Megatron:** Shardy inserts a collective_permute for it on this mesh, which tt-mlir "
                    f"cannot lower {self.cite.cite('tt_mlir_3370')}, so it cannot run "
                    f"({mega['ccl_count']} collectives in all).")
        if t is None or mine is None or t <= mine:
            return None
        d_ccl = (mega.get("ccl_us") or 0) - (self.cost.get("ccl_us") or 0)
        d_compute = (mega.get("compute_us") or 0) - (self.cost.get("compute_us") or 0)
        if d_ccl > 0 and d_compute <= 0:
            because = "its collectives cost more than the compute its splits save"
        elif d_compute > 0 and d_ccl <= 0:
            because = "the recommended plan parallelises more of the compute for the collectives it pays"
        else:
            because = "it pays more for collectives and parallelises less of the compute"
        cites = []
        if d_ccl > 0:  # each extra CCL pays a fixed synchronisation cost
            bh = "bh" in str(self.plan.get("system", "")).lower()
            cites.append(self.cite.cite("tt_metal_ccl_fits_bh" if bh else "tt_metal_ccl_fits_wh"))
        cites.append(self.cite.cite("playbook"))
        return (f"**Why not Megatron:** modeled {_plan.fmt_us(t)}, {_plan.fmt_us(t - mine)} slower per step: "
                f"collectives {_plan.fmt_us(mega.get('ccl_us'))} ({mega.get('ccl_count', '?')} CCLs, "
                f"{_plan.fmt_bytes(mega.get('ccl_bytes') or 0)} per device) against "
                f"{_plan.fmt_us(self.cost.get('ccl_us'))} ({self.cost.get('ccl_count', '?')} CCLs) here, compute "
                f"{_plan.fmt_us(mega.get('compute_us'))} against {_plan.fmt_us(self.cost.get('compute_us'))}: "
                f"{because} {' '.join(cites)}.")

    def _rejected_row(self, r: dict) -> str:
        total = r.get("total_us")
        base = self.cost.get("total_us")
        delta = f"+{_plan.fmt_us(total - base)}" if total is not None and base is not None else "n/a"
        changed = "; ".join(f"`{k}` → {_spec_cell(v)}" for k, v in (r.get("arguments_changed") or {}).items())
        return (f"| {_md(r.get('label', '?'))} | {_plan.fmt_us(total)} | {delta} | {r.get('ccl_count', '?')} | "
                f"{_plan.fmt_bytes(r.get('ccl_bytes') or 0)} | {changed} |")

    # -- 4 ---------------------------------------------------------------------------
    def per_component(self) -> None:
        self.w("## 4. Per-component design", "")
        why = {g.get("role"): g.get("why") for g in self.plan.get("groups") or []}
        rejected = (self.plan.get("search") or {}).get("rejected") or []
        for key, comp in self.comps.items():
            cls, _ = _component_arch(self.plan, key)
            layers = sorted(comp["layers"])
            title = f"### `{key}`" + (f" ({cls})" if cls else "")
            if len(layers) > 1:
                title += f", {len(layers)} layers"
            self.w(title, "")
            self._chosen(comp)
            self._why(key, comp, why)
            mine = [r for r in rejected if r.get("arguments_changed") and all(
                self._role_component(k) == key for k in r["arguments_changed"])]
            self._rejected(mine, "none evaluated for this component alone"
                           + (" (see the whole-model alternatives in section 3)." if rejected else "."))
            self._ccls(comp)
            self.w("")
        self._sites(rejected)

    def _sites(self, rejected: list) -> None:
        """Intermediate values the search could constrain (reshapes that split heads)."""
        sites = [g for g in self.plan.get("groups") or [] if g.get("kind") == "intermediate"]
        if not sites:
            return
        self.w("### Intermediate values (sharding constraints)", "")
        chosen = [g for g in sites if g.get("sharding") is not None]
        if chosen:
            self.w("- **Chosen sharding:** `sdy.sharding_constraint` after each reshape:", "")
            self.w("  | Reshape (operand -> result) | Constraint |", "  |---|---|")
            for g in chosen:
                self.w(f"  | `{g['role']}` | {_spec_cell(g['sharding'])} |")
            self.w("")
        else:
            self.w("- **Chosen sharding:** no constraint; Shardy propagates through every reshape unaided.")
        self.w("- **Why:** a constraint after the reshape that splits features into heads is the hint tt-xla "
               f"places by hand {self.cite.cite('tt_torch_constraint')}; Shardy propagates from it "
               f"{self.cite.cite('shardy')}. Each site was priced with and without one: "
               + "; ".join(f"`{g['role']}`: {_md(g.get('why') or '')}" for g in sites) + ".")
        keys = {g["role"] for g in sites}
        mine = [r for r in rejected if r.get("arguments_changed") and set(r["arguments_changed"]) <= keys]
        self._rejected(mine, "none evaluated.")
        self.w("- **CCLs:** a constraint's collectives are listed under the component whose op they feed.", "")

    def _rejected(self, mine: list, none: str) -> None:
        """The whole-model alternatives that changed only this part, cheapest first."""
        if not mine:
            self.w(f"- **Rejected alternatives:** {none}")
            return
        self.w("- **Rejected alternatives:**")
        for r in sorted(mine, key=lambda r: r.get("total_us") or 0):
            total, base = r.get("total_us"), self.cost.get("total_us")
            delta = (f"+{_plan.fmt_us(total - base)}" if total is not None and base is not None else "")
            self.w(f"  - {_md(r.get('label', '?'))}: modeled {_plan.fmt_us(total)} ({delta} slower), "
                   f"{r.get('ccl_count', '?')} collectives, {_plan.fmt_bytes(r.get('ccl_bytes') or 0)} per device.")

    def _role_component(self, role: str) -> str:
        for a in self.plan.get("arguments") or []:
            if a["name"] == role or _plan.role(a["name"]) == role:
                return _arg_component(a)
        return component_key(role, is_param_name=True)

    def _chosen(self, comp: dict) -> None:
        if not comp["args"]:
            self.w("- **Chosen sharding:** no tensors of its own; its collectives come from its inputs.")
            return
        self.w("- **Chosen sharding:**", "", "  | Tensor | Shape | Partition spec | Shardy |", "  |---|---|---|---|")
        for r, a in _first_per_role(comp["args"]):
            kind = (_pair_kind(a.get("sharding"), self.plan.get("source"))
                    if a.get("kind", "param") in ("param", "buffer") else "")
            self.w(f"  | `{r}` | {_tensor_cell(a.get('shape'), a.get('dtype'))} | {_spec_cell(a.get('sharding'))}"
                   f"{' ' + kind if kind else ''} | `{_plan.sdy_text(a.get('sharding'))}` |")
        self.w("")

    def _why(self, key: str, comp: dict, why: dict) -> None:
        reasons = []
        for r, a in _first_per_role(comp["args"]):
            if why.get(r) or why.get(a["name"]):
                reasons.append(f"`{r.rsplit('.', 1)[0] if r.count('.') else r}`: {_md(why.get(r) or why.get(a['name']))}")
        pair = [pr for pr in self.pairs if key == pr["block"] or key.startswith(pr["block"] + ".")]
        cites = []
        if pair:
            pr = pair[0]
            reasons.insert(0, f"a Megatron column→row pair on `{pr['axis']}`: "
                              + ", ".join(pr["column"]) + " split along their outputs, " + ", ".join(pr["row"])
                              + " along its inputs, so the activations between them stay split and one all_reduce "
                                "sums the partial results")
            cites.append(self.cite.cite("megatron", "tt_xla_llama"))
        if key == INPUTS_COMPONENT and not reasons and any(_plan.is_sharded(a.get("sharding")) for a in comp["args"]):
            reasons.append("inputs are split at the boundary for free; the split is what the weights' layout needs")
        if not reasons:
            sharded = any(_plan.is_sharded(a.get("sharding")) for a in comp["args"])
            reasons.append("split: the modeled step is fastest this way" if sharded else
                           "replicated: splitting it does not pay for the collectives it would add "
                           "(modeled by the search)")
        if not cites:  # the search's own trade-off: speed first, fewest and smallest CCLs
            cites.append(self.cite.cite("playbook"))
        self.w("- **Why:** " + "; ".join(reasons) + (" " + " ".join(cites) if cites else "") + ".")

    def _ccls(self, comp: dict) -> None:
        cs = comp["collectives"]
        if not cs:
            self.w("- **CCLs:** none.")
            return
        by_layer: OrderedDict = OrderedDict()
        for c in cs:
            by_layer.setdefault(c.get("layer"), []).append(c)
        sigs = {tuple(_signature(c) for c in v) for v in by_layer.values()}
        layers = [k for k in by_layer if k is not None]
        total_n = sum(_plan.multiplicity(c) for c in cs)
        total_b = sum((c.get("bytes_per_device") or 0) * _plan.multiplicity(c) for c in cs)
        total_t = sum((c.get("time_us") or 0) * _plan.multiplicity(c) for c in cs)
        if len(sigs) == 1 and len(layers) > 1 and None not in by_layer:
            shown = by_layer[layers[0]]
            note = (f" Shown for layer {layers[0]}; layers {_layers_text(layers)} have the same collectives.")
        else:
            shown, note = cs, ""
        self.w(f"- **CCLs:** {total_n} in total, {_plan.fmt_bytes(total_b)} per device, modeled "
               f"{_plan.fmt_us(total_t)}.{note}{self._kind_cites(cs)}", "")
        self.w("  | Op | Kind | Axes | Tensor | Bytes / device | Modeled | Comes from | Why |",
               "  |---|---|---|---|---|---|---|---|")
        for c in shown:
            self.w("  " + self._coll_row(c, with_component=False))

    def _kind_cites(self, cs: list[dict]) -> str:
        kinds = {c["kind"] for c in cs}
        out = []
        if "all_reduce" in kinds and self.pairs:
            out.append(f" Two all_reduces per transformer layer is Megatron's forward cost {self.cite.cite('megatron')}.")
        if "all_to_all" in kinds:
            out.append(f" all_to_all lowers to pairwise point_to_point ops {self.cite.cite('tt_mlir_all_to_all')}.")
        if "collective_permute" in kinds:
            out.append(f" collective_permute does not lower in tt-mlir {self.cite.cite('tt_mlir_3370')}.")
        if "all_slice" in kinds:
            out.append(f" all_slice is a local slice with no traffic {self.cite.cite('tt_mlir_all_slice')}.")
        return "".join(out)

    def _coll_row(self, c: dict, *, with_component: bool) -> str:
        axes = ", ".join(f"`{a}`" for a in c.get("axes") or []) or "-"
        origin = _md(c.get("producer") or "?")
        loc = _loc_text(c.get("loc"))
        if loc:
            origin += f" at `{_md(loc)}`"
        if not with_component and c.get("component"):
            origin += f" in `{c['component']}`"
        cells = [f"#{c.get('op_index', '?')}", c["kind"], axes, _tensor_cell(c.get("shape"), c.get("dtype")),
                 _plan.fmt_bytes(c.get("bytes_per_device") or 0), _plan.fmt_us(c.get("time_us"))]
        if with_component:
            cells.append(f"`{c.get('component') or INPUTS_COMPONENT}`")
        cells += [origin, _md(c.get("reason") or "")]
        return "| " + " | ".join(cells) + " |"

    # -- 5 ---------------------------------------------------------------------------
    def budget(self) -> None:
        self.w("## 5. CCL budget", "")
        rows: OrderedDict = OrderedDict()
        for c in self.colls:
            k = (_coll_component(c), c["kind"], tuple(c.get("axes") or []), c.get("bytes_per_device") or 0)
            r = rows.setdefault(k, [0, 0.0])
            r[0] += _plan.multiplicity(c)
            r[1] += (c.get("time_us") or 0) * _plan.multiplicity(c)
        self.w("| Component | Collective | Axes | Count | Size per device (each) | Bytes per device | Modeled time |",
               "|---|---|---|---|---|---|---|")
        for (comp, kind, axes, b), (n, t) in rows.items():
            self.w(f"| `{comp}` | {kind} | {', '.join(axes) or '-'} | {n} | {_plan.fmt_bytes(b)} | {b * n} | "
                   f"{_plan.fmt_us(t)} |")
        count, nbytes = _plan.ccl_totals(self.plan)
        t_total = sum((c.get("time_us") or 0) * _plan.multiplicity(c) for c in self.colls)
        self.w(f"| **Total** | | | **{count}** | | **{nbytes}** ({_plan.fmt_bytes(nbytes)}) | "
               f"**{_plan.fmt_us(t_total)}** |", "")
        pc, pb = self.cost.get("ccl_count"), self.cost.get("ccl_bytes")
        if (pc is not None and pc != count) or (pb is not None and pb != nbytes):
            self.w(f"> **Note:** the listed collectives add up to {count} / {nbytes} bytes but the plan's cost says "
                   f"{pc} / {pb} bytes; the plan JSON is inconsistent.", "")
        fits = "tt_metal_ccl_fits_bh" if "bh" in str(self.plan.get("system", "")).lower() else "tt_metal_ccl_fits_wh"
        self.w(f"Sizes are each collective's per-device operand (bytes_per_device, the `b` of the tt-metal fits); "
               f"the bytes on the busiest link follow the tt-metal formulas {self.cite.cite('tt_metal_ccl_bandwidth')} "
               f"and the times the fitted latency models {self.cite.cite(fits)}: every CCL also pays a fixed "
               "synchronisation cost, which is why the count matters as much as the bytes.", "")
        if self.png_path:
            self.w(f"![Modeled CCL time per component]({self.png_path})", "")

    # -- 6 ---------------------------------------------------------------------------
    def bottlenecks(self) -> None:
        p = self.plan
        self.w("## 6. Bottlenecks & compiler limitations", "")
        c = self.cost
        if c.get("total_us"):
            share = (c.get("ccl_us") or 0) / c["total_us"] * 100
            self.w(f"- Collectives take {share:.0f}% of the modeled step "
                   f"({_plan.fmt_us(c.get('ccl_us'))} of {_plan.fmt_us(c.get('total_us'))}).")
        top = sorted(self.colls, key=lambda x: -(x.get("time_us") or 0))[:3]
        for x in top:
            self.w(f"- Largest: {x['kind']} over {', '.join(x.get('axes') or [])} of "
                   f"{_tensor_cell(x.get('shape'), x.get('dtype'))} at op #{x.get('op_index', '?')} in "
                   f"`{x.get('component') or INPUTS_COMPONENT}`: {_plan.fmt_bytes(x.get('bytes_per_device') or 0)} "
                   f"per device, {_plan.fmt_us(x.get('time_us'))}.")
        if p.get("memory_fallback"):
            self.w(f"- **Memory fallback taken**: {_md(p.get('memory_fallback_reason') or '')} "
                   f"{self.cite.cite('playbook')}")
        self.w("")
        hits, checked = limitations(p, self.cite)
        self.w("Compiler limitations:", "")
        if hits:
            for h in hits:
                self.w(f"- {h}")
        else:
            self.w("- None of the known limitations applies to this plan.")
        if checked:
            self.w(f"- Checked, not hit: {', '.join(checked)}.")
        for note in p.get("notes") or []:
            self.w(f"- Note: {_md(note)}")
        self.w("")

    # -- 7 + appendix ----------------------------------------------------------------
    def appendix(self) -> None:
        if not self.colls:
            return
        self.w("## Appendix A. Every collective, in program order", "")
        self.w("| Op | Kind | Axes | Tensor | Bytes / device | Modeled | Component | Comes from | Why |",
               "|---|---|---|---|---|---|---|---|---|")
        for c in self.colls:
            self.w(self._coll_row(c, with_component=True))
        self.w("")

    def sources(self) -> None:
        self.w("## 7. Sources", "")
        self.w("Cited above by number; each restates a fact from the project's reference notes.", "")
        self.w(self.cite.table(), "")

    def render(self) -> str:
        self.header()
        self.model_and_target()
        self.architecture()
        self.strategy()
        self.per_component()
        self.budget()
        self.bottlenecks()
        body, self.lines = self.lines, []
        self.appendix()  # printed after the sources; it cites nothing new
        appendix, self.lines = self.lines, body
        self.sources()
        return "\n".join(self.lines + appendix).rstrip() + "\n"


def limitations(plan: dict, cite: Citer) -> tuple[list[str], list[str]]:
    """(limitations this plan hits, names of the ones checked and not hit)."""
    shape, _axes = _plan.mesh_of(plan)
    cs = _plan.collectives(plan)
    kinds = {c["kind"] for c in cs}
    hits, checked = [], []

    def rule(name: str, hit: bool, text):
        # text is a callable so that only the limitations hit cite their sources
        (hits.append(text()) if hit else checked.append(name))

    rule("collective_permute", "collective_permute" in kinds,
         lambda: f"**collective_permute is not lowered by tt-mlir** (\"not implemented yet\") {cite.cite('tt_mlir_3370')}: "
         "this plan will not compile until that is fixed; choose an alternative.")
    rule("all_to_all", "all_to_all" in kinds,
         lambda: f"all_to_all lowers to N*(N-1) pairwise point_to_point ops plus a concat, slower than its byte count "
         f"suggests {cite.cite('tt_mlir_all_to_all')}.")
    bf16_rs = any(c["kind"] == "reduce_scatter" and c.get("dtype") == "bf16" for c in cs)
    rule("bf16 reduce_scatter", bf16_rs,
         lambda: f"bf16 reduce_scatter loses precision {cite.cite('tt_metal_36749_37884')}: check the PCC.")
    ar_slice = _all_reduce_then_slice(cs)
    rule("all_reduce+all_slice fusion", ar_slice,
         lambda: f"tt-mlir fuses an all_reduce followed by an all_slice on the same axes into one reduce_scatter "
         f"{cite.cite('tt_mlir_6843')}: the TTIR will show fewer, different CCLs (verify-ir counts them as "
         "equivalent).")
    line_ar = any(c["kind"] == "all_reduce" for c in cs)
    rule("all_reduce on a line fabric", line_ar,
         lambda: f"Watch: all_reduce on a 1-D line fabric has given low PCC {cite.cite('tt_metal_33540')}: compare against the "
         f"unsharded model. It lowers to a native ttnn.all_reduce {cite.cite('tt_mlir_8961')}.")
    galaxy_1x32 = tuple(shape) in ((1, 32), (32,)) and line_ar
    rule("Galaxy 1x32 all_reduce", galaxy_1x32,
         lambda: f"**all_reduce on a 1x32 Galaxy mesh hangs** {cite.cite('tt_metal_43749')}: use 8x4 or 4x8.")
    from shard_opt.sharding import TT_MLIR_SUPPORTED_MESHES

    shape_t = tuple(shape) if len(shape) != 1 else (1, shape[0])
    rule("supported mesh", shape_t not in TT_MLIR_SUPPORTED_MESHES,
         lambda: f"**mesh {'x'.join(map(str, shape))} is not one tt-mlir accepts** (\"Mesh is not valid\") "
         f"{cite.cite('tt_mlir_4668')}.")
    n1 = len(shape) == 2 and shape[1] == 1 and shape[0] > 1
    sharded_out = any(_plan.is_sharded(r.get("sharding")) for r in plan.get("results") or [])
    rule("output constraint on an (N,1) mesh", n1 and sharded_out,
         lambda: f"an output sharding constraint on an (N,1) mesh is broken {cite.cite('tt_xla_2975')}.")
    rule("sharded reshape", bool(plan.get("constraints")),
         lambda: f"intermediate constraints are written as a replicated-then-sharded pair, the workaround for sharded "
         f"reshapes {cite.cite('tt_xla_3643', 'tt_torch_constraint')}.")
    conv_spatial = False
    for a in plan.get("arguments") or []:
        s = a.get("sharding") or []
        if "conv" in a["name"].lower() and len(s) >= 4 and any(s[2:]):
            conv_spatial = True
    rule("spatial conv sharding", conv_spatial,
         lambda: f"**a convolution is split on a spatial dim**, which needs a halo exchange tt-mlir does not expose; shard "
         f"channels instead {cite.cite('tt_mlir_8216')}.")
    return hits, checked


def _all_reduce_then_slice(cs: list[dict]) -> bool:
    for a, b in zip(cs, cs[1:]):
        if a["kind"] == "all_reduce" and b["kind"] == "all_slice" and set(a.get("axes") or []) == set(b.get("axes") or []):
            return True
    return False


def _pair_kind(sharding, source) -> str:
    if not sharding or len(sharding) != 2:
        return ""
    out_dim = 1 if source == "jax" else 0
    if sharding[out_dim] and not sharding[1 - out_dim]:
        return "(column-parallel)"
    if sharding[1 - out_dim] and not sharding[out_dim]:
        return "(row-parallel)"
    return ""


def _numel(shape) -> int:
    n = 1
    for s in shape or []:
        n *= s
    return n


def _flops_text(flops) -> str:
    if not flops:
        return ""
    for unit, div in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= div:
            return f"{flops / div:.1f} {unit}"
    return str(flops)


def _ccl_cells(cost: dict) -> str:
    """``count | bytes`` cells of a cost dict (``n/a`` where a baseline did not record them)."""
    n, b = cost.get("ccl_count"), cost.get("ccl_bytes")
    return f"{'n/a' if n is None else n} | {'n/a' if b is None else _plan.fmt_bytes(b)}"


def _ratio(t, base) -> str:
    if not t or not base:
        return "n/a"
    return f"{t / base:.2f}x"


def render_report(plan: dict, *, png_path: str | None) -> str:
    """``sharding_analysis.md`` for a plan.

    Args:
      plan: the plan JSON dict (a pipeline plan renders each model in turn).
      png_path: where the chart will be, relative to the report (None: no picture).
    """
    if plan.get("pipeline"):
        parts = [f"# Sharding analysis - pipeline of {len(plan['pipeline'])} models", "",
                 f"One mesh shape for all models, chosen for the slowest: `{plan.get('slowest', '?')}` "
                 f"{Citer().cite('playbook')}.", ""]
        for i, sub in enumerate(plan["pipeline"]):
            parts.append(_Report(sub, png_path if i == 0 else None).render())
        return "\n".join(parts)
    return _Report(plan, png_path).render()


def write_ccl_chart(plan: dict, png_path: str) -> str:
    """Draw modeled CCL time per component (stacked by kind) to ``png_path``; returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if plan.get("pipeline"):
        plan = plan["pipeline"][0]
    per: OrderedDict = OrderedDict()
    counts: dict[str, int] = {}
    kinds: list[str] = []
    for c in _plan.collectives(plan):
        comp = _coll_component(c)
        per.setdefault(comp, {})
        per[comp][c["kind"]] = per[comp].get(c["kind"], 0.0) + (c.get("time_us") or 0.0) * _plan.multiplicity(c)
        counts[comp] = counts.get(comp, 0) + _plan.multiplicity(c)
        if c["kind"] not in kinds:
            kinds.append(c["kind"])
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.6 * len(per) + 1.5)), dpi=100)
    if not per:
        ax.text(0.5, 0.5, "no collectives in this plan", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        names = list(per)
        left = [0.0] * len(names)
        colors = {"all_reduce": "#4c72b0", "all_gather": "#55a868", "reduce_scatter": "#c44e52",
                  "all_to_all": "#8172b2", "collective_permute": "#ccb974", "all_slice": "#64b5cd"}
        for k in kinds:
            vals = [per[n].get(k, 0.0) for n in names]
            ax.barh(names, vals, left=left, label=k, color=colors.get(k))
            left = [a + b for a, b in zip(left, vals)]
        for i, n in enumerate(names):
            ax.text(left[i], i, f"  {counts[n]} CCL{'s' if counts[n] != 1 else ''}, {_plan.fmt_us(left[i])}",
                    va="center", fontsize=8)
        ax.set_xlim(0, max(left) * 1.3 or 1)
        ax.invert_yaxis()
        ax.set_xlabel("modeled CCL time per step (us)")
        count, nbytes = _plan.ccl_totals(plan)
        ax.set_title(f"{plan.get('model', '')}: {count} collectives, {_plan.fmt_bytes(nbytes)} per device")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=max(1, len(kinds)), fontsize=8,
                  frameon=False)
    os.makedirs(os.path.dirname(os.path.abspath(png_path)), exist_ok=True)
    fig.savefig(png_path, format="png", bbox_inches="tight")
    plt.close(fig)
    return png_path


def _first_per_role(args: list[dict]):
    """(role, argument) for the first argument of each role, in order."""
    seen = set()
    for a in args:
        r = _plan.role(a["name"])
        if r not in seen:
            seen.add(r)
            yield r, a
