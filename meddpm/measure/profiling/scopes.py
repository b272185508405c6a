"""Where in the model a profiled kernel or aten operator ran: the module, the aten operator, and their dtypes.

The harness, not the workload, marks the model: while one iteration is profiled, :func:`module_scopes` puts a
forward pre-hook and hook on every submodule of the step's model, which open and close a profiler scope named
``qualified.name (Type)`` (``denoiser.output_blocks.3.0.out_layers.2 (Conv3d)``). The workload imports nothing
for it, and the hooks are gone when the block ends. A compiled step gets no hooks: a hook added to a compiled
module makes Dynamo compile it again, in the very iteration profiled, and its kernels fuse across modules anyway.

:func:`attribute` then places each event of the profile (an aten operator on a CPU, a CUDA kernel on a GPU):

- its **op** is the outermost aten operator it ran under (``aten::convolution``, ``aten::convolution_backward``),
  and its **label** the innermost's with the dtypes of its tensor inputs (``copy bfloat16 -> float32``);
  a kernel is tied to the operator that launched it by the profiler's correlation id;
- its **module** is the innermost module scope around it. Backward runs outside every forward scope, on the
  autograd engine's thread: its operators lie under an ``autograd::engine::evaluate_function`` event whose
  sequence number is the one of the forward operator that recorded the gradient, so they take that
  operator's module. The optimizer's step takes its own scope (``Optimizer.step#Adam.step``).

:func:`module_bytes` sums, per module, the bytes its forward operators left allocated (the profiler's
memory records): what the module keeps for backward, its saved activations and output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch.autograd import DeviceType

from meddpm.measure.profiling.names import op_label, short_name

_BACKWARD = "autograd::engine::evaluate_function"
_OPTIMIZER = "Optimizer."
# The CUDA runtime and driver calls that launch work: an older torch ties a kernel to its launch through them.
_RUNTIME = ("cuda", "cuLaunch")


@dataclass(frozen=True)
class Site:
    """Where one event ran: its module scope ("" where none), outermost aten operator and short label."""

    module: str
    op: str
    label: str


def scope_name(name: str, module: torch.nn.Module) -> str:
    """The profiler scope of one module: ``output_blocks.3.0.out_layers.2 (Conv3d)``."""
    return f"{name} ({type(module).__name__})"


@contextlib.contextmanager
def module_scopes(step: object) -> Iterator[None]:
    """Every submodule's forward of ``step.model`` in a profiler scope while the block runs; nothing where the step
    has no model (a plain callable) or compiles it."""
    model, combo = getattr(step, "model", None), getattr(step, "combo", None)
    if not isinstance(model, torch.nn.Module) or getattr(combo, "compile", False):
        yield
        return
    open_scopes: list[Any] = []
    handles = []
    for name, module in model.named_modules():
        if name:  # the root's forward is not what a step calls (GaussianDiffusion.loss)
            scope = scope_name(name, module)
            handles.append(module.register_forward_pre_hook(partial(_enter, open_scopes, scope)))
            handles.append(module.register_forward_hook(partial(_exit, open_scopes), always_call=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _enter(open_scopes: list[Any], scope: str, module: torch.nn.Module, args: object) -> None:
    record = torch.profiler.record_function(scope)
    record.__enter__()
    open_scopes.append(record)


def _exit(open_scopes: list[Any], module: torch.nn.Module, args: object, output: object) -> None:
    if open_scopes:
        open_scopes.pop().__exit__(None, None, None)


# Where no module scope was open: the loss, the optimizer's bookkeeping, and a compiled graph, which runs
# without its modules' hooks.
OUTSIDE = "outside modules"


class Attribution:
    """The sites of a profile's events (``torch.profiler.profile(...).events()``, or objects with the same fields:
    ``name``, ``id``, ``device_type``, ``cpu_parent``, ``sequence_nr``, and where this torch records them
    ``linked_correlation_id`` and ``input_dtypes``).

    A kernel is tied to the aten operator that launched it through the correlation id its launch shares: a newer
    torch links the kernel to the operator itself (``linked_correlation_id``); an older one keeps only the CUDA
    runtime call (``cudaLaunchKernel``, which carries the kernel's id) inside the operator that made it.
    """

    def __init__(self, events: Sequence[Any], dtypes: Mapping[int, Sequence[str]] | None = None):
        """``dtypes``: an operator's input dtypes by its id, where its event carries none (:class:`KinetoDtypes`)."""
        self._dtypes = dtypes or {}
        cpu = [e for e in events if e.device_type == DeviceType.CPU]
        self._launcher = {e.id: e for e in cpu if hasattr(e, "linked_correlation_id") and not e.linked_correlation_id}
        self._runtime = {e.id: e for e in cpu if e.name.startswith(_RUNTIME)}
        # Sequence number -> the module of the forward operator that recorded that gradient. Every operator records
        # the number the next gradient will get, so the one that recorded it is the last to carry it.
        self._forward: dict[int, str] = {}
        for e in sorted(cpu, key=lambda e: e.time_range.start):
            if _is_aten(e) and e.sequence_nr >= 0 and not _outer(e, _BACKWARD):
                self._forward[e.sequence_nr] = self._scope(e)

    def of_operator(self, event: Any) -> Site:
        """The site of an aten operator (a CPU row)."""
        outermost = event
        for parent in _ancestors(event):
            if _is_aten(parent):
                outermost = parent
        dtypes = getattr(event, "input_dtypes", None) or self._dtypes.get(event.id, ())
        return Site(self.module(event), outermost.name, op_label(event.name, dtypes))

    def of_kernel(self, kernel: Any) -> Site:
        """The site of a CUDA kernel, through the aten operator that launched it; its short name where none did."""
        linked = getattr(kernel, "linked_correlation_id", 0)
        launcher = self._launcher.get(linked) if linked else self._runtime.get(kernel.id)
        operator = next((e for e in [launcher, *_ancestors(launcher)] if e is not None and _is_aten(e)), None)
        if operator is None:
            return Site(self.module(launcher) if launcher is not None else "", "", short_name(kernel.name))
        site = self.of_operator(operator)
        own = "at::native::" in kernel.name or "Memcpy" in kernel.name or "Memset" in kernel.name
        return Site(site.module, site.op, site.label if own else short_name(kernel.name))

    def module(self, event: Any) -> str:
        """The innermost module scope around ``event``; in backward, the forward operator's."""
        backward = _outer(event, _BACKWARD)
        if backward is not None:
            return self._forward.get(backward.sequence_nr, "")
        return self._scope(event)

    @staticmethod
    def _scope(event: Any) -> str:
        return next((p.name for p in _ancestors(event) if _is_scope(p.name)), "")


class KinetoDtypes(Mapping[int, Sequence[str]]):
    """Each aten operator's input dtypes by its event's id, from Kineto's own records
    (``prof.profiler.kineto_results.events()``): an older torch (2.11) keeps them there only, not on its events.
    Read on demand: an iteration holds tens of thousands of records, and only the launching operators are asked."""

    def __init__(self, records: Iterable[Any]):
        self._records = {r.correlation_id(): r for r in records if r.device_type() == DeviceType.CPU}

    def __getitem__(self, key: int) -> Sequence[str]:
        return list(self._records[key].dtypes())

    def __iter__(self) -> Iterator[int]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


def module_bytes(events: Sequence[Any], attribution: Attribution, device: torch.device) -> dict[str, int]:
    """Per module, the bytes its forward operators left allocated (outermost operators only, so none counts twice)."""
    found: dict[str, int] = {}
    for e in events:
        if e.device_type != DeviceType.CPU or not _is_aten(e) or any(_is_aten(p) for p in _ancestors(e)):
            continue
        if _outer(e, _BACKWARD) is not None:
            continue
        module = attribution.module(e)
        used = e.device_memory_usage if device.type == "cuda" else e.cpu_memory_usage
        if module and used:
            found[module] = found.get(module, 0) + used
    return found


def device_kernels(events: Sequence[Any]) -> list[Any]:
    """The device events that are work on the GPU: kernels, copies and sets, without the GPU spans of the
    ``record_function`` ranges (a module's or the optimizer's scope) that the profiler lists beside them once it
    records the CPU too. A span carries its range's name, which a CPU event of that range also has; a copy's
    name (``Memcpy DtoD (Device -> Device)``, ``Memset (Device)``) has no CPU event."""
    ranges = {e.name for e in events if e.device_type == DeviceType.CPU and _is_scope(e.name)}
    return [
        e
        for e in events
        if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False) and e.name not in ranges
    ]


def _is_aten(event: Any) -> bool:
    return event.name.startswith("aten::")


def _is_scope(name: str) -> bool:
    """A module's scope (``name (Type)``) or the optimizer's (``Optimizer.step#Adam.step``)."""
    return name.startswith(_OPTIMIZER) or (name.endswith(")") and " (" in name and "::" not in name)


def _ancestors(event: Any) -> Iterator[Any]:
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def _outer(event: Any, prefix: str) -> Any:
    """The nearest ancestor whose name starts with ``prefix``, or None."""
    return next((p for p in _ancestors(event) if p.name.startswith(prefix)), None)
