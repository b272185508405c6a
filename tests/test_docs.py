"""The documentation works as written: its Python snippets run and its links and paths resolve.

Every ```python block in README.md and docs/*.md is executed in a fresh namespace. A block that
cannot run here (it needs a GPU, say) is preceded by ``<!-- not run: reason -->``; it is
reported as skipped with that reason, and a marker without a reason fails.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NOT_RUN = re.compile(r"<!--\s*not run\b\s*:?(?P<reason>.*?)-->")  # alone on its line
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\((?P<target><[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(?P<target>\S+)", re.M)
CODE_SPAN = re.compile(r"(`+)(?P<code>.+?)\1")
# Repository paths quoted in backticks (`meddpm/suite/plugin.py`, `docs/measurements/...-suite-*`).
REPO_PATH = re.compile(r"^(?:meddpm|perf_tests|tests|baselines|docs|\.github|\.ci)/[\w./*-]*$")


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    skip_reason: str | None  # None: run it

    @property
    def id(self) -> str:
        return f"{_rel(self.page)}:{self.line}"


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def split_page(page: Path) -> tuple[list[Snippet], list[tuple[int, str]], list[str]]:
    """The page's python snippets, its prose lines (outside fences) and its misplaced markers."""
    lines = page.read_text(encoding="utf-8").splitlines()
    snippets: list[Snippet] = []
    prose: list[tuple[int, str]] = []
    problems: list[str] = []
    pending: tuple[int, str] | None = None  # a not-run marker waiting for its block
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            marker = NOT_RUN.fullmatch(lines[i].strip())
            if marker:
                if pending:
                    problems.append(f"{_rel(page)}:{pending[0]}: a not-run marker with no python block after it")
                pending = (i + 1, marker.group("reason").strip())
            elif lines[i].strip() and pending:
                problems.append(f"{_rel(page)}:{pending[0]}: a not-run marker must directly precede a python block")
                pending = None
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        start, closing = i, fence.group(1)
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith(closing):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if fence.group("lang") == "python":
            snippets.append(Snippet(page, start + 1, "\n".join(body) + "\n", pending[1] if pending else None))
        elif pending:
            problems.append(f"{_rel(page)}:{pending[0]}: a not-run marker before a {fence.group('lang')!r} block")
        pending = None
    if pending:
        problems.append(f"{_rel(page)}:{pending[0]}: a not-run marker with no python block after it")
    return snippets, prose, problems


SPLIT = {page: split_page(page) for page in PAGES}
SNIPPETS = [s for snippets, _, _ in SPLIT.values() for s in snippets]


def _params() -> list:
    return [
        pytest.param(s, id=s.id, marks=[pytest.mark.skip(reason=f"not run: {s.skip_reason or '(no reason)'}")])
        if s.skip_reason is not None
        else pytest.param(s, id=s.id)
        for s in SNIPPETS
    ]


@pytest.mark.parametrize("snippet", _params())
def test_python_snippet_runs_as_written(snippet: Snippet):
    code = compile(snippet.code, f"{snippet.id} (python block)", "exec")
    exec(code, {"__name__": "__doc_snippet__"})


def test_skipped_snippets_are_few_and_say_why():
    markers = [problem for _, _, problems in SPLIT.values() for problem in problems]
    assert not markers, "\n".join(markers)
    skipped = [s for s in SNIPPETS if s.skip_reason is not None]
    unexplained = [s.id for s in skipped if not s.skip_reason]
    assert not unexplained, f"<!-- not run: ... --> needs a reason at {', '.join(unexplained)}"
    ran = len(SNIPPETS) - len(skipped)
    assert ran >= 1 and len(skipped) <= ran, f"{len(skipped)} python blocks are not run, only {ran} are"
    not_run = "; ".join(f"{s.id} ({s.skip_reason})" for s in skipped)
    print(f"{ran} python blocks run, {len(skipped)} not run: {not_run}")


def _strip_code_spans(text: str) -> str:
    return CODE_SPAN.sub("", text)


def github_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (lower case, punctuation dropped, spaces to -)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    prose = SPLIT[page][1] if page in SPLIT else split_page(page)[1]
    for _, line in prose:
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).lower()
        slug = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN").replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(page: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in SPLIT[page][1]:
        text = _strip_code_spans(line)
        for match in (*LINK.finditer(text), *REFERENCE.finditer(text)):
            found.append((number, match.group("target").strip("<>")))
    return found


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_point_to_files_that_exist(page: Path):
    broken = []
    for number, target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        where = f"{_rel(page)}:{number}: {target}"
        if not resolved.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in github_anchors(resolved):
            broken.append(f"{where} (no heading with that anchor in {resolved.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_repository_paths_in_backticks_exist(page: Path):
    missing = []
    for number, line in SPLIT[page][1]:
        for span in CODE_SPAN.finditer(line):
            path = span.group("code").strip()
            if not REPO_PATH.match(path):
                continue
            if not (list(ROOT.glob(path.rstrip("/"))) if "*" in path else (ROOT / path).exists()):
                missing.append(f"{_rel(page)}:{number}: `{path}`")
    assert not missing, "paths that do not exist (relative to the repository root):\n" + "\n".join(missing)
