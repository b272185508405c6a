"""The results document of a run, typed: what the suite's results.json and meddpm-bench's JSON both say.

Both writers fill a :class:`RunHeader` (the architecture, what the run was, the environment) and write it
into their own format; the history reads either format, through the versioned loader
(:mod:`meddpm.versioned.loader`, kinds :data:`SUITE_RESULTS` and :data:`BENCH_RESULTS`), into one
:class:`ResultsDocument`. The suite writes ``meddpm-perf-results/3``, the bench ``meddpm-bench/4``; older
versions are upgraded step by step, recovering what they did not say the way the history did before
the files said it (each step below says how).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from meddpm.judge.arch import arch_from_gpu
from meddpm.versioned.loader import Kind

# What a run was: measured in the writing process, in N fresh worker processes, or an A/B run
# (--compare-to, --compare-python, --compare-env) measuring the working tree against a revision, another
# interpreter or another environment in alternating processes.
RUN_KINDS = ("measure", "processes", "ab")
_RESULTS_FIX = "give a results file written by the suite or meddpm-bench"


@dataclass(frozen=True)
class RunHeader:
    """What every results file says of its run, whichever writer wrote it.

    ``run_kind``: one of :data:`RUN_KINDS`; ``processes``: per side in an A/B run (1: the writing process
    itself); ``compare_to``: the revision of an A/B run; ``arch``: the architecture key (``cpu`` off the GPU);
    ``sides``: in worker processes, each side's code, interpreter, extra environment variables and the environment
    its first worker reported (:func:`meddpm.measure.processes.sides.side_record`), A first; empty otherwise.
    """

    arch: str
    run_kind: str
    processes: int
    compare_to: str | None
    environment: dict[str, Any]
    sides: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        arch: str,
        processes: int,
        compare_to: str | None,
        environment: dict[str, Any],
        sides: list[dict[str, Any]] | None = None,
    ) -> RunHeader:
        """The header of a run in ``processes`` processes (a side), against ``compare_to`` or a side B of ``sides``."""
        described = run_description(processes, compare_to)
        if len(sides or []) == 2:  # side B may be this tree under another interpreter or environment
            described["run_kind"] = "ab"
        return cls(arch=arch, **described, environment=environment, sides=list(sides or []))

    def as_dict(self) -> dict[str, Any]:
        """The header's fields as both formats write them."""
        return {
            "arch": self.arch,
            "run_kind": self.run_kind,
            "processes": self.processes,
            "compare_to": self.compare_to,
            "environment": self.environment,
            "sides": self.sides,
        }


def run_description(processes: int, compare_to: str | None) -> dict[str, Any]:
    """``run_kind``, ``processes`` and ``compare_to`` of a run in ``processes`` processes against ``compare_to``."""
    kind = "ab" if compare_to is not None else "processes" if processes > 1 else "measure"
    return {"run_kind": kind, "processes": processes, "compare_to": compare_to}


@dataclass
class ResultsDocument:
    """A results file as the history reads it, of either writer, upgraded to its current version.

    ``cases``: each timed case's figures as written (a bench case with its per-process medians added);
    ``ddp``: each DDP result; ``options``: the bench's preset and settings (the suite's file has none).
    """

    schema: str  # the version it was written as
    writer: str  # suite or bench
    header: RunHeader
    partial: bool
    interrupted: str
    cases: list[dict[str, Any]]
    ddp: list[dict[str, Any]]
    options: dict[str, Any] = field(default_factory=dict)
    # The history's run an A/B against the last good commit was set beside (--compare-to=last-good); None else.
    last_good: dict[str, Any] | None = None


def results_document(document: Mapping[str, Any], schema: str, kind: Kind) -> ResultsDocument:
    """The typed document of a results file upgraded by ``kind`` (``schema``: the version it was written as).

    Raises ``KeyError`` for a missing field and ``ValueError`` for a header that describes no run.
    """
    kind_of_run, processes, compare_to = document["run_kind"], document["processes"], document["compare_to"]
    if kind_of_run not in RUN_KINDS or type(processes) is not int or processes < 1:
        raise ValueError(f"run_kind {kind_of_run!r} with processes {processes!r} describes no run")
    if not (compare_to is None or isinstance(compare_to, str)):
        raise ValueError(f"compare_to {compare_to!r} is not a revision")
    if not isinstance(document["arch"], str):
        raise ValueError(f"arch {document['arch']!r} is not an architecture key")
    environment = document["environment"]
    if not isinstance(environment, dict):
        raise ValueError(f"environment {environment!r} is not an object")
    sides = document["sides"]
    if not isinstance(sides, list) or not all(isinstance(side, dict) for side in sides):
        raise ValueError(f"sides {sides!r} is not a list of objects")
    header = RunHeader(document["arch"], kind_of_run, processes, compare_to, environment, sides)
    common = {
        "schema": schema,
        "header": header,
        "partial": bool(document.get("partial")),
        "interrupted": str(document.get("interrupted") or ""),
        "ddp": list(document.get("ddp") or []),
        "last_good": document.get("last_good") if isinstance(document.get("last_good"), dict) else None,
    }
    if kind is SUITE_RESULTS:
        return ResultsDocument(writer="suite", cases=list(document.get("cases") or []), **common)
    medians = bench_process_medians(document.get("process_medians_ms"))
    cases = [{**c, "process_medians_ms": medians.get(c["combo"], [])} for c in document["results"]]
    options = {"preset": document.get("preset"), **(document.get("settings") or {})}
    return ResultsDocument(writer="bench", cases=cases, options=options, **common)


