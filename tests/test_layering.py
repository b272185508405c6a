"""The package's rooms import only the rooms below them, the suite's modules only the layers below theirs,
no module is in an import cycle, and the workload imports nothing of the harness.

The architecture as data: each room of ``meddpm/`` with the rooms it may import, and the two sets
the rooms fall into (docs/design.md, "Workload and harness"): the workload, the code a revision
supplies, and the harness, which measures, judges, stores and reports it. The workload imports only
itself and the plumbing, so one tree's harness can drive another revision's workload; the harness
imports only the workload's public surface, named here.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from meddpm.measure.processes.workload import WORKLOAD_ROOMS

PACKAGE = Path(__file__).resolve().parent.parent / "meddpm"

PLUMBING = {"errors", "atomic"}
WORKLOAD = set(WORKLOAD_ROOMS)  # what a worker imports from the revision it measures
HARNESS = {"versioned", "measure", "judge", "parity", "report", "suite", "bench", "history"}
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "atomic": {"errors"},
    "kernels": set(),
    "model": {"kernels", "errors"},
    "data": {"errors"},
    "run": {"model", "kernels", "data", "errors"},
    "versioned": {"errors"},  # the versioned-JSON loader, below every room that reads a file back
    "measure": {"run", "model", "kernels", "data", "top", "versioned", *PLUMBING},
    "parity": {"run", "model", "data", "versioned", *PLUMBING},
    "judge": {"measure", "run", "model", "versioned", *PLUMBING},
    "report": {"measure", "run", "model"},
    "suite": {"measure", "judge", "parity", "run", "model", "data", "report", "history", "versioned", *PLUMBING},
    "history": {"measure", "judge", "versioned", *PLUMBING},
    "bench": {"measure", "judge", "run", "model", "data", "report", "history", *PLUMBING},
    "top": {"model", "run", "bench", "errors"},  # meddpm/__init__.py (the public API) and __main__.py
}
# What the harness imports from the workload, by module: the surface a revision's workload must offer.
WORKLOAD_SURFACE: dict[str, set[str]] = {
    "meddpm.model.config": {"ModelConfig", "PRESETS"},
    "meddpm.model.diffusion": {"build_model"},
    "meddpm.run.combos": {"COMBOS", "Combo", "get_combo"},
    "meddpm.run.train": {"TrainStep"},
    "meddpm.run.sampling": {"Sampler"},
    "meddpm.run.distributed": {
        "GRADIENT_SYNCS",
        "check_gradient_sync",
        "launch",
        "init_process_group",
        "resolve_gradient_sync",
        "data_parallel_step",
    },
    "meddpm.data.phantom": {"phantom_batch"},
}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return "top" if len(parts) == 1 or parts[1] == "__main__" else parts[1]


def _imported_names(path: Path) -> set[tuple[str, str]]:
    """(module, name) for every ``from meddpm... import name`` in ``path``; (module, "") for ``import meddpm...``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update((alias.name, "") for alias in node.names)
    return {(module, name) for module, name in found if module == "meddpm" or module.startswith("meddpm.")}


NAMES = {_module(path): _imported_names(path) for path in sorted(PACKAGE.rglob("*.py"))}
MODULES = {module: {target for target, _ in names} for module, names in NAMES.items()}


def _allowed(source_room: str, target: str) -> bool:
    target_room = _room(target)
    allowed = MAY_IMPORT[source_room]
    return target_room in (source_room, *allowed) or any(target == f"meddpm.{e}" for e in allowed if "." in e)


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


def _harness_imports(modules: dict[str, set[str]]) -> list[str]:
    """Each import of a workload module outside the workload and the plumbing, as ``module -> target``."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in modules.items()
        if _room(module) in WORKLOAD
        for target in targets
        if _room(target) not in WORKLOAD | PLUMBING
    )


def test_every_room_is_workload_harness_or_plumbing():
    rooms = [*WORKLOAD, *HARNESS, *PLUMBING, "top"]
    assert sorted(rooms) == sorted(MAY_IMPORT), "each room belongs to exactly one set"
    for room in WORKLOAD:
        assert MAY_IMPORT[room] <= WORKLOAD | PLUMBING, f"the workload room {room} may import the harness"


def test_no_workload_module_imports_the_harness():
    wrong = _harness_imports(MODULES)
    assert not wrong, f"the workload imports the harness (a revision's workload must run under any harness): {wrong}"


def test_a_workload_module_importing_the_harness_is_caught():
    planted = {"meddpm.run.sampling": {"meddpm.model.config", "meddpm.errors", "meddpm.measure.machine.timing"}}
    assert _harness_imports(planted) == ["meddpm.run.sampling -> meddpm.measure.machine.timing"]
    assert _harness_imports({"meddpm.model.unet": {"meddpm"}}) == ["meddpm.model.unet -> meddpm"]  # the whole API
    assert not _allowed("run", "meddpm.measure.machine.timing")


def _off_surface(names: dict[str, set[tuple[str, str]]]) -> list[str]:
    """Each harness import from the workload that is not in WORKLOAD_SURFACE, as ``module -> target.name``."""
    return sorted(
        f"{module} -> {target}.{name}"
        for module, imported in names.items()
        if _room(module) in HARNESS
        for target, name in imported
        if _room(target) in WORKLOAD and name not in WORKLOAD_SURFACE.get(target, set())
    )


def test_the_harness_imports_only_the_workload_surface():
    wrong = _off_surface(NAMES)
    assert not wrong, f"the harness imports workload names outside WORKLOAD_SURFACE (docs/design.md): {wrong}"
    used = {pair for module, imported in NAMES.items() if _room(module) in HARNESS for pair in imported}
    unused = sorted(f"{m}.{n}" for m, names in WORKLOAD_SURFACE.items() for n in names if (m, n) not in used)
    assert not unused, f"WORKLOAD_SURFACE names what the harness no longer imports: {unused}"


def test_a_harness_import_off_the_surface_is_caught():
    planted = {
        "meddpm.measure.campaign.interleaved": {("meddpm.model.unet", "UNet"), ("meddpm.run.train", "TrainStep")}
    }
    assert _off_surface(planted) == ["meddpm.measure.campaign.interleaved -> meddpm.model.unet.UNet"]


# Inside the suite: cases <- selection <- measuring, judging <- records, saving <- session <- plugin. The helpers of
# layer 0 (options, the Markdown summary and pull-request comment) may import one another.
SUITE_LAYERS = {
    **dict.fromkeys(("options", "summary", "pr_comment"), 0),
    "cases": 1,
    "selection": 2,
    "measuring": 3,
    "judging": 3,
    "records": 4,
    "saving": 4,
    "session": 5,
    "plugin": 6,
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
