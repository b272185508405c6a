"""How the kernels meet ``torch.compile``: custom operators that Dynamo records as one call and Inductor inlines.

A kernel with a written-out backward used to be a ``torch.autograd.Function``. Dynamo traces every
use of one into a forward and a backward subgraph of its own: most of its tracing time for
``fast`` (about 40 GroupNorms), paid again by every process, as Dynamo keeps no cache
(docs/performance.md). As a custom operator (``torch.library``)
with its backward registered as a second one, Dynamo records a single call and takes the output's
shape from a fake implementation, and AOTAutograd, when it traces forward and backward for Inductor,
replaces each call by the kernel's own PyTorch ops (a decomposition in Inductor's table, registered
by :func:`prepare_inductor`), so Inductor fuses them with their neighbours as it did before.

Compile caches (AOTAutograd's, Inductor's) key a graph by its operators' names, not by the code
behind them; :func:`operator_versions` names each operator with a hash of this package's source for
the key, so an edited kernel is compiled again rather than served from the cache.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from pathlib import Path

import torch

NAMESPACE = "meddpm"

_INLINED: dict[str, Callable[..., object]] = {}


def inlined_operator(name: str, fn: Callable[..., object], fake: Callable[..., object]):
    """``fn`` as the custom operator ``meddpm::name``, which Inductor compiles from ``fn``'s ops.

    ``fn``'s type hints give the operator's schema; ``fake`` gives its outputs' shapes, dtypes and
    strides without computing them (what Dynamo traces with). The result is called like ``fn`` and
    takes ``register_autograd``; outside ``torch.compile`` it runs ``fn``.
    """
    operator = opaque_operator(name, fn, fake)
    _INLINED[name] = fn
    return operator


def opaque_operator(name: str, fn: Callable[..., object], fake: Callable[..., object]):
    """``fn`` as the custom operator ``meddpm::name``, which Inductor calls as it is, unfused.

    For kernels of our own (Triton's) that must see their tensors' real strides when they run:
    Inductor may lay out an intermediate otherwise than its fake tensor said at trace time. ``fake``
    gives the outputs' shapes, dtypes and strides. An opaque call needs no version in the compile
    caches' keys: it runs ``fn``'s current code.
    """
    operator = torch.library.custom_op(f"{NAMESPACE}::{name}", fn, mutates_args=())
    operator.register_fake(fake)
    return operator


def prepare_inductor() -> dict[str, object]:
    """Register every :func:`inlined_operator` in Inductor's decompositions; the options to compile with.

    Called by :meth:`meddpm.run.combos.Combo.compiled` before it compiles, so that importing the
    model does not import Inductor; registering is idempotent. Inductor memoises its table on first
    use, so that copy is dropped after registering; without the decomposition Inductor would call
    the operator as an opaque kernel, correct but unfused. The options returned name each operator's
    source version for the compile caches' keys (:func:`operator_versions`), where this PyTorch
    has that option.
    """
    from torch._inductor import config, decomposition

    missing = {name: fn for name, fn in _INLINED.items() if _overload(name) not in decomposition.decompositions}
    for name, fn in missing.items():
        decomposition.register_decomposition(_overload(name))(fn)
    if missing and hasattr(decomposition, "fast_random_decomps"):
        decomposition.fast_random_decomps.cache_clear()
    if not hasattr(config, "unsafe_marked_cacheable_functions"):
        return {}
    return {"unsafe_marked_cacheable_functions": operator_versions()}


def operator_versions() -> dict[str, str]:
    """Each inlined operator with this version of the kernels' source.

    Inductor's option ``unsafe_marked_cacheable_functions`` takes such a dict and puts it in the key
    of AOTAutograd's and Inductor's caches. (PyTorch's ``torch.compiler.config.cache_key_tag``, set
    around the compiled call, keyed those caches too, but also the autotuning results, which then
    were stored under one key and looked up under another: every process benchmarked its kernels
    again, seconds of its first iteration; docs/performance.md.)
    """
    return {f"torch.ops.{NAMESPACE}.{name}": _source_version() for name in sorted(_INLINED)}


@functools.cache
def _source_version() -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _overload(name: str) -> torch._ops.OpOverload:
    return getattr(getattr(torch.ops, NAMESPACE), name).default
