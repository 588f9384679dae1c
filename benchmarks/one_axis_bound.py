"""Would a lower bound prune the one-axis baseline's enumeration? Measured, not built.

    python benchmarks/one_axis_bound.py tests/fixtures/scripts/qwen35_attention.py 1x8 1

tt-mlir AutoShardingPass's heuristic (``costmodel/autoshard_heuristic.py``) is a sum of CCL
terms, each >= 0, minus a memory benefit that the argument shardings fix before any Shardy
run; so ``-memory_benefit`` bounds a candidate's score from below (an argument left open,
a 1-D parameter that follows its consumer, is counted as if split over every device). A
best-first pass would evaluate, in the bound's order, every candidate whose bound is not
above the best score: this script scores every candidate of the space (``autoshard_groups``
on the model's copy of LAYERS layers), checks that every bound holds, and prints how many
such a pass must still evaluate. Results: benchmarks/results.md (issue 33, twelfth session).
"""

from __future__ import annotations

import itertools
import math
import sys
import time


def main(argv: list[str]) -> int:
    from shard_opt import costmodel, frontends
    from shard_opt.baselines import autoshard_groups
    from shard_opt.driver import resolve_system
    from shard_opt.evaluate import shardings_for
    from shard_opt.search import make_scorer
    from shard_opt.sharding import Mesh

    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    source, mesh_spec, layers = argv
    model = frontends.load(source, layers=int(layers))
    mesh = Mesh.parse(mesh_spec)
    scorer = make_scorer(model, mesh, resolve_system(mesh, None)[1], costmodel.get_cost_model("autoshard-heuristic"))
    groups = autoshard_groups(model, mesh)
    top = max(math.prod(a.shape) for a in model.arguments)

    def bound(assignment) -> float:
        shardings = shardings_for(model, groups, assignment)
        benefit = 0.0
        for a in model.arguments:
            s = shardings.get(a.index)
            split = mesh.num_devices if s is None else math.prod(
                mesh.axis_size(x) for axes in s.axis_names() for x in axes)
            benefit += (3.0 if a.kind in ("param", "buffer") else 1.0) * math.prod(a.shape) / top * (1 - 1 / split)
        return -benefit

    every = list(itertools.product(*[range(len(g.options)) for g in groups]))
    t0 = time.process_time()
    rows = [(scorer.score(groups, a), bound(a), a) for a in every]
    seconds = time.process_time() - t0
    best = min(rows, key=lambda r: (r[0].key(), r[2]))[0].score
    broken = sum(1 for s, b, _ in rows if b > s.score + 1e-9)
    needed = sum(1 for _, b, _ in rows if round(b, 6) <= round(best, 6))
    print(f"{source} {mesh_spec} layers={layers}: {len(every)} candidates scored in {seconds:.1f} CPU-s; "
          f"best heuristic {best:.4f}; bounds above the score: {broken}; a best-first pass evaluates {needed}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
