"""The opt-in lowering cache (SHARD_OPT_CACHE): a second load lowers nothing and returns the same model."""

import os

import pytest

from shard_opt import frontends
from shard_opt.frontends import cache, zoo


def test_second_load_comes_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    first = frontends.load("zoo:llama-3.2-1b", layers=1)
    assert len(os.listdir(tmp_path)) == 1

    def no_lowering(*a, **k):
        raise AssertionError("lowered again despite the cache")

    monkeypatch.setattr(zoo, "_lower_zoo", no_lowering)
    again = frontends.load("zoo:llama-3.2-1b", layers=1)
    assert again.text == first.text
    assert again.arguments == first.arguments
    assert again.with_layers is not None  # the closure is re-attached, not pickled
    # another key (a different sequence length) is a miss
    with pytest.raises(AssertionError, match="lowered again"):
        frontends.load("zoo:llama-3.2-1b", layers=1, seq_len=64)


def test_unreadable_entry_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    frontends.load("zoo:mlp")
    (entry,) = os.listdir(tmp_path)
    (tmp_path / entry).write_bytes(b"not a pickle")
    model = frontends.load("zoo:mlp")
    assert "func.func" in model.text
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_off_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv(cache.ENV, raising=False)
    calls = []
    real = zoo._lower_zoo
    monkeypatch.setattr(zoo, "_lower_zoo", lambda *a, **k: calls.append(1) or real(*a, **k))
    frontends.load("zoo:mlp")
    frontends.load("zoo:mlp")
    assert len(calls) == 2
