"""Stored runs read back row by row, so that a corrupt row is one line naming it and the rest is still read.

A shared database may hold rows that this code never wrote: a hand edit, another version's writer, a tool
that wrote SQLite's dynamic types freely (text in a number column, malformed JSON, a date in another form).
The ORM would stop the whole read at the first such value with a traceback (a ``JSONDecodeError``, an
``Invalid isoformat string``), or pass a text on to numpy. Here each value is decoded by its column's own type
and checked against what the models declare; a run row that fails is left out with its cases, a case row
that fails is left out alone, each with one line naming the table, the row's id and the field.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from sqlalchemy import Connection, Table, select, type_coerce
from sqlalchemy.types import JSON, BigInteger, Boolean, DateTime, Float, Integer, NullType, String

from meddpm.history.models import CaseResult, Run

# What each JSON column holds (the models' annotations); every other JSON column holds an object.
_NUMBER_LISTS = {"process_medians_ms", "samples_ms", "energy_samples_j"}
_TEXT_LISTS = {"throttle_reasons", "clock_event_reasons", "verdicts"}


class _Corrupt(ValueError):
    """A stored value that cannot be what its column says."""


def read_runs(connection: Connection) -> tuple[list[Run], list[str]]:
    """Every run that reads back whole, with the cases that do, oldest first (detached, not in a session);
    and a line for each row left out."""
    problems: list[str] = []
    runs: dict[int, Run] = {}
    for row in _rows(connection, Run.__table__):
        try:
            runs[row["id"]] = Run(**_decoded(Run.__table__, row, connection), cases=[])
        except _Corrupt as exc:
            problems.append(f"runs row {row['id']}: {exc}; the run is left out")
    for row in _rows(connection, CaseResult.__table__):
        run = runs.get(row["run_id"])
        if run is None:  # its run was left out, and said so
            continue
        try:
            run.cases.append(CaseResult(**_decoded(CaseResult.__table__, row, connection)))
        except _Corrupt as exc:
            problems.append(f"case_results row {row['id']} (run {row['run_id']}): {exc}; the case is left out")
    return sorted(runs.values(), key=lambda run: (run.started_at, run.id)), problems


def _rows(connection: Connection, table: Table) -> list[dict[str, Any]]:
    """The table's rows as the driver returns them, nothing decoded yet (ordered by id)."""
    columns = [type_coerce(column, NullType()).label(column.key) for column in table.columns]
    query = select(*columns).order_by(table.c.id)
    return [dict(row) for row in connection.execute(query).mappings()]


def _decoded(table: Table, row: dict[str, Any], connection: Connection) -> dict[str, Any]:
    return {column.key: _value(column, row[column.key], connection) for column in table.columns}


def _value(column: Any, value: Any, connection: Connection) -> Any:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    if value is None:
        if not column.nullable:
            raise _Corrupt(f"{column.key} is empty")
        return None
    # SQLite hands back text for dates and JSON, which the column type decodes; PostgreSQL's driver returns
    # them decoded, and its typed columns hold nothing else.
    dialect = connection.dialect
    processor = column.type.dialect_impl(dialect).result_processor(dialect, None) if dialect.name == "sqlite" else None
    if processor is not None:
        try:
            value = processor(value)
        except (ValueError, TypeError):
            raise _Corrupt(f"{column.key} holds {shown}, which is no {_what(column)}") from None
    if not _fits(column, value):
        raise _Corrupt(f"{column.key} holds {shown}, which is no {_what(column)}")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fits(column: Any, value: Any) -> bool:
    kind = column.type
    if isinstance(kind, JSON):
        if column.key in _NUMBER_LISTS:
            return isinstance(value, list) and all(_number(v) for v in value)
        if column.key in _TEXT_LISTS:
            return isinstance(value, list) and all(isinstance(v, str) for v in value)
        return isinstance(value, dict)
    if isinstance(kind, DateTime):
        return isinstance(value, datetime.datetime)
    if isinstance(kind, Boolean):
        return isinstance(value, bool)
    if isinstance(kind, (Integer, BigInteger)):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(kind, Float):
        return _number(value)
    return isinstance(value, str) if isinstance(kind, String) else True


def _what(column: Any) -> str:
    kind = column.type
    if isinstance(kind, JSON):
        return (
            "JSON list of numbers"
            if column.key in _NUMBER_LISTS
            else "JSON list of texts"
            if column.key in _TEXT_LISTS
            else "JSON object"
        )
    for types, words in [
        (DateTime, "date and time"),
        (Boolean, "true or false"),
        ((Integer, BigInteger), "whole number"),
        (Float, "finite number"),
        (String, "text"),
    ]:
        if isinstance(kind, types):
            return words
    return "value of its column"
