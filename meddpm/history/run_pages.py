"""The dashboard's runs: a table of the recent runs, the A/B runs with their verdicts, and a page per run.

A run's page holds what a triager asks of one night: what ran (kind, processes, options), where (the whole
environment as recorded), and per case the median, the per-process medians, the clocks, temperature,
throttle and clock-event reasons, the outcome and the verdicts.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from meddpm.atomic import write_text_atomic
from meddpm.history.compare import compare_body, compare_runs
from meddpm.history.html_parts import (
    RUNS_FOLDER,
    CommitLinks,
    case_anchor,
    case_label,
    page,
    page_name,
    run_href,
    software_version,
    table,
)
from meddpm.history.models import CaseResult, Run
from meddpm.history.series import TREND_KINDS, run_processes, series_case

RECENT_RUNS = 30  # rows of the index's table of recent runs; every run still has its page
_GIB = 2**30
# The word an A/B verdict gives the time: "... vs REV (...) time unchanged: baseline 249 ms, now ..."
_AB_WORD = re.compile(r"\btime ([a-z]+(?: [a-z]+)*?):")
# ... and the revision it names: "working tree (...) vs HEAD (7f930cbe0) time ..."
_AB_AGAINST = re.compile(r"\bvs (.+?) time [a-z]")


def write_run_pages(
    out: Path, runs: Sequence[Run], links: CommitLinks, stamp: str, arch_pages: Collection[str] = ()
) -> list[Path]:
    """A page per run in ``out/runs``; returns them. ``arch_pages``: the architectures that have a page."""
    folder = out / RUNS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    pages = []
    by_arch: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.started_at, r.id)):
        by_arch.setdefault(run.arch, []).append(run)
    for arch_runs in by_arch.values():
        for at, run in enumerate(arch_runs):
            near = _Neighbours(
                previous=arch_runs[at - 1] if at else None,
                next=arch_runs[at + 1] if at + 1 < len(arch_runs) else None,
                before=_run_before(arch_runs[:at], run),
                arch_page=run.arch in arch_pages,
            )
            pages.append(folder / f"{run.id}.html")
            write_text_atomic(pages[-1], _run_page(run, links, stamp, near))
    return pages


@dataclass(frozen=True)
class _Neighbours:
    """A run's neighbours on its architecture: the runs before and after it, and the run to compare it with."""

    previous: Run | None
    next: Run | None
    before: Run | None  # the newest earlier run of the same kind and processes: what the night before measured
    arch_page: bool


def _run_before(earlier: Sequence[Run], run: Run) -> Run | None:
    same = [r for r in earlier if r.kind == run.kind and run_processes(r) == run_processes(run)]
    return same[-1] if same else None


def recent_runs_table(runs: Sequence[Run], links: CommitLinks) -> str:
    """The newest runs of every kind, newest first, each linked to its page."""
    newest = sorted(runs, key=lambda r: (r.started_at, r.id), reverse=True)[:RECENT_RUNS]
    rows = [
        [
            f'<a href="{run_href(run.id)}">{run.started_at:%Y-%m-%d %H:%M}</a>',
            html.escape(run.arch),
            _kind(run),
            links.commit(run.commit),
            html.escape(run.branch or "-"),
            html.escape(run.host or "-"),
            html.escape(run.gpu_name or "-"),
            len(run.cases),
            _outcomes(run.cases),
        ]
        for run in newest
    ]
    headers = ["run (UTC)", "arch", "kind", "commit", "branch", "host", "GPU", "cases", "outcomes"]
    return table(headers, rows, "No runs in the history yet.")


def ab_runs_table(runs: Sequence[Run], links: CommitLinks) -> str:
    """Every A/B run, newest first: the working tree's commit against the revision, and each case's verdict."""
    ab = sorted((r for r in runs if r.kind == "ab"), key=lambda r: (r.started_at, r.id), reverse=True)
    rows = [
        [
            f'<a href="{run_href(run.id)}">{run.started_at:%Y-%m-%d %H:%M}</a>',
            html.escape(run.arch),
            links.commit(run.commit),
            _against(run),
            run_processes(run),
            "<br>".join(f"{case_label(c.case)}: {_ab_verdict(c)}" for c in run.cases),
        ]
        for run in ab
    ]
    headers = ["run (UTC)", "arch", "working tree at", "against", "processes per side", "time: verdict, ratio [95 %]"]
    return table(headers, rows, "No A/B runs.")


