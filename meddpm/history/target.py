"""Which history database a run uses: ``--history``, else ``$MEDDPM_HISTORY``, else a default, or none.

Only the standard library here: the suite and the bench decide this before they measure, and a run that keeps no
history should not pay for importing SQLAlchemy and Alembic (about 2 s of a GPU machine's process start).
"""

from __future__ import annotations

import os

ENV_VAR = "MEDDPM_HISTORY"
DEFAULT_DB = "perf-history.sqlite"


def resolve_target(given: str | None, default: str | None = DEFAULT_DB) -> str | None:
    """The database to use: ``given`` (an option's value), else ``$MEDDPM_HISTORY``, else ``default``.

    Empty values count as not given, so a workflow can pass an unset secret through unchanged.
    """
    for value in (given, os.environ.get(ENV_VAR)):
        if value and value.strip():
            return value.strip()
    return default


def history_target(given: str | None, default: str | None = None) -> str | None:
    """The database a run appends to (``given``, else ``$MEDDPM_HISTORY``, else ``default``; None: none).

    It is opened (created, migrated) now, so a bad path or URL stops the run before it measures.
    """
    target = resolve_target(given, default)
    if target is not None:
        from meddpm.history.store import HistoryStore  # only where there is a database to open

        HistoryStore.open(target).close()
    return target
