"""The user's own shard spec: a loader's ``load_shard_spec`` or a ``--spec`` file.

tt-forge-models loaders define ``ModelLoader.load_shard_spec(model)`` returning
``{tensor: partition_spec}`` -- the keys are the model's parameter tensors themselves,
the values tuples with one entry per dim (``None``, an axis name, or a tuple of axis
names) -- and ``ModelLoader.get_mesh_config(num_devices)`` returning the mesh shape
(or ``(shape, axis_names)``) the spec was written for; tt-xla's test runner applies it
with ``xs.mark_sharding(tensor, mesh, spec)`` (references/expert_specs.md). A spec may
depend on the mesh (the Wan VAE loader picks its axis in ``get_mesh_config``), so for
each standard device count the mesh is asked first, then the spec.

``capture`` turns a spec into plain data the plan can carry::

    {"source": "loader" | "spec file", "where": PATH,
     "by_devices": {"8": {"mesh": [2, 4] | None, "spec": {name: [None | axis | [axes]]},
                          "unmatched": [...]}, ...}}

(``"*"`` when the spec does not depend on the device count), and ``"refused": {"2":
"ValueError: ..."}`` for the counts whose ``get_mesh_config`` raised: tt-forge-models'
GPT-OSS and Flux loaders raise for the counts they do not support, which means "not
offered", not an error (``refusal`` words the plan's note). Keys are named as
PyTorch names the tensors (``named_parameters`` / ``named_buffers``); a key that is
not one of the model's tensors is listed as ``unmatched``.

A ``--spec`` file is a Python file defining ``load_shard_spec(model)`` (and optionally
``get_mesh_config(num_devices)``), or JSON: ``{"mesh": [2, 4], "spec": {name: [...]}}``
or just ``{name: [...]}``, with optional ``"activations": {module: spec | {"then": [spec, ...]}}``.
A loader's (or Python spec file's) ``load_activation_shard_spec(model)`` -- ``{module:
spec}`` (tt-xla PR 5512), a list value meaning specs applied back to back -- is captured
beside the spec as ``"activations": {name: [dims or None, ...]}``
(``shard_opt.activations`` says what a key may name).
"""

from __future__ import annotations

import json
import os

from shard_opt.errors import UserError

DEVICE_COUNTS = (1, 2, 4, 8, 32)  # the standard systems (references/tenstorrent.md section 1)


def loader_functions(obj) -> tuple:
    """(load_shard_spec, get_mesh_config or None) of a loader object or module, or None."""
    spec = getattr(obj, "load_shard_spec", None)
    if not callable(spec):
        return None
    mesh = getattr(obj, "get_mesh_config", None)
    return spec, mesh if callable(mesh) else None


def activation_function(obj):
    """A loader's ``load_activation_shard_spec(model)`` (tt-xla PR 5512: ``{module: output
    partition spec}``), or None."""
    fn = getattr(obj, "load_activation_shard_spec", None)
    return fn if callable(fn) else None


def capture(model, functions, *, where: str, source: str, run_user, activation_fn=None) -> dict | None:
    """The spec ``functions`` (from ``loader_functions``) give for ``model``, for every
    standard device count; None when the loader returns no spec. ``run_user`` calls the
    user's code (output to stderr, errors as one line). ``activation_fn``: the loader's
    ``load_activation_shard_spec``, captured as ``"activations"`` per count."""
    load_shard_spec, get_mesh_config = functions
    names = {}
    for name, t in list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers()):
        names.setdefault(id(t), name)
    def ask(n):  # a count the loader raises for is one it does not offer (GPT-OSS, Flux)
        try:
            return get_mesh_config(n), None
        except Exception as e:
            text = " ".join(str(e).split())
            return None, f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__

    by_devices, refused = {}, {}
    for n in (DEVICE_COUNTS if get_mesh_config is not None else ("*",)):
        mesh = None
        if get_mesh_config is not None:
            raw_mesh, why = run_user(where, f"get_mesh_config({n})", ask, n)
            if why is not None:
                refused[str(n)] = why
                continue
            mesh = _mesh_shape(raw_mesh, where, n)
        raw = run_user(where, "load_shard_spec(model)", load_shard_spec, model)
        if raw is None:
            continue
        by_devices[str(n)] = {"mesh": mesh, **_named(raw, names, where)}
        if activation_fn is not None:
            acts = run_user(where, "load_activation_shard_spec(model)", activation_fn, model)
            if acts:
                by_devices[str(n)]["activations"] = _activations(acts, model, where)
    if not by_devices and not refused:
        return None
    out = {"source": source, "where": where, "by_devices": by_devices}
    if refused:
        out["refused"] = refused
    return out


def refusal(data: dict | None, num_devices: int) -> str | None:
    """Why the loader offers no spec for ``num_devices`` chips, when its
    ``get_mesh_config`` raised for that count (a plan note; not an error)."""
    why = ((data or {}).get("refused") or {}).get(str(num_devices))
    if why is None:
        return None
    return (f"the loader's get_mesh_config({num_devices}) raised {why}: {num_devices} devices are not offered "
            f"by {data.get('where')}, so there is no loader-spec baseline on this mesh")


