"""The persistent disk cache of lowered zoo models, on by default.

Lowering a full-size zoo model takes tens of seconds (building it on the meta device,
``torch.export``, torch-mlir), and the result depends only on the model, its
phase/batch/sequence/dtype/layer count and the code that lowers it. So ``zoo:`` loads
(and the 1- and 2-layer copies the search lowers) are kept on disk, in:

* ``$SHARD_OPT_CACHE`` when set; an empty value, ``off``, ``0``, ``no`` or ``false``
  turns the cache off;
* else ``$XDG_CACHE_HOME/shard-opt`` (an absolute ``XDG_CACHE_HOME`` only, as the XDG
  spec says);
* else ``~/.cache/shard-opt``.

``--no-cache`` (``disabled()``) turns it off for one run.

The key hashes the load arguments, the versions of torch, torch-mlir, jaxlib,
transformers and diffusers, and the source of every frontend module plus the IR adapter
and ``LoweredModel`` they produce, so a change to the lowering code never serves a stale
entry. Entries are written atomically (a temporary file renamed into place); an
unreadable entry is ignored and rebuilt; a cache that cannot be written is no cache, not
an error. After each write the least recently used entries (by mtime: a hit touches its
entry) are removed until the directory holds at most ``SHARD_OPT_CACHE_MAX_MB`` (default
2048 MiB).

Entries are pickles: unpickling runs code, so the directory must be the user's own (the
default is; a shared, world-writable ``SHARD_OPT_CACHE`` is not safe).

Load scripts are not cached: what a script lowers to depends on everything it imports and
reads (its own modules, config files, the hub), which no key here can see.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import tempfile
import time
from typing import Callable

from shard_opt.lowered import LoweredModel

ENV = "SHARD_OPT_CACHE"
MAX_ENV = "SHARD_OPT_CACHE_MAX_MB"
DEFAULT_MAX_MB = 2048
OFF = ("", "off", "0", "no", "false")
SUFFIX = ".pkl"
# the evaluated candidates' facts (shard_opt.factcache) live beside the lowerings, under the same limit
FACTS_SUBDIR = "facts"
FACTS_SUFFIX = ".facts"
CHECKS_SUBDIR, CHECKS_SUFFIX = "checks", ".check"  # the tt-mlir check's results (shard_opt.ttmlir.store)
_STALE_TMP_SECONDS = 3600  # a temporary file this old was left by a run that died mid-write
_VERSIONED = ("torch", "torch-mlir", "jaxlib", "transformers", "diffusers")

_disabled = 0  # > 0 inside ``disabled()``
stats = {"hits": 0, "misses": 0, "writes": 0, "evicted": 0}  # of this process, for the CLI's line


def reset_stats() -> None:
    for k in stats:
        stats[k] = 0


def cache_dir() -> str | None:
    """Where entries live, or None when the cache is off."""
    if _disabled:
        return None
    raw = os.environ.get(ENV)
    if raw is not None:
        raw = raw.strip()
        return None if raw.lower() in OFF else os.path.expanduser(raw)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "shard-opt")


def max_bytes() -> int:
    raw = os.environ.get(MAX_ENV, "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_MAX_MB
    except ValueError:
        mb = DEFAULT_MAX_MB
    return max(0, int(mb * 2**20))


@contextlib.contextmanager
def disabled():
    """No cache inside the ``with`` (``--no-cache``): nothing read, nothing written."""
    global _disabled
    _disabled += 1
    try:
        yield
    finally:
        _disabled -= 1


def _code_digest() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    core = os.path.dirname(os.path.abspath(__import__("shard_opt").__file__))
    files = [os.path.join(here, n) for n in sorted(os.listdir(here)) if n.endswith(".py")]
    files += [os.path.join(core, n) for n in ("ir.py", "lowered.py", "errors.py")]
    h = hashlib.sha256()
    for path in files:
        try:
            with open(path, "rb") as f:
                h.update(os.path.basename(path).encode() + b"\0" + f.read())
        except OSError:
            h.update(path.encode() + b"\0missing")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _versions() -> str:
    from importlib import metadata

    out = []
    for dist in _VERSIONED:
        try:
            out.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist}=none")
    return " ".join(out)


def _key(parts: dict) -> str:
    h = hashlib.sha256()
    h.update(repr(sorted(parts.items())).encode())
    h.update(_versions().encode())
    h.update(_code_digest().encode())
    return h.hexdigest()[:32]


def entry_path(parts: dict, root: str) -> str:
    return os.path.join(root, f"{parts.get('name', 'model')}-{_key(parts)}{SUFFIX}")


def entries(root: str, suffix: str = SUFFIX) -> list[tuple[float, int, str]]:
    """(mtime, size, path) of every entry (file ending in ``suffix``), oldest first."""
    out = []
    try:
        names = os.listdir(root)
    except OSError:
        return []
    for name in names:
        if not name.endswith(suffix):
            continue
        path = os.path.join(root, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append((st.st_mtime, st.st_size, path))
    out.sort()
    return out


def usage(root: str | None = None) -> tuple[int, int]:
    """(entries, bytes) in the cache directory."""
    root = root or cache_dir()
    found = entries(root) if root else []
    return len(found), sum(size for _, size, _ in found)


def evict(root: str, limit: int | None = None) -> int:
    """Remove the least recently used entries until the directory holds at most ``limit``
    bytes (and temporary files older than an hour). The evaluated candidates' facts
    (``shard_opt.factcache``, in ``facts/``) and the tt-mlir check's results
    (``shard_opt.ttmlir.store``, in ``checks/``) count and go by the same rule. Returns how
    many entries went."""
    limit = max_bytes() if limit is None else limit
    now = time.time()
    facts = os.path.join(root, FACTS_SUBDIR)
    checks = os.path.join(root, CHECKS_SUBDIR)  # the tt-mlir check's results
    for d in (root, facts, checks):
        with contextlib.suppress(OSError):
            for name in os.listdir(d):
                if name.endswith(".tmp"):
                    path = os.path.join(d, name)
                    with contextlib.suppress(OSError):
                        if now - os.stat(path).st_mtime > _STALE_TMP_SECONDS:
                            os.unlink(path)
    found = sorted(entries(root) + entries(facts, FACTS_SUFFIX) + entries(checks, CHECKS_SUFFIX))
    total = sum(size for _, size, _ in found)
    removed = 0
    for _, size, path in found:
        if total <= limit:
            break
        try:
            os.unlink(path)
        except FileNotFoundError:  # another run evicted it first
            pass
        except OSError:
            continue
        total -= size
        removed += 1
    stats["evicted"] += removed
    return removed


def _read(path: str) -> LoweredModel | None:
    try:
        with open(path, "rb") as f:
            model = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a corrupt or foreign entry of any kind is a miss
        return None
    if not isinstance(model, LoweredModel):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # most recently used
    return model


def _write(root: str, path: str, model: LoweredModel) -> None:
    keep, model.with_layers = model.with_layers, None
    tmp = None
    try:
        os.makedirs(root, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(model, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        tmp = None
        stats["writes"] += 1
        evict(root)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass  # a cache that cannot be written is no cache, not an error
    finally:
        model.with_layers = keep
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def cached(parts: dict, build: Callable[[], LoweredModel]) -> LoweredModel:
    """``build()``, or its stored result for the same ``parts`` when the cache is on.

    ``with_layers`` (a closure) is not stored: the caller re-attaches it. Time spent here
    counts as the ``lower`` phase (``shard_opt.timing``), wherever it is called from.
    """
    from shard_opt import timing

    with timing.phase("lower"):
        root = cache_dir()
        if not root:
            return build()
        path = entry_path(parts, root)
        model = _read(path)
        if model is not None:
            stats["hits"] += 1
            return model
        stats["misses"] += 1
        model = build()
        _write(root, path, model)
        return model
