"""Short names a person can tell apart, for CUDA kernels and aten operators, and the key that matches a kernel
across two compiles.

A kernel's full name is a C++ signature of hundreds of characters (``void at::native::vectorized_elementwise_kernel
<4, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, ...``), and
two different kernels often share the first eighty. :func:`short_name` keeps what tells them apart:

| kernel | short name |
| --- | --- |
| aten's own (``at::native::``) | the operation and its dtype, from the functor or lambda: ``mul float32`` |
| cuDNN's ``sm90_xmma_...`` | the family, before the tile sizes: ``xmma fprop implicit gemm bfloat16`` |
| other C++ kernels | library, function, first dtype: ``cudnn wgrad2d_grouped_direct_kernel bfloat16`` |
| Inductor's ``triton_...`` | its name without the compile's numbering: ``triton_red_fused_native_group_norm`` |
| an aten operator | the operator: ``convolution`` |

Where the profiler knows the aten operator that launched a kernel and its input dtypes, :func:`op_label`
names the kernel after them (``copy bfloat16 -> float32``), which is what the kernel's own name hides.

:func:`match_key` is the name by which two sides' rows are matched: the full name, except that Inductor's
kernels lose the number each compile gives them, so ``triton_red_fused_17`` on one side and ``..._19`` on the
other are one row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# C++ and profiler spellings of dtypes, and the xmma names' abbreviations, as torch names them
_DTYPES = {
    "float": "float32",
    "f32": "float32",
    "tf32": "float32",
    "double": "float64",
    "f64": "float64",
    "c10::bfloat16": "bfloat16",
    "__nv_bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "c10::half": "float16",
    "__half": "float16",
    "f16": "float16",
    "long": "int64",
    "long int": "int64",
    "int64_t": "int64",
    "int": "int32",
    "bool": "bool",
    "unsigned char": "uint8",
    "signed char": "int8",
}
_GENERIC_FUNCTORS = {"Binary", "BUnary", "AUnary", "Unary", "BinaryOpScalar", "BinaryOpList", "Fill"}
# aten's kernel templates, which run any operation: the operation is named inside them
_GENERIC_KERNELS = {
    "vectorized_elementwise",
    "unrolled_elementwise",
    "elementwise",
    "reduce",
    "multi_tensor_apply",
    "distribution_elementwise_grid_stride",
    "gpu",
}
_FOREACH = {"plus": "add", "minus": "sub", "multiplies": "mul", "divides": "div"}
_TRITON_NUMBER = re.compile(r"^(triton_\w+?)_\d+$")
_XMMA = re.compile(r"^sm\d+_xmma_(?P<words>[a-z_]+?)_(?P<dtype>bf16|f16|f32|tf32|f64|s8|i8|e4m3|e5m2)")
_TILE = re.compile(r"^(\d+x\d+(x\d+)?|align\d+|stage\d+|warpgroupsize\w+|tilesize\w+)$")


def dtype_name(spelled: str) -> str:
    """A dtype as torch names it (``float32``, ``bfloat16``), from its C++, profiler or xmma spelling; else as given."""
    return _DTYPES.get(spelled.strip().lower(), spelled.strip())


def match_key(name: str) -> str:
    """The name two sides' rows are matched by: the name, without an Inductor kernel's compile numbering."""
    numbered = _TRITON_NUMBER.match(name)
    return numbered.group(1) if numbered else name


def op_label(op: str, dtypes: Sequence[str]) -> str:
    """An aten operator and the dtypes of its tensor inputs: ``mul float32``; a copy across dtypes as
    ``copy bfloat16 -> float32`` (from the source to the destination)."""
    verb = op.removeprefix("aten::").removesuffix("_").lstrip("_") or op
    tensors = [dtype_name(d) for d in dtypes if d.strip().lower() in _DTYPES]  # not Scalar, TensorList, ...
    if verb in ("copy", "to_copy") and len(tensors) >= 2 and tensors[0] != tensors[1]:
        return f"copy {tensors[1]} -> {tensors[0]}"
    distinct = list(dict.fromkeys(tensors))
    return " ".join([verb, *distinct])


def short_name(name: str) -> str:
    """A short name of a CUDA kernel or aten operator that tells it apart (see the module's table)."""
    if name.startswith("aten::"):
        return name.removeprefix("aten::")
    if name.startswith("triton_"):
        return match_key(name)
    if "::" not in name and " " in name:  # the profiler's own rows: "Memcpy DtoD (Device -> Device)"
        return name
    xmma = _XMMA.match(name)
    if xmma:
        return f"xmma {xmma.group('words').replace('_', ' ')} {dtype_name(xmma.group('dtype'))}"
    body = name.removeprefix("void ").strip()
    if "at::native::" in body:
        return _aten_kernel(body)
    if body.startswith("cutlass::Kernel"):
        inner = re.search(r"<(\w+)", body)
        if inner:
            return "_".join(t for t in inner.group(1).split("_") if not _TILE.match(t))
    qualified = re.split(r"[<(]", body, maxsplit=1)[0]
    parts = qualified.split("::")
    library = parts[0] if len(parts) > 1 else ""
    dtype = _first_dtype(body)
    return " ".join(p for p in (library, parts[-1], dtype) if p)[:80]


def _aten_kernel(body: str) -> str:
    """``mul float32`` from aten's kernel names: the functor or the kernel function names the operation."""
    functor = _search(r"binary_internal::(\w+?)Functor", body) or _search(r"CUDAFunctor_(\w+)", body)
    foreach = _search(r"std::(plus|minus|multiplies|divides)<", body) if "multi_tensor_apply" in body else None
    kernels = [k for k in re.findall(r"(\w+?)_kernel(?:_cuda|_impl)?\b", body) if k not in _GENERIC_KERNELS]
    op = (
        (functor or "").lower()
        or (f"foreach {_FOREACH[foreach]}" if foreach else "")
        or (kernels[0].removeprefix("direct_") if kernels else "")
        or (_search(r"(\w+?)Ops<", body) or "").lower()
        or next((m.lower() for m in re.findall(r"(\w+?)Functor<", body) if m not in _GENERIC_FUNCTORS), "")
        or (_search(r"(Fill)Functor<", body) or "").lower()
        or re.sub(r"(CUDA)?Kernel$", "", _search(r"at::native::(?:\(anonymous namespace\)::)?(\w+)<", body) or "kernel")
    )
    lam = _search(r"\{lambda\(([\w: ]+)\)#\d+\}", body)
    dtype = dtype_name(lam) if lam else _first_dtype(body)
    return f"{op} {dtype}".strip()


def _first_dtype(body: str) -> str:
    """The first template argument that is a dtype (``float``, ``__nv_bfloat16``, ``c10::BFloat16``), named as torch
    names it; "" where none is."""
    for arg in re.findall(r"[<,]\s*([\w:]+(?: int)?)(?=\s*[,>])", body):
        if arg.lower() in _DTYPES and arg.lower() not in ("int", "long", "bool"):
            return dtype_name(arg)
    return ""


def _search(pattern: str, text: str) -> str | None:
    found = re.search(pattern, text)
    return found.group(1) if found else None