def load_spec_file(path: str, model=None, *, run_user=None) -> dict:
    """A ``--spec`` file as ``capture`` returns it. Python files need the model (load
    scripts); JSON works for every input."""
    if not os.path.isfile(path):
        raise UserError(f"--spec {path}: no such file; give a .py defining load_shard_spec(model) or a .json")
    if path.endswith(".json"):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise UserError(f"--spec {path}: not valid JSON ({e}); write {{\"spec\": {{name: [..]}}}}") from None
        if not isinstance(data, dict):
            raise UserError(f"--spec {path}: expected an object of tensor name -> partition spec")
        mesh = data.get("mesh")
        spec = data.get("spec", data if "spec" not in data else None)
        if not isinstance(spec, dict):
            raise UserError(f"--spec {path}: \"spec\" must map tensor names to partition specs")
        entries = {str(k): _dims(v, path, k) for k, v in spec.items() if k not in ("mesh", "activations")}
        entry = {"mesh": list(mesh) if mesh else None, "spec": entries, "unmatched": []}
        acts = data.get("activations")
        if acts is not None:
            if not isinstance(acts, dict):
                raise UserError(f"--spec {path}: \"activations\" must map module names (or 'OP IN->OUT') to "
                                f"partition specs")
            entry["activations"] = {str(k): _activation_specs(v.get("then") if isinstance(v, dict) else v, path, k,
                                                              many=isinstance(v, dict))
                                    for k, v in acts.items()}
        return {"source": "spec file", "where": path, "by_devices": {"*": entry}}
    if not path.endswith(".py"):
        raise UserError(f"--spec {path}: give a .py defining load_shard_spec(model) or a .json")
    if model is None:
        raise UserError(f"--spec {path}: a Python spec needs the PyTorch model; use it with a load script, or "
                        f"write the spec as JSON for this input")
    import importlib.util

    mod_spec = importlib.util.spec_from_file_location("shard_opt_user_spec", path)
    mod = importlib.util.module_from_spec(mod_spec)
    run_user(path, "importing the spec", mod_spec.loader.exec_module, mod)
    functions = loader_functions(mod)
    if functions is None:
        raise UserError(f"--spec {path}: defines no load_shard_spec(model); define it (returning "
                        f"{{tensor: partition_spec}})")
    found = capture(model, functions, where=path, source="spec file", run_user=run_user,
                    activation_fn=activation_function(mod))
    if found is None:
        raise UserError(f"--spec {path}: load_shard_spec(model) returned None; return a dict")
    return found


def _mesh_shape(raw, where: str, n) -> list[int] | None:
    """``get_mesh_config``'s answer: a shape, or (shape, axis names)."""
    if raw is None:
        return None
    if isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[0], (tuple, list)):
        raw = raw[0]
    try:
        shape = [int(x) for x in raw]
    except (TypeError, ValueError):
        raise UserError(f"{where}: get_mesh_config({n}) returned {raw!r}; return a mesh shape such as (2, 4)") from None
    return shape


def _named(raw, names: dict, where: str) -> dict:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: load_shard_spec returned {type(raw).__name__}; return {{tensor: partition_spec}}")
    spec, unmatched = {}, []
    for key, value in raw.items():
        if isinstance(key, str):
            name = key
        else:
            name = names.get(id(key))
            if name is None:
                shape = "x".join(str(s) for s in getattr(key, "shape", ()))
                unmatched.append(f"a {shape or 'non-tensor'} tensor that is not one of the model's parameters")
                continue
        spec[name] = _dims(value, where, name)
    return {"spec": spec, "unmatched": unmatched}


def _activations(raw, model, where: str) -> dict:
    """``load_activation_shard_spec``'s answer as plain data: {module name or 'OP IN->OUT':
    [dims or None, ...]} (a list value: specs applied back to back; None: replicated)."""
    if not isinstance(raw, dict):
        raise UserError(f"{where}: load_activation_shard_spec returned {type(raw).__name__}; return "
                        f"{{module: partition_spec}}")
    modules = {id(m): n for n, m in model.named_modules()}
    out = {}
    for key, value in raw.items():
        name = key if isinstance(key, str) else modules.get(id(key))
        if name is None:
            raise UserError(f"{where}: load_activation_shard_spec has a key {type(key).__name__} that is not one "
                            f"of the model's modules; key it by the module (or its name)")
        out[name] = _activation_specs(value, where, name, many=isinstance(value, list))
    return out


def _activation_specs(value, where: str, name, *, many: bool) -> list:
    if not many:
        return [None if value is None else _dims(value, where, name)]
    if not isinstance(value, (list, tuple)) or not value:
        raise UserError(f"{where}: the activation spec of {name} is {value!r}; give a spec, or a list of specs "
                        f"applied back to back")
    return [None if v is None else _dims(v, where, name) for v in value]


def _dims(value, where: str, name) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise UserError(f"{where}: the spec of {name} is {value!r}; give a tuple with one entry per dim")
    out = []
    for v in value:
        if v is None:
            out.append(None)
        elif isinstance(v, str):
            out.append(v)
        elif isinstance(v, (tuple, list)) and all(isinstance(x, str) for x in v):
            out.append(list(v))
        else:
            raise UserError(f"{where}: the spec of {name} has entry {v!r}; use None, an axis name or a tuple of them")
    return out
