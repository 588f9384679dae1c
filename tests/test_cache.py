"""The persistent lowering cache (on by default), --no-cache, eviction, phase timings and
deferred imports. Every test points the cache at tmp_path: nothing reaches ~/.cache."""

import json
import os
import pickle
import subprocess
import sys
import time

import pytest

from shard_opt import factcache, frontends, timing
from shard_opt.frontends import cache, zoo
from conftest import CHILD_CEILING_S

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "examples", "mlp.mlir")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """No SHARD_OPT_CACHE, XDG_CACHE_HOME and HOME inside tmp_path: the default location."""
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.delenv(cache.MAX_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def count_lowerings(monkeypatch) -> list:
    calls = []
    real = zoo._lower_zoo
    monkeypatch.setattr(zoo, "_lower_zoo", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def files_under(path) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]


# -- where it lives ---------------------------------------------------------------------

def test_default_location_is_xdg_cache_home(home):
    assert cache.cache_dir() == str(home / "xdg" / "shard-opt")


def test_without_xdg_it_is_dot_cache_in_home(home, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == str(home / "home" / ".cache" / "shard-opt")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG spec: ignore a relative value
    assert cache.cache_dir() == str(home / "home" / ".cache" / "shard-opt")


def test_shard_opt_cache_overrides_and_disables(home, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(home / "mine"))
    assert cache.cache_dir() == str(home / "mine")
    for off in ("", "off", "0", "OFF", "false"):
        monkeypatch.setenv(cache.ENV, off)
        assert cache.cache_dir() is None
    with cache.disabled():
        monkeypatch.setenv(cache.ENV, str(home / "mine"))
        assert cache.cache_dir() is None
    assert cache.cache_dir() == str(home / "mine")


def test_on_by_default(home, monkeypatch):
    calls = count_lowerings(monkeypatch)
    first = frontends.load("zoo:mlp")
    again = frontends.load("zoo:mlp")
    assert len(calls) == 1 and again.text == first.text
    (entry,) = os.listdir(home / "xdg" / "shard-opt")
    assert entry.startswith("mlp-") and entry.endswith(".pkl")


def test_off_means_every_load_lowers(home, monkeypatch):
    monkeypatch.setenv(cache.ENV, "off")
    calls = count_lowerings(monkeypatch)
    frontends.load("zoo:mlp")
    frontends.load("zoo:mlp")
    assert len(calls) == 2
    assert files_under(home) == []


# -- hits and misses --------------------------------------------------------------------

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


def test_a_hit_marks_the_entry_recently_used(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    frontends.load("zoo:mlp")
    (entry,) = tmp_path.iterdir()
    os.utime(entry, (1_000_000, 1_000_000))  # last used in 1970
    frontends.load("zoo:mlp")
    assert entry.stat().st_mtime > 1_000_000  # the hit touched it (no clock reading: any time after 1970 is later)


@pytest.mark.parametrize("junk", [b"not a pickle", b"", pickle.dumps({"a": "dict"}), b"\x80\x05\x95truncated"])
def test_corrupt_entry_is_ignored_and_rebuilt(tmp_path, monkeypatch, junk):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    frontends.load("zoo:mlp")
    (entry,) = os.listdir(tmp_path)
    (tmp_path / entry).write_bytes(junk)
    calls = count_lowerings(monkeypatch)
    model = frontends.load("zoo:mlp")
    assert "func.func" in model.text and calls == [1]
    assert os.listdir(tmp_path) == [entry]  # rewritten in place, no temporary file left
    assert isinstance(pickle.loads((tmp_path / entry).read_bytes()), type(model))
    frontends.load("zoo:mlp")
    assert calls == [1]  # ...and served from then on


def test_a_cache_that_cannot_be_written_is_no_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(cache.ENV, str(blocker / "cache"))
    model = frontends.load("zoo:mlp")
    assert "func.func" in model.text
    assert blocker.read_text() == "not a directory"


# -- eviction ---------------------------------------------------------------------------

def fake_entry(root, name, size, mtime):
    path = root / f"{name}-{'0' * 32}.pkl"
    path.write_bytes(b"x" * size)
    os.utime(path, (mtime, mtime))
    return path


def test_eviction_removes_least_recently_used_until_under_the_limit(tmp_path):
    now = time.time()
    paths = [fake_entry(tmp_path, f"m{i}", 1000, now - 100 + i) for i in range(6)]  # m0 oldest
    stale = tmp_path / "left-by-a-crash.tmp"
    stale.write_bytes(b"x" * 10)
    os.utime(stale, (now - 2 * 3600, now - 2 * 3600))
    fresh = tmp_path / "being-written.tmp"
    fresh.write_bytes(b"x" * 10)
    assert cache.evict(str(tmp_path), limit=2500) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([paths[4].name, paths[5].name, fresh.name])
    assert cache.usage(str(tmp_path)) == (2, 2000)


def test_writing_an_entry_evicts_older_ones(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    old = fake_entry(tmp_path, "old", 300_000, time.time() - 1000)
    used = fake_entry(tmp_path, "used", 300_000, time.time() - 2000)
    os.utime(used)  # used a moment ago: the older-looking one is kept
    with cache.disabled():
        size = len(pickle.dumps(zoo.load_zoo("mlp"), protocol=pickle.HIGHEST_PROTOCOL))  # the entry's size
    monkeypatch.setenv(cache.MAX_ENV, str((size + 300_000 + 1000) / 2**20))
    frontends.load("zoo:mlp")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert old.name not in names and used.name in names and len(names) == 2
    n, total = cache.usage(str(tmp_path))
    assert total <= cache.max_bytes()


def test_limit_defaults_to_2_gib(monkeypatch):
    monkeypatch.delenv(cache.MAX_ENV, raising=False)
    assert cache.max_bytes() == 2 * 2**30
    monkeypatch.setenv(cache.MAX_ENV, "1.5")
    assert cache.max_bytes() == int(1.5 * 2**20)
    monkeypatch.setenv(cache.MAX_ENV, "lots")  # unreadable: the default, not an error
    assert cache.max_bytes() == 2 * 2**30


# -- the command line -------------------------------------------------------------------

def test_cli_no_cache_writes_nothing(home, run_cli, monkeypatch):
    calls = count_lowerings(monkeypatch)
    code, _, err = run_cli("zoo:mlp", "--mesh", "1x2", "--no-cache", "-o", home / "o.mlir")
    assert code == 0, err
    assert not (home / "xdg").exists() and not (home / "home").exists()
    assert "cache:" not in err
    assert cache.cache_dir() == str(home / "xdg" / "shard-opt")  # only for that run
    code, _, err = run_cli("zoo:mlp", "--mesh", "1x2", "--no-cache", "-o", home / "o.mlir")
    assert calls == [1, 1]


def test_cli_says_where_the_cache_is(home, run_cli):
    code, _, err = run_cli("zoo:mlp", "--mesh", "1x2", "-o", home / "o.mlir")
    assert code == 0, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("shard-opt: cache: ") and lines[-1].endswith("--no-cache to skip")
    assert str(home / "xdg" / "shard-opt") in lines[-1] and "(1 entry, 0.0 MB;" in lines[-1]
    assert "0 of 1 lowerings reused" in lines[-1]
    code, _, err = run_cli("zoo:mlp", "--mesh", "1x2", "-o", home / "o.mlir")
    assert "1 of 1 lowerings reused" in err
    code, _, err = run_cli("zoo:mlp", "--mesh", "1x2", "-o", home / "o.mlir", "--quiet")
    assert err == ""


def test_cli_shows_the_home_directory_as_tilde(home, run_cli, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    code, _, err = run_cli("zoo:mlp", "--mesh", "1x2", "-o", home / "o.mlir")
    assert code == 0, err
    assert "shard-opt: cache: ~/.cache/shard-opt (1 entry" in err


def test_cli_mlir_input_does_not_touch_the_cache(home, run_cli):
    code, _, err = run_cli(MLP, "--mesh", "1x2", "-o", home / "o.mlir")
    assert code == 0, err
    # it says where the cache lives and why this run kept no lowering; only the evaluated
    # candidates are stored (shard_opt.factcache: every model's)
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"shard-opt: cache: {home / 'xdg' / 'shard-opt'} keeps every model's evaluated candidates")
    assert "no lowering kept: a .mlir input needs no lowering" in line
    assert os.listdir(home / "xdg" / "shard-opt") == [factcache.SUBDIR]


# -- timings ----------------------------------------------------------------------------

def test_timing_phases_nest_and_reset():
    timing.reset()
    with timing.phase("outer"):
        time.sleep(0.02)
        with timing.phase("inner"):
            time.sleep(0.02)
            with timing.phase("outer"):  # re-entered: counted once, by the outermost
                time.sleep(0.01)
    with timing.phase("inner"):
        pass
    snap = timing.snapshot()
    assert set(snap) == {"outer", "inner"}
    assert snap["outer"] >= 0.05 and snap["inner"] >= 0.03
    assert snap["outer"] < 0.05 + snap["inner"]  # the inner time is inside, not added again
    own = timing.exclusive()
    assert own["outer"] == pytest.approx(snap["outer"] - snap["inner"], abs=0.01)
    with pytest.raises(ValueError):
        with timing.phase("boom"):
            raise ValueError
    assert "boom" in timing.snapshot()  # an exception still closes the phase
    timing.reset()
    assert timing.snapshot() == {}


def test_cli_writes_timings_when_asked(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path / "cache"))
    out = tmp_path / "timings.json"
    monkeypatch.setenv(timing.ENV, str(out))
    code, stdout, err = run_cli("zoo:mlp", "--mesh", "1x2", "--plan-json", tmp_path / "p.json", "-o", tmp_path / "o")
    assert code == 0, err
    data = json.loads(out.read_text())
    for name in ("import", "lower", "optimize", "emit"):
        assert data[name] >= 0, name
    assert data["lower"] > 0 and data["optimize"] > 0
    assert data["peak_rss_mb"] > 10 and data["exit_status"] == 0
    assert set(data["self"]) >= {"lower", "optimize", "emit"}
    assert "lower" not in stdout and stdout == ""  # timings never reach stdout
    # a failing run writes its timings too
    code, _, _ = run_cli("zoo:no-such-model", "--mesh", "1x2")
    assert code == 1 and json.loads(out.read_text())["exit_status"] == 1


def test_no_timings_file_unless_asked(tmp_path, run_cli, monkeypatch):
    monkeypatch.delenv(timing.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, _ = run_cli(MLP, "--mesh", "1x2", "-o", tmp_path / "o.mlir")
    assert code == 0 and os.listdir(tmp_path) == ["o.mlir"]


def test_a_process_run_times_its_start_up_and_imports_nothing_heavy(tmp_path):
    """A .mlir input needs neither torch nor transformers, diffusers or matplotlib
    (``-X importtime`` lists every import); the ``import`` phase counts python's start-up."""
    out = tmp_path / "t.json"
    env = dict(os.environ, SHARD_OPT_TIMINGS=str(out), SHARD_OPT_CACHE=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "shard_opt.cli", MLP, "--mesh", "1x8",
                          "-o", str(tmp_path / "o.mlir")], env=env, capture_output=True, text=True, timeout=CHILD_CEILING_S)
    assert res.returncode == 0, res.stderr
    imported = {line.split("|")[-1].strip().split(".")[0] for line in res.stderr.splitlines()
                if line.startswith("import time:")}
    assert "shard_opt" in imported and "jaxlib" in imported
    assert not imported & {"torch", "transformers", "diffusers", "matplotlib"}
    data = json.loads(out.read_text())
    assert 0 < data["import"] < data["wall_s"] and data["exit_status"] == 0
    assert (tmp_path / "o.mlir").read_text().startswith("module")
    assert os.listdir(tmp_path / "cache") == [factcache.SUBDIR]  # facts only: no lowering kept


def test_the_process_exit_status_is_main_s(tmp_path):
    res = subprocess.run([sys.executable, "-m", "shard_opt.cli", "zoo:no-such-model", "--mesh", "1x2"],
                         capture_output=True, text=True, timeout=CHILD_CEILING_S)
    assert res.returncode == 1 and res.stderr.startswith("shard-opt: error:")
