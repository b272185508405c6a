"""The bad-input campaign: every row is one bad or edge input and what handling it well means.

Run from the repository root on a CPU machine (about 15 minutes on two cores):

    . .venv/bin/activate && python docs/measurements/2026-11-25-issue44-campaign/campaign.py [-k NAME] [--workers 2]

Each row runs in a fresh temporary folder (its own TMPDIR too), at most two at a time, with a
timeout. A row is a command line (run by bash, the repository's package on PYTHONPATH) or a
Python callable for API inputs (run in a worker process, inside the row's folder). Its
expectation returns None when the input was handled well, else the reason. The rows, verdicts
and reasons go to results.jsonl and results.md beside this script; the counts are printed.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
# API rows import meddpm in this process's workers: this checkout's, not one installed in the environment.
sys.path.insert(0, str(REPO))
PY = sys.executable
BENCH = f"{PY} -m meddpm"
HIST = f"{PY} -m meddpm.history.cli"
# The suite kept short: two rounds, no warm-up, one combo; every run has its own results and baseline folders.
SUITE = (
    f"{PY} -m pytest {REPO}/perf_tests -m cpu -q -p no:cacheprovider --perf-max-rounds=2 --perf-min-rounds=2 "
    "--perf-warmup=0 --combos=baseline --perf-results-dir={T}/r --baseline-dir={T}/b"
)
# Signal rows: long enough (30 rounds) that a signal soon after the first timed round lands mid-campaign, and
# -s, since pytest otherwise captures the suite's progress lines into the test's report instead of showing them.
SUITE_V = SUITE.replace(" -q ", " -v -s ").replace("rounds=2", "rounds=30")
# The suite's progress lines that prove a round was timed (so results.json has something to keep): an
# in-process campaign prints "  round 1 " once its first round is measured, a process campaign
# "  process 1/N" once its first worker process has finished all of its rounds. A fixed delay after
# the test's name fell before the first round on a busy machine, where the suite rightly writes nothing.
ROUND_TIMED = "  round 1 "
PROCESS_TIMED = "  process 1/"
FIX: Path  # shared fixtures made once: a tiny baseline, a suite results.json, a bench JSON, history databases
TIMEOUT_SCALE = 1.0  # --timeout-scale: a machine busy with other work runs everything slower
BAD_OUTPUT = ("Traceback (most recent call last)", "INTERNALERROR")


@dataclass
class Result:
    rc: int | None = None
    out: str = ""
    err: str = ""
    elapsed: float = 0.0
    timed_out: bool = False
    exc_type: str | None = None  # API rows: the exception raised (None: returned)
    exc_msg: str = ""
    value: Any = None
    warned: list[str] = field(default_factory=list)
    signalled: bool = False
    T: Path | None = None


Expect = Callable[[Result], "str | None"]


@dataclass
class Row:
    name: str
    surface: str
    run: str | Callable[[Path], Any]
    expect: Expect
    says: str  # the expectation in words
    setup: Callable[[Path], None] | None = None
    timeout: float = 90.0
    signal: tuple[str, int, float] | None = None  # (text to wait for in the output, signal, seconds after it)
    item: int | None = None  # the issue's item whose input this is
    env: dict[str, str] | None = None


ROWS: list[Row] = []


def row(name: str, surface: str, run: Any, expect: tuple[Expect, str], **kw: Any) -> None:
    assert all(r.name != name for r in ROWS), name
    ROWS.append(Row(name, surface, run, expect[0], expect[1], **kw))


# ---------------------------------------------------------------- expectations


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _clean(r: Result) -> str | None:
    if r.timed_out:
        return "timed out (hung or far too slow)"
    for bad in BAD_OUTPUT:
        if bad in r.out or bad in r.err:
            first = next((ln for ln in reversed(_lines(r.err + "\n" + r.out)) if "Error" in ln), "")
            return f"{bad.split(' ')[0]} in the output ({first.strip()[:120]})"
    return None


def _words(text: str, words: tuple[str, ...]) -> str | None:
    low = text.lower()
    missing = [w for w in words if w.lower() not in low]
    return f"message lacks {missing}" if missing else None


def refuse(
    *words: str,
    rc: tuple[int, ...] = (2,),
    lines: int = 1,
    under: float | None = None,
    absent: tuple[str, ...] = (),
    extra: Callable[[Result], str | None] | None = None,
) -> tuple[Expect, str]:
    """Exit status in ``rc``, at most ``lines`` stderr lines naming ``words``, no traceback."""

    def check(r: Result) -> str | None:
        if bad := _clean(r):
            return bad
        if r.rc not in rc:
            return f"exit {r.rc}, expected {'/'.join(map(str, rc))} ({_last(r)})"
        errs = _lines(r.err)
        if not errs:
            return "no message on stderr"
        if len(errs) > lines:
            return f"{len(errs)} stderr lines, expected {lines}: {errs[0][:80]!r} ..."
        if bad := _words(r.err, words):
            return f"{bad}: {errs[-1][:140]!r}"
        if under is not None and r.elapsed > under:
            return f"took {r.elapsed:.1f} s, so it measured before refusing (limit {under} s)"
        for a in absent:
            if list(r.T.glob(a)):
                return f"{a} exists after the refusal"
        return extra(r) if extra else None

    text = f"exit {'/'.join(map(str, rc))}, {'one' if lines == 1 else f'<= {lines}'} stderr line"
    text += f" naming {', '.join(repr(w) for w in words)}" if words else ""
    text += (
        ", no traceback" + (f", within {under:g} s" if under else "") + (f", no {', '.join(absent)}" if absent else "")
    )
    return check, text


def _status_and_words(r: Result, rc: tuple[int, ...], words: tuple[str, ...]) -> str | None:
    """No traceback, an exit status in ``rc`` and ``words`` in the output, or what is wrong."""
    if bad := _clean(r):
        return bad
    if r.rc not in rc:
        return f"exit {r.rc}, expected {'/'.join(map(str, rc))} ({_last(r)})"
    return _words(r.out + r.err, words)


def interrupted(
    *words: str, rc: tuple[int, ...] = (130,), extra: Callable[[Result], str | None] | None = None, says: str = ""
) -> tuple[Expect, str]:
    """After a planted signal: an exit status in ``rc``, no traceback, ``words`` in the output, then ``extra``."""

    def check(r: Result) -> str | None:
        if "planted point was never reached" in r.err:
            return "the planted point was never reached (no signal sent)"
        if bad := _status_and_words(r, rc, words):
            return bad
        return extra(r) if extra else None

    return check, f"exit {'/'.join(map(str, rc))}, no traceback" + (f", says {', '.join(words)}" if words else "") + (
        f"; {says}" if says else ""
    )


def succeed(
    *files: str, rc: tuple[int, ...] = (0,), extra: Callable[[Result], str | None] | None = None, says: str = ""
) -> tuple[Expect, str]:
    def check(r: Result) -> str | None:
        if bad := _clean(r):
            return bad
        if r.rc not in rc:
            return f"exit {r.rc}, expected {'/'.join(map(str, rc))} ({_last(r)})"
        for f in files:
            if not list(r.T.glob(f)):
                return f"{f} not written"
        return extra(r) if extra else None

    text = f"exit {'/'.join(map(str, rc))}, no traceback" + (f", writes {', '.join(files)}" if files else "")
    return check, text + (f"; {says}" if says else "")


def either(a: tuple[Expect, str], b: tuple[Expect, str]) -> tuple[Expect, str]:
    def check(r: Result) -> str | None:
        ra = a[0](r)
        if ra is None:
            return None
        rb = b[0](r)
        return None if rb is None else f"{ra}; or: {rb}"

    return check, f"either ({a[1]}) or ({b[1]})"


def api_refuse(*words: str, warn_ok: bool = False) -> tuple[Expect, str]:
    """The call raises UserError with a one-line message naming ``words`` (or, with warn_ok, warns so)."""

    def check(r: Result) -> str | None:
        if r.timed_out:
            return "timed out (hung)"
        if warn_ok and r.exc_type is None and any(_words(w, words) is None for w in r.warned):
            return None
        if r.exc_type is None:
            got = f"; warned {r.warned[0][:80]!r}" if r.warned else ""
            return f"accepted without an error{got} (returned {_short(r.value)})"
        if r.exc_type not in ("UserError", "BaselineError"):
            return f"raw {r.exc_type}: {r.exc_msg[:140]}"
        if len(_lines(r.exc_msg)) != 1:
            return f"UserError of {len(_lines(r.exc_msg))} lines"
        if bad := _words(r.exc_msg, words):
            return f"{bad}: {r.exc_msg[:140]!r}"
        return None

    text = "raises UserError, one line" + (f" naming {', '.join(repr(w) for w in words)}" if words else "")
    return check, text + (" (or warns so)" if warn_ok else "")


def api_ok(check_value: Callable[[Any], str | None] | None = None, says: str = "") -> tuple[Expect, str]:
    def check(r: Result) -> str | None:
        if r.timed_out:
            return "timed out (hung)"
        if r.exc_type is not None:
            return f"raised {r.exc_type}: {r.exc_msg[:140]}"
        return check_value(r.value) if check_value else None

    return check, "returns" + (f" {says}" if says else " without error")


def api_handled(check_value: Callable[[Any], str | None], says: str) -> tuple[Expect, str]:
    """Either a correct value or a one-line UserError: never a raw exception or a wrong value."""

    def check(r: Result) -> str | None:
        if r.timed_out:
            return "timed out (hung)"
        if r.exc_type is None:
            return check_value(r.value)
        if r.exc_type not in ("UserError", "BaselineError"):
            return f"raw {r.exc_type}: {r.exc_msg[:140]}"
        return None if len(_lines(r.exc_msg)) == 1 else "multi-line UserError"

    return check, f"{says}, or a one-line UserError; never a raw exception"


def _short(v: Any) -> str:
    if hasattr(v, "shape"):
        return f"a tensor of shape {tuple(v.shape)}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_short(x) for x in v) + ")"
    return repr(v)[:60]


def _last(r: Result) -> str:
    lines = _lines(r.err) or _lines(r.out)
    return lines[-1].strip()[:140] if lines else "no output"


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def all_of(*checks: Callable[[Result], str | None]) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        for c in checks:
            if bad := c(r):
                return bad
        return None

    return check


def partial_json(path: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        p = r.T / path
        if not p.is_file():
            return f"{path} not written after the interrupt"
        try:
            doc = _json(p)
        except ValueError:
            return f"{path} is not valid JSON (half-written)"
        if doc.get("partial") is not True and '"partial": true' not in p.read_text():
            return f"{path} is not marked partial"
        return None

    return check


def no_leftovers(r: Result) -> str | None:
    # torch's own compile cache folder is not the program's to remove
    tmp = r.T / "tmp"
    left = [p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor")] if tmp.is_dir() else []
    if left:
        return f"left behind in TMPDIR: {left[:3]}"
    repo = r.T / "repo"
    if repo.is_dir():
        trees = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
        if len(_lines(trees)) > 1:
            return f"git worktree left registered: {_lines(trees)[-1][:80]}"
    return None


def stray(*names: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        for n in names:
            if list(r.T.glob(n)):
                return f"created {n} (a mistyped URL became a local path)"
        return None

    return check


def unchanged(path: str, digest_file: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        p = r.T / path
        if not p.exists():
            return f"{path} removed"
        if hashlib.sha256(p.read_bytes()).hexdigest() != (r.T / digest_file).read_text():
            return f"{path} changed"
        return None

    return check


def runs_in(db: str, n: int) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        p = r.T / db
        if not p.is_file():
            return f"{db} not written"
        with contextlib.closing(sqlite3.connect(p)) as con:
            try:
                got = con.execute("select count(*) from runs").fetchone()[0]
            except sqlite3.Error as exc:
                return f"{db}: {exc}"
        return None if got == n else f"{db} holds {got} run(s), expected {n}"

    return check


def save_failed_keeps_results(r: Result) -> str | None:
    """A save that fails after measuring: a non-zero exit, a line naming the file, results.json still written."""
    if bad := _clean(r):
        return bad
    if r.rc == 0:
        return "exit 0 although the baseline could not be saved"
    if bad := _words(r.out + r.err, ("cpu.json",)):
        return bad
    return None if (r.T / "r/results.json").is_file() else "results.json not written after the failed save"


def text_has(*words: str, where: str = "out") -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        return _words(r.out + r.err if where == "both" else getattr(r, where), words)

    return check


# ---------------------------------------------------------------- setup helpers


def put(rel: str, content: str | bytes) -> Callable[[Path], None]:
    def setup(T: Path) -> None:
        p = T / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)

    return setup


def steps(*fns: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(T: Path) -> None:
        for f in fns:
            f(T)

    return setup


def sh(cmd: str) -> Callable[[Path], None]:
    def setup(T: Path) -> None:
        subprocess.run(
            ["bash", "-c", cmd.format(T=T, FIX=FIX, REPO=REPO, PY=PY)], check=True, cwd=T, capture_output=True
        )

    return setup


def baseline(T: Path, mutate: Callable[[dict], None] | None = None, raw: str | None = None) -> None:
    (T / "b").mkdir(exist_ok=True)
    if raw is not None:
        (T / "b" / "cpu.json").write_text(raw)
        return
    doc = _json(FIX / "cpu.json")
    if mutate:
        mutate(doc)
    (T / "b" / "cpu.json").write_text(json.dumps(doc, indent=1))


def with_baseline(mutate: Callable[[dict], None] | None = None, raw: str | None = None) -> Callable[[Path], None]:
    return lambda T: baseline(T, mutate, raw)


def immutable(rel: str) -> Callable[[Path], None]:
    # Root ignores permission bits; an immutable inode refuses even root, like a read-only mount.
    return sh("chattr +i {T}/" + rel)


def digest(rel: str) -> Callable[[Path], None]:
    def setup(T: Path) -> None:
        (T / (rel + ".sha")).write_text(hashlib.sha256((T / rel).read_bytes()).hexdigest())

    return setup


def case0(doc: dict) -> dict:
    return next(iter(doc["cases"].values()))


def hist_doc(mutate: Callable[[dict], None] | None = None, name: str = "run.json") -> Callable[[Path], None]:
    def setup(T: Path) -> None:
        doc = _json(FIX / "sim0.json")
        if mutate:
            mutate(doc)
        (T / name).write_text(json.dumps(doc))

    return setup


def clone(T: Path) -> None:
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(T / "repo")], check=True)


# ---------------------------------------------------------------- rows: meddpm-bench

E = "bench"
QUICK = "--combos baseline --iters 1 --warmup 1"
for name, args, words in [
    ("preset unknown", "--preset zz", ("preset", "zz")),
    ("combos unknown", "--combos zz", ("combo", "zz")),
    ("combos empty", "--combos ''", ("combo",)),
    ("combos double comma", "--combos baseline,,opt2", ("combo",)),
    ("device unknown", "--device tpu", ("device", "tpu")),
    ("device cuda on cpu", "--device cuda", ("GPU",)),
    ("device cuda:7 on cpu", "--device cuda:7", ("GPU",)),
    ("device cpu:1", "--device cpu:1", ("cpu:1",)),
    ("batch 0", "--batch-size 0", ("batch",)),
    ("batch 1.5", "--batch-size 1.5", ("batch",)),
    ("batch huge", "--batch-size 100000000", ("batch",)),
    ("warmup -1", "--warmup -1", ("warmup",)),
    ("warmup huge", "--warmup 1000000000", ("warmup",)),
    ("iters 0", "--iters 0", ("iters",)),
    ("iters huge", "--iters 1000000000", ("iters",)),
    ("iters with min-rounds", "--iters 2 --min-rounds 3", ("iters",)),
    ("min-rounds 0", "--min-rounds 0", ("min-rounds",)),
    ("max below min", "--min-rounds 5 --max-rounds 2", ("max-rounds",)),
    ("max-rounds huge", "--max-rounds 1000000000", ("max-rounds",)),
    ("rel-iqr negative", "--rel-iqr -0.1", ("rel-iqr",)),
    ("rel-iqr nan", "--rel-iqr nan", ("rel-iqr",)),
    ("budget 0", "--budget 0", ("budget",)),
    ("budget nan", "--budget nan", ("budget",)),
    ("median-precision 2", "--median-precision 2", ("median-precision",)),
    ("median-precision -0.1", "--median-precision -0.1", ("median-precision",)),
    ("gpus -1", "--gpus -1", ("gpus",)),
    ("kernel-mix on cpu", "--kernel-mix", ("kernel-mix",)),
    ("processes 0", "--processes 0", ("processes",)),
    ("processes huge", "--processes 1000000", ("processes",)),
    ("until-detectable without an A/B", "--until-detectable 0.01", ("until-detectable", "compare-to")),
    ("until-detectable 2", "--compare-to HEAD --until-detectable 2", ("until-detectable", "0 and 1")),
    ("until-detectable abc", "--until-detectable abc", ("until-detectable",)),
    ("unknown option", "--itres 3", ("--itres",)),
    ("stray positional", "tiny", ("tiny",)),
    ("compare-to unknown rev", "--compare-to no-such-rev", ("compare-to", "no-such-rev")),
    (
        "compare-to pre-worker commit",
        "--compare-to $(git -C {REPO} rev-list --max-parents=0 HEAD | head -1)",
        ("compare-to",),
    ),
    ("json empty", "--json ''", ("json",)),
    ("json a folder", "--json {T}", ("directory",)),
    ("json under a file", "--json {T}/afile/r.json", ("afile",)),
    ("json name too long", "--json {T}/" + "x" * 300 + ".json", ("json",)),
    ("json fifo", "--json {T}/fifo", ("fifo",)),
    ("json link to fifo", "--json {T}/tofifo", ("fifo",)),
    ("json link loop", "--json {T}/loop", ("loop",)),
    ("json immutable folder", "--json {T}/ro/r.json", ("ro",)),
    ("json immutable file", "--json {T}/rofile.json", ("rofile",)),
    ("history bad port", "--history postgresql://h:abc/db", ("port",)),
    ("history one-slash url", "--history postgresql:/db.example/perf", ("URL",)),
    ("history sqlite relative", "--history sqlite:relative.db", ("sqlite",)),
    ("history sqlite memory", "--history sqlite://", ("memory",)),
    ("history a folder", "--history {T}", ("history",)),
    ("history zero-byte file", "--history {T}/empty.sqlite", ("history database",)),
    ("history foreign sqlite", "--history {T}/foreign.sqlite", ("history database",)),
    ("history corrupt sqlite", "--history {T}/corrupt.sqlite", ("history",)),
    ("history immutable", "--history {T}/ro.sqlite", ("ro.sqlite",)),
]:
    setup = None
    if "fifo" in name:
        setup = sh("mkfifo {T}/fifo && ln -s {T}/fifo {T}/tofifo")
    elif "loop" in name:
        setup = sh("ln -s {T}/loop {T}/loop")
    elif "under a file" in name:
        setup = put("afile", "x")
    elif name == "json immutable folder":
        setup = sh("mkdir {T}/ro && chattr +i {T}/ro")
    elif name == "json immutable file":
        setup = sh("echo old > {T}/rofile.json && chattr +i {T}/rofile.json")
    elif name == "history zero-byte file":
        setup = put("empty.sqlite", b"")
    elif name == "history foreign sqlite":
        setup = sh(
            "python3 -c \"import sqlite3; c=sqlite3.connect('{T}/foreign.sqlite');"
            "c.execute('create table t(x)'); c.commit()\""
        )
    elif name == "history corrupt sqlite":
        setup = sh("head -c 4096 /dev/urandom > {T}/corrupt.sqlite")
    elif name == "history immutable":
        setup = sh("cp {FIX}/hist.sqlite {T}/ro.sqlite && chattr +i {T}/ro.sqlite")
    # Option mistakes are refused before the first measurement: a few seconds, never a run of the model.
    absent = ("bench-results",) if "history" not in name else ()
    lim = 40.0  # a loaded machine starts Python slowly; the stderr lines and absent files show measuring
    extra = stray("postgresql:*", "sqlite:*", "relative.db", "h", "foo:*") if name.startswith("history") else None
    item = {
        "device cpu:1": 10,
        "warmup huge": 10,
        "iters huge": 10,
        "processes huge": 10,
        "json fifo": 1,
        "json link to fifo": 1,
        "history bad port": 4,
        "history one-slash url": 4,
        "history sqlite relative": 4,
    }.get(name)
    expect = refuse(*words, under=lim, absent=absent, extra=extra)
    if "zero-byte" in name:
        # An empty file is SQLite's empty database: a command that stores runs may make it a history database,
        # as it makes a missing one (HistoryStore.open); check and report, which only read, must refuse it.
        expect = either(expect, succeed(extra=runs_in("empty.sqlite", 1), says="the run stored in it"))
    row(
        f"bench {name}",
        E,
        f"{BENCH} {QUICK if 'combos' not in name else '--iters 1 --warmup 1'} {args}",
        expect,
        setup=setup,
        item=item,
        timeout=60 if name.startswith(("history", "json")) else 30,
    )


def bench_table(r: Result) -> str | None:
    head = next((ln for ln in r.out.splitlines() if "TFLOP/s" in ln), None)
    tab = [ln for ln in r.out.splitlines() if ln.startswith(("baseline ", "opt2 "))]
    if head is None or not tab:
        return "no results table with a TFLOP/s column on stdout"
    end = head.index("TFLOP/s") + len("TFLOP/s")  # pandas right-aligns: a value ends where its header ends
    for ln in tab:
        tflops = ln[:end].split()[-1]
        if re.fullmatch(r"0\.?0*", tflops):
            return f"TFLOP/s shows {tflops!r} for {ln.split()[0]} (too few digits for the tiny preset)"
    return None


row(
    "bench README command 1 on a CPU",
    E,
    f"{BENCH}",
    succeed("bench-results/*.json", extra=bench_table, says="TFLOP/s readable (not 0.00)"),
    timeout=240,
    item=14,
)
row(
    "bench combos twice",
    E,
    f"{BENCH} --combos baseline,baseline --iters 1 --warmup 1 --json r.json",
    either(
        refuse("baseline", under=40),
        succeed(
            "r.json",
            extra=lambda r: (
                None
                if len(_json(r.T / "r.json")["results"]) == 1
                else f"{len(_json(r.T / 'r.json')['results'])} results for one combo"
            ),
        ),
    ),
    timeout=120,
    item=10,
)
row(
    "bench json a symlink to a file",
    E,
    f"{BENCH} {QUICK} --json {{T}}/link.json",
    succeed(
        "target.json",
        extra=lambda r: (
            None
            if (r.T / "link.json").is_symlink() and "results" in _json(r.T / "target.json")
            else "the link was replaced or its target not written"
        ),
    ),
    setup=sh("echo '{{}}' > {T}/target.json && ln -s {T}/target.json {T}/link.json"),
    timeout=120,
    item=1,
)
row(
    "bench json a dangling symlink",
    E,
    f"{BENCH} {QUICK} --json {{T}}/dangling.json",
    either(
        refuse("dangling", under=40),
        succeed(
            "sub/t.json", extra=lambda r: None if (r.T / "dangling.json").is_symlink() else "the link was replaced"
        ),
    ),
    setup=sh("mkdir {T}/sub && ln -s {T}/sub/t.json {T}/dangling.json"),
    timeout=120,
    item=1,
)
row(
    "bench json unicode and spaces",
    E,
    f"{BENCH} {QUICK} --json '{{T}}/résultats d’essai.json'",
    succeed("résultats d’essai.json"),
    timeout=120,
)
row(
    "bench history good database",
    E,
    f"{BENCH} {QUICK} --json r.json --history {{T}}/h.sqlite",
    succeed("r.json", extra=runs_in("h.sqlite", 1)),
    timeout=120,
)
row(
    "bench env MEDDPM_HISTORY bad url",
    E,
    f"MEDDPM_HISTORY=postgresql://h:abc/db {BENCH} {QUICK} --json r.json",
    refuse("port", under=40, absent=("r.json",)),
    timeout=60,
    item=4,
)
row(
    "bench default names, two runs at once",
    E,
    f"({BENCH} {QUICK} & {BENCH} {QUICK}; wait)",
    succeed(
        extra=lambda r: (
            None
            if len(list(r.T.glob("bench-results/*.json"))) == 2
            else f"{len(list(r.T.glob('bench-results/*.json')))} result file(s) from two runs"
        )
    ),
    timeout=300,
    item=6,
)
row(
    "bench stdout into head -1",
    E,
    f"{BENCH} {QUICK} --json r.json --history {{T}}/h.sqlite | head -1",
    succeed("r.json", extra=runs_in("h.sqlite", 1)),
    timeout=120,
    item=12,
)
row("bench help into head -1", E, f"{BENCH} --help | head -1", succeed(), timeout=30)
row("bench stdout closed", E, f"{BENCH} {QUICK} --json r.json >&-", succeed("r.json", rc=(0, 1)), timeout=120)
row(
    "bench SIGINT in a round",
    E,
    f"exec {BENCH} --combos baseline --iters 4 --warmup 1 --json r.json",
    interrupted("interrupt", extra=partial_json("r.json")),
    signal=("round 1/", signal.SIGINT, 1.0),
    timeout=120,
    item=8,
)
row(
    "bench SIGTERM in a round",
    E,
    f"exec {BENCH} --combos baseline --iters 4 --warmup 1 --json r.json",
    interrupted(rc=(130, 143, -15), extra=all_of(partial_json("r.json"), no_leftovers)),
    signal=("round 1/", signal.SIGTERM, 1.0),
    timeout=120,
)
row(
    "bench SIGINT in --sample",
    E,
    f"exec {BENCH} --combos baseline --iters 1 --warmup 1 --sample --json r.json",
    interrupted("interrupt", extra=partial_json("r.json")),
    signal=("results written to", signal.SIGINT, 3.0),
    timeout=150,
    item=8,
)
row(
    "bench SIGTERM in an A/B",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo exec {BENCH} --combos baseline --iters 2 --warmup 1 --compare-to HEAD "
    "--processes 2 --json {T}/r.json",
    interrupted(rc=(130, 143, -15), extra=no_leftovers),
    setup=clone,
    signal=("meddpm-bench: preset", signal.SIGTERM, 8.0),
    timeout=150,
    item=5,
)
row(
    "bench SIGINT in an A/B",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo exec {BENCH} --combos baseline --iters 2 --warmup 1 --compare-to HEAD "
    "--processes 2 --json {T}/r.json",
    interrupted("interrupt", extra=no_leftovers),
    setup=clone,
    signal=("meddpm-bench: preset", signal.SIGINT, 8.0),
    timeout=150,
    item=5,
)


def undrivable_commit(T: Path) -> None:
    """A clone whose HEAD~1 breaks the model room on import and whose HEAD reverts that: HEAD~1 cannot be driven."""
    clone(T)
    git = ["git", "-C", str(T / "repo"), "-c", "user.name=campaign", "-c", "user.email=campaign@example.invalid"]
    with open(T / "repo/meddpm/model/__init__.py", "a") as f:
        f.write('raise ImportError("this revision breaks its model room on purpose")\n')
    subprocess.run([*git, "commit", "-qam", "break the model room"], check=True)
    subprocess.run([*git, "revert", "--no-edit", "HEAD"], check=True, capture_output=True)


# --bisect GOOD..BAD: a malformed or impossible range, or an option it cannot combine, is one line before measuring.
for name, args, words in [
    ("bisect one revision", "--bisect HEAD", ("GOOD..BAD", "'HEAD'")),
    ("bisect no good end", "--bisect ..HEAD", ("GOOD..BAD", "..HEAD")),
    ("bisect no bad end", "--bisect HEAD..", ("GOOD..BAD", "HEAD..")),
    ("bisect empty range", "--bisect ''", ("GOOD..BAD",)),
    ("bisect three dots", "--bisect HEAD~1...HEAD", ("GOOD..BAD", "...")),
    ("bisect a..b..c", "--bisect a..b..c", ("--bisect takes GOOD..BAD", "'a..b..c'")),
    ("bisect two ranges in one", "--bisect HEAD~2..HEAD~1..HEAD", ("--bisect", "HEAD~1..HEAD")),
    ("bisect good unknown", "--bisect no-such-rev..HEAD", ("--bisect", "no-such-rev")),
    ("bisect bad unknown", "--bisect HEAD~1..no-such-rev", ("--bisect", "no-such-rev")),
    ("bisect good after bad", "--bisect HEAD..HEAD~2", ("not an ancestor", "older")),
    ("bisect good equals bad", "--bisect HEAD..HEAD", ("HEAD", "older")),
    ("bisect good off the first-parent line", "--bisect 8df1feb^2..8df1feb", ("first-parent",)),
    ("bisect two combos", "--combos baseline,opt2 --bisect HEAD~1..HEAD", ("one combo", "--combos")),
    ("bisect with compare-to", "--bisect HEAD~1..HEAD --compare-to HEAD~1", ("--compare-to",)),
    ("bisect with history and sample", "--bisect HEAD~1..HEAD --history h.sqlite --sample", ("--history", "--sample")),
    ("bisect with kernel-mix", "--bisect HEAD~1..HEAD --kernel-mix", ("--kernel-mix",)),
    ("bisect with gpus", "--bisect HEAD~1..HEAD --gpus 2", ("--gpus",)),
    ("bisect processes 1", "--bisect HEAD~1..HEAD --processes 1", ("--processes", "2")),
]:
    combos = "" if "--combos" in args else "--combos baseline "
    row(
        f"bench {name}",
        E,
        f"{BENCH} {combos}--iters 1 --warmup 1 {args} --json r.json",
        refuse(*words, under=40, absent=("r.json", "bench-results", "h.sqlite")),
        timeout=60,
    )
row(
    "bench compare-to an undrivable revision",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo {BENCH} {QUICK} --compare-to HEAD~1 --json {{T}}/r.json",
    refuse("--compare-to", "cannot drive", "break", "first commit after it", "Revert", under=60, absent=("r.json",)),
    setup=undrivable_commit,
    timeout=90,
)
row(
    "bench bisect from an undrivable revision",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo {BENCH} {QUICK} --bisect HEAD~1..HEAD --json {{T}}/r.json",
    # three worker checks (the bad end, the good end, the search for a drivable commit), each importing torch
    refuse("--bisect", "cannot drive", "first commit after it", under=90, absent=("r.json",)),
    setup=undrivable_commit,
    timeout=90,
)

# ---------------------------------------------------------------- rows: issues 53 and 54 (bisection, sides, workers)
# Named "(53.N)" / "(54.N)" after the issue and item whose input each re-runs.


def _git_in(repo: Path) -> list[str]:
    return ["git", "-C", str(repo), "-c", "user.name=campaign", "-c", "user.email=campaign@example.invalid"]


def _commit_change(T: Path, rel: str, text: str | None, message: str, append: bool = True) -> None:
    """Append ``text`` to (or with ``text`` None remove) ``rel`` in the clone, and commit."""
    path = T / "repo" / rel
    if text is None:
        subprocess.run([*_git_in(T / "repo"), "rm", "-q", "-r", rel], check=True)
    else:
        with open(path, "a" if append else "w") as f:
            f.write(text)
    subprocess.run([*_git_in(T / "repo"), "commit", "-q", "-am", message], check=True)


def broken_then_slow(breakage: str) -> Callable[[Path], None]:
    """A clone with three commits after HEAD: its harness reading planted iteration times from the workload (as
    tests/planted_repo.py does: 100 ms), one commit this harness cannot drive (``breakage``), then one that restores
    the tree and plants 150 ms for the baseline combo: the culprit sits next to a skipped commit. Planted, since on
    a machine busy with other sessions the tiny preset's real iterations read anything from 0.2 to 5 s, and a real
    0.3 s, then 3 s, slowdown was refused (ratio 1.41 [0.84, 2.37] at 6+6 processes), rightly."""

    def setup(T: Path) -> None:
        sys.path.insert(0, str(REPO / "tests"))
        from planted_repo import plant_harness_clock, set_clock

        clone(T)
        repo = T / "repo"
        plant_harness_clock(repo)
        set_clock(repo)
        subprocess.run([*_git_in(repo), "commit", "-q", "-am", "planted clock: 100 ms"], check=True)
        if breakage == "syntax":
            _commit_change(T, "meddpm/model/unet.py", "\ndef broken(:\n", "a syntax error in the model")
        elif breakage == "import":
            _commit_change(T, "meddpm/model/__init__.py", "\nimport meddpm.model.no_such_module\n", "an import error")
        else:
            _commit_change(T, "meddpm", None, "meddpm/ moved away")
        subprocess.run([*_git_in(repo), "checkout", "-q", "HEAD~1", "--", "meddpm"], check=True)
        set_clock(repo, baseline=150.0)
        subprocess.run([*_git_in(repo), "add", "-A"], check=True)
        subprocess.run([*_git_in(repo), "commit", "-q", "-m", "back, and the baseline combo slower"], check=True)

    return setup


def bisect_json_skipped(r: Result) -> str | None:
    doc = _json(r.T / "r.json")["bisect"]
    if len(doc.get("skipped", [])) != 1 or len(doc.get("suspects", [])) != 2:
        return f"r.json's skipped/suspects are {doc.get('skipped')}/{doc.get('suspects')}"
    return None


for breakage, words in [("syntax", "SyntaxError"), ("import", "no_such_module"), ("moved", "no meddpm/ folder")]:
    row(
        f"bench bisect around a midpoint with {breakage} breakage (53.1)",
        E,
        f"cd {{T}}/repo && PYTHONPATH={{T}}/repo {BENCH} {QUICK} --processes 2 --bisect HEAD~2..HEAD "
        "--json {T}/r.json",
        succeed("r.json", extra=all_of(text_has("skipped", words, "one of 2 commits"), bisect_json_skipped)),
        setup=broken_then_slow(breakage),
        timeout=400,
    )


def bisect_partial_shape(r: Result) -> str | None:
    doc = _json(r.T / "r.json")["bisect"]
    return None if isinstance(doc.get("good"), dict) and isinstance(doc.get("bad"), dict) else "good/bad not objects"


row(
    "bench SIGHUP in a bisection (53.2, 54.2, 54.11)",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo exec {BENCH} {QUICK} --processes 2 --bisect HEAD~3..HEAD "
    "--json {T}/r.json",
    interrupted("interrupted", extra=all_of(partial_json("r.json"), bisect_partial_shape, no_leftovers)),
    setup=broken_then_slow("syntax"),
    signal=("step 1:", signal.SIGHUP, 3.0),
    timeout=400,
)
row(
    "bench SIGHUP in an A/B (54.2)",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo exec {BENCH} --combos baseline --iters 2 --warmup 1 --compare-to HEAD "
    "--processes 2 --json {T}/r.json",
    interrupted("interrupt", extra=no_leftovers),
    setup=clone,
    signal=("meddpm-bench: preset", signal.SIGHUP, 8.0),
    timeout=150,
)
for variable, words in [
    ("PYTHONHOME=/nonexistent", ("stops Python from starting", "PYTHONHOME=/nonexistent")),
    ("PYTHONHASHSEED=abc", ("stops Python from starting", "PYTHONHASHSEED=abc")),
    ("PYTHONINSPECT=1", ("interactive", "PYTHONINSPECT=1")),
]:
    row(
        f"bench compare-env {variable} (53.5)",
        E,
        f"{BENCH} {QUICK} --compare-env {variable} --json r.json",
        refuse("side B's environment", *words, under=40, absent=("r.json",)),
        timeout=60,
    )
row(
    "bench bisect in a shallow clone (53.6)",
    E,
    f"cd {{T}}/shallow && PYTHONPATH={{T}}/shallow {BENCH} {QUICK} --bisect HEAD~5..HEAD --json {{T}}/r.json",
    refuse("shallow", "git fetch --unshallow", under=40, absent=("r.json",)),
    setup=sh(f"git clone -q --depth 3 file://{REPO} {{T}}/shallow"),
    timeout=60,
)
row(
    "bench paper preset on the CPU (53.7)",
    E,
    f"{BENCH} --preset paper --json r.json",
    refuse("preset 'paper' on the CPU", "at least", "--allow-slow-cpu", under=40, absent=("r.json",)),
    timeout=60,
)
row(
    "bench bisect a clone's commits with meddpm imported from another checkout (53.8)",
    E,
    f"cd {{T}}/repo && {BENCH} {QUICK} --processes 2 --bisect HEAD~1..$(git rev-parse HEAD) --json {{T}}/r.json",
    # measured in the clone (HEAD adds an empty commit): the ends are the same code, so "not slower" (or, on a busy
    # machine, a culprit of noise), never "unknown revision"
    either(refuse("not slower", "nothing to bisect", lines=40, absent=("r.json",)), succeed("r.json")),
    setup=steps(clone, sh("git -C {T}/repo -c user.name=c -c user.email=c@c commit -q --allow-empty -m clone-only")),
    timeout=300,
)
row(
    "bench bisect an unknown revision outside a checkout names the repository (53.8)",
    E,
    f"{BENCH} {QUICK} --bisect no-such-rev..HEAD --json r.json",
    refuse("unknown revision", "no-such-rev", f"(in {REPO}", under=40, absent=("r.json",)),
    timeout=60,
)
row(
    "bench stop line names each combo (53.9)",
    E,
    f"{BENCH} --combos baseline,opt2 --iters 2 --warmup 1 --json r.json",
    succeed("r.json", extra=text_has("stopped: round limit of 2 reached (baseline, opt2)")),
    timeout=120,
)


def ddp_sync_na(r: Result) -> str | None:
    ddp = _json(r.T / "r.json").get("ddp") or [{}]
    return None if ddp[0].get("exposed_comm_ms", 0) is None else f"sync at one rank: {ddp[0].get('exposed_comm_ms')}"


row(
    "bench DDP at one rank reads sync n/a (53.10)",
    E,
    f"{BENCH} {QUICK} --gpus 1 --json r.json",
    succeed("r.json", extra=all_of(text_has("n/a"), ddp_sync_na)),
    timeout=240,
)


def no_usdt(r: Result) -> str | None:
    return "profiler lines on stderr" if "USDT" in r.err or "profiler_start" in r.err else None


row(
    "bench CPU run prints no profiler lines (53.12)",
    E,
    f"{BENCH} {QUICK} --json r.json",
    succeed("r.json", extra=no_usdt),
    timeout=120,
)
CRASHING = (
    '#!/bin/sh\ncase "$*" in *--out*) n=$(cat "$0.n" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$0.n"; '
    'if [ $n -eq 2 ]; then echo "RuntimeError: planted crash" >&2; exit 1; fi;; esac\n'
    f'exec {PY} "$@"\n'
)
row(
    "bench a side-B worker that crashes mid-run (54.1)",
    E,
    f"chmod +x py && {BENCH} --combos baseline --iters 2 --warmup 1 --processes 2 --compare-python {{T}}/py "
    "--json r.json",
    refuse("measuring process 3/4", "planted crash", "marked partial", lines=8, extra=partial_json("r.json")),
    setup=put("py", CRASHING),
    timeout=240,
)
row(
    "bench bisect brats on 24 GiB (54.3)",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo {BENCH} --preset brats --combos baseline --bisect HEAD~1..HEAD "
    "--json {T}/r.json",
    refuse("brats", under=40, absent=("r.json",)),
    setup=clone,
    timeout=60,
)
row(
    "bench compare-to a revision with a link out of meddpm/ (54.6)",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo {BENCH} {QUICK} --compare-to HEAD --json {{T}}/r.json",
    refuse("--compare-to", "link", "outside meddpm/", "/etc/passwd", under=60, absent=("r.json",)),
    setup=steps(
        clone,
        sh(
            "ln -s /etc/passwd {T}/repo/meddpm/evil && git -C {T}/repo add -A && "
            "git -C {T}/repo -c user.name=c -c user.email=c@c commit -q -m 'a link out'"
        ),
    ),
    timeout=90,
)


def latin1_subject(T: Path) -> None:
    clone(T)
    (T / "msg").write_bytes("caf\xe9: une r\xe9vision".encode("latin-1"))
    git = _git_in(T / "repo")
    subprocess.run(
        [*git, "-c", "i18n.commitEncoding=ISO-8859-1", "commit", "-q", "--allow-empty", "-F", str(T / "msg")],
        check=True,
    )
    subprocess.run([*git, "config", "i18n.logOutputEncoding", "ISO-8859-1"], check=True)


row(
    "bench bisect over a latin-1 subject (54.6)",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo {BENCH} {QUICK} --processes 2 --bisect HEAD~1..HEAD --json {{T}}/r.json",
    either(refuse("not slower", "café", lines=40), succeed("r.json", extra=text_has("café"))),
    setup=latin1_subject,
    timeout=300,
)


def hostile_subject(T: Path) -> None:
    clone(T)
    subject = "fix\x1b]0;pwned\x07\r\x1b[2Kculprit: someone else"
    subprocess.run([*_git_in(T / "repo"), "commit", "-q", "--allow-empty", "-m", subject], check=True)


def escaped(r: Result) -> str | None:
    return "a raw escape reached the terminal" if "\x1b" in r.out + r.err else None


row(
    "bench bisect over a subject with escape sequences (54.7)",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo {BENCH} {QUICK} --processes 2 --bisect HEAD~1..HEAD --json {{T}}/r.json",
    either(
        refuse("not slower", "\\x1b]0;pwned", lines=40, extra=escaped),
        succeed("r.json", extra=all_of(text_has("\\x1b]0;pwned"), escaped)),
    ),
    setup=hostile_subject,
    timeout=300,
)
row(
    "bench bisect with until-detectable (54.8)",
    E,
    f"{BENCH} {QUICK} --bisect HEAD~1..HEAD --until-detectable 0.01 --json r.json",
    refuse("--bisect", "--until-detectable", under=40, absent=("r.json",)),
    timeout=60,
)
row(
    "bench compare-to with meddpm in a subfolder of a repository (54.8)",
    E,
    f"cd {{T}}/outer/tools && PYTHONPATH={{T}}/outer/tools {BENCH} {QUICK} --compare-to HEAD --json {{T}}/r.json",
    refuse("root of its git repository", "outer", under=40, absent=("r.json",)),
    setup=sh(
        f"mkdir -p {{T}}/outer/tools && cp -r {REPO}/meddpm {{T}}/outer/tools/ && git -C {{T}}/outer init -q && "
        "git -C {T}/outer add -A && git -C {T}/outer -c user.name=c -c user.email=c@c commit -q -m start"
    ),
    timeout=60,
)


NOISY = """
import os as _os, pathlib as _pl
_count = _pl.Path(_os.environ["TMPDIR"], "noise-count")
_n = int(_count.read_text()) + 1 if _count.exists() else 0
_count.write_text(str(_n))
_sleep_s = 0.3 * (_n % 2)
_step = TrainStep.__call__
TrainStep.__call__ = lambda self, *a, **k: (__import__("time").sleep(_sleep_s), _step(self, *a, **k))[1]
"""


def noisy_bad_end(T: Path) -> None:
    """A clone whose HEAD makes every other process that imports it 0.3 s an iteration slower: ends too noisy to
    tell at first."""
    clone(T)
    _commit_change(T, "meddpm/run/train.py", NOISY, "a slowdown in every other process")


row(
    "bench bisect whose ends are too noisy to tell at first (54.9)",
    E,
    f"cd {{T}}/repo && PYTHONPATH={{T}}/repo {BENCH} {QUICK} --processes 2 --bisect HEAD~1..HEAD --json {{T}}/r.json",
    either(
        refuse("not slower", "6+6 processes", lines=60, extra=text_has("too wide to tell")),
        succeed("r.json", extra=text_has("too wide to tell", "culprit")),
    ),
    setup=noisy_bad_end,
    timeout=600,
)

row(
    "suite says which median the verdicts use beside pytest-benchmark's table (53.13)",
    "suite",
    SUITE,
    succeed(
        rc=(0, 1), extra=text_has("no verdict reads them", "pytest-benchmark's own rounds, not read by the verdicts")
    ),
    setup=with_baseline(),
    timeout=240,
)

# ---------------------------------------------------------------- rows: the suite

S = "suite"
PYTEST_USAGE = (
    "energy maybe",
    "batch abc",
    "unknown option",
    "until-detectable abc",
)  # values pytest's own option parser refuses


def argparse_line(*words: str) -> Callable[[Result], str | None]:
    """pytest's usage error: one "error:" line names the problem (the rest is its usage, inifile and rootdir)."""

    def check(r: Result) -> str | None:
        line = next((ln for ln in _lines(r.err) if "error:" in ln and "usage:" not in ln), "")
        return _words(line, words) if line else "no 'error:' line from pytest's option parser"

    return check


