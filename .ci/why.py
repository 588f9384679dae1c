"""The last lines of a failed CI log: one per failed test, its kind and why.

``python3 .ci/why.py LOG``. pytest's lines are the ones tests/conftest.py writes at the end
of a failing run ("KIND test: why"); lit's come from its -v output: per failed test, the
first line that says what went wrong (FileCheck's "error:", or the command that failed). A
run that failed before any test (the install) gets the last line of its output."""

import re
import sys


def main(path: str) -> int:
    lines = open(path, errors="replace").read().splitlines()
    out = []
    if any(ln.startswith("shard-opt tests: ") for ln in lines):
        start = max(i for i, ln in enumerate(lines) if ln.startswith("shard-opt tests: "))
        out += [ln for ln in lines[start + 1:] if re.match(r"(FAILED|ERROR|HUNG|CRASHED) ", ln)]
    # lit -v: "******************** TEST 'shard-opt :: x.mlir' FAILED ********************" ... "********************"
    for m in re.finditer(r"^\*+ TEST '([^']+)' FAILED \*+$(.*?)^\*+$", "\n".join(lines), re.M | re.S):
        body = [ln.strip() for ln in m.group(2).splitlines() if ln.strip()]
        why = next((ln for ln in body if "error:" in ln), None) or next(
            (ln for ln in reversed(body) if "failed" in ln.lower() or "error" in ln.lower()), body[-1] if body else "")
        out.append(f"FAILED lit {m.group(1)}: {why[:400]}")
    if not out:
        last = next((ln for ln in reversed(lines) if ln.strip()), "no output")
        out.append(f"FAILED before any test: {last[:400]}")
    print(f"CI failed; one line each (kind, test, why):")
    for ln in out:
        print(ln)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
