"""The last good run: the newest clean-commit run before any open regression of its architecture."""

from __future__ import annotations

import copy
import dataclasses
import datetime

import numpy as np
import pytest
from test_campaign_runs import block

from meddpm.errors import UserError
from meddpm.history.documents import run_from_document
from meddpm.history.last_good_lookup import last_good
from meddpm.history.last_good_run import LastGood
from meddpm.history.results import run_description
from meddpm.history.simulation import simulate, simulated_documents
from meddpm.history.store import HistoryStore
from meddpm.measure.energy.counter import ENERGY_METHOD

STEP_NIGHT = 20  # opt1 (column 1) is 5 % slower from this night on: an open regression
NIGHTS = 24


def sha(night: int) -> str:
    return f"{night:04x}" + "a" * 36


@pytest.fixture(autouse=True)
def _no_history_env(monkeypatch):
    monkeypatch.delenv("MEDDPM_HISTORY", raising=False)


def plant(db, documents, **extra) -> None:
    with HistoryStore.open(str(db)) as store:
        store.add([run_from_document(d, f"night {i}") for i, d in enumerate(documents)])


def nightly(commits=sha, step: bool = True, arch: str = "a100", driver: str = "580.95"):
    logs = simulate(np.random.default_rng(3), NIGHTS, step_case=1, step_night=STEP_NIGHT if step else None, step=0.05)
    documents = simulated_documents(logs, arch, driver=driver, torch="2.11.0", cuda="13.0")
    for night, document in enumerate(documents):
        document["environment"]["commit"] = commits(night)
    return documents


def test_the_last_good_run_is_the_newest_before_the_open_regression(tmp_path):
    db = tmp_path / "h.sqlite"
    plant(db, nightly())
    good = last_good(str(db), "a100", "suite")
    assert isinstance(good, LastGood)
    assert good.commit == sha(STEP_NIGHT - 1)
    assert good.started_at == datetime.datetime(2026, 12, 1, 2, 17) + datetime.timedelta(days=STEP_NIGHT - 1)
    assert (good.arch, good.kind, good.processes, good.driver, good.torch, good.cuda) == (
        "a100",
        "suite",
        1,
        "580.95",
        "2.11.0",
        "13.0",
    )
    assert good.environment["commit"] == good.commit and good.gpu_name == "NVIDIA A100"
    assert sorted(good.medians_ms) == sorted(
        f"paper/{c}/b1" for c in ("baseline", "opt1", "opt2", "opt12", "amp_bf16", "fast")
    )
    assert 200 < good.medians_ms["paper/opt1/b1"] < 260


def test_without_an_open_regression_the_newest_run_is_good(tmp_path):
    db = tmp_path / "h.sqlite"
    plant(db, nightly(step=False))
    assert last_good(str(db), "a100", "suite").commit == sha(NIGHTS - 1)


def test_dirty_and_unknown_commits_are_passed_over(tmp_path):
    db = tmp_path / "h.sqlite"
    dirty = {STEP_NIGHT - 1: sha(STEP_NIGHT - 1) + "+dirty", STEP_NIGHT - 2: "unknown"}
    plant(db, nightly(lambda night: dirty.get(night, sha(night))))
    assert last_good(str(db), "a100", "suite").commit == sha(STEP_NIGHT - 3)


def test_only_dirty_good_runs_is_one_line_saying_so(tmp_path):
    db = tmp_path / "h.sqlite"
    plant(db, nightly(lambda night: sha(night) + "+dirty"))
    with pytest.raises(UserError, match=r"measured a dirty tree or an unknown commit.*--compare-to REV") as error:
        last_good(str(db), "a100", "suite")
    assert "\n" not in str(error.value)


def test_processes_and_kind_select_the_runs(tmp_path):
    db = tmp_path / "h.sqlite"
    documents = nightly(step=False)
    documents[5].update(run_description(3, None))  # one run in three worker processes
    for case in documents[5]["cases"]:
        case["process_medians_ms"] = [case["stats"]["median"]] * 3
    plant(db, documents)
    assert last_good(str(db), "a100", "suite", processes=3).commit == sha(5)
    assert last_good(str(db), "a100", "suite", processes=3).processes == 3
    assert last_good(str(db), "a100", "suite", processes=1).commit == sha(NIGHTS - 1)
    with pytest.raises(UserError, match=r"holds no bench run on a100; run the suite .* --history first"):
        last_good(str(db), "a100", "bench")
    with pytest.raises(UserError, match=r"holds no suite run in 2 process\(es\) on a100"):
        last_good(str(db), "a100", "suite", processes=2)
    with pytest.raises(UserError, match=r"holds no suite run on h100"):
        last_good(str(db), "h100", "suite")