for name, args, words, item in [
    ("warmup -1", "--perf-warmup=-1", ("perf-warmup",), None),
    ("min-rounds 0", "--perf-min-rounds=0", ("perf-min-rounds",), None),
    ("max below min", "--perf-max-rounds=1", ("perf-max-rounds",), None),
    ("rel-iqr -1", "--perf-rel-iqr=-1", ("perf-rel-iqr",), None),
    ("rel-iqr nan", "--perf-rel-iqr=nan", ("perf-rel-iqr",), None),
    ("budget 0", "--perf-budget=0", ("perf-budget",), None),
    ("budget inf", "--perf-budget=inf", ("perf-budget",), None),
    ("median-precision 2", "--perf-median-precision=2", ("perf-median-precision",), None),
    ("energy maybe", "--perf-energy=maybe", ("perf-energy",), None),
    ("energy-bound -1", "--perf-energy-bound=-1", ("perf-energy-bound",), None),
    ("benchmark-rounds 0", "--perf-benchmark-rounds=0", ("perf-benchmark-rounds",), None),
    ("processes 0", "--perf-processes=0", ("perf-processes",), None),
    ("processes huge", "--perf-processes=1000000", ("perf-processes",), 10),
    ("until-detectable without an A/B", "--perf-until-detectable=0.01", ("perf-until-detectable", "compare-to"), None),
    ("until-detectable 2", "--compare-to=HEAD --perf-until-detectable=2", ("perf-until-detectable", "0 and 1"), None),
    ("until-detectable abc", "--perf-until-detectable=abc", ("perf-until-detectable",), None),
    ("warmup huge", "--perf-warmup=1000000000", ("perf-warmup",), 10),
    ("max-rounds huge", "--perf-max-rounds=1000000000", ("perf-max-rounds",), 10),
    ("combos empty", "--combos=", ("combos",), None),
    ("combos unknown", "--combos=zz", ("zz",), None),
    ("preset unknown", "--preset=zz", ("zz",), None),
    ("batch 0", "--batch-size=0", ("batch",), None),
    ("batch abc", "--batch-size=abc", ("batch",), None),
    ("baseline-dir missing", "--baseline-dir={T}/nope", ("nope",), None),
    ("baseline-dir a file", "--baseline-dir={T}/afile", ("afile",), None),
    ("baseline-dir immutable, saving", "--baseline-dir={T}/ro --save-baseline", ("ro",), None),
    ("results-dir a file", "--perf-results-dir={T}/afile", ("afile",), None),
    ("results-dir immutable", "--perf-results-dir={T}/ro", ("ro",), None),
    ("results.json a fifo", "", ("results.json",), 1),
    ("summary.md a folder", "", ("summary.md",), None),
    ("history bad port", "--history=postgresql://h:abc/db", ("port",), 4),
    ("history one-slash url", "--history=postgresql:/db.example/perf", ("URL",), 4),
    ("history sqlite relative", "--history=sqlite:relative.db", ("sqlite",), 4),
    ("history zero-byte", "--history={T}/empty.sqlite", ("history database",), 11),
    ("compare-to unknown", "--compare-to=no-such-rev", ("no-such-rev",), None),
    ("ncu-replay unknown", "--ncu-replay=zz", ("ncu replay", "zz"), None),
    ("ncu-timeout negative", "--ncu-timeout=-1", ("ncu-timeout",), None),
    ("unknown option", "--perf-itres=3", ("perf-itres",), None),
    ("arch zz9 on cpu", "--arch=zz9", ("zz9",), 10),
]:
    setup = None
    if "a file" in name:
        setup = put("afile", "x")
    elif "immutable" in name:
        setup = sh("mkdir -p {T}/ro && chattr +i {T}/ro")
    elif "fifo" in name:
        setup = sh("mkdir -p {T}/r && mkfifo {T}/r/results.json")
    elif "summary.md" in name:
        setup = sh("mkdir -p {T}/r/summary.md")
    elif "zero-byte" in name:
        setup = put("empty.sqlite", b"")
    base = with_baseline()
    cmd = SUITE if "baseline-dir" not in name else SUITE.replace(" --baseline-dir={T}/b", "")
    if "results-dir" in name:
        cmd = cmd.replace(" --perf-results-dir={T}/r", "")
    # pytest: 4 for a usage error; the plugin's one-line errors, or pytest's own usage error where its argparse
    # refuses the value (choices, type) or the option: its usage line, the "error:" line, inifile and rootdir
    extra = stray("postgresql:*", "sqlite:*", "relative.db") if "history" in name else None
    expect = refuse(
        *words,
        rc=(1, 2, 3, 4),
        lines=4 if name in PYTEST_USAGE else 1,
        under=40,
        absent=("r/results.json",) if "fifo" not in name else (),
        extra=all_of(extra or (lambda r: None), argparse_line(*words)) if name in PYTEST_USAGE else extra,
    )
    if "zero-byte" in name:  # as for the bench: a command that stores runs may make an empty file a history database
        expect = either(expect, succeed("r/results.json", extra=runs_in("empty.sqlite", 1), says="the run stored"))
    row(
        f"suite {name}",
        S,
        f"{cmd} {args}",
        expect,
        setup=steps(base, setup) if setup else base,
        item=item,
        timeout=60,
    )

