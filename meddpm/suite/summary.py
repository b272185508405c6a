"""The Markdown summary of a suite run: what a nightly job posts and a reviewer reads first."""

from __future__ import annotations

from typing import Any

import pandas as pd

from meddpm.judge.verdict import UNDER_THRESHOLD
from meddpm.measure.campaign.time_split import TimeSplit
from meddpm.measure.processes.sides import legend, sides_line
from meddpm.report.explanation import case_first_line, case_name, explanation_lines
from meddpm.report.outlying import outlying_processes
from meddpm.report.tables import SUMMARY_TABLE, kernel_mix_table, ncu_table, results_table


def _rounded(value: float | None, digits: int, scale: float = 1.0) -> float | None:
    return None if value is None else round(scale * value, digits)


def _energy_table(cases: list[dict[str, Any]]) -> pd.DataFrame:
    """Energy per case: per iteration with its counter bound and spread, power, per volume, per sample, TFLOP/J."""
    rows = [
        {
            "case": f"{c['arch']} {c['preset']} b{c['batch_size']}",
            "combo": c["combo"],
            "J/iter": _rounded(c["energy_j_per_iter"], 2),
            "bound %": _rounded(c["energy_quantisation"], 2, 100),
            "spread %": _rounded(c["energy_spread"], 2, 100),
            "W": _rounded(c["mean_power_w"], 0),
            "J/volume": _rounded(c["energy_j_per_volume"], 2),
            "kJ/sample est.": _rounded(c["sample_energy_j_estimate"], 2, 1e-3),
            "TFLOP/J": _rounded(c["tflop_per_j"], 4),
            "counter period ms": _rounded(c["energy_period_ms"], 0),
        }
        for c in results_with_energy(cases)
    ]
    return pd.DataFrame(rows)


