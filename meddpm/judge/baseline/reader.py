"""Strict readers of JSON values: each checks one value's type and names its field, so an error says where to look.

Generic over documents: a reader raises :class:`Invalid` with the problem and, where the value itself says how to
fix it, the fix; the document's own usual fix (for a baseline file: restore or re-create it) is the caller's, who
passes it to :meth:`Invalid.advice`.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable
from dataclasses import MISSING, fields
from typing import Any


class Invalid(ValueError):
    """One thing wrong with a document's contents: the problem, and how to fix it (None: the document's usual fix)."""

    def __init__(self, problem: str, fix: str | None = None):
        super().__init__(problem)
        self.problem, self.fix = problem, fix

    def advice(self, usual_fix: str) -> str:
        """How to fix it, given the document's usual fix."""
        return usual_fix if self.fix is None else self.fix


class MissingKey(Invalid):
    """A required key that is not there: add it, or fall back on the document's usual fix."""

    def advice(self, usual_fix: str) -> str:
        """Add the key, or the document's usual fix."""
        return f"add it, or {usual_fix}"


def object_with_keys(value: Any, where: str, known: Iterable[str], required: Iterable[str] = ()) -> dict[str, Any]:
    """``value`` as a JSON object holding only ``known`` keys and every ``required`` one."""
    if not isinstance(value, dict):
        raise Invalid(f"{where} = {short(value)}, which must be an object {{...}}")
    known = list(known)
    for key in value:
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else f" (known: {', '.join(known)})"
            raise Invalid(f"an unknown key {key!r} in {where}{hint}", "correct or remove it: it would be ignored")
    for key in required:
        if key not in value:
            raise MissingKey(f"no {key!r} in {where}")
    return value


def mapping(value: Any, where: str) -> dict[str, Any]:
    """A JSON object whose keys are names chosen by the document (for a baseline file: cases, ratios, environment)."""
    if not isinstance(value, dict):
        raise Invalid(f"{where} = {short(value)}, which must be an object {{...}}")
    return value


def json_list(value: Any, where: str) -> list[Any]:
    """A JSON list."""
    if not isinstance(value, list):
        raise Invalid(f"{where} = {short(value)}, which must be a list [...]")
    return value


def number(value: Any, where: str) -> float:
    """A finite JSON number; true/false, strings, NaN and infinities are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Invalid(f"{where} = {short(value)}, which must be a finite number (not true/false, not a string)")
    return float(value)


def optional_number(value: Any, where: str) -> float | None:
    """A finite number, or None for null."""
    return None if value is None else number(value, where)


def integer(value: Any, where: str) -> int:
    """A whole JSON number; true/false and fractions are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{where} = {short(value)}, which must be a whole number such as 1 (no fraction, not true)")
    return value


def optional_integer(value: Any, where: str) -> int | None:
    """A whole number, or None for null."""
    return None if value is None else integer(value, where)


def text(value: Any, where: str) -> str:
    """A JSON string."""
    if not isinstance(value, str):
        raise Invalid(f"{where} = {short(value)}, which must be a string")
    return value


def numbers(value: Any, where: str) -> list[float]:
    """A list of finite numbers, each named by its index."""
    return [number(x, f"{where}[{i}]") for i, x in enumerate(json_list(value, where))]


def subfield(where: str, name: str) -> str:
    """The name of field ``name`` of the value at ``where``, for an error message."""
    return f"{where}.{name}"


def short(value: Any) -> str:
    """A value as the document spells it, cut to 40 characters for an error message."""
    dumped = json.dumps(value, allow_nan=True) if not isinstance(value, float) else repr(value)
    return dumped if len(dumped) <= 40 else dumped[:37] + "..."


def field_names(cls: type) -> list[str]:
    """A dataclass's fields: the keys its JSON object may hold."""
    return [f.name for f in fields(cls)]


def required_fields(cls: type) -> list[str]:
    """A dataclass's fields without a default: the keys its JSON object must hold."""
    return [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]


def one_of(value: Any, where: str, choices: Iterable[str]) -> str:
    """``value`` if it is one of ``choices``."""
    choices = list(choices)
    if value not in choices:
        raise Invalid(f"{where} = {short(value)}, which must be one of {', '.join(choices)}")
    return value