SUITE_OK = succeed("r/results.json")


def _note_or_refuse(option: str) -> tuple[Expect, str]:
    return either(
        refuse(option, rc=(1, 2, 4), under=40),
        succeed("r/results.json", extra=text_has(option, where="both"), says=f"output mentions {option}"),
    )


row("suite arch h200 on -m cpu", S, f"{SUITE} --arch=h200", _note_or_refuse("arch"), setup=with_baseline(), item=10)
row("suite ncu on -m cpu", S, f"{SUITE} --ncu", _note_or_refuse("ncu"), setup=with_baseline(), item=10)
row(
    "suite energy off on -m cpu",
    S,
    f"{SUITE} --perf-energy=off",
    _note_or_refuse("energy"),
    setup=with_baseline(),
    item=10,
)
row(
    "suite combos twice",
    S,
    f"{SUITE.replace('--combos=baseline', '--combos=baseline,baseline')}",
    either(
        refuse("baseline", rc=(1, 2, 4), under=40),
        succeed(
            "r/results.json",
            extra=lambda r: (
                None if len(_json(r.T / "r/results.json")["cases"]) == 1 else "the combo was measured twice"
            ),
        ),
    ),
    setup=with_baseline(),
    item=10,
)
row("suite plain run with a tiny baseline", S, SUITE, SUITE_OK, setup=with_baseline())
row("suite no tests selected", S, f"{SUITE} -k no_such_test", succeed(rc=(5,)), setup=with_baseline())
row(
    "suite results-dir a symlink to a folder",
    S,
    SUITE.replace("--perf-results-dir={T}/r", "--perf-results-dir={T}/rl"),
    succeed("rreal/results.json"),
    setup=steps(with_baseline(), sh("mkdir {T}/rreal && ln -s {T}/rreal {T}/rl")),
)
row(
    "suite two runs sharing results-dir",
    S,
    f"({SUITE} & {SUITE}; wait)",
    succeed(
        extra=lambda r: (
            None
            if len(list(r.T.glob("r/results-*.json"))) == 2
            else f"{len(list(r.T.glob('r/results-*.json')))} per-run file(s) from two runs"
        )
    ),
    setup=with_baseline(),
    timeout=300,
    item=6,
)
row(
    "suite history good database",
    S,
    f"{SUITE} --history={{T}}/h.sqlite",
    succeed(extra=runs_in("h.sqlite", 1)),
    setup=with_baseline(),
)
row(
    "suite output into head -1",
    S,
    f"{SUITE} | head -1",
    succeed("r/results.json", rc=(0, 1)),
    setup=with_baseline(),
    item=12,
)
row(
    "suite SIGINT in a case, no save",
    S,
    f"exec {SUITE_V}",
    interrupted(rc=(1, 2, 130), extra=partial_json("r/results.json")),
    setup=with_baseline(),
    signal=(ROUND_TIMED, signal.SIGINT, 1.0),
    item=8,
)
row(
    "suite SIGINT in a case, saving",
    S,
    f"exec {SUITE_V} --save-baseline",
    interrupted(
        rc=(1, 2, 130), extra=all_of(partial_json("r/results.json"), unchanged("b/cpu.json", "b/cpu.json.sha"))
    ),
    setup=steps(with_baseline(), digest("b/cpu.json")),
    signal=(ROUND_TIMED, signal.SIGINT, 1.0),
)
row(
    "suite SIGTERM in a case, saving",
    S,
    f"exec {SUITE_V} --save-baseline",
    interrupted(rc=(1, 2, 130, 143, -15), extra=unchanged("b/cpu.json", "b/cpu.json.sha")),
    setup=steps(with_baseline(), digest("b/cpu.json")),
    signal=(ROUND_TIMED, signal.SIGTERM, 1.0),
)
row(
    "suite SIGINT in a process campaign",
    S,
    f"exec {SUITE_V} --perf-processes=2",
    interrupted(rc=(1, 2, 130), extra=all_of(partial_json("r/results.json"), no_leftovers)),
    setup=with_baseline(),
    signal=(PROCESS_TIMED, signal.SIGINT, 2.0),
    timeout=150,
    item=8,
)

