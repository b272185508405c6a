"""What every page of the dashboard shares: the page frame, tables, links to commits, file names."""

from __future__ import annotations

import hashlib
import html
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from meddpm.errors import UserError

RUNS_FOLDER = "runs"
DIRTY = "+dirty"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(330px, 1fr)); gap: 0.5em; }
/* content-visibility: a page of 90 charts lays out and paints only those near the screen. */
figure.chart { margin: 0; content-visibility: auto; contain-intrinsic-size: auto 230px; }
figure.chart figcaption { font-size: 0.85em; font-weight: 600; }
.chart-svg { width: 100%; height: auto; }
.chart-svg a use, .chart-svg a path { cursor: pointer; }
.none { color: #777; }
.open { color: #c0392b; font-weight: bold; }
.good { color: #1e8449; font-weight: bold; }
.grid td { white-space: nowrap; }
.grid td.open { background: #fdecea; }
.grid td.acknowledged { background: #fff4e0; }
.grid .change { color: #555; font-size: 0.85em; }
.grid svg { vertical-align: middle; margin-left: 0.4em; }
"""


def page(title: str, body: str) -> str:
    """A whole HTML page: it loads nothing (the charts are inline SVG), so it opens offline and at once."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], empty: str) -> str:
    """An HTML table of ``rows`` (cells already escaped) under ``headers``; without rows, ``empty`` as a note."""
    if not rows:
        return f'<p class="none">{empty}</p>'
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def run_href(run_id: int, up: str = "") -> str:
    """The path of a run's page, from the site's folder (``up``: from a page below it)."""
    return f"{up}{RUNS_FOLDER}/{run_id}.html"


def case_label(case: str) -> str:
    """A case key in words a newcomer reads, escaped, the key itself on hover (``check`` and ``ack`` take it):
    ``paper/fast/b1/p3`` -> ``paper fast, batch 1, 3 processes``."""
    words = []
    for part in case.split("/"):
        if re.fullmatch(r"b\d+", part):
            words.append(f", batch {part[1:]}")
        elif re.fullmatch(r"p\d+", part):
            words.append(f", {part[1:]} processes")
        elif re.fullmatch(r"ddp\d+", part):
            words.append(f", data-parallel on {part[3:]} GPUs")
        else:
            words.append(f" {part}" if words else part)
    return f'<span title="{html.escape(case)}">{html.escape("".join(words))}</span>'


def software_version(name: str, value: object) -> str:
    """A recorded version as its project writes it: cuDNN records 91900 for 9.19.0 (8907 for 8.9.7)."""
    text = str(value)
    if name == "cudnn" and text.isdigit() and len(text) >= 4:
        number = int(text)
        major, rest = divmod(number, 10000 if number >= 10000 else 1000)
        return f"{major}.{rest // 100}.{rest % 100}"
    return text


def case_anchor(case: str) -> str:
    """The id of a case's section on its architecture's page."""
    return f"case-{slug(case)}"


def slug(text: str) -> str:
    """``text`` as a file name or an element id."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def page_name(key: str) -> str:
    """A file name (without ``.html``) for an architecture key, distinct for distinct keys.

    A key of lower-case letters, digits, ``_`` and ``-`` is its own name; any other (``cpu-ü``, ``H100``) gets a
    hash of itself after its slug, so that ``cpu`` and ``cpu-ü`` never share a page, on case-insensitive file
    systems too.
    """
    if re.fullmatch(r"[a-z0-9_-]+", key):
        return key
    return f"{slug(key)}~{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def revision(commit: str) -> str | None:
    """A stored commit as git names it (12 digits, without the mark of a dirty tree); None where unknown."""
    bare = commit.removesuffix(DIRTY)
    return bare[:12] if bare and bare != "unknown" else None


@dataclass(frozen=True)
class CommitLinks:
    """Commits as text, linked to the repository's web pages where its URL was given (``report --repo-url``).

    GitHub, GitLab and Gitea all serve ``URL/commit/SHA`` and ``URL/compare/A...B``.
    """

    repo_url: str | None = None

    @classmethod
    def of(cls, repo_url: str | None) -> CommitLinks:
        """Links into ``repo_url`` (http or https), or a one-line UserError."""
        if repo_url is None:
            return cls()
        fix = "give the repository's web address, such as https://github.com/OWNER/REPO"
        if not re.fullmatch(r"https?://[^\s/]+(/[^\s]*)?", repo_url):
            raise UserError(f"--repo-url {repo_url!r} is not a web address; {fix}")
        # Commit pages are URL/commit/SHA: a query or a fragment would end up in the middle of every link.
        if "?" in repo_url or "#" in repo_url:
            raise UserError(f"--repo-url {repo_url!r} has a query or a fragment (?, #), which links cannot hold; {fix}")
        try:
            urllib.parse.urlsplit(repo_url).port  # noqa: B018 - urlsplit reads the port only when asked, and refuses a bad one then
        except ValueError:
            raise UserError(f"--repo-url {repo_url!r} has a port that is no number from 0 to 65535; {fix}") from None
        return cls(repo_url.rstrip("/"))

    def commit(self, commit: str) -> str:
        """The commit (12 digits, with its dirty mark), linked to its page where it is a known commit."""
        text = f"<code>{html.escape(commit[:12])}{DIRTY if commit.endswith(DIRTY) else ''}</code>"
        known = revision(commit)
        if self.repo_url is None or known is None:
            return text
        return f'<a href="{html.escape(self.repo_url)}/commit/{html.escape(known)}">{text}</a>'

    def range(self, good: str, bad: str) -> str:
        """``good..bad``, linked to the comparison of the two where both are known commits."""
        first, last = revision(good), revision(bad)
        if first is not None and first == last:
            # One commit on both sides: the change is outside the commits (uncommitted changes, the machine).
            dirty = " (uncommitted changes)" if DIRTY in good + bad else ""
            return f"{self.commit(bad)} on both sides{dirty}"
        if first is None or last is None:
            return f"{self.commit(good)}..{self.commit(bad)}"
        text = f"<code>{html.escape(first)}..{html.escape(last)}</code>"
        if self.repo_url is None:
            return text
        return f'<a href="{html.escape(self.repo_url)}/compare/{html.escape(first)}...{html.escape(last)}">{text}</a>'
