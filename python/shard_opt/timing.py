"""Wall time per phase of one shard-opt run (``SHARD_OPT_TIMINGS=FILE``).

    from shard_opt import timing

    with timing.phase("lower"):
        model = frontends.load(...)

Each phase name accumulates the wall seconds spent inside it, in a module-level dict.
Phases nest, and each is counted on its own: an outer ``optimize`` includes the
``search`` inside it, and ``search`` is counted in full too (``snapshot()``). A name
entered again while it is already open (``lower`` inside ``lower``, as a zoo model's
1-layer copy is lowered inside the driver) is counted once, by its outermost use.
``exclusive()`` gives each phase's own time, without the phases opened inside it: those
add up to the time spent in any phase.

The CLI records ``import`` (process start to ``main``, plus the imports it defers),
``lower``, ``optimize``, ``verify`` and ``emit``; the driver records ``baselines``,
``search``, ``final`` (the winner on the whole model) and ``analysis`` (the plan JSON
around it: alternatives, robustness, the annotated module) inside ``optimize``. Worker processes keep their own (unreported)
timings: their work is inside the parent's phase that waited for it.

Nothing here prints: the CLI writes ``write_json(path)`` when ``SHARD_OPT_TIMINGS`` is set.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

ENV = "SHARD_OPT_TIMINGS"

_lock = threading.Lock()
_totals: dict[str, float] = {}  # inclusive seconds per phase
_self: dict[str, float] = {}  # exclusive seconds per phase
_open: dict[str, int] = {}  # how deep each name is open (re-entry is not counted twice)
_stack: list[list] = []  # [name, start, seconds spent in phases opened inside it]


@contextlib.contextmanager
def phase(name: str):
    """Count the wall time of the ``with`` body under ``name``."""
    start = time.perf_counter()
    with _lock:
        reentered = _open.get(name, 0) > 0
        _open[name] = _open.get(name, 0) + 1
        frame = None if reentered else [name, start, 0.0]
        if frame is not None:
            _stack.append(frame)
    try:
        yield
    finally:
        end = time.perf_counter()
        with _lock:
            _open[name] -= 1
            if frame is not None:
                spent = end - start
                _totals[name] = _totals.get(name, 0.0) + spent
                _self[name] = _self.get(name, 0.0) + spent - frame[2]
                if frame in _stack:
                    _stack.remove(frame)
                if _stack:
                    _stack[-1][2] += spent


def add(name: str, seconds: float) -> None:
    """Count ``seconds`` measured elsewhere under ``name`` (a top-level phase)."""
    with _lock:
        _totals[name] = _totals.get(name, 0.0) + seconds
        _self[name] = _self.get(name, 0.0) + seconds


def snapshot() -> dict[str, float]:
    """{phase: inclusive wall seconds} of every phase closed so far."""
    with _lock:
        return dict(_totals)


def exclusive() -> dict[str, float]:
    """{phase: seconds in the phase itself, not in phases opened inside it}."""
    with _lock:
        return dict(_self)


def reset() -> None:
    with _lock:
        _totals.clear()
        _self.clear()
        _open.clear()
        _stack.clear()


def process_age() -> float | None:
    """Seconds since this process started (Linux /proc, 10 ms resolution), or None."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        # field 22 (starttime, clock ticks after boot); the command name in () may hold spaces
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def peak_rss_mb() -> dict[str, float]:
    """``peak_rss_mb``: getrusage's maxrss of this process; ``vm_hwm_mb``: the peak of its own
    address space (/proc VmHWM). maxrss can carry the RSS a forking parent had; VmHWM cannot."""
    out: dict[str, float] = {}
    try:
        import resource

        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    except (ImportError, OSError):
        pass
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    out["vm_hwm_mb"] = round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return out


def report(**extra) -> dict:
    """What ``write_json`` writes: ``{phase: inclusive seconds, ..., "self": {phase: exclusive
    seconds}, "peak_rss_mb": .., "vm_hwm_mb": .., **extra}``."""
    data: dict = {k: round(v, 4) for k, v in snapshot().items()}
    data["self"] = {k: round(v, 4) for k, v in exclusive().items()}
    data.update(peak_rss_mb())
    data.update(extra)
    return data


def write_json(path: str, **extra) -> None:
    """Write ``report(**extra)`` to ``path`` atomically; an unwritable path is ignored (timings
    never fail a run)."""
    import json

    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(report(**extra), f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