def test_a_run_after_the_regression_is_not_good_whatever_it_measured(tmp_path):
    db = tmp_path / "h.sqlite"
    documents = nightly()
    # A run in three worker processes after the step: its own series has no step, but its commit carries it.
    late = copy.deepcopy(documents[-1])
    late.update(run_description(3, None))
    late["environment"].update(date="2026-12-30T02:17:00+00:00", commit=sha(99))
    plant(db, [*documents, late])
    with pytest.raises(
        UserError, match=r"every suite run in 3 process\(es\) on a100 .* is at or after the open"
    ) as error:
        last_good(str(db), "a100", "suite", processes=3)
    assert f"commit {sha(STEP_NIGHT)[:12]}" in str(error.value)


def test_no_database_is_one_line_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"no history database at .*perf-history.sqlite.*--history first") as error:
        last_good(None, "a100", "suite")
    assert "\n" not in str(error.value) and not (tmp_path / "perf-history.sqlite").exists()
    monkeypatch.setenv("MEDDPM_HISTORY", str(tmp_path / "env.sqlite"))
    with pytest.raises(UserError, match="env.sqlite"):
        last_good(None, "a100", "suite")


def test_a_kind_that_is_no_trend_is_refused():
    with pytest.raises(UserError, match="kind 'ab' is not one of suite, bench"):
        last_good(None, "a100", "ab")


def test_a_night_whose_own_verdicts_failed_a_case_is_not_good(tmp_path):
    # The newest night failed its A/B: the change points cannot see a step one run old, its verdict can.
    db = tmp_path / "h.sqlite"
    documents = nightly(step=False)
    documents[-1]["cases"][1]["outcome"] = "regression"
    plant(db, documents)
    assert last_good(str(db), "a100", "suite").commit == sha(NIGHTS - 2)


def _with_energy(documents, uuid: str = "GPU-1", method: str = ENERGY_METHOD):
    """The nights with their card's UUID and a block of 50 J over 10 iterations for opt1, measured by ``method``."""
    for document in documents:
        document["environment"]["gpu_uuid"] = uuid
        for case in document["cases"]:
            if case["combo"] == "opt1":
                case["energy_blocks"] = [dataclasses.asdict(block(50.0))]
                case["energy_method"] = method
    return documents


def test_the_last_good_runs_energy_is_carried_to_side_b_on_its_own_card_alone(tmp_path):
    db = tmp_path / "h.sqlite"
    plant(db, _with_energy(nightly()))
    good = last_good(str(db), "a100", "suite")
    assert sorted(good.energy_blocks) == ["paper/opt1/b1"]
    thresholds = {"paper/opt1/b1": 0.1, "paper/fast/b1": 0.1}
    here = {"gpu_uuid": "GPU-1", "gpu_name": "NVIDIA A100", "driver": "580.95", "torch": "2.11.0", "cuda": "13.0"}
    carried, differs = good.carried_energy(thresholds, here)
    assert differs == "" and sorted(carried) == ["paper/opt1/b1"]  # fast kept no energy: its side B measures it
    energy = carried["paper/opt1/b1"]
    assert energy.source == f"run #{good.run_id}" and energy.threshold == 0.1
    assert energy.estimate is not None and energy.estimate.j_per_iter == pytest.approx(5.0)
    assert good.carried_energy(thresholds, {**here, "gpu_uuid": "GPU-2"}) == ({}, "card GPU-1 -> GPU-2")
    assert good.carried_energy(thresholds, {**here, "driver": "590.10"}) == ({}, "driver 580.95 -> 590.10")
    assert good.carried_energy(thresholds, {**here, "gpu_uuid": "GPU-2", "torch": "2.12.0"}) == (
        {},
        "card GPU-1 -> GPU-2, torch 2.11.0 -> 2.12.0",
    )


def test_a_run_that_recorded_no_card_or_unreadable_blocks_carries_no_energy(tmp_path):
    documents = _with_energy(nightly(step=False))
    for document in documents:
        del document["environment"]["gpu_uuid"]
    plant(tmp_path / "a.sqlite", documents)
    good = last_good(str(tmp_path / "a.sqlite"), "a100", "suite")
    assert good.carried_energy({"paper/opt1/b1": 0.1}, {"gpu_uuid": "GPU-1"}) == ({}, "card unrecorded -> GPU-1")
    documents = _with_energy(nightly(step=False))
    for document in documents:
        for case in document["cases"]:
            case["energy_blocks"] = [{"windows": "not a list of windows"}] if case["combo"] == "opt1" else []
    plant(tmp_path / "b.sqlite", documents)
    assert last_good(str(tmp_path / "b.sqlite"), "a100", "suite").energy_blocks == {}
    plant(tmp_path / "c.sqlite", _with_energy(nightly(step=False), method="counter-window/0"))  # another method's
    assert last_good(str(tmp_path / "c.sqlite"), "a100", "suite").energy_blocks == {}
