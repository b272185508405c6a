"""The environment of each side of an A/B run: the interpreter and the extra environment variables a worker runs under.

Side A is always this interpreter with this process's environment. Side B may run another interpreter
(``--compare-python``: another venv, so another torch, CUDA or cuDNN) and more variables
(``--compare-env NAME=VALUE``), with this tree's workload or a revision's (``--compare-to``): that is how an
upgrade of torch is measured before it is made. Both run this tree's harness. Each side's record in the results
says the interpreter, the extra variables and what its first worker found (Python, torch, CUDA and cuDNN versions).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meddpm.errors import UserError

PYTHON_OPTION = "--compare-python"
ENV_OPTION = "--compare-env"
# The harness's oldest Python (pyproject.toml's requires-python).
OLDEST_PYTHON = (3, 10)
# Runs on any Python 3: its version first, then torch's import (the first thing a worker needs that a bare
# interpreter lacks); the traceback's last line says why it failed.
_PROBE = "import sys; print('%d.%d.%d' % sys.version_info[:3], flush=True); import torch; print(torch.__version__)"
# Says whether Python started and whether it stays interactive after its script (PYTHONINSPECT), which turns a
# worker's exit status into a traceback and waits on a terminal for commands.
_START_PROBE = "import sys; print('started', sys.flags.inspect)"


@dataclass(frozen=True)
class OtherSide:
    """What side B runs under where it differs from side A: another interpreter, more environment variables."""

    python: str | None = None  # an absolute path; None: this interpreter
    env: tuple[tuple[str, str], ...] = ()

    @property
    def given(self) -> bool:
        """Whether side B differs from side A in interpreter or environment."""
        return self.python is not None or bool(self.env)

    def label(self, label: str) -> str:
        """``label`` (the code measured) with what this side runs under, so both sides of one tree differ."""
        under = f" under {self.python}" if self.python else ""
        with_env = f" with {describe_env(self.env)}" if self.env else ""
        return f"{label}{under}{with_env}"


# Side B as side A: this interpreter, no variables of its own.
SAME = OtherSide()


def describe_env(env: Sequence[tuple[str, str]] | Mapping[str, str]) -> str:
    """``NAME=VALUE, NAME=VALUE``, as given."""
    pairs = env.items() if isinstance(env, Mapping) else env
    return ", ".join(f"{name}={value}" for name, value in pairs)


def parse_env(values: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    """``--compare-env`` values (``NAME=VALUE`` each) as pairs, or a one-line UserError naming the bad one."""
    pairs: dict[str, str] = {}
    for given in values or ():
        name, equals, value = given.partition("=")
        if not equals:
            raise UserError(f"{ENV_OPTION} {given!r} has no '='; give NAME=VALUE, e.g. {ENV_OPTION} OMP_NUM_THREADS=1")
        if not name.strip() or name != name.strip() or "\0" in given:
            raise UserError(f"{ENV_OPTION} {given!r} names no variable; give NAME=VALUE with a name before the '='")
        if name in pairs:
            raise UserError(f"{ENV_OPTION} sets {name} twice; give each variable once")
        pairs[name] = value
    return tuple(pairs.items())


def interpreter(given: str | None) -> str | None:
    """``--compare-python``'s interpreter as an absolute path (a bare name is looked up on PATH), not yet probed.

    The path is kept as given, symlinks unresolved: a venv's ``bin/python`` is a link to its base
    interpreter, and only through the link does Python find the venv's packages.
    """
    if given is None:
        return None
    if not given.strip():
        raise UserError(f"{PYTHON_OPTION} is empty; give the path of a Python interpreter, e.g. /opt/venv/bin/python")
    found = given if os.sep in given else shutil.which(given)
    if found is None or not Path(found).is_file() or not os.access(found, os.X_OK):
        raise UserError(f"{PYTHON_OPTION} {given} is not an executable; give the path of a Python interpreter")
    return os.path.abspath(found)


def check_python(python: str, env: Mapping[str, str]) -> None:
    """A one-line UserError unless ``python`` is a Python of :data:`OLDEST_PYTHON` or later that imports torch.

    ``env``: the environment its workers will have. The rest of what a worker needs is found by driving
    the workload once with it (:func:`meddpm.measure.processes.revision.check_sides`).
    """
    try:
        probe = subprocess.run(
            [python, "-c", _PROBE], env=dict(env), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else f"no answer in {exc.timeout:.0f} s"
        fix = "give the path of a Python interpreter"
        raise UserError(f"{PYTHON_OPTION} {python} cannot be run ({reason}); {fix}") from None
    lines = probe.stdout.split()
    version = _version(lines[0]) if lines else None
    if version is None:
        raise UserError(f"{PYTHON_OPTION} {python} is not a Python interpreter (it ran, but said no Python version)")
    if version < OLDEST_PYTHON:
        oldest = ".".join(map(str, OLDEST_PYTHON))
        raise UserError(f"{PYTHON_OPTION} {python}'s Python {lines[0]} is older than {oldest}; give a newer one")
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{PYTHON_OPTION} {python} cannot import torch: {reason}; install torch in its environment")


def check_environment(
    python: str, env: Sequence[tuple[str, str]], environment: Callable[[Sequence[tuple[str, str]]], Mapping[str, str]]
) -> None:
    """A one-line UserError, naming the variable, when side B's variables ``env`` stop ``python`` from starting or
    from running a script as a worker does; ``environment`` makes a worker's environment of such variables.

    Without it, such a variable showed as the workload's fault, with Python's last words (``<no Python frame>``).
    """
    problem = _start_problem(python, environment(env))
    if problem is None:
        return
    alone = next(((pair, found) for pair in env if (found := _start_problem(python, environment([pair])))), None)
    culprit, problem = alone if alone else (None, problem)
    which = f"{culprit[0]}={culprit[1]}" if culprit else f"{describe_env(env)}, together"
    raise UserError(f"{ENV_OPTION}: side B's environment {problem} ({which}); fix or drop that variable")


def _start_problem(python: str, env: Mapping[str, str]) -> str | None:
    """What stops ``python`` from running a script under ``env``, in words, or None."""
    try:
        probe = subprocess.run(
            [python, "-c", _START_PROBE],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # the interpreter itself: check_python says so
    if probe.returncode != 0 or not probe.stdout.startswith("started"):
        lines = probe.stderr.strip().splitlines()
        fatal = [line for line in lines if line.startswith("Fatal Python error")]
        return f"stops Python from starting: {(fatal or lines or ['no output'])[-1]}"
    if probe.stdout.split()[1:] != ["0"]:
        return "keeps Python interactive after its script (as python -i), which no worker can run under"
    return None


def _version(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    return tuple(int(p) for p in parts) if len(parts) == 3 and all(p.isdigit() for p in parts) else None


def side_record(
    label: str, commit: str, python: str, env: Sequence[tuple[str, str]], environment: Mapping[str, Any]
) -> dict[str, Any]:
    """One side as the results keep it: its code, interpreter, extra variables and its first worker's environment."""
    return {"label": label, "commit": commit, "python": python, "env": dict(env), "environment": dict(environment)}


