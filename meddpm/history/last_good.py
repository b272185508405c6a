"""The last good run: the newest run of an architecture that no open regression had reached, for ``--compare-to``.

An A/B run against the last good commit measures a working tree against the code that last measured well,
on the same architecture. A run is good when it started before the first run of every open regression of
its architecture (:func:`meddpm.history.changepoints.detect`, the rule ``meddpm-history check`` fails on):
the commit of a run at or after such a step carries the regression, whichever cases that run measured. Only
a run of a plain git commit can be checked out again: one of a dirty tree (``sha+dirty``) or of an unknown
commit is passed over. This module answers the option; :mod:`meddpm.history.last_good_lookup` reads the history,
and :mod:`meddpm.history.last_good_run` is the run found.
"""

from __future__ import annotations

from meddpm.errors import UserError
from meddpm.history.last_good_run import LastGood
from meddpm.measure.processes.revision import checkout_root, resolve_revision

# What --compare-to takes to mean the last good run's commit.
LAST_GOOD = "last-good"


def check_known(found: LastGood) -> None:
    """A one-line UserError, saying where the commit came from, when git here lacks the last good run's commit."""
    root = checkout_root()
    try:
        resolve_revision(found.commit, root)
    except UserError:
        raise UserError(
            f"--compare-to=last-good: {found.describe()}, a commit that git does not know in {root}; "
            "fetch it (git fetch), or give --compare-to a revision"
        ) from None


def compare_to_last_good(
    given: str | None, target: str | None, arch: str, kind: str, processes: int
) -> LastGood | None:
    """The last good run where ``--compare-to`` says :data:`LAST_GOOD`, else None (any other revision).

    One measured in ``processes`` processes where there is one, since a median of process medians and one of a
    single process's rounds need not agree to the 0.1 %; else one in any number (its line says how many).
    """
    if given is None or given.strip() != LAST_GOOD:
        return None
    # Only here: the history's store brings SQLAlchemy, Alembic and ruptures (about 2 s of a GPU machine's process
    # start), which a run against anything else never needs.
    from meddpm.history.last_good_lookup import last_good
    from meddpm.history.store import HistoryLocked

    try:
        return last_good(target, arch, kind, processes)
    except HistoryLocked:
        raise  # the lookup in any number of processes would wait for the same lock again
    except UserError:
        return last_good(target, arch, kind)
