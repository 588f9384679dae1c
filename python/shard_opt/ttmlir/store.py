"""What tt-mlir made of a module, kept on disk so the same module is never compiled twice.

A compile depends on the module text, the plugin build (its version and the schema hash
its descriptors are written for), the system descriptor and the compile options; a
numerics run on the reference module, tt-mlir's program and the numerics code. Entries
are keyed by the hash of all of those and live in the lowering cache's directory
(``frontends/cache.py``: on by default, ``--no-cache`` / ``SHARD_OPT_CACHE=off`` turn it
off), under ``checks/``, as zlib-compressed JSON (no pickles: nothing here is run as
code); the least recently used go with the lowering entries, under the same size limit.
``SHARD_OPT_TT_KEEP`` (keep tt-mlir's dumps on disk) bypasses it: a kept dump needs a
compile.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
import zlib

from shard_opt.frontends.cache import CHECKS_SUBDIR as SUBDIR, CHECKS_SUFFIX as SUFFIX

VERSION = 1


def directory() -> str | None:
    from shard_opt.frontends import cache

    if os.environ.get("SHARD_OPT_TT_KEEP"):
        return None
    root = cache.cache_dir()
    return os.path.join(root, SUBDIR) if root else None


@functools.lru_cache(maxsize=None)
def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _numerics_code() -> str:
    """The source of the code a numerics verdict depends on (a change runs it again)."""
    from shard_opt import ir, verify
    from shard_opt.ttmlir import numerics

    return hashlib.sha256(b"".join(open(m.__file__, "rb").read() for m in (ir, verify, numerics))).hexdigest()


def key(kind: str, *parts: str) -> str:
    h = hashlib.sha256(f"{kind}\0{VERSION}\0".encode())
    for p in parts:
        h.update(hashlib.sha256(p.encode()).digest())
    return h.hexdigest()[:40]


def compile_key(text: str, descriptor: str, options: str) -> str:
    from shard_opt.ttmlir import sysdesc

    return key("compile", text, sysdesc.PLUGIN_VERSION, sysdesc.SCHEMA_HASH, _file_digest(descriptor), options)


def numerics_key(reference: str, dump: str, devices: int, module: str) -> str:
    return key("numerics", reference, dump, str(devices), module, _numerics_code())


def get(k: str) -> dict | None:
    d = directory()
    if d is None:
        return None
    path = os.path.join(d, k + SUFFIX)
    try:
        with open(path, "rb") as f:
            data = json.loads(zlib.decompress(f.read()))
        os.utime(path)  # recently used
        return data
    except (OSError, ValueError, zlib.error):
        return None


def put(k: str, value: dict) -> None:
    d = directory()
    if d is None:
        return
    with contextlib.suppress(OSError):
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(zlib.compress(json.dumps(value).encode(), 6))
        os.replace(tmp, os.path.join(d, k + SUFFIX))
