"""The bench's report on stdout, a line at a time, going on without it once its reader has gone."""

from __future__ import annotations

from meddpm.errors import drop_stdout


def say(text: object) -> None:
    """Print a line of the report; once stdout's reader has gone (``| head``), go on without it.

    The run still writes its results file and appends to the history, which come after the tables.
    Flushing each line makes a closed pipe show here rather than in a later, unguarded write.
    """
    try:
        print(text, flush=True)
    except BrokenPipeError:
        drop_stdout()
