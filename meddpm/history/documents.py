"""Results documents (the suite's results.json, meddpm-bench's JSON) turned into history rows.

Every version of both is read, through the versioned loader: :data:`~meddpm.history.results.SUITE_RESULTS`
and :data:`~meddpm.history.results.BENCH_RESULTS` upgrade an old one to the current version, recovering what
it did not say (what the run was, the bench's architecture), and :func:`~meddpm.history.results.results_document`
reads it into one typed :class:`~meddpm.history.results.ResultsDocument`. Anything else is refused with one
line, so a foreign file in a batch is named and skipped rather than stored as nonsense; so is a figure no
measurement gives (a time that is not a number, NaN, infinite, 0 or negative; a negative or non-finite
energy, clock or count), one beyond any measurement (1e400, which JSON reads as infinite; a median of 1e308 ms), a
count or size its column cannot hold, a text longer than its column, and a date that is none, naming the case
and the field.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from meddpm.errors import UserError
from meddpm.history.models import CaseResult, Run
from meddpm.history.results import BENCH_RESULTS, RESULTS_KINDS, SUITE_RESULTS, ResultsDocument, results_document
from meddpm.versioned.loader import upgrade

# Oldest first: the last of each family is the version its writer writes now.
SUITE_SCHEMAS = SUITE_RESULTS.versions
BENCH_SCHEMAS = BENCH_RESULTS.versions
SUITE_SCHEMA = SUITE_RESULTS.current
BENCH_SCHEMA = BENCH_RESULTS.current
SCHEMAS = (*SUITE_SCHEMAS, *BENCH_SCHEMAS)
_DESCRIPTION = ("run_kind", "processes", "compare_to")  # the fields that say what the run was
# Run fields that a live append knows but a results file does not carry (the suite and the bench
# add them from the machine they run on): they fill the run's columns when given.
CONTEXT_FIELDS = ("branch", "host", "gpu_uuid", "driver", "options", "commit_subject", "ci_job")
# Bounds no measurement reaches, so that a typo or a corrupt file is refused rather than stored: over a day per
# iteration; joules, MHz, degrees or TFLOP/s far above any card; what a BIGINT column (bytes) and an INTEGER
# column (batch and world sizes: PostgreSQL's integer is 32 bits) hold.
_MAX_MS = 1e8
_MAX_FIGURE = 1e9
_MAX_COUNT = 2**63 - 1
_MAX_SIZE = 2**31 - 1

# Case fields that get a column of their own; the rest of a case goes into ``details`` unchanged.
_COLUMNS = {
    "preset",
    "combo",
    "batch_size",
    "math_precision",
    "samples_ms",
    "process_medians_ms",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "energy_j_per_iter",
    "energy_samples_j",
    "tflops",
    "sm_clock_mean_mhz",
    "sm_clock_min_mhz",
    "temperature_max_c",
    "throttle_reasons",
    "clock_event_reasons",
    "reliable",
    "outcome",
    "verdicts",
}


def run_from_document(document: Any, source: str, context: Mapping[str, Any] | None = None) -> Run:
    """The :class:`Run` (with its cases) a results document describes, not yet stored.

    ``context`` adds what the file lacks (see :data:`CONTEXT_FIELDS`). A document of another kind
    (:class:`~meddpm.versioned.loader.ForeignDocument`), of a version this code cannot read, or missing a
    field the history needs is a one-line :class:`UserError`.
    """
    kind, current = upgrade(document, None, *RESULTS_KINDS)
    schema = document["schema"]
    if current.get("partial"):
        # Cut-short rounds and unjudged cases would pose as a night's full run in the series and change points.
        during = f" during {current['interrupted']}" if current.get("interrupted") else ""
        raise UserError(f"a partial run (interrupted{during}), not imported: re-run it to record the figures")
    try:
        run = _run(results_document(current, schema, kind))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        detail = f"field {exc.args[0]!r} is missing" if isinstance(exc, KeyError) else " ".join(str(exc).split())
        raise UserError(f"a malformed {schema} file ({detail})") from None
    if not run.cases:
        raise UserError(f"a {schema} file with no measured cases")
    seen: set[str] = set()
    for case in run.cases:
        if case.case in seen:
            raise UserError(f"a {schema} file with case {case.case} twice")
        seen.add(case.case)
    context = dict(context or {})
    for name in CONTEXT_FIELDS:
        if context.get(name) is not None:
            setattr(run, name, context[name])
    # What the run was, from its file, beside the options a live append gives: runs measured in one
    # process and in several are different series.
    run.options = {**run.options, **{name: current[name] for name in _DESCRIPTION}}
    run.schema = schema
    run.source = source
    run.fingerprint = fingerprint(document)
    run.added_at = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    _fits(run)
    return run


def fingerprint(document: Mapping[str, Any]) -> str:
    """A hash of what a document measured: its environment (time, commit, machine) and every sample.

    Fields a run adds or rewrites later (the bench's kernel mix, a baseline-saved message) are left out,
    so the first save of a bench run and its final file are the same run.
    """
    cases = document.get("cases") or document.get("results") or []
    identity = {
        "environment": document.get("environment"),
        "samples": [[c.get("combo"), c.get("batch_size"), c.get("samples_ms")] for c in cases],
        "ddp": [[d.get("combo"), d.get("world_size"), d.get("rank_samples_ms")] for d in document.get("ddp") or []],
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


def _run(document: ResultsDocument) -> Run:
    """The run's row and its cases. Its kind in the history is ``ab`` for an A/B run, which measures a working
    tree against a revision and is no part of the branch's trends; else the writer's (``suite`` or ``bench``).
    A run against the last good run's commit (the nightly's) is a trend run: its cases are the working tree's,
    measured as any run in processes would measure them, and the next night's last good run may be this one."""
    env = document.header.environment
    trend = document.header.run_kind != "ab" or document.last_good is not None
    return Run(
        kind=document.writer if trend else "ab",
        arch=document.header.arch,
        started_at=_utc(env["date"]),
        commit=str(env.get("commit") or "unknown"),
        commit_subject=_subject(env.get("commit_subject")),
        ci_job=_text(env.get("ci_job")),
        branch=env.get("branch"),
        host=env.get("host"),
        gpu_name=env.get("gpu_name"),
        gpu_uuid=env.get("gpu_uuid"),
        driver=env.get("driver"),
        torch=_text(env.get("torch")),
        cuda=_text(env.get("cuda")),
        cudnn=_text(env.get("cudnn")),
        python=_text(env.get("python")),
        options=dict(document.options),
        environment=dict(env),
        cases=[_case(c) for c in document.cases] + [_ddp_case(d) for d in document.ddp],
    )