# Baseline files read at the suite's start: each mistake is refused before anything is measured.
for name, mutate, raw, words, item in [
    ("corrupt json", None, '{"schema": ', ("not JSON",), None),
    ("empty file", None, "", ("cpu.json",), None),
    ("a list", None, "[]", ("not a baseline file",), None),
    ("schema 9", lambda d: d.update(schema="meddpm-baseline/9"), None, ("meddpm-baseline/9",), None),
    ("ratios a string", lambda d: d.update(ratios={"tiny/b1": "fast"}), None, ("ratios",), 2),
    ("case tolerance typo", lambda d: case0(d).update(tolerance={"time_rel": 0.5}), None, ("tolerances",), 9),
    ("median true", lambda d: case0(d).update(median_ms=True), None, ("median_ms",), 9),
    ("tflops NaN", lambda d: case0(d).update(tflops=float("nan")), None, ("tflops",), 9),
    (
        "median contradicts samples",
        lambda d: case0(d).update(median_ms=case0(d)["median_ms"] * 3),
        None,
        ("median",),
        9,
    ),
    ("arch h100 in cpu.json", lambda d: d.update(arch="h100"), None, ("arch",), None),
]:
    row(
        f"suite baseline {name}",
        "baseline",
        SUITE,
        refuse(*words, rc=(1, 2, 4), under=40, absent=("r/results.json",)),
        setup=with_baseline(mutate, raw),
        item=item,
        timeout=60,
    )
row(
    "suite baseline a symlink",
    "baseline",
    f"{SUITE} --save-baseline --force-save-baseline",  # forced: a loaded machine's timings may be unreliable
    succeed("r/results.json", extra=lambda r: None if (r.T / "b/cpu.json").is_symlink() else "the link was replaced"),
    setup=steps(
        lambda T: (T / "b").mkdir(), sh("cp {FIX}/cpu.json {T}/real.json && ln -s {T}/real.json {T}/b/cpu.json")
    ),
    item=1,
)
row(
    "suite baseline a folder",
    "baseline",
    SUITE,
    refuse("cpu.json", rc=(1, 2, 4), under=40),
    setup=sh("mkdir -p {T}/b/cpu.json"),
)
row(
    "suite baseline immutable, saving",
    "baseline",
    f"{SUITE} --save-baseline",
    either(
        refuse("cpu.json", rc=(1, 2, 4), under=40),
        (save_failed_keeps_results, "a failed save after measuring: non-zero exit naming cpu.json, results.json kept"),
    ),
    setup=steps(with_baseline(), immutable("b/cpu.json")),
)
row(
    "suite baseline dangling symlink",
    "baseline",
    SUITE,
    either(refuse("cpu.json", rc=(1, 2, 4), under=40), SUITE_OK),
    setup=sh("mkdir -p {T}/b && ln -s {T}/gone {T}/b/cpu.json"),
)


# ---------------------------------------------------------------- rows: baseline files through the API


def load_cpu(T: Path) -> Any:
    from meddpm.judge.baseline import load_baseline

    b = load_baseline(T / "b" / "cpu.json", "cpu")
    return None if b is None else sorted(str(k) for k in b.cases)


def _drop(key: str) -> Callable[[dict], None]:
    return lambda d: d.pop(key)


def _tol(**kw: Any) -> Callable[[dict], None]:
    return lambda d: d["tolerances"].update(kw)


def _exp(**kw: Any) -> Callable[[dict], None]:
    def m(d: dict) -> None:
        e = {
            "preset": "tiny",
            "metric": "time",
            "combo": "opt2",
            "reference": "baseline",
            "max": 2.0,
            "provenance": "target",
            "source": "campaign",
        }
        e.update(kw)
        d.setdefault("expectations", []).append({k: v for k, v in e.items() if v != "DROP"})

    return m


B = "baseline"
SB = {"preset": "tiny", "combo": "baseline", "batch_size": 1, "budget_s": 5.0, "provenance": "target", "source": "x"}
for name, mutate, raw, words, item in [
    ("not JSON", None, "not json", ("not JSON",), None),
    ("truncated", None, "TRUNC", ("not JSON",), None),
    ("bare NaN token", lambda d: case0(d).update(median_ms=float("nan")), None, ("median_ms",), 9),
    ("Infinity token", lambda d: case0(d).update(iqr_ms=float("inf")), None, ("iqr_ms",), 9),
    ("number 1e400", None, "E400", ("median_ms",), None),
    ("UTF-8 BOM", None, "BOM", ("cpu.json",), None),
    ("latin-1 bytes", None, "LATIN", ("cpu.json",), None),
    ("schema missing", _drop("schema"), None, ("schema",), None),
    ("schema a number", lambda d: d.update(schema=3), None, ("schema",), None),
    ("schema old 1", lambda d: d.update(schema="meddpm-baseline/1"), None, None, None),
    ("arch missing", _drop("arch"), None, ("arch",), None),
    ("unknown top-level key", lambda d: d.update(tolerence={}), None, ("tolerances",), 9),
    ("case unknown key", lambda d: case0(d).update(medain_ms=1.0), None, ("median_ms",), 9),
    ("case tolerance typo", lambda d: case0(d).update(tolerance={"time_rel": 0.5}), None, ("tolerances",), 9),
    ("median_ms true", lambda d: case0(d).update(median_ms=True), None, ("median_ms",), 9),
    ("median_ms a string", lambda d: case0(d).update(median_ms="12"), None, ("median_ms",), None),
    ("median_ms negative", lambda d: case0(d).update(median_ms=-1.0), None, ("median_ms",), None),
    ("median_ms zero", lambda d: case0(d).update(median_ms=0.0), None, ("median_ms",), None),
    (
        "median contradicts samples",
        lambda d: case0(d).update(median_ms=case0(d)["median_ms"] * 3),
        None,
        ("median",),
        9,
    ),
    ("samples empty", lambda d: case0(d).update(samples_ms=[]), None, ("samples_ms",), None),
    ("samples a number", lambda d: case0(d).update(samples_ms=5.0), None, ("samples_ms",), None),
    ("samples with null", lambda d: case0(d)["samples_ms"].append(None), None, ("samples_ms",), None),
    ("batch_size 1.5", lambda d: case0(d).update(batch_size=1.5), None, ("batch_size",), 9),
    ("tflops NaN", lambda d: case0(d).update(tflops=float("nan")), None, ("tflops",), 9),
    ("tflops negative", lambda d: case0(d).update(tflops=-1.0), None, ("tflops",), None),
    ("peak bytes negative", lambda d: case0(d).update(peak_allocated_bytes=-5), None, ("peak_allocated_bytes",), None),
    ("case key malformed", lambda d: d["cases"].update({"tiny/baseline": case0(d)}), None, ("tiny/baseline",), None),
    ("case key batch disagrees", lambda d: d["cases"].update({"tiny/baseline/b4": case0(d)}), None, ("b4",), None),
    ("cases a list", lambda d: d.update(cases=[]), None, ("cases",), None),
    ("cases null", lambda d: d.update(cases=None), None, ("cases",), None),
    ("tolerance negative", _tol(time_rel=-0.05), None, ("time_rel",), None),
    ("tolerance huge", _tol(time_rel=1e9), None, ("time_rel",), None),
    ("alpha 2", _tol(alpha=2.0), None, ("alpha",), None),
    ("alpha 0", _tol(alpha=0.0), None, ("alpha",), None),
    ("tolerance unknown key", _tol(tme_rel=0.1), None, ("time_rel",), 9),
    ("expectation unknown metric", _exp(metric="speed"), None, ("speed",), None),
    ("expectation min above max", _exp(min=3.0, max=2.0), None, ("min",), None),
    ("expectation no bound", _exp(max="DROP"), None, ("max",), None),
    ("expectation unknown combo", _exp(combo="opt9"), None, ("opt9",), None),
    ("expectation provenance odd", _exp(provenance="guess"), None, ("provenance",), None),
    ("expectation ratio over itself", _exp(combo="baseline"), None, ("baseline",), 13),
    ("expectation bound NaN", _exp(max=float("nan")), None, ("max",), None),
    (
        "sampling budget negative",
        lambda d: d.setdefault("sampling", {}).update({"tiny/baseline/b1": {**SB, "budget_s": -1.0}}),
        None,
        ("budget_s",),
        None,
    ),
    (
        "sampling unknown key",
        lambda d: d.setdefault("sampling", {}).update(
            {"tiny/baseline/b1": {**{k: v for k, v in SB.items() if k != "budget_s"}, "budget": 5.0}}
        ),
        None,
        ("budget_s",),
        None,
    ),
    ("ratios a string", lambda d: d.update(ratios={"tiny/b1": "fast"}), None, ("ratios",), 2),
    ("ratios nested wrong", lambda d: d.update(ratios={"tiny/b1": {"opt2": [1, 2]}}), None, ("ratios",), 2),
    (
        "noise negative",
        lambda d: case0(d).update(noise={"between_process_rel": -0.1}),
        None,
        ("between_process_rel",),
        None,
    ),
    ("description a number", lambda d: d.update(description=5), None, ("description",), None),
    ("deeply nested garbage", None, "[" * 100000 + "]" * 100000, ("cpu.json",), None),
]:

    def setup(T: Path, mutate=mutate, raw=raw) -> None:
        if raw == "BOM":
            baseline(T)
            p = T / "b/cpu.json"
            p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
        elif raw == "LATIN":
            baseline(T)
            p = T / "b/cpu.json"
            p.write_bytes(p.read_bytes().replace(b'"description": "', b'"description": "caf\xe9 ', 1))
        elif raw == "E400":
            baseline(T)
            p = T / "b/cpu.json"
            p.write_text(re.sub(r'"median_ms": [0-9.e+-]+', '"median_ms": 1e400', p.read_text(), count=1))
        elif raw == "TRUNC":
            baseline(T)
            p = T / "b/cpu.json"
            p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
        else:
            baseline(T, mutate, raw)

    expect = (
        api_ok(lambda v: None if v else "no cases loaded", "the cases")
        if words is None
        else (api_refuse(*words) if name != "deeply nested garbage" else api_handled(lambda v: "accepted", "refused"))
    )
    row(f"baseline api {name}", B, load_cpu, expect, setup=setup, item=item)

