"""What a session keeps: its results files, ``summary.md``, the ncu tables and charts, and the history entry.

:func:`write_results` turns a session's measurements, expectation checks and saving outcome into
the results document (schema ``meddpm-perf-results/3``), written as the run's own
``results-<time>-<pid>.json`` and as ``results.json`` (the latest run's), and its Markdown summary, with the ncu
CSVs, the kernel-mix chart and the power chart beside them; :func:`append_history` adds the
written document to ``--history``'s database. It may import :mod:`meddpm.suite.measuring`,
:mod:`meddpm.suite.cases`, the suite's options, verdicts and summary, the reports, the history and
the rooms below the suite; nothing of the session's judging or saving.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from meddpm.atomic import write_json_atomic, write_text_atomic
from meddpm.errors import UserError
from meddpm.history.results import SUITE_RESULTS, RunHeader
from meddpm.judge.verdict import Verdict
from meddpm.measure.machine.environment import environment
from meddpm.measure.profiling.ncu import NcuProfile
from meddpm.report.plots import kernel_mix_chart
from meddpm.report.power_plot import power_chart
from meddpm.report.tables import kernel_mix_table, ncu_table
from meddpm.suite.cases import CPU
from meddpm.suite.measuring import Measuring, device_for
from meddpm.suite.options import SuiteOptions
from meddpm.suite.summary import markdown_summary

RESULTS_SCHEMA = SUITE_RESULTS.current


def write_results(
    measured: Measuring,
    expectation_verdicts: list[tuple[str, Verdict, str]],
    save_message: str,
    out: Path,
    partial: bool = False,
) -> Path | None:
    """Write the run's results JSON and Markdown summary into ``out``; returns the summary's path.

    ``partial``: the session was interrupted, so the document says so (``"partial": true``) and no
    reader takes it for a full run.
    """
    # A session of sampling cases alone (-k sample) measured full samples: their verdicts are its results.
    sampled = any(verdict.outcome != "no budget" for _, verdict, _ in expectation_verdicts)
    if not (measured.anything or sampled):
        return None
    on_gpu = torch.cuda.is_available() and (
        bool(measured.ddp_results or measured.ncu_profiles) or any(r.case.on_gpu for r in measured.records.values())
    )
    payload = results_payload(measured, expectation_verdicts, save_message, on_gpu)
    payload["partial"] = partial
    if measured.ncu_profiles:
        _write_ncu_tables(measured.ncu_profiles, out / "ncu", measured.running_arch)
    with_energy = [r.result for r in measured.records.values() if r.result.energy_blocks]
    if with_energy:
        where = f"{payload['arch']}, {with_energy[0].preset} b{with_energy[0].batch_size}"
        payload["power_chart"] = str(power_chart(with_energy, out / "power.png", f"power and SM clock, {where}"))
    # Each run its own file, so runs sharing the folder keep every case; results.json is the latest.
    write_json_atomic(out / measured.options.run_results.name, payload)
    write_json_atomic(out / "results.json", payload)
    summary = out / "summary.md"
    write_text_atomic(summary, markdown_summary(payload))
    return summary


def results_payload(
    measured: Measuring, expectation_verdicts: list[tuple[str, Verdict, str]], save_message: str, on_gpu: bool
) -> dict[str, Any]:
    """The results document of a run on the GPU (or the CPU): what the run was, environment, cases, ratios,
    checks, DDP, ncu."""
    options = measured.options
    return {
        "schema": RESULTS_SCHEMA,
        **RunHeader.of(
            measured.running_arch if on_gpu else CPU,
            options.processes,
            options.compare_to,
            environment(device_for(on_gpu)),
            measured.sides(),
        ).as_dict(),
        "last_good": options.last_good.as_dict() if options.last_good else None,
        "cases": [r.payload() for r in measured.records.values()],
        "ratios": measured.ratio_table(on_gpu),
        "expectations": [
            {"arch": arch, "check": v.metric, "measured": v.now, "outcome": v.outcome, "source": source}
            for arch, v, source in expectation_verdicts
        ],
        "ddp": [r.as_dict() for r in measured.ddp_results],
        "ncu": [p.as_dict() for p in measured.ncu_profiles.values()],
        "baseline_saved": save_message,
        "time_split": {"wall_s": measured.wall_s, "seconds": measured.time_split.seconds},
    }


def ncu_tables(profiles: Mapping[str, NcuProfile]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-combo Nsight Compute table and the kernel-mix shares (categories x combos)."""
    return (
        ncu_table({p.combo: p.totals for p in profiles.values()}),
        kernel_mix_table({p.combo: p.mix() for p in profiles.values()}),
    )


def _write_ncu_tables(profiles: Mapping[str, NcuProfile], out: Path, running_arch: str | None) -> None:
    table, shares = ncu_tables(profiles)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "ncu-per-combo.csv")
    shares.to_csv(out / "kernel-mix.csv")
    first = next(iter(profiles.values()))
    title = f"kernel mix per combo, {first.preset} b{first.batch_size}, {running_arch}"
    kernel_mix_chart(shares, out / "kernel-mix.png", title)


def append_history(options: SuiteOptions, write_line: Callable[[str], None]) -> None:
    """Append the run just written to ``--history``'s database, and say so in one line.

    A failure is one line and leaves the run's results file as written; importing it later adds the run.
    It is the run's own file, not results.json, which a run sharing the folder may have replaced since.
    """
    from meddpm.history.append import append_results  # the store's imports, only for a run that keeps a history

    results = options.run_results
    try:
        line = append_results(options.history, results, asdict(options), "pytest suite")
    except (UserError, OSError) as exc:
        line = f"meddpm: run not appended to the history ({results} has it): {exc}"
    write_line(line)
