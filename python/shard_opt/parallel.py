"""Evaluate candidates on every core: worker processes for the search.

Shardy propagation of one candidate is independent of every other, so a batch of
candidates (an exhaustive enumeration, one round of local search, the probes) is
split over worker processes. Each worker is a fresh ``python -m shard_opt.parallel``
(not a fork: MLIR and XLA keep threads a fork would not copy; not multiprocessing's
spawn either, which re-imports the caller's main script). A batch goes to each worker as
one pickled message on its stdin; the results come back on its stdout. Workers rebuild
each evaluator from a picklable spec the first time they see it. Results do not depend
on which worker ran what, so plans stay deterministic.

``SHARD_OPT_JOBS`` sets the number of workers (default: the machine's cores, at most
4); ``SHARD_OPT_JOBS=1`` evaluates in-process.
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys

MIN_BATCH = 8  # smaller batches run in-process: a round trip costs more than it saves
MIN_SECONDS = 4.0  # ...and so do batches shorter than this in-process (a worker's start-up)

_WORKERS: list[subprocess.Popen] = []


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
            [sys.executable, "-m", "shard_opt.parallel"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env,
        ))
        if len(_WORKERS) == 1:
            atexit.register(close)
    return _WORKERS[:n]


def run_batch(tasks: list, seconds_each: float | None = None) -> list | None:
    """Results of ``tasks`` (see ``work``) computed by the workers, in order.

    None when the batch is not worth the workers (too few tasks, an estimated
    in-process time under ``MIN_SECONDS`` while no worker runs yet, or only one job
    allowed): the caller then evaluates in-process.
    """
    n = min(jobs(), len(tasks) // (MIN_BATCH // 2) or 1)
    if n <= 1 or len(tasks) < MIN_BATCH:
        return None
    if not _WORKERS and (seconds_each is None or seconds_each * len(tasks) < MIN_SECONDS):
        return None
    workers = _workers(n)
    chunks = [tasks[i::n] for i in range(n)]
    for w, chunk in zip(workers, chunks):
        _send(w.stdin, chunk)
    results = [None] * len(tasks)
    for i, w in enumerate(workers):
        reply = _recv(w.stdout)
        if isinstance(reply, BaseException):
            close()
            raise reply
        results[i::n] = reply
    return results


def close() -> None:
    while _WORKERS:
        w = _WORKERS.pop()
        try:
            w.stdin.close()
            w.wait(timeout=5)
        except Exception:
            w.kill()


# ---- worker side --------------------------------------------------------------------

_EVALUATORS: dict = {}


def _evaluator(spec):
    uid = spec[0]
    if uid not in _EVALUATORS:
        from shard_opt.evaluate import Evaluator
        from shard_opt.lowered import LoweredModel

        _, name, text, arguments, mesh, system, cost_model, result_shardings, pipeline, storage, allow = spec
        model = LoweredModel(name, text, arguments)
        _EVALUATORS[uid] = Evaluator(model, mesh, system, cost_model, result_shardings=result_shardings,
                                     pipeline=pipeline, prepared=(text, storage), allow=allow)
    return _EVALUATORS[uid]


def work(task):
    """One task: ("facts", spec, groups, assignment) or ("probe", spec, groups, (gi, o))."""
    kind, spec, groups, arg = task
    ev = _evaluator(spec)
    if kind == "facts":
        return ev.facts(groups, arg)
    return ev.probe(groups, *arg)


def _serve() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but results may reach the pipe
    while True:
        try:
            tasks = _recv(stdin)
        except EOFError:
            return
        try:
            _send(stdout, [work(t) for t in tasks])
        except Exception as e:  # hand the error to the parent, which raises it
            _send(stdout, e)


if __name__ == "__main__":
    _serve()