row("baseline api a directory", B, load_cpu, api_refuse("cpu.json"), setup=sh("mkdir -p {T}/b/cpu.json"))
row(
    "baseline api a fifo",
    B,
    load_cpu,
    api_refuse("cpu.json"),
    setup=sh("mkdir -p {T}/b && mkfifo {T}/b/cpu.json"),
    timeout=20,
)
row(
    "baseline api a symlink",
    B,
    load_cpu,
    api_ok(lambda v: None if v else "no cases", "the cases"),
    setup=steps(with_baseline(), sh("mv {T}/b/cpu.json {T}/real.json && ln -s {T}/real.json {T}/b/cpu.json")),
)
row(
    "baseline api the tiny baseline as made",
    B,
    load_cpu,
    api_ok(lambda v: None if v else "no cases", "the cases"),
    setup=with_baseline(),
)


# ---------------------------------------------------------------- rows: meddpm-history

H = "history"
HDB = "--db {T}/h.sqlite"


def import_refuse(*words: str, item: int | None = None) -> tuple[Expect, str]:
    return refuse(
        *words, rc=(1, 2), lines=2, extra=lambda r: runs_in("h.sqlite", 0)(r) if (r.T / "h.sqlite").exists() else None
    )


for name, mutate, words, item in [
    ("NaN median", lambda d: d["cases"][0]["stats"].update(median=float("nan")), ("median",), 3),
    ("NaN sample", lambda d: d["cases"][0]["samples_ms"].__setitem__(0, float("nan")), ("samples",), 3),
    ("inf median", lambda d: d["cases"][0]["stats"].update(median=float("inf")), ("median",), 11),
    ("negative median", lambda d: d["cases"][0]["stats"].update(median=-5.0), ("median",), 11),
    ("median a string", lambda d: d["cases"][0]["stats"].update(median="fast"), ("median",), None),
    ("median null", lambda d: d["cases"][0]["stats"].update(median=None), ("median",), 3),
    ("no stats", lambda d: d["cases"][0].pop("stats"), ("stats",), None),
    ("cases empty", lambda d: d.update(cases=[]), ("cases",), 11),
    ("schema newer, no cases", lambda d: (d.update(schema="meddpm-suite/99"), d.pop("cases")), ("schema",), 11),
    ("schema missing", lambda d: d.pop("schema"), ("schema",), None),
    ("environment missing", lambda d: d.pop("environment"), ("environment",), None),
    ("date malformed", lambda d: d["environment"].update(date="yesterday"), ("date",), None),
    ("case twice", lambda d: d["cases"].append(d["cases"][0]), ("baseline",), None),
    ("partial document", lambda d: d.update(partial=True), ("partial",), None),
]:
    row(
        f"history import {name}",
        H,
        f"{HIST} {HDB} import {{T}}/run.json",
        import_refuse(*words),
        setup=hist_doc(mutate),
        item=item,
    )

for name, setup, words in [
    ("missing file", None, ("nothere.json",)),
    ("empty file", put("run.json", ""), ("run.json",)),
    ("not JSON", put("run.json", "hello"), ("run.json",)),
    ("a JSON list", put("run.json", "[1, 2]"), ("run.json",)),
    ("a fifo", sh("mkfifo {T}/run.json"), ("run.json",)),
    ("a symlink loop", sh("ln -s {T}/run.json {T}/run.json"), ("run.json",)),
    ("an empty folder", sh("mkdir {T}/run.json"), ("run.json",)),
    ("a corrupt sqlite", sh("head -c 8192 /dev/urandom > {T}/run.sqlite"), ("run.sqlite",)),
    (
        "a foreign sqlite",
        sh(
            "python3 -c \"import sqlite3; c=sqlite3.connect('{T}/run.sqlite');"
            "c.execute('create table t(x)'); c.commit()\""
        ),
        ("run.sqlite",),
    ),
]:
    target = (
        "{T}/nothere.json" if name == "missing file" else ("{T}/run.sqlite" if "sqlite" in name else "{T}/run.json")
    )
    row(
        f"history import {name}",
        H,
        f"{HIST} {HDB} import {target}",
        import_refuse(*words),
        setup=setup,
        timeout=15 if "fifo" in name else 30,
    )

row("history import a bench JSON", H, f"{HIST} {HDB} import {{FIX}}/bench.json", succeed(extra=runs_in("h.sqlite", 1)))
row(
    "history import a suite results.json",
    H,
    f"{HIST} {HDB} import {{FIX}}/results.json",
    succeed(extra=runs_in("h.sqlite", 1)),
)
row(
    "history import the same run twice",
    H,
    f"{HIST} {HDB} import {{FIX}}/results.json && {HIST} {HDB} import {{FIX}}/results.json",
    succeed(extra=all_of(runs_in("h.sqlite", 1), text_has("already", where="both"))),
)
row(
    "history import a folder of runs",
    H,
    f"{HIST} {HDB} import {{T}}/runs",
    succeed(extra=runs_in("h.sqlite", 2)),
    setup=sh("mkdir {T}/runs && cp {FIX}/results.json {FIX}/sim0.json {T}/runs/"),
)
row(
    "history import a good and a bad file",
    H,
    f"{HIST} {HDB} import {{FIX}}/results.json {{T}}/bad.json",
    refuse("bad.json", rc=(1,), lines=2, extra=runs_in("h.sqlite", 1)),
    setup=put("bad.json", "{"),
)
row(
    "history import another history database",
    H,
    f"{HIST} {HDB} import {{FIX}}/hist.sqlite",
    succeed(extra=runs_in("h.sqlite", 30)),
)
row(
    "history import into a read-only database",
    H,
    f"{HIST} --db {{T}}/ro.sqlite import {{FIX}}/results.json",
    refuse("ro.sqlite", rc=(1, 2)),
    setup=sh("cp {FIX}/hist.sqlite {T}/ro.sqlite && chattr +i {T}/ro.sqlite"),
    item=11,
)
row("history import no files", H, f"{HIST} {HDB} import", refuse("FILES", rc=(2,)))

REPORT_TOO = ("missing database", "zero-byte file", "foreign sqlite", "bad port", "one-slash url")
for cmd, extra_args in (("check", ""), ("report", " --out {T}/site")):
    for name, db, setup, words, item in [
        ("missing database", "{T}/nope.sqlite", None, ("nope.sqlite",), None),
        ("zero-byte file", "{T}/empty.sqlite", put("empty.sqlite", b""), ("history database",), 11),
        (
            "foreign sqlite",
            "{T}/foreign.sqlite",
            sh(
                "python3 -c \"import sqlite3; c=sqlite3.connect('{T}/foreign.sqlite');c.execute('create table t(x)');"
                'c.commit()"'
            ),
            ("history database",),
            11,
        ),
        (
            "empty foreign sqlite",
            "{T}/e.sqlite",
            sh("python3 -c \"import sqlite3; c=sqlite3.connect('{T}/e.sqlite'); c.execute('vacuum')\""),
            ("history database",),
            11,
        ),
        ("corrupt file", "{T}/c.sqlite", sh("head -c 8192 /dev/urandom > {T}/c.sqlite"), ("c.sqlite",), None),
        ("a folder", "{T}", None, ("",), None),
        ("bad port", "postgresql://h:abc/db", None, ("port",), 4),
        ("one-slash url", "postgresql:/db.example/perf", None, ("URL",), 4),
        ("sqlite relative url", "sqlite:relative.db", None, ("sqlite",), 4),
        ("empty --db", "''", None, ("history database",), None),
    ]:
        if cmd == "report" and name not in REPORT_TOO:
            continue  # check and report open the database the same way; report repeats the main ones
        wr = refuse(*words, rc=(1, 2), extra=stray("postgresql:*", "sqlite:*", "relative.db", "nope.sqlite", "foo:*"))
        row(f"history {cmd} {name}", H, f"{HIST} --db {db} {cmd}{extra_args}", wr, setup=setup, item=item, timeout=40)
    row(
        f"history {cmd} read-only database",
        H,
        f"{HIST} --db {{T}}/ro.sqlite {cmd}{extra_args}",
        succeed(rc=(0, 1)),
        setup=sh("cp {FIX}/hist.sqlite {T}/ro.sqlite && chattr +i {T}/ro.sqlite"),
        item=11,
    )
    if cmd == "report":
        continue
    row(f"history {cmd} window 0", H, f"{HIST} --db {{FIX}}/hist.sqlite {cmd} --window 0{extra_args}", refuse("window"))
    row(
        f"history {cmd} window abc",
        H,
        f"{HIST} --db {{FIX}}/hist.sqlite {cmd} --window abc{extra_args}",
        refuse("window"),
    )
    row(
        f"history {cmd} env MEDDPM_HISTORY bad url",
        H,
        f"MEDDPM_HISTORY=postgresql://h:abc/db {HIST} {cmd}{extra_args}",
        refuse("port"),
        item=4,
    )
    row(
        f"history {cmd} a symlink to the database",
        H,
        f"{HIST} --db {{T}}/link.sqlite {cmd}{extra_args}",
        succeed(rc=(0, 1)),
        setup=sh("cp {FIX}/hist.sqlite {T}/real.sqlite && ln -s {T}/real.sqlite {T}/link.sqlite"),
    )

row(
    "history check finds the planted step",
    H,
    f"{HIST} --db {{T}}/h.sqlite check",
    succeed(rc=(1,), extra=text_has("opt1", where="both")),
    setup=sh("cp {FIX}/hist.sqlite {T}/h.sqlite"),
)
row(
    "history check into head -1",
    H,
    f"{HIST} --db {{T}}/h.sqlite check | head -1",
    succeed(rc=(0, 1)),
    setup=sh("cp {FIX}/hist.sqlite {T}/h.sqlite"),
    item=12,
)
row(
    "history report into head -1",
    H,
    f"{HIST} --db {{T}}/h.sqlite report --out {{T}}/site | head -1",
    succeed("site/index.html", rc=(0, 1)),
    setup=sh("cp {FIX}/hist.sqlite {T}/h.sqlite"),
    item=12,
)
row(
    "history report a good database",
    H,
    f"{HIST} --db {{T}}/h.sqlite report --out {{T}}/site",
    succeed("site/index.html"),
    setup=sh("cp {FIX}/hist.sqlite {T}/h.sqlite"),
)
row(
    "history report out a file",
    H,
    f"{HIST} --db {{FIX}}/hist.sqlite report --out {{T}}/afile",
    refuse("afile"),
    setup=put("afile", "x"),
)
row(
    "history report out under a file",
    H,
    f"{HIST} --db {{FIX}}/hist.sqlite report --out {{T}}/afile/site",
    refuse("afile"),
    setup=put("afile", "x"),
)
row(
    "history report out immutable",
    H,
    f"{HIST} --db {{FIX}}/hist.sqlite report --out {{T}}/ro",
    refuse("ro"),
    setup=sh("mkdir {T}/ro && chattr +i {T}/ro"),
)
row("history report out missing", H, f"{HIST} --db {{FIX}}/hist.sqlite report", refuse("--out"))
row("history no subcommand", H, f"{HIST}", refuse("", rc=(2,)))
row("history unknown subcommand", H, f"{HIST} purge", refuse("purge", rc=(2,)))
row("history help into head -1", H, f"{HIST} --help | head -1", succeed())


# ---------------------------------------------------------------- rows: the NIfTI loader

N = "nifti"


