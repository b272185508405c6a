"""Results documents (the suite's results.json, meddpm-bench's JSON) turned into history rows.

Every version of both is read: the suite's ``meddpm-perf-results/1`` and ``/2``, the bench's
``meddpm-bench/1`` to ``/3``. The current versions say what a run was (:func:`run_description`: a plain
measurement, one in worker processes, or an A/B run against a revision) and the bench's its
architecture; the older ones are upgraded by recovering both the way they used to be recovered
(:func:`upgraded`). Anything else is refused with one line, so a foreign file in a batch is named
and skipped rather than stored as nonsense; so is a figure no measurement gives (a time that is NaN,
infinite, 0 or negative; a negative or non-finite energy, clock or count), naming the case and the field.
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
from meddpm.judge.arch import arch_from_gpu

# Oldest first: the last of each family is the version its writer writes now.
SUITE_SCHEMAS = ("meddpm-perf-results/1", "meddpm-perf-results/2")
BENCH_SCHEMAS = ("meddpm-bench/1", "meddpm-bench/2", "meddpm-bench/3")
SUITE_SCHEMA = SUITE_SCHEMAS[-1]
BENCH_SCHEMA = BENCH_SCHEMAS[-1]
SCHEMAS = (*SUITE_SCHEMAS, *BENCH_SCHEMAS)
# Versions written before the files said what the run was and, for the bench, on which architecture.
_UNDESCRIBED = ("meddpm-perf-results/1", "meddpm-bench/1", "meddpm-bench/2")
# What a run was: measured in the writing process, in N fresh worker processes, or an A/B run
# (--compare-to) measuring the working tree against a revision in alternating processes.
RUN_KINDS = ("measure", "processes", "ab")
_DESCRIPTION = ("run_kind", "processes", "compare_to")  # the fields that say so (see run_description)
_FAMILIES = tuple(sorted({schema.split("/")[0] + "/" for schema in SCHEMAS}))
# Run fields that a live append knows but a results file does not carry (the suite and the bench
# add them from the machine they run on): they fill the run's columns when given.
CONTEXT_FIELDS = ("branch", "host", "gpu_uuid", "driver", "options")

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


class ForeignDocument(UserError):
    """The document is valid JSON but not a meddpm results file (no known schema)."""


def run_from_document(document: Any, source: str, context: Mapping[str, Any] | None = None) -> Run:
    """The :class:`Run` (with its cases) a results document describes, not yet stored.

    ``context`` adds what the file lacks (see :data:`CONTEXT_FIELDS`). A document of another kind
    (:class:`ForeignDocument`), of a version this code cannot read, or missing a field the history
    needs is a one-line :class:`UserError`.
    """
    if not isinstance(document, dict):
        raise ForeignDocument("not a meddpm results file (the JSON is not an object)")
    schema = document.get("schema")
    if isinstance(schema, str) and schema not in SCHEMAS and schema.startswith(_FAMILIES):
        # A newer version of a results file is a problem to report, not a foreign file to pass over.
        raise UserError(f"a {schema} file, which this meddpm-perf cannot read (it reads {', '.join(SCHEMAS)})")
    if schema not in SCHEMAS:
        found = f"schema {schema!r}" if schema is not None else "no schema field"
        raise ForeignDocument(f"not a meddpm results file ({found}; known: {', '.join(SCHEMAS)})")
    if document.get("partial"):
        # Cut-short rounds and unjudged cases would pose as a night's full run in the series and change points.
        during = f" during {document['interrupted']}" if document.get("interrupted") else ""
        raise UserError(f"a partial run (interrupted{during}), not imported: re-run it to record the figures")
    try:
        current = upgraded(document)
        run = _suite_run(current) if schema in SUITE_SCHEMAS else _bench_run(current)
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
    return run


def run_description(processes: int, compare_to: str | None) -> dict[str, Any]:
    """What a results file says its run was: ``run_kind`` (one of :data:`RUN_KINDS`), ``processes`` (per
    side in an A/B run; 1: the writing process itself) and ``compare_to`` (the revision of an A/B run)."""
    kind = "ab" if compare_to is not None else "processes" if processes > 1 else "measure"
    return {"run_kind": kind, "processes": processes, "compare_to": compare_to}


def upgraded(document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` with what the current versions carry: its run's description and the bench's ``arch``.

    A file of a current version has them, and they are checked; an older one gets them recovered the
    way the history did before the files said so: an A/B run by its comparisons (the bench) or by
    verdicts that name the working tree, which no other verdict does (the suite); worker processes by
    per-process medians; the bench's architecture from its GPU's name and compute capability. Their
    revision was not recorded (``compare_to`` None).
    """
    document = dict(document)
    schema = document["schema"]
    if schema not in _UNDESCRIBED:
        kind, processes, compare_to = (document[name] for name in _DESCRIPTION)
        if kind not in RUN_KINDS or type(processes) is not int or processes < 1:
            raise ValueError(f"run_kind {kind!r} with processes {processes!r} describes no run")
        if not (compare_to is None or isinstance(compare_to, str)):
            raise ValueError(f"compare_to {compare_to!r} is not a revision")
        if not isinstance(document["arch"], str):
            raise ValueError(f"arch {document['arch']!r} is not an architecture key")
        return document
    if schema in SUITE_SCHEMAS:
        cases = document.get("cases") or []
        ab = any("working tree (" in v for c in cases for v in c.get("verdicts") or [])
        processes = max((len(c.get("process_medians_ms") or []) for c in cases), default=0)
    else:
        env = document["environment"]
        if env.get("gpu_name"):
            major, minor = (int(part) for part in str(env["compute_capability"]).split("."))
            document["arch"] = arch_from_gpu(env["gpu_name"], (major, minor))
        else:
            document["arch"] = "cpu"
        ab = bool(document.get("comparisons"))
        medians = _bench_process_medians(document.get("process_medians_ms"))
        processes = max((len(m) for m in medians.values()), default=0)
    described = run_description(max(processes, 1), None)
    if ab:  # an A/B run with its revision unknown
        described["run_kind"] = "ab"
    return {**document, **described}


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


