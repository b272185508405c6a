"""Finding the last good run in the history database (:func:`last_good`), for ``--compare-to=last-good``.

The rule is :mod:`meddpm.history.last_good`'s: the newest run of an architecture that started before the first run
of every open regression of that architecture, failed no case of its own, and measured a plain git commit.
"""

from __future__ import annotations

import datetime
import re
import sys
from collections.abc import Mapping
from typing import Any

from meddpm.errors import UserError
from meddpm.history.acks import covered
from meddpm.history.changepoints import detect
from meddpm.history.last_good_run import LastGood
from meddpm.history.models import Acknowledgement, Run
from meddpm.history.series import TREND_KINDS, case_frame, run_processes
from meddpm.history.store import HistoryLocked, HistoryStore
from meddpm.history.target import DEFAULT_DB, resolve_target
from meddpm.measure.energy.counter import ENERGY_METHOD, BlockEnergy

_SHA = re.compile(r"[0-9a-f]{7,40}")
_FIX = "run the suite (or meddpm-bench) with --history first, or give --compare-to REV"


def last_good(target: str | None, arch: str, kind: str, processes: int | None = None) -> LastGood:
    """The newest good ``kind`` run (``suite`` or ``bench``) on ``arch`` in the history database.

    ``target``: the database as ``--history`` gives it (None: ``$MEDDPM_HISTORY``, else
    ``./perf-history.sqlite``). ``processes``: only runs measured in that many worker processes (None: any).
    No database, no such run, or no good one is a one-line :class:`UserError` naming the fix.
    """
    if kind not in TREND_KINDS:
        raise UserError(f"last good run: kind {kind!r} is not one of {', '.join(TREND_KINDS)}")
    database = resolve_target(target, DEFAULT_DB)
    try:
        with HistoryStore.open(database, create=False) as store:
            runs = store.runs()
            acks = store.acknowledgements()
            label = store.label
        for line in store.skipped:
            print(f"history {label}: {line}", file=sys.stderr)
    except HistoryLocked:
        raise  # a lock is no missing history: running the suite with --history would not help
    except UserError as exc:
        raise UserError(f"no last good run: {exc}; {_FIX}") from None
    wanted = " ".join(filter(None, [kind, "run", f"in {processes} process(es)" if processes else ""]))
    candidates = [
        run
        for run in runs
        if run.arch == arch and run.kind == kind and (processes is None or run_processes(run) == processes)
    ]
    if not candidates:
        raise UserError(f"no last good run: the history {label} holds no {wanted} on {arch}; {_FIX}")
    first_bad = _first_regressed_run(runs, acks, arch)
    before = [run for run in candidates if first_bad is None or _order(run) < _order(first_bad)]
    if not before:
        raise UserError(
            f"no last good run: every {wanted} on {arch} in {label} is at or after the open regression from "
            f"commit {first_bad.commit[:12]} ({first_bad.started_at:%Y-%m-%d %H:%M}; meddpm-history check lists it); "
            "give --compare-to REV"
        )
    # A run whose own verdicts failed a case (against its baselines, or its A/B against the night before) is
    # not good either: the change points see a step only runs after it, and meanwhile the next night would
    # A/B against the regression itself.
    passed = [run for run in before if not any(case.outcome == "regression" for case in run.cases)]
    if not passed:
        raise UserError(
            f"no last good run: every {wanted} on {arch} in {label} before any open regression failed a case of its "
            "own; give --compare-to REV"
        )
    committed = [run for run in passed if _SHA.fullmatch(run.commit)]
    if not committed:
        raise UserError(
            f"no last good run: every good {wanted} on {arch} in {label} ({len(passed)}) measured a dirty tree or "
            "an unknown commit, which cannot be checked out for an A/B run; run the suite with --history on a "
            "clean commit, or give --compare-to REV"
        )
    return _last_good(committed[-1], processes)


def _first_regressed_run(runs: list[Run], acks: list[Acknowledgement], arch: str) -> Run | None:
    """The earliest run at which an open regression of ``arch`` starts, or None where none is open. An
    acknowledged one is known and expected: the runs after it are good, as ``check`` passes them."""
    by_id = {run.id: run for run in runs}
    frame = case_frame([run for run in runs if run.arch == arch])
    starts = [by_id[step.run_id] for step in covered(detect(frame), acks) if step.failing]
    return min(starts, key=_order, default=None)


def _order(run: Run) -> tuple[datetime.datetime, int]:
    """A run's place in the history: the order the store and the change points read runs in."""
    return run.started_at, run.id


def _last_good(run: Run, processes: int | None) -> LastGood:
    return LastGood(
        commit=run.commit,
        run_id=run.id,
        started_at=run.started_at,
        arch=run.arch,
        kind=run.kind,
        processes=processes or run_processes(run),
        gpu_name=run.gpu_name,
        gpu_uuid=run.gpu_uuid,
        driver=run.driver,
        torch=run.torch,
        cuda=run.cuda,
        cudnn=run.cudnn,
        python=run.python,
        environment=dict(run.environment or {}),
        medians_ms={case.case: case.median_ms for case in run.cases},
        energy_blocks={case.case: blocks for case in run.cases if (blocks := _energy_blocks(case.details))},
    )


def _energy_blocks(details: Mapping[str, Any] | None) -> tuple[BlockEnergy, ...]:
    """A stored case's energy blocks; none where it kept none, where another method measured them (its
    ``energy_method``, which this harness's counter windows would not match), or where they do not read back as
    blocks (a row of another writer), so that such a case's side B measures its energy again."""
    details = details or {}
    if details.get("energy_method") != ENERGY_METHOD:
        return ()
    try:
        return tuple(BlockEnergy.from_dict(block) for block in details.get("energy_blocks") or ())
    except (KeyError, TypeError, ValueError, AttributeError):
        return ()
