"""``conftest.shared_once``: what one test process computes, the run's other test processes
read instead of computing again (the lowerings of the fixture scripts, the real plans)."""

import dataclasses
import hashlib
import os
import subprocess
import sys

import pytest
from conftest import CHILD_CEILING_S, SCRIPTS, shared_once

TESTS = os.path.dirname(os.path.abspath(__file__))


def _digest(model) -> str:
    return hashlib.sha256(repr((model.text, model.arguments, model.meta, model.num_layers)).encode()).hexdigest()


def test_another_process_reads_the_lowering_one_process_made(tmp_path, monkeypatch):
    from shard_opt.frontends import torch_frontend as tf

    monkeypatch.setenv("SHARD_OPT_TEST_SHARED", str(tmp_path))
    made = dataclasses.replace(tf.load_script(os.path.join(SCRIPTS, "layernorm_mlp.py")), with_layers=None)
    value, computed = shared_once("a lowering", lambda: made)
    assert computed and value is made
    # a second process asks for the same key with a computation that would fail: it reads
    child = ("import hashlib, sys; sys.path.insert(0, sys.argv[1]); from conftest import shared_once\n"
             "v, computed = shared_once('a lowering', lambda: 1 / 0)\n"
             "assert not computed\n"
             "print(hashlib.sha256(repr((v.text, v.arguments, v.meta, v.num_layers)).encode()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", child, TESTS], capture_output=True, text=True, timeout=CHILD_CEILING_S,
                         env=dict(os.environ, SHARD_OPT_TEST_SHARED=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == _digest(made)


def test_an_exception_is_not_kept_and_an_unpicklable_value_is_computed_each_time(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARD_OPT_TEST_SHARED", str(tmp_path))

    def boom():
        raise ValueError("the script failed")

    with pytest.raises(ValueError, match="the script failed"):
        shared_once("fails", boom)
    assert shared_once("fails", lambda: 2) == (2, True)  # the failure left nothing behind
    assert shared_once("fails", lambda: 3) == (2, False)
    closure = [lambda: None]
    assert shared_once("closure", lambda: closure)[1] and shared_once("closure", lambda: closure)[1]
