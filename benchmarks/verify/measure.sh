#!/bin/sh
# Peak memory and wall time of shard-opt on the 2-layer GPT-J-sized model, without and with
# --verify-numerics. Usage: benchmarks/verify/measure.sh [PYTHON]  (default .venv/bin/python)
PY=${1:-.venv/bin/python}
M=benchmarks/verify/gptj_2layers.py
export SHARD_OPT_CHECK=0
for flags in "" "--verify-numerics"; do
  /usr/bin/time -f "flags='$flags' rc=%x wall %e s, max RSS %M KB" \
    "$PY" -m shard_opt.cli "$M" --mesh 1x8 --quiet -o /dev/null $flags 2>&1 | grep -E "^flags=|numerics (PASS|FAIL)|error"
done