def _case(case: Mapping[str, Any]) -> CaseResult:
    batch = _size(case["batch_size"], f"{case['preset']}/{case['combo']}", "batch_size")
    name = f"{case['preset']}/{case['combo']}/b{batch}"
    process_medians = _times(case.get("process_medians_ms") or [], name, "process_medians_ms")
    if len(process_medians) > 1:
        median = statistics.median(process_medians)
    else:
        median = _times([case["stats"]["median"]], name, "stats.median")[0]
    return CaseResult(
        case=name,
        preset=str(case["preset"]),
        combo=str(case["combo"]),
        batch_size=batch,
        world_size=None,
        math_precision=case.get("math_precision"),
        median_ms=median,
        process_medians_ms=process_medians,
        samples_ms=_times(case["samples_ms"], name, "samples_ms"),
        peak_allocated_bytes=_count(case, "peak_allocated_bytes", name),
        peak_reserved_bytes=_count(case, "peak_reserved_bytes", name),
        energy_j_per_iter=_figure(case, "energy_j_per_iter", name),
        energy_samples_j=_figures(case.get("energy_samples_j") or [], name, "energy_samples_j"),
        tflops=_figure(case, "tflops", name),
        sm_clock_mean_mhz=_figure(case, "sm_clock_mean_mhz", name),
        sm_clock_min_mhz=_figure(case, "sm_clock_min_mhz", name),
        temperature_max_c=_figure(case, "temperature_max_c", name),
        throttle_reasons=list(case.get("throttle_reasons") or []),
        clock_event_reasons=list(case.get("clock_event_reasons") or []),
        reliable=case.get("reliable"),
        outcome=case.get("outcome"),
        verdicts=[str(v) for v in case.get("verdicts") or []],
        details={k: v for k, v in case.items() if k not in _COLUMNS},
    )


def _ddp_case(result: Mapping[str, Any]) -> CaseResult:
    """A DDP result as a case of its own: the slowest rank of each round is the round's time."""
    where = f"{result['preset']}/{result['combo']} (DDP)"
    batch = _size(result["batch_per_rank"], where, "batch_per_rank")
    world = _size(result["world_size"], where, "world_size")
    name = f"{result['preset']}/{result['combo']}/b{batch}/ddp{world}"
    ranks: Sequence[Sequence[float]] = [_times(r, name, "rank_samples_ms") for r in result["rank_samples_ms"]]
    slowest = [max(values) for values in zip(*ranks)]
    energy = _figures(_per_rank(result, "energy_j_per_iter"), name, "energy_j_per_iter")
    peaks = _counts(_per_rank(result, "peak_allocated_bytes"), name, "peak_allocated_bytes")
    clocks = _figures(_per_rank(result, "sm_clock_min_mhz"), name, "sm_clock_min_mhz")
    return CaseResult(
        case=name,
        preset=str(result["preset"]),
        combo=str(result["combo"]),
        batch_size=batch,
        world_size=world,
        math_precision=None,
        median_ms=_times([result["median_ms"]], name, "median_ms")[0],
        process_medians_ms=[],
        samples_ms=slowest,
        peak_allocated_bytes=max(peaks) if peaks else None,
        peak_reserved_bytes=None,
        # The job's energy per iteration is every rank's card together.
        energy_j_per_iter=float(sum(energy)) if energy else None,
        energy_samples_j=[],
        tflops=None,
        sm_clock_mean_mhz=None,
        sm_clock_min_mhz=float(min(clocks)) if clocks else None,
        temperature_max_c=None,
        throttle_reasons=[],
        clock_event_reasons=[],
        reliable=None,
        outcome=None,
        verdicts=[],
        details=dict(result),
    )


