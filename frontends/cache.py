"""An opt-in disk cache of lowered zoo models.

Lowering a full-size zoo model takes tens of seconds (building it on the meta device,
``torch.export``, torch-mlir), and the result depends only on the model, its
phase/batch/sequence/dtype/layer count and the code that lowers it. Set
``SHARD_OPT_CACHE`` to a directory and ``zoo:`` loads are kept there, so searching the
same model on several meshes (``benchmarks/bench_search.py``) lowers it once.

The key hashes the load arguments, the torch and jaxlib versions and the source of
every frontend module, so a change to the lowering code never serves a stale entry.
Entries are written atomically (a temporary file renamed into place); an unreadable
entry is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from typing import Callable

from shard_opt.lowered import LoweredModel

ENV = "SHARD_OPT_CACHE"


def _code_digest() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def _key(parts: dict) -> str:
    import jaxlib
    import torch

    h = hashlib.sha256()
    h.update(repr(sorted(parts.items())).encode())
    h.update(f"torch={torch.__version__} jaxlib={jaxlib.__version__}".encode())
    h.update(_code_digest().encode())
    return h.hexdigest()[:32]


def cached(parts: dict, build: Callable[[], LoweredModel]) -> LoweredModel:
    """``build()``, or its stored result for the same ``parts`` when the cache is on.

    ``with_layers`` (a closure) is not stored: the caller re-attaches it.
    """
    root = os.environ.get(ENV)
    if not root:
        return build()
    path = os.path.join(root, f"{parts.get('name', 'model')}-{_key(parts)}.pkl")
    try:
        with open(path, "rb") as f:
            model = pickle.load(f)
        if isinstance(model, LoweredModel):
            return model
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        pass
    model = build()
    keep, model.with_layers = model.with_layers, None
    tmp = None
    try:
        os.makedirs(root, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(model, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass  # a cache that cannot be written is no cache, not an error
    finally:
        model.with_layers = keep
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return model