def _against(run: Run) -> str:
    """The revision an A/B run measured against: as its file said, else as its verdicts name it (files written
    before they recorded ``compare_to`` still say it in every verdict: ``... vs HEAD (7f930cbe0) time ...``)."""
    recorded = (run.options or {}).get("compare_to")
    if recorded:
        return html.escape(str(recorded))
    for case in run.cases:
        for verdict in case.verdicts:
            found = _AB_AGAINST.search(verdict)
            if found:
                return f"{html.escape(found.group(1))} (from its verdicts)"
    return "not recorded"


def _ab_verdict(case: CaseResult) -> str:
    """A case's A/B time verdict in a word with its ratio and interval (the whole verdict on hover), a regression
    in red; else its outcome."""
    comparison = next(
        (c for c in (case.details or {}).get("comparisons") or [] if isinstance(c, dict) and c.get("metric") == "time"),
        None,
    )
    ratio = ""
    if comparison is not None and isinstance(comparison.get("ratio"), (int, float)):
        ratio = f" {comparison['ratio']:.4f}"
        if isinstance(comparison.get("ci_low"), (int, float)) and isinstance(comparison.get("ci_high"), (int, float)):
            ratio += f" [{comparison['ci_low']:.4f}, {comparison['ci_high']:.4f}]"
    for verdict in case.verdicts:
        found = _AB_WORD.search(verdict)
        if found:
            word = found.group(1)
            style = ' class="open"' if word == "regression" else ""
            return f'<span{style} title="{html.escape(verdict)}">{html.escape(word)}{ratio}</span>'
    return html.escape(case.outcome or "no verdict") + ratio


def _kind(run: Run) -> str:
    processes = run_processes(run)
    kind = {"ab": "A/B run", "suite": "suite run", "bench": "bench run"}.get(run.kind, run.kind)
    return html.escape(kind) + (f", {processes} processes" if processes > 1 else "")


