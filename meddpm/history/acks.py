"""Acknowledged regressions: a step marked as known and expected, so that ``check`` stops failing on it.

``meddpm-history ack ARCH CASE METRIC --note TEXT`` stores an :class:`~meddpm.history.models.Acknowledgement`
for the open regression of that series. It covers that series' open regression while the step started no
later than the series' newest run at the time (``through``): the step's place may move by a run as nights
are added, but a regression that starts after it (the series worse again after a fix) is open anew.

Acknowledgements travel with the runs: an import of another history database brings its own, and a
``meddpm-history-acks/1`` file (a list of them, as the table holds them) is imported like a results file, so
the acknowledgements that belong to the project's measured runs live beside them in ``docs/measurements``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

import pandas as pd

from meddpm.errors import UserError
from meddpm.history.changepoints import ALL_CASES, Step
from meddpm.history.models import Acknowledgement
from meddpm.versioned.loader import Kind

ACKS = Kind(
    family="meddpm-history-acks",
    versions=("meddpm-history-acks/1",),
    noun="acknowledgements file",
    fix="write it as docs/history.md shows, or acknowledge with meddpm-history ack",
)
_FIELDS = ("arch", "case", "metric", "step_commit", "step_started_at", "through", "note", "acknowledged_at")
_TIMES = ("step_started_at", "through", "acknowledged_at")
NOTE_LENGTH = 2000


def acknowledge(
    steps: Sequence[Step], frame: pd.DataFrame, arch: str, case: str, metric: str, note: str
) -> Acknowledgement:
    """The acknowledgement of the open regression of ``arch case metric`` among ``steps`` (as ``check`` names
    it), or a one-line UserError naming the open ones."""
    note = " ".join(note.split())
    if not note:
        raise UserError("--note is empty; say why the step is known and expected")
    control = sorted({f"\\x{ord(c):02x}" for c in note if not c.isprintable()})
    if control:
        # check prints the note to a terminal and the dashboard into HTML: an escape sequence would act there
        raise UserError(f"--note holds control characters ({', '.join(control)}); write it as plain text")
    if len(note) > NOTE_LENGTH:
        raise UserError(f"--note is {len(note)} characters long; the history keeps at most {NOTE_LENGTH}")
    found = [s for s in steps if s.open and (s.arch, s.case, s.metric) == (arch, case, metric)]
    if not found:
        listed = "; ".join(f"{s.arch} {s.case} {s.metric}" for s in steps if s.open) or "none"
        raise UserError(
            f"no open regression of {arch} {case} {metric} to acknowledge (open: {listed}); "
            "give ARCH CASE METRIC as meddpm-history check prints them"
        )
    step = found[-1]
    series = frame[frame["arch"] == arch]
    if case != ALL_CASES:
        series = series[(series["case"] == case) & series[metric].notna()]
    return Acknowledgement(
        arch=arch,
        case=case,
        metric=metric,
        step_commit=step.commit,
        step_started_at=step.started_at,
        through=max(series["started_at"]),
        note=note,
        acknowledged_at=datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None),
    )


def covered(steps: Sequence[Step], acks: Sequence[Acknowledgement]) -> list[Step]:
    """``steps``, each open one that an acknowledgement covers carrying its note (the newest that covers it)."""
    newest_first = sorted(acks, key=lambda ack: ack.acknowledged_at, reverse=True)
    out = []
    for step in steps:
        ack = next(
            (
                a
                for a in newest_first
                if step.open
                and (a.arch, a.case, a.metric) == (step.arch, step.case, step.metric)
                and step.started_at <= a.through
            ),
            None,
        )
        out.append(step if ack is None else dataclasses.replace(step, note=ack.note, noted_at=ack.acknowledged_at))
    return out


def acks_from_document(document: dict[str, Any]) -> list[Acknowledgement]:
    """The acknowledgements of a ``meddpm-history-acks/1`` document (upgraded by :data:`ACKS`); raises
    ``KeyError``, ``TypeError`` or ``ValueError`` for one that is malformed."""
    acks = []
    for entry in document["acknowledgements"]:
        fields = {name: entry[name] for name in _FIELDS}
        for name in _FIELDS:
            if not isinstance(fields[name], str) or not fields[name].strip():
                raise ValueError(f"{name} {fields[name]!r} is not a text")
        for name in _TIMES:
            moment = datetime.datetime.fromisoformat(fields[name])
            if moment.tzinfo is not None:
                moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
            fields[name] = moment
        if len(fields["note"]) > NOTE_LENGTH:
            raise ValueError(f"a note of {len(fields['note'])} characters (at most {NOTE_LENGTH})")
        acks.append(Acknowledgement(**fields))
    return acks


def copy_ack(ack: Acknowledgement) -> Acknowledgement:
    """A new, unstored copy (to move acknowledgements from one database to another)."""
    return Acknowledgement(**{name: getattr(ack, name) for name in _FIELDS})