def describe_side(record: Mapping[str, Any]) -> str:
    """A side's interpreter and versions in words, e.g. ``python /usr/bin/python3 3.12.3, torch 2.11.0, CUDA 12.8,
    cuDNN 91000, with OMP_NUM_THREADS=1``; a version its worker did not report (no worker finished) is ``?``."""
    found = record.get("environment") or {}

    def version(key: str) -> str:
        return "?" if key not in found else str(found[key]) if found[key] is not None else "none"

    words = (
        f"python {record['python']} {version('python')}, torch {version('torch')}, "
        f"CUDA {version('cuda')}, cuDNN {version('cudnn')}"
    )
    return f"{words}, with {describe_env(record['env'])}" if record.get("env") else words


def legend(labels: Sequence[str]) -> str:
    """``A: this tree (c2d8786d2+dirty, 3 file(s) of meddpm/ changed or new) | B: main (fcd2d0fd0)``: what each side
    of an A/B measured, said once per run; its lines then call the sides by their short names."""
    return " | ".join(f"{name}: {label}" for name, label in zip("AB", labels))


def sides_line(records: Sequence[Mapping[str, Any]]) -> str:
    """``A: ... | B: ...``: each side's interpreter, versions and extra variables, on one line."""
    return " | ".join(f"{name}: {describe_side(r)}" for name, r in zip("AB", records))