def results_with_energy(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cases whose payload carries an energy figure of the windowed method."""
    return [c for c in cases if c.get("energy_method") and c.get("energy_j_per_iter") is not None]


def not_guarded(results: dict[str, Any]) -> list[str]:
    """What this run measured or ran but could not judge: cases with no baseline, sampling with no budget."""
    cases = [
        f"{c['arch']} {c['preset']}/{c['combo']}/b{c['batch_size']} training: no baseline (save one with "
        "--save-baseline)"
        for c in results["cases"]
        if c["outcome"] == "no baseline"
    ]
    sampling = [
        f"{e['arch']} {e['check'].removesuffix(' time (no budget)')}: no sampling budget (add one to the "
        "baseline file's sampling, docs/baselines.md)"
        for e in results["expectations"]
        if e["outcome"] == "no budget"
    ]
    return cases + sampling


def explained(results: dict[str, Any]) -> list[str]:
    """Markdown lines: each flagged case opened by its one line, then its roll-up per module type and the rows that
    moved (A: this run, B: its reference, said once)."""
    flagged = [c for c in results["cases"] if c.get("explain")]
    if not flagged:
        return []
    lines = ["What moved (A: this run, B: its reference; docs/explain.md):", ""]
    for c in flagged:
        lines += [f"**{case_first_line(c)}**", "", *explanation_lines(c["explain"], markdown=True)]
    return lines


def attributed(results: dict[str, Any]) -> list[str]:
    """Markdown lines: whether the code or the machine moved each case, in a run against the last good run."""
    last_good = results.get("last_good")
    rows = [{"case": case_name(c), **c["attribution"]} for c in results["cases"]
            if c.get("attribution")]  # fmt: skip
    if not last_good or not rows:
        return []
    table = pd.DataFrame(rows)
    table["differences"] = ["; ".join(d) for d in table["differences"]]
    return [
        f"Code or machine, against the last good run #{last_good['run_id']} ({last_good['started_at']}, commit "
        f'{last_good["commit"][:12]}): A/B = this tree / its commit now, "vs last good run" = this tree now / '
        "that run's median, \"its commit again\" = its commit now / that run's median (docs/history.md):",
        "",
        table.rename(columns={"against_last_run": "vs last good run", "same_code": "its commit again"})
        .drop(columns=["tolerance"])
        .to_markdown(index=False, floatfmt=".4f"),
        "",
    ]


def apart(results: dict[str, Any]) -> list[str]:
    """Markdown lines: each process that lies apart from its side, with the card's state over its rounds."""
    sentences = [
        sentence
        for c in results["cases"]
        for sentence in outlying_processes(case_name(c), c.get("process_cards") or [])
    ]
    if not sentences:
        return []
    return [
        "Processes apart from their side (each read against its side's median, the card over its own rounds; "
        "docs/statistics.md):",
        "",
        *[f"- {sentence}" for sentence in sentences],
        "",
    ]


def markdown_summary(results: dict[str, Any]) -> str:
    """A short Markdown report of a results document (see :func:`meddpm.suite.records.write_results`)."""
    env = results["environment"]
    where = env.get("gpu_name") or env.get("cpu")
    lines = [
        f"## meddpm-perf on {results['arch']} ({where})",
        "",
        f"torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, commit {env['commit']}, {env['date']}",
        "",
    ]
    ab = len(results.get("sides") or []) == 2
    if ab:  # the A/B lines below call the sides by their short names
        lines += [f"A/B: {legend([side['label'] for side in results['sides']])}", ""]
    if results["cases"]:
        lines += [results_table(results["cases"], SUMMARY_TABLE).to_markdown(index=False), ""]
    if results_with_energy(results["cases"]):
        lines += [
            "Energy (NVML counter over windows of back-to-back iterations; bound: the counter's steps, "
            "spread: twice the replicates' relative SD; sample: one volume's full reverse diffusion at the "
            "training step's J/FLOP; see docs/energy.md):",
            "",
            _energy_table(results["cases"]).to_markdown(index=False),
            "",
        ]
    if results.get("ddp"):
        ddp = pd.DataFrame(results["ddp"])[["combo", "world_size", "median_ms", "samples_per_s", "exposed_comm_ms"]]
        lines += ["Data-parallel weak scaling (slowest rank per round):", "", ddp.to_markdown(index=False), ""]
    ratios = [
        {"preset": preset, "ratio": name, "median": r["median"], "q1": r["q1"], "q3": r["q3"]}
        for preset, by_name in results["ratios"].items()
        for name, r in by_name.items()
    ]
    if ratios:
        lines += ["Interleaved time ratios (per round, paired):", "", pd.DataFrame(ratios).to_markdown(index=False), ""]
    if results["expectations"]:
        exp = pd.DataFrame(results["expectations"])[["arch", "check", "measured", "outcome"]]
        lines += ["Expectations and sampling budgets:", "", exp.to_markdown(index=False), ""]
    unguarded = not_guarded(results)
    if unguarded:
        lines += ["Not guarded (nothing stored to judge against):", ""] + [f"- {u}" for u in unguarded] + [""]
    comparisons = [
        {
            "case": case_name(c),
            "ratio": round(x["ratio"], 4),
            "95 % interval": f"{x['ci_low']:.4f}-{x['ci_high']:.4f}",
            "p": f"{x['p_slower']:.2g}",
            "threshold %": round(100 * x["threshold"], 2),
            "detectable %": round(100 * x["detectable"], 2),
            "processes": f"{len(x['candidate_ms'])} vs {len(x['reference_ms'])}",
            "outcome": x["outcome"],
        }
        for c in results["cases"]
        for x in c.get("comparisons", [])
    ]
    if comparisons:
        lines += [
            "Process-level time verdicts (per-process medians):",
            "",
            pd.DataFrame(comparisons).to_markdown(index=False),
            "",
        ]
    lines += apart(results)
    energy = [
        {
            "case": case_name(c),
            "B J/iter" if ab else "reference J/iter": None if e["baseline"] is None else float(f"{e['baseline']:.4g}"),
            "A J/iter" if ab else "now J/iter": None if e["now"] is None else float(f"{e['now']:.4g}"),
            "change %": None if e["change"] is None else round(100 * e["change"], 1),
            "resolution %": None if e["resolution"] is None else round(100 * e["resolution"], 1),
            "threshold %": round(100 * e["threshold"], 1),
            "outcome": e["outcome"],
            # Side B's figure came from its first process, or from the last good run (docs/energy.md).
            **({"B measured by": e.get("reference_source") or "its first process"} if ab else {}),
        }
        for c in results["cases"]
        if (e := c.get("energy_verdict"))
    ]
    if energy:
        against = "side B's, as the column says" if ab else "the stored baseline"
        lines += [f"Energy verdicts (reference: {against}):", "", pd.DataFrame(energy).to_markdown(index=False), ""]
    memory = [
        {
            "case": case_name(c),
            "metric": m["metric"],
            "B GiB" if ab else "reference GiB": None if m["baseline"] is None else round(m["baseline"], 3),
            "A GiB" if ab else "now GiB": None if m["now"] is None else round(m["now"], 3),
            "change %": None if m["change"] is None else round(100 * m["change"], 1),
            "threshold %": None if m["threshold"] is None else round(100 * m["threshold"], 1),
            "outcome": m["outcome"],
        }
        for c in results["cases"]
        for m in c.get("memory_verdicts", [])
    ]
    if memory:
        against = "side B's processes" if ab else "the stored baseline"
        lines += [f"Memory verdicts (reference: {against}):", "", pd.DataFrame(memory).to_markdown(index=False), ""]
    if ab:  # what each side of an A/B ran under
        lines += [f"A/B sides: {sides_line(results['sides'])}", ""]
    changed = (" regression:", " improvement:", *(f" {outcome}:" for outcome in UNDER_THRESHOLD))
    problems = [v for c in results["cases"] for v in c["verdicts"] if any(word in v for word in changed)]
    if problems:
        heading = "Changes, side A against side B:" if ab else "Changes against the baseline:"
        lines += [heading, ""] + [f"- {p}" for p in problems] + [""]
    lines += explained(results)
    lines += attributed(results)
    unjudged = (" energy not judged:", " energy not comparable:")
    energy_notes = [v for c in results["cases"] for v in c["verdicts"] if any(u in v for u in unjudged)]
    if energy_notes:
        lines += ["Energy not judged:", ""] + [f"- {n}" for n in energy_notes] + [""]
    if results.get("ncu"):
        ncu = ncu_table({p["combo"]: p["totals"] for p in results["ncu"]})
        mix = kernel_mix_table(
            {p["combo"]: pd.DataFrame(p["kernel_mix"]).set_index("category") for p in results["ncu"]}
        )
        lines += [
            "Nsight Compute, per iteration (see ncu/ for the CSV tables, the kernel-mix chart and the reports):",
            "",
            ncu.T.to_markdown(floatfmt=".4g"),
            "",
            "Kernel mix (share of GPU kernel time):",
            "",
            mix.to_markdown(floatfmt=".1%"),
            "",
        ]
    if results.get("power_chart"):
        lines += [f"Power and SM clock per combo over its energy block: {results['power_chart']}", ""]
    if results.get("baseline_saved"):
        lines += [results["baseline_saved"], ""]
    if results.get("time_split"):
        split = results["time_split"]
        table = TimeSplit(split["seconds"]).table(split["wall_s"])
        lines += [
            f"Where the run's {split['wall_s']:.0f} s went (docs/ci.md):",
            "",
            table.to_markdown(floatfmt=("", ".1f", ".1%")),
            "",
        ]
    return "\n".join(lines)
