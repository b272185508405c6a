"""The counts gate: an iteration's launches, bytes allocated and FLOPs against a measured spread.

Counts do not depend on the clock (:mod:`meddpm.measure.profiling.iteration`), so a move is judged
without a test or a threshold: a count above the reference's spread (the minimum and maximum over its
processes, widened by :data:`SLACK` where a count varies between machine starts) is a regression, one below it
an improvement, each named in a verdict of its own; with none
moved the case gets one "unchanged" verdict of its launches. The reference is a stored baseline's
``counts`` or, in an A/B run, the revision's processes; both judge a case even when its time is too
noisy to (docs/explain.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meddpm.judge.baseline import CountRange
from meddpm.judge.verdict import Verdict
from meddpm.measure.profiling.iteration import BYTES_ALLOCATED, FLOPS, LAUNCHES

_UNITS = {LAUNCHES: "launches", BYTES_ALLOCATED: "bytes", FLOPS: "FLOPs"}
# How far beyond the stored spread a count may lie and still be the same code. Launches and FLOPs are
# exact; the bytes an iteration allocates include the workspaces cuDNN picks on each machine start, which
# moved them by some thousandths of a percent between H200 starts (docs/explain.md): a tenth of a percent
# leaves room for that and still catches a tensor more of any size that matters.
SLACK = {BYTES_ALLOCATED: 0.001}


def count_ranges(runs: Sequence[Mapping[str, int]]) -> dict[str, CountRange]:
    """The spread of each count over ``runs`` (one per process), for the counts every run has."""
    if not runs:
        return {}
    keys = [k for k in runs[0] if all(k in r for r in runs)]
    return {k: CountRange(min(r[k] for r in runs), max(r[k] for r in runs)) for k in keys}


def farthest(runs: Sequence[Mapping[str, int]], reference: Mapping[str, CountRange]) -> dict[str, int]:
    """Per count, the run's value farthest outside ``reference``'s spread (the first run's where all lie in it)."""
    keys = [k for k in runs[0] if all(k in r for r in runs)]

    def outside(key: str, value: int) -> int:
        return abs(value - reference[key].nearest(value)) if key in reference else 0

    return {k: max((r[k] for r in runs), key=lambda v, k=k: outside(k, v)) for k in keys}


def judge_counts(subject: str, runs: Sequence[Mapping[str, int]], reference: Mapping[str, CountRange]) -> list[Verdict]:
    """Each count of ``runs`` (one per process) that left ``reference``'s spread, else one "unchanged" verdict.

    "not measured" where either side has no counts (a baseline saved before them, a worker of an older
    harness, nothing profiled): not a failure.
    """
    now = count_ranges(runs)
    judged = [k for k in reference if k in now]
    if not judged:
        return [Verdict(subject, "counts", "not measured", _first(reference), _first(now), "launches")]
    moved = []
    for key in judged:
        spread, measured, slack = reference[key], now[key], SLACK.get(key, 0.0)
        if measured.max > spread.max * (1 + slack):
            moved.append(Verdict(subject, _metric(key), "regression", spread.max, measured.max, _unit(key), slack))
        elif measured.min < spread.min * (1 - slack):
            moved.append(Verdict(subject, _metric(key), "improvement", spread.min, measured.min, _unit(key), slack))
    if moved:
        return moved
    key = LAUNCHES if LAUNCHES in judged else judged[0]
    return [Verdict(subject, "counts", "unchanged", reference[key].max, now[key].max, _unit(key))]


def _first(counts: Mapping[str, CountRange]) -> float | None:
    """The launches (or the first count) of a side, for a "not measured" verdict."""
    spread = counts.get(LAUNCHES) or next(iter(counts.values()), None)
    return None if spread is None else spread.max


def _metric(key: str) -> str:
    """``launches.convolution`` -> "convolution launches"; ``bytes_allocated`` -> "bytes allocated"."""
    if key.startswith(f"{LAUNCHES}."):
        return f"{key.removeprefix(f'{LAUNCHES}.')} launches"
    return key.replace("_", " ") if key != FLOPS else "FLOPs"


def _unit(key: str) -> str:
    return _UNITS.get(key.split(".")[0], "")
