"""Load script: the GPT-J-6B-width decoder of tests/fixtures/scripts/gptj_block.py with 2
layers (hidden 4096, 16 heads, MLP 16384, vocab 50400: 0.82 B parameters), the size
issue 23 measured ``--verify-numerics`` on. Used by benchmarks/verify/measure.sh."""
import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "gptj_block", os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "scripts", "gptj_block.py"))
_gptj = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gptj)

import torch  # noqa: E402


def load_model():
    with torch.device("meta"):
        return _gptj.GPTJ(layers=2)


def load_inputs():
    return _gptj.load_inputs()
