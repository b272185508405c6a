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
import pandas as pd
import pytest

from meddpm.errors import UserError
from meddpm.history.changepoints import detect
from meddpm.history.charts import chart
from meddpm.history.dashboard import write_site
from meddpm.history.html_parts import CommitLinks
from meddpm.history.importer import import_files
from meddpm.history.judged import with_judged
from meddpm.history.results import run_description
from meddpm.history.series import EnvironmentChange, case_frame, environment_changes
from meddpm.history.simulation import simulate, simulated_documents
from meddpm.history.store import HistoryStore

MEASUREMENTS = Path(__file__).resolve().parent.parent / "docs" / "measurements"
MEASURED_RUNS = 72  # the runs docs/measurements holds, numbered first; each measured run added moves it
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


REPO = "https://github.com/example/meddpm-perf"


def simulated_files(folder: Path) -> list[Path]:
    """A simulated a100 history: a 5 % step in opt1 at night 19, a driver update at night 12, and two runs in
    three worker processes on the last two nights (series of their own, that begin after the driver update).
    Each run records its commit's subject (one with a script tag) and the CI job that measured it."""
    logs = simulate(np.random.default_rng(7), 24, step_case=1, step_night=19, step=0.05)
    files = []
    for night, document in enumerate(simulated_documents(logs, "a100")):
        document["environment"]["driver"] = "570.86" if night < 12 else "580.95"
        document["environment"]["commit_subject"] = f"night {night}: <script>alert(1)</script> & more"
        document["environment"]["ci_job"] = f"https://github.com/example/meddpm-perf/actions/runs/{night}/attempts/1"
        if night == 0:
            document["environment"]["ci_job"] = "javascript:alert(1)"
        if night >= 22:
            document.update(run_description(3, None))
            for case in document["cases"]:
                case["process_medians_ms"] = [case["stats"]["median"] * f for f in (0.99, 1.0, 1.01)]
                case["throttle_reasons"] = ["SwPowerCap"]
                case["sm_clock_mean_mhz"] = 1755.0
        files.append(folder / f"a100-{night:02d}.json")
        files[-1].write_text(json.dumps(document))
    return files


