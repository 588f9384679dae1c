"""The house is layered: no import circle among shard-opt's own modules (docs/design.md,
"Layout"). Every import counts, a function's too: a circle hidden in a function body is
still two modules that cannot be read, or changed, one without the other."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {"shard_opt.passes": "passes", "shard_opt.frontends": "frontends", "shard_opt.costmodel": "costmodel",
            "shard_opt": os.path.join("python", "shard_opt")}


def _modules() -> dict[str, str]:
    out = {}
    for pkg, folder in PACKAGES.items():
        base = os.path.join(ROOT, folder)
        for d, _, files in os.walk(base):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(d, f), base)[:-3].replace(os.sep, ".")
                    name = pkg if rel == "__init__" else f"{pkg}.{rel.removesuffix('.__init__')}"
                    out.setdefault(name, os.path.join(d, f))
    return out


def _imports(mods: dict[str, str]) -> dict[str, set[str]]:
    def known(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for m, path in mods.items():
        is_pkg = path.endswith("__init__.py")
        here = m if is_pkg else m.rpartition(".")[0]
        out = set()
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here
                    for _ in range(node.level - 1):
                        up = up.rpartition(".")[0]
                    base = f"{up}.{node.module}" if node.module else up
                out |= {known(f"{base}.{a.name}") if f"{base}.{a.name}" in mods else known(base) for a in node.names}
        out -= {None, m}
        # a package re-exporting its own modules, or a module naming its package, is no circle
        out = {t for t in out if not (is_pkg and t.startswith(m + ".")) and not (m.startswith(t + ".") and not is_pkg
                                                                                   and mods[t].endswith("__init__.py"))}
        graph[m] = out
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circle():
    graph = _imports(_modules())
    assert len(graph) > 80  # every module was read
    assert _circles(graph) == []


def test_a_circle_is_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
