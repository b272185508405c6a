"""The bench's report on stdout, a line at a time, going on without it once its reader has gone."""

from __future__ import annotations

from collections.abc import Sequence

from meddpm.errors import drop_stdout
from meddpm.measure.campaign.result import ComboResult


def say(text: object) -> None:
    """Print a line of the report; once stdout's reader has gone (``| head``), go on without it.

    The run still writes its results file and appends to the history, which come after the tables.
    Flushing each line makes a closed pipe show here rather than in a later, unguarded write.
    """
    try:
        print(text, flush=True)
    except BrokenPipeError:
        drop_stdout()


def say_gpu_state(results: Sequence[ComboResult]) -> None:
    """One line on the card's condition, so a throttled run is visible at a glance."""
    states = [s for r in results for s in r.gpu_states]
    if not states:
        return
    reasons = sorted({reason for r in results for reason in r.clock_event_reasons} - {"GpuIdle"})
    say(
        f"GPU {states[0].name}, driver {states[0].driver}: SM clock {min(s.sm_clock_mhz for s in states)}-"
        f"{max(s.sm_clock_mhz for s in states)} MHz (max {states[0].sm_clock_max_mhz}), "
        f"temperature up to {max(s.temperature_c for s in states)} C, "
        f"clock events: {', '.join(reasons) or 'none'}"
    )
