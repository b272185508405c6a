"""Two readings of every results file kept under docs/measurements, run from the repository root:

    python docs/measurements/2026-11-28-issue51-h200-fresh/kept_results.py

1. energy: each energy verdict of an A/B whose two sides ran the same commit (side A's first process against side
   B's, one card, minutes apart): |A/B - 1|, the spread that side B's carried energy must stay within
   (docs/energy.md, "Side B's energy in a nightly");
2. rounds: each case whose every process ran exactly 5 rounds, its process medians from all 5 rounds against those
   from the first 3: how much more the 3-round medians spread between processes (docs/statistics.md, "How many
   rounds a process times").
"""

import json
import lzma
import statistics
from pathlib import Path

KEPT = Path("docs/measurements")


def documents():
    """(folder, document) for each run's results file, plain or compressed."""
    for path in sorted(KEPT.rglob("results*.json*")):
        if path.name.startswith("results-"):  # a run's own copy of its results.json
            continue
        opener = lzma.open if path.suffix == ".xz" else open
        try:
            with opener(path) as f:
                yield str(path.parent.relative_to(KEPT)), json.load(f)
        except (OSError, ValueError, EOFError):
            continue


def same_commit(document) -> bool:
    sides = document.get("sides") or []
    return len(sides) == 2 and sides[0]["commit"].split("+")[0][:9] == sides[1]["commit"][:9]


def energy_changes() -> list[float]:
    changes = []
    for folder, document in documents():
        for case in document.get("cases", []) if same_commit(document) else []:
            verdict = case.get("energy_verdict") or {}
            if verdict.get("now") and verdict.get("baseline"):
                changes.append(verdict["now"] / verdict["baseline"] - 1)
                print(
                    f"energy {folder:52s} {case['combo']:9s} {changes[-1]:+.2%} "
                    f"(resolution {verdict['resolution']:.1%})"
                )
    return changes


def rel_sd(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def round_spreads() -> list[tuple[str, float, float, float]]:
    """(combo, spread of 5-round medians, spread of 3-round medians, largest |m3/m5 - 1|) per case."""
    found = []
    for folder, document in documents():
        for case in document.get("cases", []):
            medians, samples = case.get("process_medians_ms") or [], case.get("samples_ms") or []
            if len(medians) < 2 or len(samples) != 5 * len(medians):
                continue
            fives = [samples[i * 5 : (i + 1) * 5] for i in range(len(medians))]
            if any(abs(statistics.median(f) - m) > 1e-9 * m for f, m in zip(fives, medians)):
                continue  # not 5 rounds a process after all
            m5, m3 = [statistics.median(f) for f in fives], [statistics.median(f[:3]) for f in fives]
            moved = max(abs(a / b - 1) for a, b in zip(m3, m5))
            found.append((case["combo"], rel_sd(m5), rel_sd(m3), moved))
            print(
                f"rounds {folder:52s} {case['combo']:9s} {len(medians)} processes: spread {rel_sd(m5):.3%} from 5 "
                f"rounds, {rel_sd(m3):.3%} from 3; a median moved up to {moved:.3%}"
            )
    return found


if __name__ == "__main__":
    changes = [abs(c) for c in energy_changes()]
    print(
        f"energy: {len(changes)} verdicts, |A/B - 1| median {statistics.median(changes):.1%}, "
        f"largest {max(changes):.1%}"
    )
    spreads = round_spreads()
    ratios = [three / five for _, five, three, _ in spreads if five > 0]
    slow = [three / five for combo, five, three, _ in spreads if five > 0 and combo in ("baseline", "opt2")]
    print(
        f"rounds: {len(spreads)} cases, 3-round spread / 5-round spread median {statistics.median(ratios):.2f}; "
        f"baseline and opt2 {statistics.median(slow):.2f}, above 1.2 in {sum(r > 1.2 for r in slow)} of {len(slow)}; "
        f"a median moved up to {max(m for c, *_, m in spreads if c != 'fast'):.2%} (eager combos), "
        f"{max(m for c, *_, m in spreads if c == 'fast'):.2%} (`fast`, from before its median precision rule)"
    )