def build_site(folder: Path, inputs: list[Path]) -> Path:
    with HistoryStore.open(str(folder / "h.sqlite")) as store:
        import_files(store, inputs)
        runs = store.runs()
    frame = case_frame(runs)
    steps = detect(frame)
    write_site(folder / "site", frame, steps, environment_changes(frame), "test history", runs, CommitLinks.of(REPO))
    return folder / "site"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The measured runs, plus the simulated a100 history."""
    folder = tmp_path_factory.mktemp("history")
    return build_site(folder, [MEASUREMENTS, *simulated_files(folder)])


def test_the_site_has_an_index_and_a_page_per_architecture(site):
    assert sorted(p.name for p in site.iterdir()) == [
        "a100.html",
        "h100.html",
        "h200.html",
        "index.html",
        "runs",
    ]
    index = (site / "index.html").read_text()
    assert '<a href="h200.html">h200</a>' in index and "paper/opt1/b1" in index and "c0019" in index
    assert 'class="chart"' not in index and "<script" not in index
    page = (site / "a100.html").read_text()
    # Six cases, each with time, memory and TFLOP/s (energy is not simulated), one process and three: inline SVG,
    # and nothing to load.
    assert page.count('<figure class="chart"') == page.count('class="chart-svg"') == 36
    assert "driver 570.86 -&gt; 580.95" in page and "<script" not in page and "src=" not in page
    h200 = (site / "h200.html").read_text()
    assert 'id="chart-h200-paper-fast-b1-energy"' in h200
    ddp = '<span title="paper/opt1/b1/ddp2">paper opt1, batch 1, data-parallel on 2 GPUs</span>'
    assert f'<h3 id="case-paper-opt1-b1-ddp2">{ddp}</h3>' in h200


def test_open_regressions_have_their_commit_range_linked_and_their_bisect_command(site):
    index = (site / "index.html").read_text()
    opened = index[index.index("<h2>Open regressions</h2>") : index.index("<h2>Recent runs</h2>")]
    assert f'<a href="{REPO}/compare/c0018...c0019"><code>c0018..c0019</code></a>' in opened
    assert "<code>meddpm-bench --bisect c0018..c0019 --combos opt1 --preset paper</code>" in opened
    # The measured h200 regression too, between two commits of which the second had uncommitted changes.
    assert "meddpm-bench --bisect f2f8196384b7..098de49e46c3 --combos fast --preset paper" in opened
    assert f'<a href="{REPO}/commit/c0023"><code>c0023</code></a>' in index


def test_the_index_lists_recent_runs_and_ab_runs_with_verdicts_and_each_run_has_a_page(site):
    index = (site / "index.html").read_text()
    recent = index[index.index("<h2>Recent runs</h2>") : index.index("<h2>A/B runs</h2>")]
    assert recent.count("<tr>") == 31  # a header and the 30 newest runs
    assert "suite run, 3 processes" in recent
    ab = index[index.index("<h2>A/B runs</h2>") :]
    # The measured H100 A/B run against fa2f81a: opt1 unchanged, its whole verdict on hover.
    assert "fa2f81a" in ab and "paper opt1, batch 1</span>: <span title=" in ab and ">unchanged 0.99" in ab
    pages = sorted((site / "runs").glob("*.html"))
    assert len(pages) == MEASURED_RUNS + 24
    last = max(pages, key=lambda p: int(p.stem)).read_text()
    assert f"a100 suite run {MEASURED_RUNS + 24} of 2026-12-24 02:17" in last and "suite run, 3 processes" in last
    # Per-process medians, clocks, throttle reasons and the environment as recorded.
    assert "SwPowerCap" in last and "<td>1755 / -</td>" in last and "<td>driver</td><td>580.95</td>" in last
    assert "<script" not in last


def test_a_run_page_shows_its_commit_subject_escaped_and_links_its_ci_job(site):
    last = max((site / "runs").glob("*.html"), key=lambda p: int(p.stem)).read_text()
    assert "<td>commit subject</td><td>night 23: &lt;script&gt;alert(1)&lt;/script&gt; &amp; more</td>" in last
    job = "https://github.com/example/meddpm-perf/actions/runs/23/attempts/1"
    assert f'<td>CI job</td><td><a href="{job}">{job}</a></td>' in last
    # A recorded address that is no web address is text, never a link that runs script.
    first = (site / "runs" / f"{MEASURED_RUNS + 1}.html").read_text()
    assert f"a100 suite run {MEASURED_RUNS + 1} of" in first and "<td>CI job</td><td>javascript:alert(1)</td>" in first
    measured = (site / "runs" / "1.html").read_text()
    assert "<td>commit subject</td><td>not recorded</td>" in measured and "none recorded (not run in CI)" in measured


def test_each_point_carries_its_commit_date_and_subject_and_links_its_run(site):
    page = (site / "a100.html").read_text()
    chart = page[page.index('id="chart-a100-paper-opt1-b1-time"') :]
    chart = chart[: chart.index("</figure>")]
    assert chart.count('<a href="runs/') == 22  # the one-process runs of the series, each a link to its page
    # The newest one-process run is night 21's: the last two nights ran in three processes, a series of their own.
    title = "commit c0021, 2026-12-22 02:17 UTC\nnight 21: &lt;script&gt;alert(1)&lt;/script&gt; &amp; more"
    assert title in chart and "<script>" not in page


def test_the_charts_show_what_the_detector_judges_and_each_steps_threshold(site):
    page = (site / "a100.html").read_text()
    chart = page[page.index('id="chart-a100-paper-opt1-b1-time"') :]
    chart = chart[: chart.index("</figure>")]
    with HistoryStore.open(str(site.parent / "h.sqlite"), create=False) as store:
        frame = case_frame(store.runs())
    (step,) = [s for s in detect(frame) if s.arch == "a100" and s.case == "paper/opt1/b1" and s.metric == "time"]
    # The step's label gives its size and the size it needed, which is the smallest step or more, and less than it.
    assert 0.01 <= step.threshold < step.change and f"+{step.change:.1%} (needs {step.threshold:.1%})" in chart
    judged = with_judged(frame[frame["arch"] == "a100"])
    newest = judged[judged["case"] == "paper/opt1/b1"].iloc[-1]
    assert f"{newest['time']:.4g} ms/iter, judged {newest['time_judged']:.4g}" in chart
    assert "How to read a chart:</b> the detector judges the blue points" in page


def test_a_history_of_ab_runs_only_lists_them(tmp_path):
    measured = sorted(MEASUREMENTS.rglob("results.json"))
    # An A/B against the last good run is a trend run (the nightly's): not one of these.
    documents = {f: json.loads(f.read_text()) for f in measured}
    ab_files = [f for f, d in documents.items() if d.get("run_kind") == "ab" and not d.get("last_good")]
    assert ab_files, "the measurements hold A/B runs"
    index = (build_site(tmp_path, ab_files) / "index.html").read_text()
    assert "No runs in the history yet" not in index
    assert f"No suite or bench runs yet, which the trends are drawn from; {len(ab_files)} A/B run(s) below." in index
    assert index.count(">unchanged ") + index.count(">slower") + index.count(">faster") >= 1


def test_a_repo_url_that_is_no_web_address_is_one_line():
    with pytest.raises(UserError, match=r"--repo-url 'github.com/x' is not a web address; give .*https://github"):
        CommitLinks.of("github.com/x")


def _browser() -> str:
    for name in (os.environ.get("CHROMIUM"), *BROWSERS):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.skip("no Chromium on PATH (apt-get install chromium, or set CHROMIUM); .ci/run installs it")


# Per chart: its id, how many runs it links, the box of its drawing and the box around all its text (pixels).
_CHARTS = """() => [...document.querySelectorAll('figure.chart')].map(figure => {
    const svg = figure.querySelector('svg').getBoundingClientRect();
    const texts = [...figure.querySelectorAll('svg text')].map(t => t.getBoundingClientRect());
    return {
        id: figure.id,
        points: figure.querySelectorAll('svg a[href^="runs/"]').length,
        svg: [svg.left, svg.top, svg.right, svg.bottom],
        text: [Math.min(...texts.map(t => t.left)), Math.min(...texts.map(t => t.top)),
               Math.max(...texts.map(t => t.right)), Math.max(...texts.map(t => t.bottom))],
    };
})"""


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
            page.on("dialog", lambda d: problems.append(f"a dialog ran: {d.message}"))
            page.goto((site / "index.html").as_uri(), wait_until="load")
            assert page.locator("figure.chart").count() == 0 and page.locator(".grid svg").count() > 0
            page.goto((site / "a100.html").as_uri(), wait_until="load")
            charts = page.evaluate(_CHARTS)
            assert len(charts) == 36 and all(chart["points"] >= 2 for chart in charts), charts
            # A chart's points are its own runs: the three-process series has two, after the driver update.
            assert {c["id"]: c["points"] for c in charts}["chart-a100-paper-opt1-b1-p3-time"] == 2
            # No label is cut off: all of a chart's text lies within its drawing.
            for chart in charts:
                left, top, right, bottom = chart["svg"]
                text_left, text_top, text_right, text_bottom = chart["text"]
                inside = left - 0.5 <= text_left and top - 0.5 <= text_top
                assert inside and text_right <= right + 0.5 and text_bottom <= bottom + 0.5, chart
            assert page.locator("table").first.inner_text().count("paper opt1, batch 1") == 1
            # A click on a point opens its run's page.
            page.locator("#chart-a100-paper-opt1-b1-time").scroll_into_view_if_needed()
            page.locator("#chart-a100-paper-opt1-b1-time a").last.click()
            page.wait_for_url(f"**/runs/{MEASURED_RUNS + 22}.html")
            assert "Against the run before" in page.inner_text("body")
            page.goto((site / "runs" / "1.html").as_uri(), wait_until="load")
            assert "Cases" in page.inner_text("body")
        finally:
            browser.close()
    assert not problems, problems


def test_recorded_text_in_a_chart_is_text_not_markup_or_a_formula():
    """A commit, a subject, a host or a driver is anyone's text: in a chart it is escaped, and matplotlib's `$...$`
    formulas are not typeset (``$\\fr$x``, an unknown command, would stop the report)."""
    n = 6
    rows = pd.DataFrame(
        {
            "run_id": range(1, n + 1),
            "started_at": pd.date_range("2026-12-01", periods=n),
            "commit": ["$\\fr$x<i>"] * n,
            "commit_subject": ["</title><script>alert(1)</script>"] * n,
            "host": ["<b>host</b>"] * n,
            "driver": ["580.95"] * n,
            "torch": ["2.11.0"] * n,
            "time": [230.0] * n,
            "time_low": [None] * n,
            "time_high": [None] * n,
        }
    )
    update = EnvironmentChange("a100", 3, rows["started_at"][2], "c", "driver", "$\\fr$", "<script>x</script>")
    page = chart("a100", "paper/opt1/b1", "time", rows, [], [update])
    assert "<script" not in page and "<b>" not in page and "<i>" not in page
    assert "&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page and "$\\fr$x" in page