def nii(
    rel: str,
    shape: tuple[int, ...] = (16, 16, 16),
    dtype: str = "float32",
    fill: str = "ramp",
    affine: str = "eye",
    gz: bool = True,
) -> Callable[[Path], None]:
    def setup(T: Path) -> None:
        import nibabel
        import numpy as np

        n = int(np.prod(shape))
        if fill == "ramp":
            a = np.arange(n, dtype="float64").reshape(shape) % 97
        elif fill == "labels":
            a = (np.arange(n).reshape(shape) % 3).astype("float64")
        elif fill == "zeros":
            a = np.zeros(shape)
        elif fill == "half":
            a = (np.arange(n).reshape(shape) % 2) * 0.5
        elif fill == "neg":
            a = -(np.arange(n).reshape(shape) % 2).astype("float64")
        elif fill == "nan":
            a = np.arange(n, dtype="float64").reshape(shape)
            a.flat[5] = np.nan
        elif fill == "inf":
            a = np.arange(n, dtype="float64").reshape(shape)
            a.flat[7] = np.inf
        elif fill == "const":
            a = np.full(shape, 3.0)
        elif fill == "huge":
            a = np.arange(n, dtype="float64").reshape(shape) * 1e300
        else:
            raise ValueError(fill)
        aff = {
            "eye": np.eye(4),
            "flip": np.diag([-1.0, 1.0, 1.0, 1.0]),
            "2mm": np.diag([2.0, 2.0, 2.0, 1.0]),
            "zeros": np.eye(4),
            "nan": np.eye(4),
            "shift": np.array([[1, 0, 0, 5], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=float),
        }[affine]
        a = a.astype(dtype) if dtype != "complex64" else (a + 1j).astype(dtype)
        img = nibabel.Nifti1Image(a, aff)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nibabel.save(img, str(T / rel))
        if affine in ("zeros", "nan"):
            # nibabel will not write an affine it cannot decompose; patch the stored sform as a broken writer would.
            raw = bytearray(gzip.decompress((T / rel).read_bytes()) if gz else (T / rel).read_bytes())
            raw[252:256] = np.array([0, 1], dtype="<i2").tobytes()  # qform_code 0, sform_code 1
            value = 0.0 if affine == "zeros" else np.nan
            raw[280:328] = np.full(12, value, dtype="<f4").tobytes()  # srow_x, srow_y, srow_z
            (T / rel).write_bytes(gzip.compress(bytes(raw)) if gz else bytes(raw))

    return setup


def shape_is(*shape: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        import torch

        t = v[0] if isinstance(v, tuple) else v
        if tuple(t.shape) != shape:
            return f"shape {tuple(t.shape)}, expected {shape}"
        if not bool(torch.isfinite(t).all()):
            return "non-finite values in the result"
        return None

    return check


def pair_ok(v: Any) -> str | None:
    image, mask = v
    if tuple(image.shape) != (1, 16, 16, 16) or tuple(mask.shape)[1:] != (16, 16, 16):
        return f"shapes {tuple(image.shape)}, {tuple(mask.shape)}"
    return None


def img(rel: str, volume: Any = (16, 16, 16)) -> Callable[[Path], Any]:
    def call(T: Path) -> Any:
        from meddpm.data.nifti import load_image

        return load_image(T / rel, volume)

    return call


def lab(rel: str, volume: Any = (16, 16, 16), num_labels: int = 2) -> Callable[[Path], Any]:
    def call(T: Path) -> Any:
        from meddpm.data.nifti import load_labels

        return load_labels(T / rel, volume, num_labels)

    return call


def pair(image: str = "i.nii.gz", mask: str = "m.nii.gz", volume: Any = (16, 16, 16), channels: int = 2):
    def call(T: Path) -> Any:
        from meddpm.data.nifti import load_pair

        return load_pair(T / image, T / mask, volume, channels)

    return call


IMG = nii("i.nii.gz")
for name, setup, call, expect, item in [
    ("image missing file", None, img("i.nii.gz"), api_refuse("i.nii.gz", "no such file"), 7),
    ("image empty file", put("i.nii.gz", b""), img("i.nii.gz"), api_refuse("i.nii.gz"), None),
    ("image text file", put("i.nii.gz", "hello"), img("i.nii.gz"), api_refuse("i.nii.gz"), None),
    (
        "image truncated gzip",
        steps(IMG, lambda T: (T / "i.nii.gz").write_bytes((T / "i.nii.gz").read_bytes()[:200])),
        img("i.nii.gz"),
        api_refuse("i.nii.gz"),
        None,
    ),
    (
        "image gzip of garbage",
        lambda T: (T / "i.nii.gz").write_bytes(gzip.compress(b"x" * 1000)),
        img("i.nii.gz"),
        api_refuse("i.nii.gz"),
        None,
    ),
    ("image a folder", sh("mkdir {T}/i.nii.gz"), img("i.nii.gz"), api_refuse("i.nii.gz"), None),
    (
        "image a symlink to a good file",
        steps(nii("real.nii.gz"), sh("ln -s {T}/real.nii.gz {T}/i.nii.gz")),
        img("i.nii.gz"),
        api_ok(shape_is(1, 16, 16, 16), "a (1,16,16,16) volume"),
        None,
    ),
    ("image uncompressed .nii", nii("i.nii", gz=False), img("i.nii"), api_ok(shape_is(1, 16, 16, 16)), None),
    ("image 2-D", nii("i.nii.gz", shape=(16, 16)), img("i.nii.gz"), api_refuse("3-D"), None),
    ("image 4-D", nii("i.nii.gz", shape=(16, 16, 16, 2)), img("i.nii.gz"), api_refuse("3-D"), None),
    (
        "image 4-D singleton",
        nii("i.nii.gz", shape=(16, 16, 16, 1)),
        img("i.nii.gz"),
        api_handled(shape_is(1, 16, 16, 16), "a (1,16,16,16) volume"),
        None,
    ),
    (
        "image anisotropic shape",
        nii("i.nii.gz", shape=(8, 16, 32)),
        img("i.nii.gz"),
        api_ok(shape_is(1, 16, 16, 16)),
        None,
    ),
    (
        "image one voxel",
        nii("i.nii.gz", shape=(1, 1, 1)),
        img("i.nii.gz"),
        api_handled(shape_is(1, 16, 16, 16), "a (1,16,16,16) volume"),
        None,
    ),
    ("image NaN voxel", nii("i.nii.gz", fill="nan"), img("i.nii.gz"), api_refuse("NaN"), None),
    ("image inf voxel", nii("i.nii.gz", fill="inf", dtype="float64"), img("i.nii.gz"), api_refuse("infinite"), None),
    (
        "image float64 beyond float32",
        nii("i.nii.gz", fill="huge", dtype="float64"),
        img("i.nii.gz"),
        api_handled(shape_is(1, 16, 16, 16), "a finite volume"),
        None,
    ),
    ("image constant", nii("i.nii.gz", fill="const"), img("i.nii.gz"), api_ok(shape_is(1, 16, 16, 16)), None),
    ("image int16", nii("i.nii.gz", dtype="int16"), img("i.nii.gz"), api_ok(shape_is(1, 16, 16, 16)), None),
    ("image uint8", nii("i.nii.gz", dtype="uint8"), img("i.nii.gz"), api_ok(shape_is(1, 16, 16, 16)), None),
    ("image complex64", nii("i.nii.gz", dtype="complex64"), img("i.nii.gz"), api_refuse(warn_ok=True), None),
    (
        "image affine all zeros",
        nii("i.nii.gz", affine="zeros"),
        img("i.nii.gz"),
        api_handled(shape_is(1, 16, 16, 16), "a volume"),
        None,
    ),
    (
        "image affine NaN",
        nii("i.nii.gz", affine="nan"),
        img("i.nii.gz"),
        api_handled(shape_is(1, 16, 16, 16), "a volume"),
        None,
    ),
    ("volume (0,16,16)", IMG, img("i.nii.gz", (0, 16, 16)), api_refuse("volume"), 7),
    ("volume (16,16)", IMG, img("i.nii.gz", (16, 16)), api_refuse("volume"), 7),
    ("volume (-1,16,16)", IMG, img("i.nii.gz", (-1, 16, 16)), api_refuse("volume"), None),
    ("volume (16,16,16,16)", IMG, img("i.nii.gz", (16, 16, 16, 16)), api_refuse("volume"), None),
    ("volume floats", IMG, img("i.nii.gz", (16.5, 16, 16)), api_refuse("volume"), None),
    ("volume a string", IMG, img("i.nii.gz", "16"), api_refuse("volume"), None),
    ("volume None", IMG, img("i.nii.gz", None), api_refuse("volume"), None),
    ("labels 0..2", nii("m.nii.gz", fill="labels"), lab("m.nii.gz"), api_ok(shape_is(16, 16, 16)), None),
    ("labels all zero", nii("m.nii.gz", fill="zeros"), lab("m.nii.gz"), api_refuse("m.nii.gz", warn_ok=True), 7),
    ("labels fractional", nii("m.nii.gz", fill="half"), lab("m.nii.gz"), api_refuse("m.nii.gz", warn_ok=True), 7),
    ("labels negative", nii("m.nii.gz", fill="neg"), lab("m.nii.gz"), api_refuse("labels"), None),
    ("labels 3 with num_labels 2", nii("m.nii.gz", fill="ramp"), lab("m.nii.gz"), api_refuse("labels"), None),
    ("labels NaN", nii("m.nii.gz", fill="nan"), lab("m.nii.gz"), api_refuse("NaN"), None),
    (
        "labels num_labels -1",
        nii("m.nii.gz", fill="labels"),
        lab("m.nii.gz", num_labels=-1),
        api_refuse("num_labels"),
        None,
    ),
    (
        "labels uint8",
        nii("m.nii.gz", fill="labels", dtype="uint8"),
        lab("m.nii.gz"),
        api_ok(shape_is(16, 16, 16)),
        None,
    ),
    ("pair good", steps(IMG, nii("m.nii.gz", fill="labels")), pair(), api_ok(pair_ok, "image and mask"), None),
    (
        "pair shapes differ",
        steps(IMG, nii("m.nii.gz", shape=(16, 16, 8), fill="labels")),
        pair(),
        api_refuse("shape"),
        None,
    ),
    (
        "pair mask flipped affine",
        steps(IMG, nii("m.nii.gz", fill="labels", affine="flip")),
        pair(),
        api_refuse("resample the mask onto the image's grid", warn_ok=True),
        7,
    ),
    (
        "pair mask 2 mm affine",
        steps(IMG, nii("m.nii.gz", fill="labels", affine="2mm")),
        pair(),
        api_refuse("resample the mask onto the image's grid", warn_ok=True),
        7,
    ),
    (
        "pair mask shifted affine",
        steps(IMG, nii("m.nii.gz", fill="labels", affine="shift")),
        pair(),
        api_refuse("resample the mask onto the image's grid", warn_ok=True),
        None,
    ),
    ("pair mask all zero", steps(IMG, nii("m.nii.gz", fill="zeros")), pair(), api_refuse("m.nii.gz", warn_ok=True), 7),
    ("pair mask missing", IMG, pair(), api_refuse("m.nii.gz"), None),
    ("pair mask the image itself", IMG, pair("i.nii.gz", "i.nii.gz"), api_refuse("labels"), None),
    (
        "pair mask_channels 0",
        steps(IMG, nii("m.nii.gz", fill="labels")),
        pair(channels=0),
        api_refuse("mask_channels"),
        None,
    ),
    ("pair volume (16,16)", steps(IMG, nii("m.nii.gz", fill="labels")), pair(volume=(16, 16)), api_refuse("volume"), 7),
]:
    row(f"nifti {name}", N, call, expect, setup=setup, item=item, timeout=20)


# ---------------------------------------------------------------- rows: the compile cache, the selection rule, the
# sampling estimate and time split, meddpm-history ack and compare, the A/B memory verdict. Named "(53+)": the
# inputs issue 53's closing paragraph asks for on what the other open issues added.

CC = "compile cache"
for name, args, setup, words in [
    ("a file", "--compile-cache {T}/afile", put("afile", "x"), ("--compile-cache", "afile", "not a folder")),
    ("under a file", "--compile-cache {T}/afile/sub", put("afile", "x"), ("afile/sub", "not a folder")),
    ("a fifo", "--compile-cache {T}/ff", sh("mkfifo {T}/ff"), ("ff", "not a folder")),
    ("an immutable folder", "--compile-cache {T}/ro", sh("mkdir {T}/ro && chattr +i {T}/ro"), ("ro", "writable")),
    ("under an immutable folder", "--compile-cache {T}/ro/cc", sh("mkdir {T}/ro && chattr +i {T}/ro"), ("ro/cc",)),
    ("an empty string", "--compile-cache ''", None, ("--compile-cache is empty", "off")),
    ("a blank string", "--compile-cache ' '", None, ("--compile-cache is empty",)),
    ("a name too long", "--compile-cache {T}/" + "x" * 300, None, ("--compile-cache",)),
    ("/dev/null", "--compile-cache /dev/null", None, ("/dev/null", "not a folder")),
    ("a file, with a compiled combo", "--compile-cache {T}/afile --combos fast", put("afile", "x"), ("afile",)),
]:
    row(
        f"bench {CC} {name} (53+)",
        CC,
        f"{BENCH} --iters 1 --warmup 1 " + (args if "--combos" in args else f"--combos baseline {args}"),
        refuse(*words, under=40, absent=("bench-results",)),
        setup=setup,
        timeout=40,
    )
for name, value, setup, words in [
    ("a file", "{T}/afile", put("afile", "x"), ("$MEDDPM_COMPILE_CACHE", "afile", "not a folder")),
    ("/dev/null", "/dev/null", None, ("$MEDDPM_COMPILE_CACHE", "/dev/null")),
    ("junk under /proc", "/proc/no/such/junk", None, ("$MEDDPM_COMPILE_CACHE", "/proc/no/such/junk")),
]:
    row(
        f"bench {CC} MEDDPM_COMPILE_CACHE {name} (53+)",
        CC,
        f"MEDDPM_COMPILE_CACHE={value} {BENCH} {QUICK}",
        refuse(*words, under=40, absent=("bench-results",)),
        setup=setup,
        timeout=40,
    )


def folder_made(rel: str) -> Callable[[Result], str | None]:
    return lambda r: None if (r.T / rel).is_dir() else f"{rel} not made"


row(f"bench {CC} off (53+)", CC, f"{BENCH} {QUICK} --compile-cache off", succeed("bench-results/*.json"))
row(
    f"bench {CC} a relative path (53+)",
    CC,
    f"{BENCH} {QUICK} --compile-cache rel/cache",
    succeed("bench-results/*.json", extra=folder_made("rel/cache")),
)
row(
    f"bench {CC} MEDDPM_COMPILE_CACHE empty is unset (53+)",
    CC,
    f"MEDDPM_COMPILE_CACHE= {BENCH} {QUICK}",
    succeed("bench-results/*.json"),
)
row(
    f"bench {CC} MEDDPM_COMPILE_CACHE a word (53+)",
    CC,
    f"MEDDPM_COMPILE_CACHE='j u:n;k' {BENCH} {QUICK}",
    succeed("bench-results/*.json", extra=folder_made("j u:n;k"), says="a folder of that name, made here"),
)
for name, args, setup, words in [
    ("a file", "--perf-compile-cache={T}/afile", put("afile", "x"), ("--perf-compile-cache", "afile", "not a folder")),
    ("an empty string", "--perf-compile-cache=", None, ("--perf-compile-cache is empty",)),
    ("MEDDPM_COMPILE_CACHE /dev/null", "", None, ("$MEDDPM_COMPILE_CACHE", "/dev/null")),
]:
    prefix = "MEDDPM_COMPILE_CACHE=/dev/null " if "MEDDPM" in name else ""
    row(
        f"suite {CC} {name} (53+)",
        CC,
        f"{prefix}{SUITE} {args}",
        refuse(*words, rc=(1, 2, 3, 4), under=40, absent=("r/results.json",)),
        setup=steps(with_baseline(), setup) if setup else with_baseline(),
        timeout=60,
    )
row(f"suite {CC} off (53+)", CC, f"{SUITE} --perf-compile-cache=off", SUITE_OK, setup=with_baseline(), timeout=180)

# -- the selection rule: -k, markers and --combos pick test items, and a campaign measures only what they read.
SEL = "selection"


def measured_combos(*combos: str) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        doc = _json(r.T / "r/results.json")
        cases = doc["cases"].values() if isinstance(doc["cases"], dict) else doc["cases"]
        got = sorted({c["combo"] for c in cases})
        return None if got == sorted(combos) else f"results.json holds {got}, expected {sorted(combos)}"

    return check


def quick_exit(rc: tuple[int, ...], limit: float, *words: str) -> tuple[Expect, str]:
    """Nothing to measure: the exit status, no traceback, the words, within ``limit`` s (no model built)."""

    def check(r: Result) -> str | None:
        if bad := _status_and_words(r, rc, words):
            return bad
        return f"took {r.elapsed:.1f} s: it built a model for nothing" if r.elapsed > limit else None

    return check, f"exit {'/'.join(map(str, rc))}, no traceback, says {', '.join(words)}, within {limit:g} s"


BOTH = SUITE.replace("--combos=baseline", "--combos=baseline,opt2")
for name, cmd, expect in [
    ("-k selects nothing", f"{SUITE} -k no_such_test", quick_exit((5,), 40, "deselected")),
    ("-m an unknown marker", SUITE.replace("-m cpu", "-m no_such_marker"), refuse("no_such_marker", rc=(4,), under=40)),
    ("-k a malformed expression", f"{SUITE} -k 'training and ('", refuse("-k", rc=(4,), lines=2, under=40)),
    ("--combos against -k", f"{SUITE} -k opt2", quick_exit((5,), 40, "deselected")),
    (
        "-k one combo of two",
        f"{BOTH} -k 'training_step and opt2'",
        succeed("r/results.json", extra=measured_combos("opt2")),
    ),
    ("-m cpu and training", SUITE.replace("-m cpu", "-m 'cpu and training'"), SUITE_OK),
    (
        "-m cpu and not training",
        SUITE.replace("-m cpu", "-m 'cpu and not training'"),
        quick_exit((0,), 40, "skipped"),
    ),
    ("-k sampling only", f"{SUITE} -k sample", quick_exit((0,), 40, "skipped")),
    (
        "--combos twice against -k",
        f"{BOTH} --combos=opt2 -k baseline",
        either(refuse("combos", rc=(1, 2, 3, 4), lines=4, under=40), quick_exit((5,), 40, "deselected")),
    ),
]:
    row(f"suite {SEL} {name} (53+)", SEL, cmd, expect, setup=with_baseline(), timeout=180)

# -- the sampling estimate (a budget planted in the baseline) and the line that splits the run's time.
SMP = "sampling"


def with_budget(seconds: float) -> Callable[[Path], None]:
    return with_baseline(
        lambda d: d.setdefault("sampling", {}).update({"tiny/baseline/b1": {**SB, "budget_s": seconds}})
    )


def time_split_sums(r: Result) -> str | None:
    """The 'where the time went' line: phases that are not negative and add up to the wall time."""
    line = next((ln for ln in _lines(r.out + r.err) if "where the time went:" in ln), None)
    if line is None:
        return "no 'where the time went' line"
    wall = float(re.search(r"([\d.]+) s wall", line).group(1))
    parts = [float(x) for x in re.findall(r" (-?[\d.]+) s(?:,|$)", line.split("wall:", 1)[1])]
    if any(p < 0 for p in parts):
        return f"a negative phase: {line.strip()[:160]}"
    return None if abs(sum(parts) - wall) <= 1 + 0.02 * wall else f"phases add to {sum(parts):.0f} s, wall {wall:.0f} s"


SMP_CMD = f"{SUITE.replace(' -q ', ' -q -s ')} -k sample"
for name, cmd, setup, expect in [
    (
        "estimated against a budget",
        SMP_CMD,
        with_budget(600.0),
        succeed("r/results.json", extra=text_has("estimated from", where="both")),
    ),
    (
        "--perf-full-sample against a budget",
        f"{SMP_CMD} --perf-full-sample",
        with_budget(600.0),
        succeed("r/results.json", extra=text_has("for 250 steps", where="both")),
    ),
    (
        "over a tiny budget",
        SMP_CMD,
        with_budget(1e-6),
        succeed(
            "r/results.json", rc=(1,), extra=text_has("budget", where="both"), says="the case fails naming the budget"
        ),
    ),
    (
        "--perf-full-sample=yes",
        f"{SMP_CMD} --perf-full-sample=yes",
        with_budget(600.0),
        refuse("perf-full-sample", rc=(4,), lines=4, under=40, extra=argparse_line("perf-full-sample")),
    ),
    (
        "suite time split line",
        f"{SUITE.replace(' -q ', ' -q -s ')}",
        with_baseline(),
        succeed("r/results.json", extra=time_split_sums),
    ),
]:
    row(f"suite {SMP} {name} (53+)", SMP, cmd, expect, setup=setup, timeout=300)
row(
    f"bench {SMP} --sample times the whole diffusion (53+)",
    SMP,
    f"{BENCH} {QUICK} --sample",
    succeed("bench-results/*.json", extra=text_has("sampling: 250 reverse steps", where="both")),
    timeout=300,
)
row(
    f"bench {SMP} time split line (53+)",
    SMP,
    f"{BENCH} {QUICK}",
    succeed("bench-results/*.json", extra=time_split_sums),
)

# -- meddpm-history ack and compare, on a copy of the 30 simulated nights (an open h200 paper/opt1/b1 time step).
HC = "history"
ACK = f"{HIST} --db {{T}}/h.sqlite ack h200 paper/opt1/b1 time"
COPY = sh("cp {FIX}/hist.sqlite {T}/h.sqlite")


def acks_in(db: str, n: int) -> Callable[[Result], str | None]:
    def check(r: Result) -> str | None:
        with contextlib.closing(sqlite3.connect(r.T / db)) as con:
            got = con.execute("select count(*) from acknowledgements").fetchone()[0]
        return None if got == n else f"{db} holds {got} acknowledgement(s), expected {n}"

    return check


NO_CASES = "c.execute('delete from case_results where run_id=1'); c.commit()\""
LOCK = (
    "(" + PY + " -c \"import sqlite3,time; c=sqlite3.connect('{T}/h.sqlite', isolation_level=None); "
    "c.execute('begin exclusive'); print('held', flush=True); time.sleep(200)\" &) ; sleep 3; "
)
for name, cmd, setup, expect in [
    (
        "ack unknown arch",
        f"{HIST} --db {{T}}/h.sqlite ack h100 paper/opt1/b1 time --note n",
        COPY,
        refuse("no open regression", "h100", extra=acks_in("h.sqlite", 0)),
    ),
    (
        "ack unknown case",
        f"{HIST} --db {{T}}/h.sqlite ack h200 paper/zz/b1 time --note n",
        COPY,
        refuse("paper/zz/b1", "open:", extra=acks_in("h.sqlite", 0)),
    ),
    (
        "ack unknown metric",
        f"{HIST} --db {{T}}/h.sqlite ack h200 paper/opt1/b1 speed --note n",
        COPY,
        refuse("METRIC", "speed"),
    ),
    (
        "ack the metric with no step",
        f"{HIST} --db {{T}}/h.sqlite ack h200 paper/opt1/b1 memory --note n",
        COPY,
        refuse("memory", "open:"),
    ),
    ("ack without --note", ACK, COPY, refuse("--note")),
    ("ack empty note", f"{ACK} --note ''", COPY, refuse("--note is empty", extra=acks_in("h.sqlite", 0))),
    ("ack blank note", f"{ACK} --note ' \t '", COPY, refuse("--note is empty")),
    (
        "ack note with escape sequences",
        f"{ACK} --note $'x\\x1b[31mred\\x1b[0m'",
        COPY,
        refuse("control characters", extra=acks_in("h.sqlite", 0)),
    ),
    (
        "ack note with a bell and a NUL-free backspace",
        f"{ACK} --note $'ding\\x07\\x08'",
        COPY,
        refuse("control characters"),
    ),
    ("ack note with a bidi override", f"{ACK} --note $'\\u202eevil'", COPY, refuse("control characters")),
    (
        "ack note with newlines",
        f"{ACK} --note $'two\\nlines' && {HIST} --db {{T}}/h.sqlite check",
        COPY,
        succeed(extra=all_of(acks_in("h.sqlite", 1), text_has("two lines (acknowledged")), says="kept as one line"),
    ),
    ("ack note too long", f"{ACK} --note {'n' * 2100}", COPY, refuse("2000")),
    (
        "ack twice",
        f"{ACK} --note first && {ACK} --note second && {HIST} --db {{T}}/h.sqlite check",
        COPY,
        succeed(
            extra=all_of(text_has("replaces", "second (acknowledged")),
            says="the second note replaces the first, and says so",
        ),
    ),
    (
        "ack with no open step",
        f"{HIST} --db {{T}}/one.sqlite ack cpu tiny/baseline/b1 time --note n",
        sh(f"{HIST} --db {{T}}/one.sqlite import {{FIX}}/results.json"),
        refuse("open: none"),
    ),
    (
        "ack missing database",
        f"{HIST} --db {{T}}/nope.sqlite ack h200 paper/opt1/b1 time --note n",
        None,
        refuse("nope.sqlite", extra=stray("nope.sqlite")),
    ),
    (
        "ack corrupt database",
        f"{HIST} --db {{T}}/c.sqlite ack h200 paper/opt1/b1 time --note n",
        sh("head -c 8192 /dev/urandom > {T}/c.sqlite"),
        refuse("c.sqlite"),
    ),
    (
        "ack immutable database",
        f"{ACK} --note n",
        sh("cp {FIX}/hist.sqlite {T}/h.sqlite && chattr +i {T}/h.sqlite"),
        refuse("h.sqlite", rc=(1, 2)),
    ),
    ("ack locked database", f"{LOCK}{ACK} --note n", COPY, refuse("locked", lines=2, extra=acks_in("h.sqlite", 0))),
    ("compare unknown runs", f"{HIST} --db {{FIX}}/hist.sqlite compare 999 1000", None, refuse("no run 999 or 1000")),
    ("compare the same run twice", f"{HIST} --db {{FIX}}/hist.sqlite compare 3 3", None, refuse("both run 3")),
    (
        "compare a run id not a number",
        f"{HIST} --db {{FIX}}/hist.sqlite compare 3 three",
        None,
        refuse("RUN_B", "three"),
    ),
    (
        "compare runs of two architectures",
        f"{HIST} --db {{T}}/h.sqlite compare 1 31",
        steps(COPY, sh(f"{HIST} --db {{T}}/h.sqlite import {{FIX}}/results.json")),
        succeed(extra=text_has("ran on h200", "on cpu", "only in A")),
    ),
    (
        "compare a run with no cases",
        f"{HIST} --db {{T}}/h.sqlite compare 1 2",
        steps(
            COPY,
            sh(PY + " -c \"import sqlite3; c=sqlite3.connect('{T}/h.sqlite'); " + NO_CASES),
        ),
        either(succeed(extra=text_has("only in B")), refuse("1")),
    ),
    ("compare --out a folder", f"{HIST} --db {{FIX}}/hist.sqlite compare 1 2 --out {{T}}", None, refuse("directory")),
    (
        "compare --out under a file",
        f"{HIST} --db {{FIX}}/hist.sqlite compare 1 2 --out {{T}}/afile/c.html",
        put("afile", "x"),
        refuse("afile", extra=lambda r: "the table was printed before the refusal" if r.out.strip() else None),
    ),
    (
        "compare --out a fifo",
        f"{HIST} --db {{FIX}}/hist.sqlite compare 1 2 --out {{T}}/ff",
        sh("mkfifo {T}/ff"),
        refuse("ff"),
    ),
    (
        "compare --out in a new folder",
        f"{HIST} --db {{FIX}}/hist.sqlite compare 1 2 --out {{T}}/site/c.html",
        None,
        succeed("site/c.html"),
    ),
    (
        "compare zero-byte database",
        f"{HIST} --db {{T}}/e.sqlite compare 1 2",
        put("e.sqlite", b""),
        refuse("history database"),
    ),
]:
    row(f"history {name} (53+)", HC, cmd, expect, setup=setup, timeout=200 if "locked" in name else 40)

# -- peaks in a results file (imported into the history) and a worker's JSON (read back for an A/B).
for name, value in [
    ("NaN", float("nan")),
    ("inf", float("inf")),
    ("negative", -5),
    ("a float", 1.5),
    ("a string", "20G"),
]:
    row(
        f"history import a {name} peak (53+)",
        HC,
        f"{HIST} {HDB} import {{T}}/run.json",
        import_refuse("peak"),
        setup=hist_doc(lambda d, v=value: d["cases"][0].update(peak_allocated_bytes=v)),
    )

MEM = "memory verdict"


def memory_ab(candidate: list[Any], reference: list[Any]) -> Callable[[Path], Any]:
    def call(T: Path) -> Any:
        from meddpm.judge.baseline.model import Tolerances
        from meddpm.judge.verdict import judge_memory_ab

        return judge_memory_ab("tiny/baseline/b1", "peak allocated", candidate, reference, Tolerances())

    return call


def outcome_is(*outcomes: str) -> Callable[[Any], str | None]:
    return lambda v: None if v.outcome in outcomes else f"outcome {v.outcome!r}, expected {' or '.join(outcomes)}"


G = 2**30
for name, cand, ref, outcomes in [
    ("a side with no peaks", [], [20 * G, 20 * G], ("not measured",)),
    ("both sides with no peaks", [], [], ("not measured",)),
    ("a NaN peak", [float("nan"), 20 * G], [20 * G, 20 * G], ("not measured",)),
    ("an inf peak", [float("inf"), float("inf")], [20 * G, 20 * G], ("not measured",)),
    ("negative peaks", [-G, -G], [-2 * G, -2 * G], ("not measured",)),
    ("a zero reference", [20 * G, 20 * G], [0, 0], ("regression", "not measured")),
    ("a planted 50 % growth", [30 * G, 30 * G, 30 * G], [20 * G, 20 * G, 20 * G], ("regression",)),
    ("identical peaks", [20 * G] * 3, [20 * G] * 3, ("unchanged",)),
]:
    row(
        f"judge memory A/B {name} (53+)",
        MEM,
        memory_ab(cand, ref),
        api_handled(outcome_is(*outcomes), f"outcome {' or '.join(outcomes)}"),
        timeout=20,
    )


def worker_peak(value: Any) -> Callable[[Path], Any]:
    """A worker's result with a planted peak, through JSON, read back as an A/B reads it."""

    def call(T: Path) -> Any:
        from dataclasses import asdict

        from meddpm.measure.campaign.result import ComboResult
        from meddpm.measure.processes.campaign import result_from_dict

        sent = ComboResult("tiny", "fast", 1, (16, 16, 16), "fp32", [10.0] * 3, [50.0], 0.1, 10**9, 0.02)
        data = json.loads(json.dumps({**asdict(sent), "peak_allocated_bytes": value}))
        return result_from_dict(data)

    return call


for name, value in [("NaN", float("nan")), ("inf", float("inf")), ("negative", -(2**30))]:
    row(f"worker JSON a {name} peak (53+)", MEM, worker_peak(value), api_refuse("peak_allocated_bytes"), timeout=30)


# ---------------------------------------------------------------- rows: the history items of the fourth and fifth
# defects issues (53.3, 53.4, 54.4, 54.5, 54.10)


def hist_literal(path: tuple, literal: str) -> Callable[[Path], None]:
    """sim0.json with the value at ``path`` written as the JSON text ``literal`` (1e400 has no float to dump)."""

    def setup(T: Path) -> None:
        doc = _json(FIX / "sim0.json")
        *parents, last = path
        target = doc
        for key in parents:
            target = target[key]
        target[last] = 123456789.125
        (T / "run.json").write_text(json.dumps(doc).replace("123456789.125", literal))

    return setup


for name, path, literal, words in [
    ("batch size 1e400", ("cases", 0, "batch_size"), "1e400", ("batch_size",)),
    ("batch size 10**20", ("cases", 0, "batch_size"), "100000000000000000000", ("batch_size",)),
    ("peak memory 1e20", ("cases", 0, "peak_allocated_bytes"), "1e20", ("peak_allocated_bytes",)),
    ("a sample of 1e308 ms", ("cases", 0, "samples_ms", 0), "1e308", ("samples_ms",)),
]:
    row(f"history import {name} (54.4)", H, f"{HIST} {HDB} import {{T}}/run.json", import_refuse(*words),
        setup=hist_literal(path, literal))  # fmt: skip

row(
    "history import a folder with one number that does not fit (54.4)",
    H,
    f"{HIST} {HDB} import {{T}}/runs",
    refuse("batch_size", rc=(1,), lines=2, extra=runs_in("h.sqlite", 1)),
    setup=steps(
        hist_literal(("cases", 0, "batch_size"), "1e400"),
        sh("mkdir {T}/runs && mv {T}/run.json {T}/runs/ && cp {FIX}/results.json {T}/runs/"),
    ),
)
row(
    "history import from a corrupt database leaves no new one (54.5)",
    H,
    f"{HIST} --db {{T}}/new.sqlite import {{T}}/run.sqlite",
    refuse("run.sqlite", rc=(1, 2), lines=2, absent=("new.sqlite",)),
    setup=sh("head -c 8192 /dev/urandom > {T}/run.sqlite"),
)
row(
    "history check on a FIFO (53.4)",
    H,
    f"{HIST} --db {{T}}/h.sqlite check",
    refuse("h.sqlite", under=15),
    setup=sh("mkfifo {T}/h.sqlite"),
    timeout=20,
)
row(
    "history report on a FIFO (53.4)",
    H,
    f"{HIST} --db {{T}}/h.sqlite report --out {{T}}/site",
    refuse("h.sqlite", under=15),
    setup=sh("mkfifo {T}/h.sqlite"),
    timeout=20,
)
row(
    "history report --repo-url with a fragment (54.10)",
    H,
    f"{HIST} --db {{FIX}}/hist.sqlite report --out {{T}}/site --repo-url https://github.com/o/r#readme",
    refuse("--repo-url", absent=("site",)),
)


def malformed_json_column(T: Path) -> None:
    """The fixture history with one run's JSON column (its environment) holding text that is no JSON."""
    import shutil
    import sqlite3

    shutil.copy(FIX / "hist.sqlite", T / "h.sqlite")
    with sqlite3.connect(T / "h.sqlite") as db:
        db.execute("update runs set environment = '{not json' where id = (select min(id) from runs)")


row(
    "history check with a malformed JSON column in one run (53.3)",
    H,
    f"{HIST} --db {{T}}/h.sqlite check",
    either(succeed(rc=(0, 1), extra=text_has("runs row", where="both")), refuse("runs row", rc=(1, 2), lines=3)),
    setup=malformed_json_column,
)


def good_history(commit: str | None = None) -> Callable[[Path], None]:
    """A history of the fixture's CPU suite run as a good run of ``commit`` (None: this checkout's HEAD)."""

    def setup(T: Path) -> None:
        doc = _json(FIX / "results.json")
        for case in doc["cases"]:
            case["outcome"] = "ok"
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
        doc["environment"]["commit"] = commit or head.stdout.strip()
        (T / "good.json").write_text(json.dumps(doc))
        subprocess.run([PY, "-m", "meddpm.history.cli", "--db", str(T / "h.sqlite"), "import", str(T / "good.json")],
                       check=True, capture_output=True, env=row_env(T))  # fmt: skip

    return setup


row(
    "suite last-good whose commit git does not know (54.8)",
    "suite",
    SUITE + " --compare-to=last-good --history={T}/h.sqlite",
    refuse("last good suite run", "does not know", rc=(4,), under=60),
    setup=steps(baseline, good_history("0123456789abcdef0123456789abcdef01234567")),
)


# ---------------------------------------------------------------- the runner


def _sh(cmd: str, cwd: Path, env: dict[str, str]) -> None:
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode:
        sys.exit(f"campaign: fixture command failed ({p.returncode}): {cmd}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


def fixtures(base: Path) -> Path:
    """A tiny baseline and a suite results.json (one short suite run), a bench JSON, a history database."""
    fix = base / "fixtures"
    fix.mkdir()
    env = row_env(fix)
    t = Path(tempfile.mkdtemp(dir=base))
    (t / "b").mkdir()
    (t / "r").mkdir()
    # forced: on a busy machine two rounds are often too spread out to save unforced
    cmd = SUITE.format(T=t) + " --save-baseline --force-save-baseline"
    _sh(cmd, t, env)
    shutil.copy(t / "b/cpu.json", fix / "cpu.json")
    shutil.copy(t / "r/results.json", fix / "results.json")
    _sh(f"{BENCH} {QUICK} --json {fix}/bench.json", t, env)
    script = f"""
import json, numpy as np
from meddpm.history.simulation import simulate, simulated_documents
logs = simulate(np.random.default_rng(0), 30, step_case=1, step_night=22, step=0.2)
for i, d in enumerate(simulated_documents(logs)):
    json.dump(d, open(f"{t}/sim{{i:02d}}.json", "w"))
json.dump(simulated_documents(logs[:1], arch="h100")[0], open("{fix}/sim0.json", "w"))
"""
    subprocess.run([PY, "-c", script], env=env, check=True, timeout=120)
    _sh(f"{HIST} --db {fix}/hist.sqlite import {t}/sim*.json", t, env)
    return fix


def row_env(T: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDDPM_", "PYTEST_"))}
    env.update(PYTHONPATH=str(REPO), TMPDIR=str(T / "tmp"), PYTHONUNBUFFERED="1", COLUMNS="200")
    (T / "tmp").mkdir(exist_ok=True)
    return env


def _default_signals() -> None:
    # A campaign started in the background (nohup ... &) has SIGINT ignored, and an ignored signal stays ignored
    # across exec: without this, a planted Ctrl-C would reach no row.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_command(r: Row, T: Path) -> Result:
    cmd = r.run.format(T=T, FIX=FIX, REPO=REPO, PY=PY)
    env = row_env(T)
    res = Result(T=T)
    start = time.monotonic()
    p = subprocess.Popen(
        ["bash", "-c", cmd],
        cwd=T,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_default_signals,
    )
    out: list[bytes] = []
    err: list[bytes] = []
    seen = threading.Event()
    marker = r.signal[0].encode() if r.signal else None

    def pump(stream, sink: list[bytes]) -> None:
        # Chunks, not lines: pytest -v writes a test's name and only ends the line once the test is over.
        tail = b""
        while chunk := os.read(stream.fileno(), 65536):
            sink.append(chunk)
            if marker and marker in tail + chunk:
                seen.set()
            tail = chunk[-len(marker) :] if marker else b""

    threads = [threading.Thread(target=pump, args=(p.stdout, out)), threading.Thread(target=pump, args=(p.stderr, err))]
    for th in threads:
        th.start()
    deadline = start + r.timeout * TIMEOUT_SCALE
    sent = False
    while p.poll() is None and time.monotonic() < deadline:
        if r.signal and not sent and seen.wait(0.1):
            time.sleep(r.signal[2])
            if p.poll() is None:
                # Ctrl-C reaches the whole foreground group; a SIGTERM (kill PID) reaches the process alone.
                if r.signal[1] == signal.SIGINT:
                    os.killpg(p.pid, signal.SIGINT)
                else:
                    os.kill(p.pid, r.signal[1])
                res.signalled = True
            sent = True
        else:
            time.sleep(0.05)
    if p.poll() is None:
        res.timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    # A worker left in the group (a killed parent's child) must not outlive its row.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    for th in threads:
        th.join(5)
    res.rc = p.returncode
    res.elapsed = time.monotonic() - start
    res.out = b"".join(out).decode(errors="replace")
    res.err = b"".join(err).decode(errors="replace")
    if r.signal and not res.signalled and not res.timed_out:
        res.err += "\n(campaign: the planted point was never reached, no signal sent)"
    return res


class _Alarm(BaseException):
    pass


def run_callable(r: Row, T: Path) -> Result:
    res = Result(T=T)
    old = os.getcwd()
    os.chdir(T)

    def ring(*_: Any) -> None:
        raise _Alarm()

    prev = signal.signal(signal.SIGALRM, ring)
    signal.alarm(int(r.timeout * TIMEOUT_SCALE))
    start = time.monotonic()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res.value = r.run(T)
        res.warned = [str(w.message) for w in caught]
    except _Alarm:
        res.timed_out = True
    except BaseException as exc:  # noqa: BLE001 - the point is to see what escapes
        res.exc_type = type(exc).__name__
        res.exc_msg = str(exc)
        if not isinstance(exc, Exception):
            res.exc_msg += " " + traceback.format_exc(limit=1)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, prev)
        os.chdir(old)
    res.elapsed = time.monotonic() - start
    return res


def execute(index: int, base: str) -> dict[str, Any]:
    r = ROWS[index]
    T = Path(tempfile.mkdtemp(prefix="row-", dir=base))
    try:
        if r.setup:
            r.setup(T)
        res = run_command(r, T) if isinstance(r.run, str) else run_callable(r, T)
        try:
            reason = r.expect(res)
        except Exception as exc:  # noqa: BLE001 - a check that cannot read what the run left is a finding too
            reason = f"after the run: {type(exc).__name__}: {exc}"[:200]
    except Exception as exc:  # noqa: BLE001
        res = Result(T=T)
        reason = f"campaign setup failed: {type(exc).__name__}: {exc}"[:200]
    finally:
        subprocess.run(["chattr", "-R", "-i", str(T)], capture_output=True)
        shutil.rmtree(T, ignore_errors=True)
    command = r.run if isinstance(r.run, str) else _describe_callable(r)
    tail = _lines(res.err)[-2:] if res.err else ([f"{res.exc_type}: {res.exc_msg}"[:200]] if res.exc_type else [])
    return {
        "name": r.name,
        "surface": r.surface,
        "item": r.item,
        "command": command,
        "expect": r.says,
        "handled_well": reason is None,
        "reason": reason,
        "rc": res.rc,
        "elapsed_s": round(res.elapsed, 2),
        "stderr_tail": [t[:300] for t in tail],
    }


def _describe_callable(r: Row) -> str:
    fn = r.run
    code = fn.__code__
    names = [c for c in (code.co_freevars or ()) if c]
    cells = {n: c.cell_contents for n, c in zip(names, fn.__closure__ or ())}
    qual = fn.__qualname__.split(".<locals>")[0]
    args = ", ".join(f"{k}={v!r}" for k, v in cells.items() if not callable(v))
    return f"python: {qual}({args})"


def main() -> int:
    global FIX, TIMEOUT_SCALE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", action="append", default=[], help="run only rows whose name contains this (repeatable)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every row's timeout (a loaded machine)")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--fixtures", type=Path, help="reuse the fixtures folder of an earlier run (kept there)")
    ap.add_argument(
        "--merge",
        action="store_true",
        help="with -k: replace those rows in --out's results.jsonl (a full run's) and rewrite both files from it",
    )
    a = ap.parse_args()
    TIMEOUT_SCALE = a.timeout_scale
    picked = [i for i, r in enumerate(ROWS) if not a.k or any(k.lower() in r.name.lower() for k in a.k)]
    earlier = _earlier_results(a.out / "results.jsonl") if a.merge else {}
    if a.list:
        for i in picked:
            print(f"{ROWS[i].surface:9} {ROWS[i].name}")
        print(len(picked), "rows")
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    base = tempfile.mkdtemp(prefix="meddpm-campaign-")
    t0 = time.monotonic()
    if a.fixtures and (a.fixtures / "hist.sqlite").exists():
        FIX = a.fixtures
    else:
        FIX = fixtures(Path(base))
        if a.fixtures:
            shutil.copytree(FIX, a.fixtures, dirs_exist_ok=True)
    print(f"fixtures made in {time.monotonic() - t0:.0f} s; {len(picked)} inputs, {a.workers} workers", flush=True)
    # Slowest first, so the two workers end together.
    order = sorted(picked, key=lambda i: -(ROWS[i].timeout if isinstance(ROWS[i].run, str) else 0))
    results: dict[int, dict[str, Any]] = {}
    import multiprocessing

    with cf.ProcessPoolExecutor(a.workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {pool.submit(execute, i, base): i for i in order}
        partial = open(a.out / "results.partial.jsonl", "w")  # each row as it ends, should the run be cut short
        for n, fut in enumerate(cf.as_completed(futures), 1):
            i = futures[fut]
            results[i] = fut.result()
            d = results[i]
            partial.write(json.dumps(d, ensure_ascii=False) + "\n")
            partial.flush()
            mark = "ok " if d["handled_well"] else "BAD"
            print(
                f"[{n:3}/{len(order)}] {mark} {d['elapsed_s']:6.1f}s {d['name']}"
                + ("" if d["handled_well"] else f": {d['reason']}"),
                flush=True,
            )
    subprocess.run(["chattr", "-R", "-i", base], capture_output=True)
    shutil.rmtree(base, ignore_errors=True)
    partial.close()
    (a.out / "results.partial.jsonl").unlink()
    wall = time.monotonic() - t0
    if a.merge:
        earlier.update({d["name"]: {**d, "rerun": True} for d in results.values()})
        ordered = [earlier[r.name] for r in ROWS if r.name in earlier]
        rerun = sum(bool(d.get("rerun")) for d in ordered)
        run = f"a full run, then {rerun} row(s) rerun with -k and merged (marked rerun)"
    else:
        ordered = [results[i] for i in picked]
        run = f"{wall:.0f} s"
    good = sum(d["handled_well"] for d in ordered)
    with open(a.out / "results.jsonl", "w") as f:
        for d in ordered:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    write_markdown(a.out / "results.md", ordered, good, f"{run}; {os.cpu_count()} CPU cores, {a.workers} workers")
    print(f"{len(ordered)} inputs: {good} handled well, {len(ordered) - good} not ({wall:.0f} s)")
    return 0


def _earlier_results(path: Path) -> dict[str, dict[str, Any]]:
    """A full run's rows by name, for --merge; refused if there is none."""
    if not path.is_file():
        sys.exit(f"campaign: --merge needs a full run's {path}")
    return {d["name"]: d for d in map(json.loads, path.read_text().splitlines())}


def write_markdown(path: Path, rows: list[dict[str, Any]], good: int, how: str) -> None:
    def cell(s: Any) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "# Bad-input campaign: results",
        "",
        f"{len(rows)} inputs: **{good} handled well, {len(rows) - good} not** (commit {commit}; {how}).",
        "",
        "| surface | count | handled well | not |",
        "| --- | --- | --- | --- |",
    ]
    for s in dict.fromkeys(d["surface"] for d in rows):
        sub = [d for d in rows if d["surface"] == s]
        ok = sum(d["handled_well"] for d in sub)
        lines.append(f"| {s} | {len(sub)} | {ok} | {len(sub) - ok} |")
    lines += ["", "## Not handled well", "", "| # | input | item | reason |", "| --- | --- | --- | --- |"]
    for n, d in enumerate(rows, 1):
        if not d["handled_well"]:
            lines.append(f"| {n} | {cell(d['name'])} | {d['item'] or ''} | {cell(d['reason'])} |")
    lines += [
        "",
        "## Every input",
        "",
        "| # | surface | input | item | command | expectation | result | s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, d in enumerate(rows, 1):
        verdict = ("well" if d["handled_well"] else f"**not**: {d['reason']}") + (" (rerun)" if d.get("rerun") else "")
        lines.append(
            f"| {n} | {d['surface']} | {cell(d['name'])} | {d['item'] or ''} | `{cell(d['command'])[:160]}` | "
            f"{cell(d['expect'])} | {cell(verdict)} | {d['elapsed_s']} |"
        )
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