def _outcomes(cases: Sequence[CaseResult]) -> str:
    counts: dict[str, int] = {}
    for case in cases:
        counts[case.outcome or "-"] = counts.get(case.outcome or "-", 0) + 1
    return html.escape(", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())))


def _run_page(run: Run, links: CommitLinks, stamp: str, near: _Neighbours) -> str:
    title = f"{run.arch} {run.kind} run {run.id} of {run.started_at:%Y-%m-%d %H:%M}"
    summary = table(
        ["field", "value"],
        [
            ["started (UTC)", f"{run.started_at:%Y-%m-%d %H:%M:%S}"],
            ["kind", _kind(run)],
            ["commit", links.commit(run.commit)],
            ["commit subject", html.escape(run.commit_subject or "not recorded")],
            ["CI job", _ci_job(run.ci_job)],
            ["branch", html.escape(run.branch or "-")],
            ["host", html.escape(run.host or "-")],
            ["GPU", html.escape(f"{run.gpu_name or '-'} {run.gpu_uuid or ''}".strip())],
            ["driver, torch, CUDA, cuDNN, Python", html.escape(_software(run))],
            ["source", html.escape(run.source)],
        ],
        "",
    )
    environment = table(["field", "value"], _fields(run.environment), "Not recorded.")
    options = table(["option", "value"], _fields(run.options), "None recorded.")
    body = (
        f"<p>{_navigation(run, near)}</p><h1>{html.escape(title)}</h1>"
        f"<p>{stamp}.</p>{summary}<h2>Cases</h2>{_cases_table(run, near.arch_page)}"
        f"{_against_before(run, near.before, links)}"
        f"<h2>Verdicts</h2>{_verdicts(run.cases)}<h2>Environment</h2>{environment}<h2>Options</h2>{options}"
    )
    return page(title, body)


def _ci_job(address: str | None) -> str:
    """The CI job that measured the run, linked; an address that is no web address (a file may say anything, and
    a ``javascript:`` link would run in the page) stays text."""
    if not address:
        return "none recorded (not run in CI)"
    if re.fullmatch(r"https?://[^\s\"<>]+", address):
        return f'<a href="{html.escape(address)}">{html.escape(address)}</a>'
    return html.escape(address)


def _software(run: Run) -> str:
    versions = [(name, getattr(run, name)) for name in ("driver", "torch", "cuda", "cudnn", "python")]
    return ", ".join(software_version(name, value) if value else "-" for name, value in versions)


def _navigation(run: Run, near: _Neighbours) -> str:
    """Links to the index, the architecture's page, and the architecture's previous and next runs."""
    parts = ['<a href="../index.html">index</a>']
    if near.arch_page:
        parts.append(f'<a href="../{page_name(run.arch)}.html">{html.escape(run.arch)} charts</a>')
    if near.previous is not None:
        parts.append(f'<a href="{near.previous.id}.html">&larr; previous run ({near.previous.id})</a>')
    if near.next is not None:
        parts.append(f'<a href="{near.next.id}.html">next run ({near.next.id}) &rarr;</a>')
    return " | ".join(parts)


def _against_before(run: Run, before: Run | None, links: CommitLinks) -> str:
    """What changed against the newest earlier run of the same kind and processes: commits, environment, cases."""
    if before is None:
        return '<h2>Against the run before</h2><p class="none">The first run of its kind here.</p>'
    fields = ("gpu_name", "driver", "torch", "cuda", "cudnn", "python")
    changed = [
        f"{name} {html.escape(software_version(name, getattr(before, name)))} &rarr; "
        f"{html.escape(software_version(name, getattr(run, name)))}"
        for name in fields
        if getattr(before, name) and getattr(run, name) and getattr(before, name) != getattr(run, name)
    ]
    rows = compare_runs(before, run)
    worse, better = (sum(row.verdict == word for row in rows) for word in ("worse", "better"))
    summary = (
        f"<p>Commits {links.range(before.commit, run.commit)}; environment: "
        f"{', '.join(changed) if changed else 'no recorded difference'}; "
        f"{worse} worse and {better} better beyond the suite's thresholds, of {len(rows)} figures.</p>"
    )
    return f"<h2>Against the run before</h2>{summary}{compare_body(before, run, rows, links, up='../')}"


def _cases_table(run: Run, arch_page: bool) -> str:
    cases = run.cases
    rows = [
        [
            _case_link(run, c, arch_page),
            f"{c.median_ms:.4g}",
            ", ".join(f"{m:.4g}" for m in c.process_medians_ms) or "-",
            len(c.samples_ms),
            _number(c.peak_allocated_bytes, _GIB, "{:.3f}"),
            _number(c.energy_j_per_iter, 1, "{:.4g}"),
            _number(c.tflops, 1, "{:.4g}"),
            f"{_number(c.sm_clock_mean_mhz, 1, '{:.0f}')} / {_number(c.sm_clock_min_mhz, 1, '{:.0f}')}",
            _number(c.temperature_max_c, 1, "{:.0f}"),
            html.escape(", ".join(c.throttle_reasons) or "-"),
            html.escape(", ".join(c.clock_event_reasons) or "-"),
            html.escape(c.outcome or "-"),
        ]
        for c in cases
    ]
    headers = [
        "case",
        "median ms/iter",
        "per-process medians (ms)",
        "rounds",
        "peak GiB",
        "J/iter",
        "TFLOP/s",
        "SM clock mean / min (MHz)",
        "max &deg;C",
        "throttle reasons",
        "clock-event reasons",
        "outcome",
    ]
    return table(headers, rows, "No cases.")


def _case_link(run: Run, case: CaseResult, arch_page: bool) -> str:
    """The case, linked to its charts on the architecture's page where it has a series there."""
    if not arch_page or run.kind not in TREND_KINDS:
        return case_label(case.case)
    return f'<a href="../{page_name(run.arch)}.html#{case_anchor(series_case(run, case))}">{case_label(case.case)}</a>'


def _verdicts(cases: Sequence[CaseResult]) -> str:
    lines = [f"<li>{html.escape(v)}</li>" for c in cases for v in c.verdicts]
    return f"<ul>{''.join(lines)}</ul>" if lines else '<p class="none">None recorded.</p>'


def _number(value: float | None, scale: float, form: str) -> str:
    return "-" if value is None else form.format(value / scale)


def _fields(mapping: dict | None) -> list[list[str]]:
    return [
        [html.escape(str(k)), html.escape(v if isinstance(v, str) else json.dumps(v, default=str))]
        for k, v in sorted((mapping or {}).items())
    ]
