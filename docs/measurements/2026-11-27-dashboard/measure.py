"""How fast the dashboard's pages are usable, and the screenshots docs/history.md shows.

Builds two sites: a simulated 30-night h200 history (opt1 5 % slower from night 20, open; amp_bf16's peak
memory 3 % higher from night 10, acknowledged) and the measured runs of docs/measurements. Then loads each
page in headless Chromium (the system's, through Playwright) several times and records, per page, the time
to the load event and to the first screen's charts drawn (``usable``), and how many charts the page holds
and how many were drawn by then. The charts are inline SVG, so a chart is drawn once the browser has laid it
out; the time to the first screen's charts is read at the load event, then after every chart in that screen
reports a size. Run from the repository root on the machine to measure:

    python docs/measurements/2026-11-27-dashboard/measure.py OUT [--repeats 5] [--screenshots docs/images]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
from playwright.sync_api import sync_playwright

from meddpm.history.cli import main as history
from meddpm.history.simulation import simulate, simulated_documents

ROOT = Path(__file__).resolve().parents[3]
FIRST_PAINT = "() => performance.getEntriesByName('first-contentful-paint')[0].startTime"
# A chart in the first screen is drawn when its SVG has been laid out (content-visibility skips the others).
IN_VIEW = "[...document.querySelectorAll('figure.chart')].filter(f => f.getBoundingClientRect().top < innerHeight)"
DRAWN = f"() => {IN_VIEW}.filter(f => f.querySelector('svg').getBoundingClientRect().height > 0).length"
VISIBLE_DRAWN = f"() => {IN_VIEW}.every(f => f.querySelector('svg').getBoundingClientRect().height > 0)"


# The planted changes' commits, as a reader would meet them on hover and on the run pages.
SUBJECTS = {
    10: "amp_bf16: keep the bf16 weight copy resident between steps",
    20: "opt1: gather the decoder's skip inputs in one copy",
}


def simulated_site(folder: Path) -> Path:
    logs = simulate(np.random.default_rng(2026), 30, step_case=1, step_night=20, step=0.05)
    files = []
    for night, document in enumerate(simulated_documents(logs, "h200", driver="580.95", torch="2.11.0")):
        subject = SUBJECTS.get(night, f"docs: night {night}'s notes")
        job = f"https://github.com/OWNER/meddpm-perf/actions/runs/{7000 + night}/attempts/1"
        document["environment"].update(commit_subject=subject, ci_job=job, host=f"gpu-runner-{night % 2}")
        if night >= 10:
            amp = next(c for c in document["cases"] if c["combo"] == "amp_bf16")
            amp["peak_allocated_bytes"] = int(amp["peak_allocated_bytes"] * 1.03)
        files.append(folder / "runs" / f"{night:02d}.json")
        files[-1].parent.mkdir(parents=True, exist_ok=True)
        files[-1].write_text(json.dumps(document))
    db = str(folder / "simulated.sqlite")
    history(["import", "--db", db, *map(str, files)])
    note = "amp_bf16 keeps its bf16 weight copy resident now: 3 % more memory, expected (a planted example)"
    history(["ack", "h200", "paper/amp_bf16/b1", "memory", "--db", db, "--note", note])
    history(["check", "--db", db])
    history(["report", "--db", db, "--out", str(folder / "simulated"), "--baselines", str(ROOT / "baselines")])
    return folder / "simulated"


def measured_site(folder: Path) -> Path:
    db = str(folder / "measured.sqlite")
    history(["import", "--db", db, str(ROOT / "docs" / "measurements")])
    history(["report", "--db", db, "--out", str(folder / "measured"), "--baselines", str(ROOT / "baselines")])
    return folder / "measured"


def timed(page, url: str) -> dict:
    start = time.perf_counter()
    page.goto(url, wait_until="load")
    loaded = time.perf_counter() - start
    page.wait_for_function(VISIBLE_DRAWN, timeout=60_000)
    usable = time.perf_counter() - start
    charts = page.locator("figure.chart").count()
    paint = page.evaluate(FIRST_PAINT) / 1000
    return {
        "first_paint_s": paint,
        "load_s": loaded,
        "usable_s": usable,
        "charts": charts,
        "drawn_at_usable": page.evaluate(DRAWN),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--screenshots", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    simulated, measured = simulated_site(args.out), measured_site(args.out)
    pages = {
        "simulated index": simulated / "index.html",
        "simulated h200 page": simulated / "h200.html",
        "simulated run page": simulated / "runs" / "30.html",
        "measured index": measured / "index.html",
        "measured h200 page": measured / "h200.html",
        "measured h100 page": measured / "h100.html",
    }
    results = {"cpus": os.cpu_count(), "chromium": shutil.which("chromium"), "pages": {}}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        for name, path in pages.items():
            # A fresh context per page: its first load reads it cold, as a first visit does.
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            runs = [timed(page, path.as_uri()) for _ in range(args.repeats)]
            results["pages"][name] = {
                "charts": runs[0]["charts"],
                "drawn_at_usable": runs[0]["drawn_at_usable"],
                "first_paint_s": [round(r["first_paint_s"], 3) for r in runs],
                "load_s": [round(r["load_s"], 3) for r in runs],
                "usable_s": [round(r["usable_s"], 3) for r in runs],
                "usable_median_s": round(statistics.median(r["usable_s"] for r in runs), 3),
                "usable_first_s": round(runs[0]["usable_s"], 3),
            }
            print(name, results["pages"][name])
        if args.screenshots:
            shots = {
                "history-index.png": (simulated / "index.html", None),
                "history-arch.png": (simulated / "h200.html", "h2:last-of-type"),
                "history-run.png": (simulated / "runs" / "30.html", None),
            }
            for file, (path, anchor) in shots.items():
                page.set_viewport_size({"width": 1400, "height": 1300})
                page.goto(path.as_uri(), wait_until="load")
                if anchor:
                    page.locator(anchor).scroll_into_view_if_needed()
                    page.evaluate(f"document.querySelector('{anchor}').scrollIntoView()")
                    page.wait_for_timeout(200)
                page.wait_for_function(VISIBLE_DRAWN, timeout=60_000)
                page.screenshot(path=str(args.screenshots / file))
        browser.close()
    worst = max(p["usable_median_s"] for p in results["pages"].values())
    first = max(p["usable_first_s"] for p in results["pages"].values())
    results["worst_usable_median_s"], results["worst_usable_first_s"] = worst, first
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"worst page usable after {worst:.2f} s (median of {args.repeats}), {first:.2f} s at its first load")


if __name__ == "__main__":
    main()
