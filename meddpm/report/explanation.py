"""A flagged case's explanation as a person reads it: one line first, the roll-up per module type, the rows that
moved, and what share of the difference they hold.

Every function reads the JSON rows of :mod:`meddpm.judge.explain` (a results file's ``explain``, or
``ExplainRow.as_dict()``), so the suite's terminal and ``summary.md``, the pull-request comment, the bench and
the bisection print the same words (docs/explain.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from meddpm.measure.profiling.names import short_name
from meddpm.measure.profiling.scopes import OUTSIDE

NO_PROFILE = (
    "the baseline keeps no profile of this case (saved before meddpm-baseline/5), so only its counts are compared; "
    "--save-baseline on this GPU would store one"
)
EXPLAIN_TOP_ROWS = 8  # the rows of a flagged case that summary.md, the terminal and the bench show
_MIB = 2**20


def first_line(
    name: str,
    time: tuple[float, float, float] | None,
    memory: float | None,
    rows: Sequence[Mapping[str, Any]],
) -> str:
    """One line that opens a flagged case: "amp_bf16: time +1.39 % [1.13, 1.65], peak memory +22.6 %: Swish runs 35
    more float32 elementwise kernels".

    ``time``: the relative change and its interval's ends (``ratio - 1``), None where time did not move the case;
    ``memory``: the peak memory verdict's relative change, None where memory did not.
    """
    moved = []
    if time is not None:
        change, low, high = time
        moved.append(f"time {change:+.2%} [{100 * low:.2f}, {100 * high:.2f}]".replace("%", " %"))
    if memory is not None:
        moved.append(f"peak memory {memory:+.1%}".replace("%", " %"))
    cause = _cause(rows, memory is not None)
    head = f"{name}: {', '.join(moved) or 'counts moved'}"
    return f"{head}: {cause}" if cause else head


def rollup_lines(rows: Sequence[Mapping[str, Any]], n: int = 3) -> list[str]:
    """The shown module types that moved, most first: "Conv3d: +6.5 ms, 70 more float32 elementwise kernels"."""
    return [
        f"{r['label']}: {_ms(r)}" + (f", {r['detail']}" if r.get("detail") else "")
        for r in rows
        if r["level"] == "module" and r.get("shown", True)
    ][:n]


def share_line(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the shown rows hold of the iteration's difference, in milliseconds A - B; "" without rows by name."""
    names = [r for r in rows if r["level"] == "name"]
    if not names:
        return ""
    total = sum(_moved(r) for r in names)
    shown = [r for r in names if r.get("shown", True)]
    part = sum(_moved(r) for r in shown)
    share = f" ({part / total:.0%})" if abs(total) > 1e-9 else ""
    return (
        f"{len(shown)} of {len(names)} rows moved beyond their processes' variation; they hold {part:+.2f} ms of "
        f"the iteration's {total:+.2f} ms{share}"
    )


def memory_lines(rows: Sequence[Mapping[str, Any]], n: int = 3) -> list[str]:
    """Module types whose forward keeps more (saved activations): "Swish: +3072.0 MiB (4.0 -> 3076.0), in ..."."""
    grown = [r for r in rows if r["level"] == "memory" and r["count_a"] > r["count_b"]]
    return [
        f"{r['label']}: {(r['count_a'] - r['count_b']) / _MIB:+.1f} MiB kept by its forward "
        f"({r['count_b'] / _MIB:.1f} -> {r['count_a'] / _MIB:.1f})"
        + (f", most in {r['module']}" if r["module"] else "")
        for r in grown[:n]
    ]


def explain_table(rows: Sequence[Mapping[str, Any]], n: int = EXPLAIN_TOP_ROWS) -> pd.DataFrame:
    """The first ``n`` shown rows by name: short name, where it ran (module -> aten operator), change, calls and
    milliseconds per side. The full name stays in the JSON."""
    shown = [r for r in rows if r["level"] == "name" and r.get("shown", True)][:n]
    columns = ["row", "where", "change", "calls A", "calls B", "ms A", "ms B"]
    return pd.DataFrame(
        [
            {
                "row": _row_label(r, 48),
                "where": _cut(" -> ".join(p for p in (r.get("module", ""), r.get("op", "")) if p), 72),
                "change": r["change"],
                "calls A": r["count_a"],
                "calls B": r["count_b"],
                "ms A": "" if r["ms_a"] is None else f"{r['ms_a']:.4f}",
                "ms B": "" if r["ms_b"] is None else f"{r['ms_b']:.4f}",
            }
            for r in shown
        ],
        columns=columns,
    )


