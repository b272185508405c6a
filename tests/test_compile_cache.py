"""The compile cache's keys and bookkeeping, and where a run's time went. Nothing here compiles: Inductor keys its
own graphs; these tests check what decides the folder and what a process reports as a hit or a miss."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_campaign_runs import run_of

from meddpm.errors import UserError
from meddpm.measure.campaign.interleaved import Campaign
from meddpm.measure.campaign.settings import CampaignSettings
from meddpm.measure.campaign.time_split import PHASES, TimeSplit
from meddpm.measure.machine import compile_cache
from meddpm.measure.machine.cache_root import bytecode_environment, keep_own_bytecode
from meddpm.measure.machine.compile_cache import (
    CompileCache,
    activate,
    environment_key,
    workload_key,
    workload_tree,
)
from meddpm.model.config import ModelConfig
from meddpm.run.combos import get_combo

CPU = torch.device("cpu")
VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", compile_cache.ROOT_VARIABLE)


@pytest.fixture(autouse=True)
def keep_environment(monkeypatch):
    """Each test's variables are set back afterwards (monkeypatch restores what it saw)."""
    for name in VARIABLES:
        monkeypatch.setenv(name, os.environ.get(name, "unset"))
        monkeypatch.delenv(name)


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of this tree's workload rooms and one harness module, to edit."""
    for room in compile_cache.WORKLOAD_ROOMS:
        shutil.copytree(workload_tree() / "meddpm" / room, tmp_path / "meddpm" / room)
    (tmp_path / "meddpm" / "judge").mkdir()
    (tmp_path / "meddpm" / "judge" / "verdict.py").write_text("THRESHOLD = 0.05\n")
    return tmp_path


def test_a_changed_workload_misses_and_an_unchanged_one_hits(tree, tmp_path):
    cache = CompileCache.of(tmp_path / "cache", tree, CPU)
    assert not cache.warm
    cache.activate()
    cache.mark_compiled()
    assert CompileCache.of(tmp_path / "cache", tree, CPU).warm  # the same code again: a hit
    (tree / "meddpm" / "judge" / "verdict.py").write_text("THRESHOLD = 0.01\n")  # the harness is not the workload
    assert CompileCache.of(tmp_path / "cache", tree, CPU).warm
    unet = tree / "meddpm" / "model" / "unet.py"
    unet.write_text(unet.read_text() + "\n# a changed model\n")
    changed = CompileCache.of(tmp_path / "cache", tree, CPU)
    assert not changed.warm and changed.folder == cache.folder  # the same folder: Inductor reuses what agrees


def test_the_folder_is_keyed_by_torch_and_the_device(monkeypatch, tree, tmp_path):
    key = environment_key(CPU)
    assert key.startswith(f"{torch.__version__}-cpu-")
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert environment_key(CPU) != key
    assert CompileCache.of(tmp_path, tree, CPU).folder.name.startswith("9.9.9-cpu-")


def test_activating_points_inductor_and_triton_at_the_folder_and_workers_at_the_root(tree, tmp_path):
    cache = activate(str(tmp_path / "root"), CPU, tree)
    assert cache is not None and cache.folder.parent == (tmp_path / "root").resolve()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache.folder / "inductor")
    assert os.environ["TRITON_CACHE_DIR"] == str(cache.folder / "triton")
    assert os.environ[compile_cache.ROOT_VARIABLE] == str(cache.folder.parent)
    assert workload_key(tree) == cache.workload


def test_off_leaves_torch_alone_and_tells_the_workers(tree):
    assert activate("off", CPU, tree) is None
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ and os.environ[compile_cache.ROOT_VARIABLE] == "off"


def test_the_root_comes_from_the_option_then_the_variable_then_the_users_cache(monkeypatch, tmp_path):
    assert compile_cache.default_root().endswith(os.path.join(".cache", "meddpm-perf", "compile"))
    compile_cache.use_root(str(tmp_path))
    assert compile_cache.default_root() == str(tmp_path)
    compile_cache.use_root(None)  # no option given: the variable stays
    assert compile_cache.default_root() == str(tmp_path)


def test_a_compiled_combo_reports_its_seconds_and_a_miss_then_a_hit(tree, tmp_path):
    campaign = Campaign(ModelConfig.preset("tiny"), [get_combo("baseline")], CPU)
    campaign.compile_cache = CompileCache.of(tmp_path, tree, CPU)
    first = campaign._compiled(75.0, {})
    assert first["seconds"] == 75.0 and first["cache"] == "miss"
    assert campaign._compiled(5.0, {})["cache"] == "hit"
    campaign.compile_cache = None
    assert campaign._compiled(5.0, {})["cache"] == "off"


def test_a_runs_compile_line_says_seconds_hit_or_miss_and_inductors_own_hits():
    figures = {"seconds": 5.24, "cache": "hit", "fx_graph_hits": 14, "fx_graph_misses": 0}
    line = run_of("fast", [1.0], compile=figures).compile_line()
    assert line == "fast compiled in 5.2 s (compile cache hit; Inductor graphs 14 of 14 from its cache)"
    assert run_of("opt1", [1.0]).compile_line() == ""
    new = {**figures, "cache": "miss", "fx_graph_hits": 2, "fx_graph_misses": 0}
    line = run_of("fast", [1.0], compile=new).compile_line()
    assert line == (
        "fast compiled in 5.2 s (compile cache: this code's first compile; Inductor graphs 2 of 2 from its cache)"
    )


