"""The package's rooms import only the rooms below them, the suite's modules only the layers below theirs,
and no module is in an import cycle.

The architecture as data: each room of ``meddpm/`` with the rooms it may import. The two
exception is named: ``run`` reads two leaf clocks of ``measure.machine`` (``timing`` and ``nvml``,
which import nothing of ``meddpm``).
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "meddpm"

PLUMBING = {"errors", "atomic"}
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "atomic": {"errors"},
    "kernels": set(),
    "model": {"kernels", "errors"},
    "data": {"errors"},
    "run": {"model", "kernels", "data", "errors", "measure.machine.timing", "measure.machine.nvml"},
    "measure": {"run", "model", "kernels", "data", "top", *PLUMBING},
    "parity": {"run", "model", "data", *PLUMBING},
    "judge": {"measure", "run", "model", *PLUMBING},
    "report": {"measure", "run", "model"},
    "suite": {"measure", "judge", "parity", "run", "model", "data", "report", "history", *PLUMBING},
    "history": {"measure", "judge", *PLUMBING},
    "bench": {"measure", "judge", "run", "model", "data", "report", "history", *PLUMBING},
    "top": {"model", "run", "bench", "errors"},  # meddpm/__init__.py (the public API) and __main__.py
}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return "top" if len(parts) == 1 or parts[1] == "__main__" else parts[1]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "meddpm" or name.startswith("meddpm.")}


MODULES = {_module(path): _imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def _allowed(source_room: str, target: str) -> bool:
    target_room = _room(target)
    if target_room == source_room:
        return True
    allowed = MAY_IMPORT[source_room]
    return target_room in allowed or any(target == f"meddpm.{entry}" for entry in allowed if "." in entry)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_imports_only_the_rooms_below_its_own(module: str):
    room = _room(module)
    assert room in MAY_IMPORT, f"{module}: room {room!r} is not in the architecture; add it to MAY_IMPORT"
    wrong = sorted(target for target in MODULES[module] if not _allowed(room, target))
    assert not wrong, f"{module} (room {room}) imports {wrong}; it may import {sorted(MAY_IMPORT[room])}"


def test_no_module_is_in_an_import_cycle():
    # `import meddpm` (the public API, for its version) is left out: the package's __init__ imports the rooms.
    graph = {module: {t for t in targets if t != "meddpm"} for module, targets in MODULES.items()}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as cycle:
        pytest.fail(f"import cycle between meddpm's modules: {' -> '.join(cycle.args[1])}")


def test_a_kernel_importing_the_model_is_caught():
    assert not _allowed("kernels", "meddpm.model.unet")
    assert not _allowed("run", "meddpm.measure.campaign.interleaved")
    assert _allowed("run", "meddpm.measure.machine.timing")


# Inside the suite: cases <- measuring, judging <- records, saving <- session <- plugin. The helpers of
# layer 0 (options, the Markdown summary) may import one another.
SUITE_LAYERS = {
    **dict.fromkeys(("options", "summary"), 0),
    "cases": 1,
    "measuring": 2,
    "judging": 2,
    "records": 3,
    "saving": 3,
    "session": 4,
    "plugin": 5,
}


def test_every_suite_module_has_a_layer():
    suite_modules = {m.removeprefix("meddpm.suite.") for m in MODULES if m.startswith("meddpm.suite.")}
    assert suite_modules == set(SUITE_LAYERS)


@pytest.mark.parametrize("module", sorted(SUITE_LAYERS))
def test_a_suite_module_imports_only_lower_layers(module: str):
    layer = SUITE_LAYERS[module]
    targets = {
        t.removeprefix("meddpm.suite.") for t in MODULES[f"meddpm.suite.{module}"] if t.startswith("meddpm.suite.")
    }
    wrong = sorted(t for t in targets if SUITE_LAYERS[t] > layer or (SUITE_LAYERS[t] == layer and layer > 0))
    assert not wrong, f"meddpm.suite.{module} (layer {layer}) imports {wrong}, which are not below it"
