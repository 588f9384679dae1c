"""What Shardy made of each candidate, kept on disk for the next run on the same module.

An ``Evaluator``'s expensive part is a candidate's ``ModuleFacts`` (the propagation and
the analysis of its result). They depend only on the module the evaluator prepared, the
mesh, the propagation pipeline, the weight storage and the result shardings, never on
the cost model, ``--parallelism``, ``--allow`` or a user's spec; so a run on a zoo model
and mesh it has seen before (another cost model or spec, the same command again) takes
them from here: the AutoShardingPass baseline alone is ~1000 Shardy runs of Llama-3-8B's
short copies on 2x4, the same in every such run.

Files live in the lowering cache's directory (``frontends/cache.py``: on by default,
``--no-cache`` or ``SHARD_OPT_CACHE=off`` turn both off), under ``facts/``, one per
evaluator, zlib-compressed pickles of ``{candidate key: ModuleFacts}`` with the mean
seconds one evaluation took (``shard_opt.parallel`` reads it to decide whether worker
processes pay when every candidate it would time comes from here; the search's plan
never depends on it). The key hashes everything the facts depend on:
the prepared module text and the settings above, jaxlib's version and the source of
every module of the core and of the passes; so a change to the analysis or the passes
never serves stale facts. The least recently used files are evicted with the lowering
entries, under the same size limit; the cache line's entry count is the lowering
entries'. Every model uses it, a load script or a ``.mlir`` file as well as a zoo model:
the key is the module the search prepared, not where it came from (a load script itself is
never cached, see
``frontends/cache.py``). Like the lowering cache, entries are pickles: keep the
directory private.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import tempfile
import zlib

from shard_opt.frontends.cache import FACTS_SUBDIR as SUBDIR, FACTS_SUFFIX as SUFFIX  # noqa: F401 (its layout)

VERSION = 2  # 2: ModuleFacts.unpriced


def directory() -> str | None:
    """Where the facts files live, or None when the cache is off."""
    from shard_opt.frontends import cache

    root = cache.cache_dir()
    return os.path.join(root, SUBDIR) if root else None


def _sources() -> list[tuple[str, str]]:
    """(name, path) of every Python source of the core and of the passes, subpackages
    included (``shard_opt.rules``: what a rule's ``breaks`` finds is in the facts)."""
    import shard_opt
    import shard_opt.passes

    out = []
    for pkg in (shard_opt, shard_opt.passes):
        here = os.path.dirname(os.path.abspath(pkg.__file__))
        for root, dirs, files in os.walk(here):
            dirs.sort()
            out += [(f"{pkg.__name__}.{os.path.relpath(os.path.join(root, n), here)}", os.path.join(root, n))
                    for n in sorted(files) if n.endswith(".py")]
    return out


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    h = hashlib.sha256()
    for name, path in _sources():
        with open(path, "rb") as f:
            h.update(f"{name}\0".encode() + f.read())
    try:
        from importlib import metadata

        h.update(metadata.version("jaxlib").encode())
    except Exception:  # noqa: BLE001 - no version: the digest of the code alone
        pass
    return h.hexdigest()


def key_of(ev) -> str:
    """The file name stem for an ``Evaluator``'s facts."""
    h = hashlib.sha256()
    h.update(ev.text.encode())
    h.update(repr((sorted(ev.storage.items()), ev.pipeline, tuple(ev.mesh.shape), tuple(ev.mesh.axes),
                   ev.mesh.name, sorted((k, v.body()) for k, v in ev.result_shardings.items()))).encode())
    # the facts also read each argument's name and kind (param, input, cache ...: the
    # frontend's, not the text's), so two models of one text with other kinds never share
    h.update(repr([(a.index, a.name, a.kind) for a in ev.model.arguments]).encode())
    h.update(_code_digest().encode())
    return f"{ev.model.name}-{h.hexdigest()[:32]}"


def load(ev) -> tuple[dict, float | None]:
    """(facts by candidate key, seconds per evaluation) stored for ``ev``; empty if none."""
    d = directory()
    if d is None:
        return {}, None
    path = os.path.join(d, key_of(ev) + SUFFIX)
    try:
        with open(path, "rb") as f:
            data = pickle.loads(zlib.decompress(f.read()))
    except FileNotFoundError:
        return {}, None
    except Exception:  # noqa: BLE001 - a damaged or foreign file is no facts
        return {}, None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("facts"), dict):
        return {}, None
    with contextlib.suppress(OSError):
        os.utime(path)  # most recently used
    return data["facts"], data.get("seconds_each")


def save(ev, facts: dict, seconds_each: float | None) -> None:
    """Write ``facts`` as ``ev``'s file (atomically); a directory that cannot be written is
    no cache, not an error. Then evict to the size limit."""
    d = directory()
    if d is None:
        return
    from shard_opt.frontends import cache

    tmp = None
    try:
        os.makedirs(d, exist_ok=True)
        data = zlib.compress(pickle.dumps({"version": VERSION, "facts": facts, "seconds_each": seconds_each},
                                          protocol=pickle.HIGHEST_PROTOCOL), 1)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(d, key_of(ev) + SUFFIX))
        tmp = None
        cache.evict(os.path.dirname(d))
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