def test_a_campaign_splits_its_time_into_phases():
    settings = CampaignSettings(warmup=1, min_rounds=3, max_rounds=3, energy=False)
    campaign = Campaign(ModelConfig.preset("tiny"), [get_combo("baseline")], CPU, settings=settings)
    try:
        campaign.run()
    finally:
        campaign.close()
    seconds = campaign.results["baseline"].phase_s
    assert {"start-up", "warm-up", "measuring", "profiling"} <= set(seconds) and all(s > 0 for s in seconds.values())
    assert campaign.time_split.seconds["measuring"] == pytest.approx(seconds["measuring"])
    assert campaign.results["baseline"].compile == {}  # an eager combo compiles nothing


def test_a_time_split_reads_as_one_line_and_a_table():
    split = TimeSplit({"start-up": 12.0, "compiling": 5.2, "measuring": 60.0})
    split.add_all([{"energy": 20.0}, {"energy": 5.0}])
    assert split.line(110.0) == "110 s wall: start-up 12 s, compiling 5 s, measuring 60 s, energy 25 s, other 8 s"
    table = split.table(110.0)
    assert list(table.index) == [*PHASES, "other"] and table.loc["other", "seconds"] == pytest.approx(7.8)
    with pytest.raises(ValueError, match="unknown phase 'lunch'"):
        split.add("lunch", 1.0)


def test_workers_keep_their_bytecode_in_the_cache_even_where_writing_it_is_off(tmp_path):
    env = {compile_cache.ROOT_VARIABLE: str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/home/x"}
    kept = bytecode_environment(env)
    assert kept["PYTHONPYCACHEPREFIX"] == str(tmp_path.resolve() / "pycache") and "PYTHONDONTWRITEBYTECODE" not in kept
    assert kept["HOME"] == "/home/x"
    assert bytecode_environment({**env, "PYTHONPYCACHEPREFIX": "/mine"})["PYTHONPYCACHEPREFIX"] == "/mine"
    off = {compile_cache.ROOT_VARIABLE: "off", "PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode_environment(off) == off


def test_the_suite_process_keeps_its_bytecode_in_the_cache_where_writing_it_is_off(monkeypatch, tmp_path):
    monkeypatch.setenv(compile_cache.ROOT_VARIABLE, str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert keep_own_bytecode() is None and sys.pycache_prefix is None  # bytecode is written as usual: left alone

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    folder = keep_own_bytecode()
    assert folder == (tmp_path / "cache").resolve() / "pycache" and folder.is_dir()
    assert sys.pycache_prefix == str(folder) and not sys.dont_write_bytecode

    (tmp_path / "module_kept.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import module_kept  # noqa: F401  (imported for its bytecode)

    assert list(folder.rglob("module_kept*.pyc")) and not (tmp_path / "__pycache__").exists()

    monkeypatch.setattr(sys, "pycache_prefix", "/theirs")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert keep_own_bytecode() is None and sys.pycache_prefix == "/theirs"  # a prefix of the user's own stands
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setenv(compile_cache.ROOT_VARIABLE, "off")
    assert keep_own_bytecode() is None and sys.dont_write_bytecode


def test_the_bench_keeps_its_bytecode_in_the_cache_before_it_imports_torch(tmp_path):
    """Every bench entry point imports meddpm.bench first: by then the prefix is set and torch is not yet imported,
    so torch's own bytecode goes to (and comes from) the cache too."""
    script = "import sys, meddpm.bench; print(sys.pycache_prefix); print('torch' in sys.modules)"
    env = {**os.environ, compile_cache.ROOT_VARIABLE: str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    shown = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.split() == [str(tmp_path.resolve() / "pycache"), "False"]


@pytest.mark.parametrize(
    ("given", "variable", "words"),
    [
        ("", None, ("--compile-cache is empty", "off")),
        ("{tmp}/a-file", None, ("--compile-cache", "a-file", "not a folder")),
        ("{tmp}/a-file/sub", None, ("not a folder",)),
        ("{tmp}/a-fifo", None, ("not a folder",)),
        (None, "{tmp}/a-file", ("$MEDDPM_COMPILE_CACHE", "a-file", "not a folder")),
    ],
)
def test_a_cache_root_that_cannot_be_a_folder_is_one_line(monkeypatch, tmp_path, given, variable, words):
    (tmp_path / "a-file").write_text("x")
    os.mkfifo(tmp_path / "a-fifo")
    if variable is not None:
        monkeypatch.setenv(compile_cache.ROOT_VARIABLE, variable.format(tmp=tmp_path))
    with pytest.raises(UserError) as caught:
        compile_cache.checked_root(None if given is None else given.format(tmp=tmp_path), "--compile-cache")
    assert len(str(caught.value).splitlines()) == 1
    assert all(word in str(caught.value) for word in words), caught.value


def test_a_relative_cache_root_is_made_absolute_for_workers_that_start_elsewhere(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert compile_cache.checked_root("rel/cache", "--compile-cache") == str(tmp_path / "rel" / "cache")
    assert (tmp_path / "rel" / "cache").is_dir()
    assert compile_cache.checked_root("off", "--compile-cache") == "off"
    assert compile_cache.checked_root(None, "--compile-cache") is None


def test_an_empty_variable_is_unset_as_the_shell_convention_has_it(monkeypatch):
    monkeypatch.setenv(compile_cache.ROOT_VARIABLE, "")
    assert compile_cache.checked_root(None, "--compile-cache") is None
