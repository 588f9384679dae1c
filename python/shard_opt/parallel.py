"""Evaluate candidates on every core: worker processes for the search.

Shardy propagation of one candidate is independent of every other, so a batch of
candidates (an exhaustive enumeration, one round of local search, the probes) is
split over worker processes. Each worker is a fresh ``python -m shard_opt.parallel``
(not a fork: MLIR and XLA keep threads a fork would not copy; not multiprocessing's
spawn either, which re-imports the caller's main script). A batch goes to each worker as
one pickled message on its stdin; the results come back on its stdout. Workers rebuild
each evaluator from a picklable spec the first time they see it. Results do not depend
on which worker ran what, so plans stay deterministic.

``SHARD_OPT_JOBS`` sets how many processes evaluate (default: the machine's cores, at
most 4): the caller's own process takes one share of each batch and ``jobs() - 1``
workers the others, so two cores run one worker beside the caller. ``SHARD_OPT_JOBS=1``
evaluates in-process. ``start()`` launches the workers ahead of the first batch (a worker
imports jax and builds its MLIR context as soon as it starts, while the caller goes on).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import pickle
import select
import struct
import subprocess
import sys

MIN_BATCH = 8  # smaller batches run in-process: a round trip costs more than it saves
MIN_SECONDS = 4.0  # ...and so do batches shorter than this in-process (a worker's start-up)

MAX_CHUNK = 16  # tasks per message to a worker (smaller chunks balance better, cost more round trips)

# what a worker imports as it starts, before its first task: the module whose tasks it runs
# (a name, not an import: this module is below the engine it serves)
WARM_UP = ("shard_opt.evaluate",)

_WORKERS: list[subprocess.Popen] = []
_KNOWN: dict[int, set] = {}  # worker pid -> uids of the evaluator specs it was sent
_READY: set[int] = set()  # pids of the workers that finished starting (see _warm_up)
_in_process = 0.0  # estimated seconds of the batches run in-process before any worker started


def jobs() -> int:
    raw = os.environ.get("SHARD_OPT_JOBS", "")
    if raw.strip().isdigit():
        return max(1, int(raw))
    return max(1, min(4, os.cpu_count() or 1))


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)))
    stream.write(data)
    stream.flush()


def _recv(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("worker closed its pipe")
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(n))


def _workers(n: int) -> list[subprocess.Popen]:
    while len(_WORKERS) < n:
        env = dict(os.environ, SHARD_OPT_JOBS="1")
        _WORKERS.append(subprocess.Popen(
            [sys.executable, "-m", "shard_opt.parallel", *WARM_UP], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env,
        ))
        if len(_WORKERS) == 1:
            atexit.register(close)
    return _WORKERS[:n]


def start() -> int:
    """Launch the ``jobs() - 1`` workers now, without waiting for them (a caller that knows
    a large search is coming); returns how many run."""
    return len(_workers(jobs() - 1))


def run_batch(tasks: list, seconds_each: float | None = None, local=None) -> list | None:
    """Results of ``tasks`` (see ``work``), in order, computed by the workers and, between
    their replies, by this process (``local``: a function of one task; default ``work``).

    Tasks go out in small chunks to whichever worker is free, and this process takes
    tasks from the other end of the batch, so a worker still starting or a slower share
    holds nobody up. Which process computed what never changes a result.

    None when the batch is not worth the workers (one task, or fewer than ``MIN_BATCH``
    while no worker is ready; only one job allowed;
    or, while no worker runs yet, an estimated in-process time that keeps the batches run
    in-process so far under ``MIN_SECONDS``): the caller then evaluates in-process.
    """
    global _in_process
    _poll_ready()
    if any(w.pid in _READY for w in _WORKERS):  # a worker waits: even two tasks are worth sharing
        n = min(jobs(), len(tasks))
    else:
        n = min(jobs(), len(tasks) // (MIN_BATCH // 2) or 1)  # processes taking a share, this one included
        if len(tasks) < MIN_BATCH:
            return None
    if n <= 1:
        return None
    if not _WORKERS:
        if seconds_each is None:
            return None
        estimate = seconds_each * len(tasks)
        # many short batches add up (a local search's rounds): once they would have kept this
        # process busy for MIN_SECONDS, the workers pay for their start-up
        if estimate < MIN_SECONDS and _in_process + estimate < MIN_SECONDS:
            _in_process += estimate
            return None
    local = local or work
    workers = {w.stdout.fileno(): w for w in _workers(n - 1)}
    chunk = max(1, min(MAX_CHUNK, len(tasks) // (4 * n)))
    results = [None] * len(tasks)
    lo, hi = 0, len(tasks)  # tasks[lo:hi] are not handed out yet
    busy: dict = {}  # worker stdout fd -> the task indices it computes
    try:
        while lo < hi or busy:
            for fd, w in workers.items():
                if lo < hi and fd not in busy and w.pid in _READY:
                    take = list(range(lo, min(hi, lo + chunk)))
                    lo = take[-1] + 1
                    _send(w.stdin, [_for_worker(w, tasks[i]) for i in take])
                    busy[fd] = take
            # workers still starting say "ready" on their pipe first
            waiting = [fd for fd, w in workers.items() if fd in busy or w.pid not in _READY]
            if lo < hi:
                hi -= 1
                results[hi] = local(tasks[hi])
                ready = select.select(waiting, [], [], 0)[0] if waiting else []
            elif busy:
                ready = select.select(waiting, [], [])[0]
            else:
                break
            for fd in ready:
                reply = _recv(workers[fd].stdout)
                if fd not in busy:  # a worker's start-up message
                    _READY.add(workers[fd].pid)
                    continue
                if isinstance(reply, BaseException):
                    raise reply
                for i, r in zip(busy.pop(fd), reply):
                    results[i] = r
    except BaseException:
        close()  # replies may be pending: start afresh next time
        raise
    return results


def _poll_ready() -> None:
    """Read the start-up message of every worker that has sent it (never waits)."""
    starting = {w.stdout.fileno(): w for w in _WORKERS if w.pid not in _READY}
    if not starting:
        return
    for fd in select.select(list(starting), [], [], 0)[0]:
        if _recv(starting[fd].stdout) == "ready":
            _READY.add(starting[fd].pid)


def _for_worker(w: subprocess.Popen, task):
    """``task`` as sent to ``w``: an evaluator's spec travels once, later tasks name its
    ``uid`` in its place."""
    known = _KNOWN.setdefault(w.pid, set())
    if task.spec.uid in known:
        return dataclasses.replace(task, spec=task.spec.uid)
    known.add(task.spec.uid)
    return task


def close() -> None:
    while _WORKERS:
        w = _WORKERS.pop()
        _KNOWN.pop(w.pid, None)
        _READY.discard(w.pid)
        try:
            w.stdin.close()
            w.wait(timeout=5)
        except Exception:
            w.kill()


# ---- worker side --------------------------------------------------------------------

_EVALUATORS: dict = {}  # uid -> the evaluator built from the spec of that uid


def _evaluator(spec):
    """The evaluator ``spec`` stands for: built (``spec.build()``) the first time its uid
    comes, named by its uid alone after that (``_for_worker``)."""
    if isinstance(spec, str):
        return _EVALUATORS[spec]
    if spec.uid not in _EVALUATORS:
        _EVALUATORS[spec.uid] = spec.build()
    return _EVALUATORS[spec.uid]


def work(task):
    """One task (``evaluate.Task``: a candidate's facts or a probe), computed by the
    evaluator its spec stands for (``Evaluator.local``)."""
    return _evaluator(task.spec).local(task)


def _serve() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but results may reach the pipe
    _send(stdout, "ready")  # the caller sends work once this arrives
    while True:
        try:
            tasks = _recv(stdin)
        except EOFError:
            return
        try:
            _send(stdout, [work(t) for t in tasks])
        except Exception as e:  # hand the error to the parent, which raises it
            _send(stdout, e)


def _warm_up(modules: list[str]) -> None:
    """What every first task needs, done before the first batch arrives: jax's MLIR
    bindings, the dialects and the shared context, and the caller's modules (``WARM_UP``:
    the passes, the analysis, the cost models)."""
    import importlib

    from shard_opt import ir

    ir.shared_context()
    for name in modules:
        importlib.import_module(name)


if __name__ == "__main__":
    _warm_up(sys.argv[1:])
    _serve()
    # the caller waits for this exit (``close``): skip the interpreter's teardown of jax,
    # MLIR and every module (most of a second); every reply is flushed already
    os._exit(0)