def bench_process_medians(by_source: Any) -> dict[str, list[float]]:
    """The working tree's per-process medians by combo (the first source), from a bench run in processes."""
    if not isinstance(by_source, dict) or not by_source:
        return {}
    first = next(iter(by_source.values()))
    return {str(combo): list(medians) for combo, medians in first.items()}


def suite_1_to_2(document: dict[str, Any]) -> dict[str, Any]:
    """Version 2 says what the run was. Version 1 is read as an A/B run if a verdict names the working tree
    (no other verdict does), as a run in worker processes if its cases have per-process medians; the
    revision of an A/B run was not kept (``compare_to`` None)."""
    cases = document.get("cases") or []
    ab = any("working tree (" in v for c in cases for v in c.get("verdicts") or [])
    processes = max((len(c.get("process_medians_ms") or []) for c in cases), default=0)
    return {**document, **_recovered_description(processes, ab)}


def bench_1_to_2(document: dict[str, Any]) -> dict[str, Any]:
    """Version 1 read the card's state before and after the run, version 2 summarises it per case: the
    driver, which the history keeps, moves from the first result's state before into the environment."""
    results = document.get("results") or [{}]
    driver = (results[0].get("gpu_state_before") or {}).get("driver") if isinstance(results[0], dict) else None
    environment = document.get("environment")
    if driver and isinstance(environment, dict) and not environment.get("driver"):
        document["environment"] = {**environment, "driver": driver}
    return document


def bench_2_to_3(document: dict[str, Any]) -> dict[str, Any]:
    """Version 3 says the architecture and what the run was. Version 2's architecture is worked out from its
    GPU's name and compute capability (``cpu`` without a GPU); an A/B run is told by its comparisons, one in
    worker processes by its per-process medians; the revision of an A/B run was not kept."""
    environment = document["environment"]
    if environment.get("gpu_name"):
        major, minor = (int(part) for part in str(environment["compute_capability"]).split("."))
        arch = arch_from_gpu(environment["gpu_name"], (major, minor))
    else:
        arch = "cpu"
    medians = bench_process_medians(document.get("process_medians_ms"))
    processes = max((len(m) for m in medians.values()), default=0)
    return {**document, "arch": arch, **_recovered_description(processes, bool(document.get("comparisons")))}


def add_sides(document: dict[str, Any]) -> dict[str, Any]:
    """The next version records each side of a run in worker processes (``sides``). The older ones did not:
    an A/B then ran both sides under the writing interpreter, which their ``environment`` describes, with no
    variables of their own, but which worker reported what is not known; their ``sides`` is empty."""
    return {**document, "sides": []}


def _recovered_description(processes: int, ab: bool) -> dict[str, Any]:
    described = run_description(max(processes, 1), None)
    if ab:  # an A/B run with its revision unknown
        described["run_kind"] = "ab"
    return described


SUITE_RESULTS = Kind(
    family="meddpm-perf-results",
    versions=("meddpm-perf-results/1", "meddpm-perf-results/2", "meddpm-perf-results/3"),
    steps={"meddpm-perf-results/1": suite_1_to_2, "meddpm-perf-results/2": add_sides},
    noun="meddpm results file",
    fix=_RESULTS_FIX,
)
BENCH_RESULTS = Kind(
    family="meddpm-bench",
    versions=("meddpm-bench/1", "meddpm-bench/2", "meddpm-bench/3", "meddpm-bench/4"),
    steps={"meddpm-bench/1": bench_1_to_2, "meddpm-bench/2": bench_2_to_3, "meddpm-bench/3": add_sides},
    noun="meddpm results file",
    fix=_RESULTS_FIX,
)
RESULTS_KINDS = (SUITE_RESULTS, BENCH_RESULTS)