def _per_rank(result: Mapping[str, Any], field: str) -> list[Any]:
    """A DDP result's per-rank figures, less the ranks that had no reading (no NVML, as on a CPU's gloo ranks)."""
    return [v for v in result.get(field) or [] if v is not None]


def _utc(text: Any) -> datetime.datetime:
    """An ISO time as naive UTC (what both SQLite and PostgreSQL columns hold alike), or a one-line UserError."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise UserError(
            f"environment.date = {text!r}, which must be an ISO 8601 date and time (YYYY-MM-DDThh:mm:ss)"
        ) from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return moment


def _subject(value: Any) -> str | None:
    """A commit's subject as its column holds it: a subject is anyone's text, and one longer than the column is
    cut rather than cost the run its place in the history."""
    text = _text(value)
    return None if text is None else text[: Run.commit_subject.type.length]


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _times(values: Sequence[Any], case: str, field: str) -> list[float]:
    """Times in milliseconds, each a finite number above 0, or a one-line UserError naming the case and field."""
    times = _numbers(values, case, field)
    for value in times:
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"case {case}: {field} holds {value}; a time must be a finite number of ms above 0")
        if value > _MAX_MS:
            raise UserError(f"case {case}: {field} holds {value:g}, beyond any measurement (at most {_MAX_MS:g} ms)")
    return times


def _figures(values: Sequence[Any], case: str, field: str) -> list[float]:
    """Energies, clocks, counts: each finite and 0 or more, or a one-line UserError naming the case and field."""
    figures = _numbers(values, case, field)
    for value in figures:
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"case {case}: {field} holds {value}; it must be a finite number, 0 or more")
        if value > _MAX_FIGURE:
            raise UserError(f"case {case}: {field} holds {value:g}, beyond any measurement (at most {_MAX_FIGURE:g})")
    return figures


def _numbers(values: Any, case: str, field: str) -> list[float]:
    """``values`` as floats, or a one-line UserError naming the case, the field and the value that is no number."""
    if not isinstance(values, list):
        raise UserError(f"case {case}: {field} = {json.dumps(values)}, which must be a list of numbers")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"case {case}: {field} holds {json.dumps(value)}, which must be a number")
    return [float(v) for v in values]


def _figure(case: Mapping[str, Any], field: str, name: str) -> float | None:
    value = case.get(field)
    return None if value is None else _figures([value], name, field)[0]


def _count(case: Mapping[str, Any], field: str, name: str) -> int | None:
    value = case.get(field)
    return None if value is None else _counts([value], name, field)[0]


def _counts(values: Sequence[Any], case: str, field: str) -> list[int]:
    """Counts (bytes): each a whole number from 0 to what a BIGINT holds, or a one-line UserError."""
    _numbers(values, case, field)
    for value in values:
        if not (math.isfinite(value) and 0 <= value <= _MAX_COUNT and float(value).is_integer()):
            raise UserError(f"case {case}: {field} holds {value}; it must be a whole number from 0 to {_MAX_COUNT}")
    return [int(v) for v in values]  # the values themselves: a float would round a count above 2**53


def _size(value: Any, where: str, field: str) -> int:
    """A batch or world size: a whole number from 1 to what an INTEGER column holds, or a one-line UserError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= _MAX_SIZE:
        raise UserError(f"{where}: {field} = {json.dumps(value)}, which must be a whole number from 1 to {_MAX_SIZE}")
    if not float(value).is_integer():
        raise UserError(f"{where}: {field} = {json.dumps(value)}, which must be a whole number")
    return int(value)


def _fits(run: Run) -> None:
    """Refuse a text longer than its column: PostgreSQL would refuse it at the insert, and with it the batch."""
    rows = [("the run's", run)] + [(f"case {case.case}:", case) for case in run.cases]
    for where, row in rows:
        for column in row.__table__.columns:
            value, length = getattr(row, column.key), getattr(column.type, "length", None)
            if length is not None and isinstance(value, str) and len(value) > length:
                raise UserError(
                    f"{where} {column.key} is {len(value)} characters long; the history keeps at most {length}"
                )