def _run(document: Mapping[str, Any], kind: str, arch: str) -> Run:
    env = document["environment"]
    return Run(
        kind=kind,
        arch=arch,
        started_at=_utc(env["date"]),
        commit=str(env.get("commit") or "unknown"),
        branch=env.get("branch"),
        host=env.get("host"),
        gpu_name=env.get("gpu_name"),
        gpu_uuid=env.get("gpu_uuid"),
        driver=env.get("driver"),
        torch=_text(env.get("torch")),
        cuda=_text(env.get("cuda")),
        cudnn=_text(env.get("cudnn")),
        python=_text(env.get("python")),
        options={},
        environment=dict(env),
        cases=[],
    )


def _kind(document: Mapping[str, Any], source: str) -> str:
    """The run's kind in the history: ``ab`` for an A/B run, which measures a working tree against a
    revision and is no part of the branch's trends; else ``suite`` or ``bench``."""
    return "ab" if document["run_kind"] == "ab" else source


def _suite_run(document: Mapping[str, Any]) -> Run:
    cases = document.get("cases") or []
    run = _run(document, _kind(document, "suite"), str(document["arch"]))
    run.cases = [_case(c) for c in cases] + [_ddp_case(d) for d in document.get("ddp") or []]
    return run


def _bench_run(document: Mapping[str, Any]) -> Run:
    run = _run(document, _kind(document, "bench"), document["arch"])
    # meddpm-bench/1 read the card's state before and after; later files summarise it per case.
    first = (document["results"] or [{}])[0]
    run.driver = run.driver or (first.get("gpu_state_before") or {}).get("driver")
    run.options = {"preset": document.get("preset"), **(document.get("settings") or {})}
    process_medians = _bench_process_medians(document.get("process_medians_ms"))
    run.cases = [_case({**c, "process_medians_ms": process_medians.get(c["combo"], [])}) for c in document["results"]]
    ddp = document.get("ddp") or []
    run.cases += [_ddp_case(d) for d in ddp]
    return run


def _bench_process_medians(by_source: Any) -> dict[str, list[float]]:
    """The working tree's per-process medians by combo (the first source), from a bench run in processes."""
    if not isinstance(by_source, dict) or not by_source:
        return {}
    first = next(iter(by_source.values()))
    return {str(combo): [float(v) for v in medians] for combo, medians in first.items()}


def _case(case: Mapping[str, Any]) -> CaseResult:
    name = f"{case['preset']}/{case['combo']}/b{int(case['batch_size'])}"
    process_medians = _times(case.get("process_medians_ms") or [], name, "process_medians_ms")
    if len(process_medians) > 1:
        median = statistics.median(process_medians)
    else:
        median = _times([case["stats"]["median"]], name, "stats.median")[0]
    return CaseResult(
        case=name,
        preset=str(case["preset"]),
        combo=str(case["combo"]),
        batch_size=int(case["batch_size"]),
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
    batch = int(result["batch_per_rank"])
    world = int(result["world_size"])
    name = f"{result['preset']}/{result['combo']}/b{batch}/ddp{world}"
    ranks: Sequence[Sequence[float]] = [_times(r, name, "rank_samples_ms") for r in result["rank_samples_ms"]]
    slowest = [max(values) for values in zip(*ranks)]
    energy = _figures(_per_rank(result, "energy_j_per_iter"), name, "energy_j_per_iter")
    peaks = _per_rank(result, "peak_allocated_bytes")
    _figures(peaks, name, "peak_allocated_bytes")
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


def _utc(text: str) -> datetime.datetime:
    """An ISO time as naive UTC (what both SQLite and PostgreSQL columns hold alike)."""
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return moment


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _times(values: Sequence[Any], case: str, field: str) -> list[float]:
    """Times in milliseconds, each finite and above 0, or a one-line UserError naming the case and field."""
    times = [float(v) for v in values]
    for value in times:
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"case {case}: {field} holds {value}; a time must be a finite number of ms above 0")
    return times


def _figures(values: Sequence[Any], case: str, field: str) -> list[float]:
    """Energies, clocks, counts: each finite and 0 or more, or a one-line UserError naming the case and field."""
    figures = [float(v) for v in values]
    for value in figures:
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"case {case}: {field} holds {value}; it must be a finite number, 0 or more")
    return figures


def _figure(case: Mapping[str, Any], field: str, name: str) -> float | None:
    value = case.get(field)
    return None if value is None else _figures([value], name, field)[0]


def _count(case: Mapping[str, Any], field: str, name: str) -> int | None:
    value = case.get(field)
    if value is None:
        return None
    _figures([value], name, field)
    return int(value)  # the value itself: a float would round a count above 2**53
