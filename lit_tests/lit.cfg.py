# lit configuration for shard-opt. FileCheck and shard-opt are substituted with this
# Python's modules, so `lit lit_tests` works without an activated virtual environment.
import os
import shlex
import sys

import lit.formats

config.name = "shard-opt"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Inputs"]

python = shlex.quote(sys.executable)
config.substitutions.append(("%PYTHON", python))
# Substitution keys are regular expressions: match the tool names only as commands, never
# inside a path such as a checkout named shard-opt.
config.substitutions.append((r"(?<![\w/.-])FileCheck(?![\w/.-])", f"{python} -m filecheck"))
config.substitutions.append((r"(?<![\w/.-])shard-opt(?![\w/.-])", f"{python} -m shard_opt.cli"))
config.environment["PYTHONHASHSEED"] = "0"
config.environment["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# The lowering cache is on by default (~/.cache/shard-opt): the suite gets a temporary one,
# removed when lit exits, unless SHARD_OPT_CACHE is set.
if "SHARD_OPT_CACHE" in os.environ:
    config.environment["SHARD_OPT_CACHE"] = os.environ["SHARD_OPT_CACHE"]
else:
    import atexit
    import shutil
    import tempfile

    config.environment["SHARD_OPT_CACHE"] = tempfile.mkdtemp(prefix="shard-opt-lit-cache-")
    atexit.register(shutil.rmtree, config.environment["SHARD_OPT_CACHE"], ignore_errors=True)
# the tt-mlir check is off unless a test asks for it (--check); its plugin assets (~417 MB)
# are kept in one folder across runs (SHARD_OPT_TT_DIR), not in the temporary cache
config.environment["SHARD_OPT_CHECK"] = "0"
config.environment["SHARD_OPT_TT_DIR"] = os.environ.get(
    "SHARD_OPT_TT_DIR", os.path.join(__import__("tempfile").gettempdir(), "shard-opt-tt-mlir"))
for var in ("HOME", "PATH", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