def counts_table(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The shown counts (against a stored baseline, which keeps no profile) as counts: each side's and the change,
    B being the nearest end of the baseline's spread over its processes."""
    shown = [r for r in rows if r["level"] == "count" and r.get("shown", True)]
    return pd.DataFrame(
        [
            {
                "count": r.get("label") or r["name"],
                "A": f"{r['count_a']:,}",
                "B": f"{r['count_b']:,}",
                "change": f"{r['count_a'] - r['count_b']:+,}"
                + (f" ({r['count_a'] / r['count_b'] - 1:+.2%})" if r["count_b"] else ""),
            }
            for r in shown
        ],
        columns=["count", "A", "B", "change"],
    )


def explanation_lines(rows: Sequence[Mapping[str, Any]], markdown: bool) -> list[str]:
    """A flagged case's roll-up, memory and share lines, then its table of rows (or of counts, with one line saying
    that the baseline keeps no profile), as text or Markdown."""
    counted = any(r["level"] == "count" for r in rows)
    said = (*rollup_lines(rows), *memory_lines(rows), *([NO_PROFILE] if counted else []))
    lines = [f"- {line}" if markdown else f"  {line}" for line in said]
    share = share_line(rows)
    tables = [t for t in (explain_table(rows), counts_table(rows)) if len(t)]
    if markdown:
        body = [t.to_markdown(index=False, disable_numparse=True) for t in tables]
        return [*lines, *([f"{share}:"] if share else []), "", *"\n\n".join(body).splitlines(), ""]
    return [*lines, *([f"  {share}:"] if share else []), *(t.to_string(index=False) for t in tables)]


def _cause(rows: Sequence[Mapping[str, Any]], memory: bool) -> str:
    """The module type that moved most, in words; where memory moved, the one whose forward keeps most more."""
    grown = [r for r in rows if r["level"] == "memory" and r["count_a"] > r["count_b"]] if memory else []
    if grown:
        kept = grown[0]
        keeps = f"{kept['label']}'s forward keeps {(kept['count_a'] - kept['count_b']) / _MIB:.1f} MiB more"
        # A module type whose work changed precision is likelier the origin than the one that keeps the bytes
        # (an output no longer cast back makes the next module cast and keep its own copy): named first.
        shifted = next((r for r in rows if r["level"] == "module" and " instead of " in (r.get("detail") or "")), None)
        return f"{shifted['label']} runs {shifted['detail']}; {keeps}" if shifted else keeps
    top = next((r for r in rows if r["level"] == "module" and r.get("shown", True)), None)
    if top is None or top["label"] == OUTSIDE:  # no module to name (a compiled graph runs without their scopes)
        row = next((r for r in rows if r["level"] == "name" and r.get("shown", True)), None)
        if row is not None:
            return _row_words(row)
    if top is None:
        count = next((r for r in rows if r["level"] == "count" and r["count_a"] != r["count_b"]), None)
        return "" if count is None else f"{count['name']} {count['count_b']} -> {count['count_a']}"
    if top.get("detail"):
        return f"{top['label']} runs {top['detail']}"
    return f"{top['label']} {_ms(top)}"


def _row_words(row: Mapping[str, Any]) -> str:
    """A row that moved, in words: "implicit_convolveNd_sgemm bfloat16 appeared (+1.8 ms)"."""
    label = _row_label(row, 60)
    if row["change"] in ("appeared", "vanished"):
        return f"{label} {row['change']} ({_ms(row)})"
    if row["change"] == "calls":
        return f"{label} ran {row['count_b']} -> {row['count_a']} times ({_ms(row)})"
    return f"{label} {_ms(row)}"


def _row_label(row: Mapping[str, Any], n: int) -> str:
    """A row's short name (its label, else one made from its full name), cut to ``n`` characters."""
    return _cut(row.get("label") or short_name(row["name"]), n)


def _moved(row: Mapping[str, Any]) -> float:
    return (row["ms_a"] or 0.0) - (row["ms_b"] or 0.0)


def _ms(row: Mapping[str, Any]) -> str:
    return f"{_moved(row):+.1f} ms"


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def case_name(case: Mapping[str, Any]) -> str:
    """A results document's case by its baseline key: ``preset/combo/bN``."""
    return f"{case['preset']}/{case['combo']}/b{case['batch_size']}"


def case_first_line(case: Mapping[str, Any]) -> str:
    """:func:`first_line` of a results file's case: its time comparison's change and interval, its peak memory
    verdict's change where memory moved the case, its ``explain`` rows."""
    x = next((c for c in case.get("comparisons", []) if c.get("metric") == "time"), None)
    time = None
    if x is not None and all(isinstance(x.get(k), (int, float)) for k in ("ratio", "ci_low", "ci_high")):
        time = (x["ratio"] - 1, x["ci_low"] - 1, x["ci_high"] - 1)
    memory = next(
        (m["change"] for m in case.get("memory_verdicts", [])
         if m.get("metric") == "peak memory" and m.get("outcome") == "regression" and m.get("change") is not None),
        None,
    )  # fmt: skip
    return first_line(case_name(case), time, memory, case["explain"])
