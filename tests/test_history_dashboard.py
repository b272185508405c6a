"""The dashboard: a static site whose pages load in a real headless Chromium, charts drawn, no console errors.

The browser test drives the system's Chromium (Debian's package; .ci/run installs it) through
Playwright, and skips with the reason where either is missing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from meddpm.history.changepoints import detect
from meddpm.history.dashboard import write_site
from meddpm.history.importer import import_files
from meddpm.history.series import case_frame, environment_changes
from meddpm.history.simulation import simulate, simulated_documents
from meddpm.history.store import HistoryStore

MEASUREMENTS = Path(__file__).resolve().parent.parent / "docs" / "measurements"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The measured runs, plus a simulated a100 history with a 5 % step in opt1 and a driver update."""
    folder = tmp_path_factory.mktemp("history")
    logs = simulate(np.random.default_rng(7), 24, step_case=1, step_night=19, step=0.05)
    files = []
    for night, document in enumerate(simulated_documents(logs, "a100")):
        document["environment"]["driver"] = "570.86" if night < 12 else "580.95"
        files.append(folder / f"a100-{night:02d}.json")
        files[-1].write_text(json.dumps(document))
    with HistoryStore.open(str(folder / "h.sqlite")) as store:
        import_files(store, [MEASUREMENTS, *files])
        runs = store.runs()
    frame = case_frame(runs)
    write_site(folder / "site", frame, detect(frame), environment_changes(frame), "test history")
    return folder / "site"


def test_the_site_has_an_index_and_a_page_per_architecture(site):
    assert sorted(p.name for p in site.iterdir()) == [
        "a100.html",
        "h100.html",
        "h200.html",
        "index.html",
        "plotly.min.js",
    ]
    index = (site / "index.html").read_text()
    assert '<a href="h200.html">h200</a>' in index and "paper/opt1/b1" in index and "c0019" in index
    page = (site / "a100.html").read_text()
    # Six cases, each with time, memory and TFLOP/s (energy is not simulated).
    assert page.count('class="plotly-graph-div"') == 18
    assert "driver 570.86 -&gt; 580.95" in page and 'src="plotly.min.js"' in page
    h200 = (site / "h200.html").read_text()
    assert 'id="chart-h200-paper-fast-b1-energy"' in h200 and "<h3>paper/opt1/b1/ddp2</h3>" in h200


def _browser() -> str:
    for name in (os.environ.get("CHROMIUM"), *BROWSERS):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.skip("no Chromium on PATH (apt-get install chromium, or set CHROMIUM); .ci/run installs it")


def test_the_pages_load_in_a_headless_browser_with_charts_and_no_errors(site):
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    executable = _browser()
    with sync_api.sync_playwright() as playwright:
        try:
            # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
            browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        except sync_api.Error as exc:
            pytest.skip(f"{executable} did not start: {str(exc).splitlines()[0]}")
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"failed to load {r.url}"))
            # The simulated architecture's page last, for the checks below; the measured ones (h200: 60 charts)
            # would take a busy CI core 20 s more.
            for name in ("index.html", "a100.html"):
                page.goto((site / name).as_uri(), wait_until="load")
                charts = page.locator(".plotly-graph-div").count()
                drawn = page.locator(".plotly-graph-div.js-plotly-plot .main-svg").count()
                points = page.locator(".plotly-graph-div .scatterlayer .point").count()
                assert drawn >= charts and (charts == 0 or points >= charts), (name, charts, drawn, points)
            step_lines = page.locator("#chart-a100-paper-opt1-b1-time .shapelayer path").count()
            assert step_lines >= 2  # the step (red) and the driver update (grey)
            assert page.locator("table").first.inner_text().count("paper/opt1/b1") == 1
        finally:
            browser.close()
    assert not problems, problems
