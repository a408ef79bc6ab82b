r"""Bindings of the compiled pool-adjacent-violators kernel (``_pav_kernel.c``, compiled on
first use by :mod:`hardgrad._core.native`; private).

The kernel runs the sequential PAV of :mod:`hardgrad.sorting._pav` row after row in C, in
double precision, and returns the blocks with their statistics and, in the same scan, the
isotonic solution (``"dual"``: :math:`v`) or :math:`s - v` (``"primal"``) rounded once to
the input's type; its backward applies the block-constant Jacobian (see the C file's
text). Every function here returns ``None`` when the kernel is not available (no C
compiler, ``HARDGRAD_NATIVE=0``), and callers fall back to tensor operations.

Inputs: CPU tensors of float32 or float64, the same shape, rows along the last dimension
(contiguous rows, or one row expanded over all, are read in place; others are copied).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch
from torch import Tensor

from .._core import native

__all__ = [
    "MODES",
    "available",
    "backward",
    "forward",
    "in_memory",
    "sort_descending",
    "status",
]

_SOURCE = Path(__file__).with_name("_pav_kernel.c")
#: Value outputs of :func:`forward`: none, ``s - v``, ``v`` or ``exp(s - v)``.
MODES = {None: 0, "primal": 1, "dual": 2, "exp": 3}
_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_INT = ctypes.c_int
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


#: Rows at least this long, in tensors of at least :data:`SORT_MIN_ENTRIES` entries
#: (twice that for float64), are sorted by the kernel: below, ``torch.sort`` is faster
#: (measured on 2 CPU cores, 1 thread: float32 256 x 100 0.35 vs 0.63 ms, 32 x 1000 0.30
#: vs 1.2 ms; 2048 x 16 0.90 vs 0.34 ms; float64 256 x 100 0.74 vs 0.64 ms).
SORT_MIN_LENGTH = {torch.float32: 64, torch.float64: 128}
SORT_MIN_ENTRIES = 4096
#: From this many entries torch.sort runs its rows on all intra-op threads (torch's grain
#: size); the radix sort runs on one, about 2x torch's one-thread speed for rows under 256
#: entries and 4-6x from 1,000 (64 x 1024 float32: 0.59 ms against 2.84 at 1 thread and
#: 1.45 at 2; 4096 x 100: 5.9 against 12.3 and 6.0), so it is used with fewer threads than
#: that factor only.
TORCH_PARALLEL_ENTRIES = 32768

#: From this many entries the kl terms e^(x - max) are computed by torch (vectorised: 5 us
#: for 25,600 against ~150 us of scalar exp in the kernel); below, the kernel computes
#: them (saving the four tensor operations' fixed cost).
VECTORISED_TERMS_MIN_ENTRIES = 2048

_typed: set[int] = set()  # id() of the libraries whose functions have their argtypes


def _library() -> ctypes.CDLL | None:
    lib = native.load(_SOURCE)
    if lib is not None and id(lib) not in _typed:
        for suffix in _SUFFIX.values():
            forward = getattr(lib, f"hg_pav_forward_{suffix}")
            forward.argtypes = [
                *(_INT, _INT, _I64, _I64, _P, _I64, _P, _I64, _P, _I64, _P, _I64),
                *(_P, _P, _P, _P, _P, _P),
            ]
            forward.restype = _INT
            backward = getattr(lib, f"hg_pav_backward_{suffix}")
            backward.argtypes = [_INT, _INT, _I64, _I64, _P, _P, _P, _P, _P, _P, _P, _P]
            backward.restype = _INT
            sort = getattr(lib, f"hg_sort_descending_{suffix}")
            sort.argtypes = [_I64, _I64, _P, _I64, _P, _P]
            sort.restype = _INT
        _typed.add(id(lib))
    return lib


def status() -> tuple[bool, str]:
    """``(True, the compiled library's path)`` when the kernel is available (compiling it
    now if it was not yet tried), else ``(False, why not)``."""
    lib = _library()
    if lib is not None:
        return True, str(lib._name)
    return False, native.failure(_SOURCE) or "not built"


def in_memory(t: Tensor) -> bool:
    """Whether ``t`` has memory of its own the kernel can read (not a batched tensor of a
    vmap, e.g. the gradients ``jacobian(..., vectorize=True)`` hands a backward)."""
    try:
        t.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return False
    return True


def available(*tensors: Tensor) -> bool:
    """Whether the kernel can run on these tensors (CPU, float32 or float64, one dtype) and
    is compiled (compiling it now if it was not yet tried). (The eager callers hand it
    plain tensors; a backward checks its incoming gradient with :func:`in_memory`.)"""
    dtype = tensors[0].dtype
    for t in tensors:
        if t.device.type != "cpu" or t.dtype != dtype:
            return False
    return dtype in _SUFFIX and _library() is not None


def _rows(x: Tensor, n: int) -> tuple[Tensor, int]:
    """``x`` as rows of ``n`` unit-stride entries and the rows' stride (0 for one row
    expanded over all: no copy)."""
    rows = x.detach().reshape(-1, n)
    if rows.stride(-1) != 1 and n > 1:
        rows = rows.contiguous()
    return rows, (rows.stride(0) if rows.shape[0] > 1 else n)


def _pointer(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _terms(rows: Tensor, stride: int) -> tuple[Tensor, int]:
    """``e^(x - max of x's row)`` in float64 (vectorised here: the kernel's kl linear form
    reads them), for the distinct rows only (one when ``stride`` is 0)."""
    base = rows[:1] if stride == 0 else rows
    top = base.amax(-1, keepdim=True)
    return torch.exp(base.to(torch.float64) - top.to(torch.float64)).contiguous(), (
        base.shape[-1] if stride else 0
    )


def forward(
    s: Tensor, w: Tensor, kl: bool, mode: str | None, perm: Tensor | None = None
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None] | None:
    """``(start, weight_s, weight_w, out)``: each entry's block start (int64), for ``kl`` its
    weight in its block's statistic of ``s`` and of ``w`` (the block's softmax, float64;
    ``None`` for l2, whose weights are ``1/|B|``) and the ``mode`` output (``s``'s dtype;
    ``None`` for ``mode=None``; with ``perm`` (int64, ``s``'s shape, each row a
    permutation), entry ``i``'s value lands at ``perm[i]``), all of ``s``'s shape; ``None``
    when the kernel is not available. ``"exp"``: :math:`e^{s - v}`, the exponential taken
    in float64 and rounded once."""
    lib = _library()
    if lib is None:
        return None
    n = s.shape[-1]
    rows = s.numel() // n if n else 0
    s_rows, s_stride = _rows(s, n)
    w_rows, w_stride = _rows(w, n)
    perm = None if perm is None else perm.contiguous()
    start = torch.empty(s.shape, dtype=torch.int64)
    weights = kl and mode is not None
    weight_s = torch.empty(s.shape, dtype=torch.float64) if weights else None
    weight_w = torch.empty(s.shape, dtype=torch.float64) if weights else None
    es = ew = None
    es_stride = ew_stride = 0
    if kl and s.numel() >= VECTORISED_TERMS_MIN_ENTRIES:
        es, es_stride = _terms(s_rows, s_stride)
        ew, ew_stride = _terms(w_rows, w_stride)
    wide = mode == "exp" and s.dtype != torch.float64
    out = None if mode is None else torch.empty(s.shape, dtype=torch.float64 if wide else s.dtype)
    kernel = getattr(lib, f"hg_pav_forward_{_SUFFIX[s.dtype]}")
    status = kernel(
        int(kl), MODES[mode] if mode != "exp" else MODES["primal"], rows, n,
        s_rows.data_ptr(), s_stride, w_rows.data_ptr(), w_stride,
        _pointer(es), es_stride, _pointer(ew), ew_stride, _pointer(perm), start.data_ptr(),
        _pointer(weight_s), _pointer(weight_w),
        None if wide else _pointer(out), _pointer(out) if wide else None,
    )  # fmt: skip
    if status != 0:
        raise MemoryError("hardgrad: the PAV kernel could not allocate its scratch memory")
    if mode == "exp":
        assert out is not None
        out = out.exp_().to(s.dtype)
    return start, weight_s, weight_w, out


def backward(
    kl: bool,
    mode: str,
    start: Tensor,
    weight_s: Tensor | None,
    weight_w: Tensor | None,
    grad: Tensor,
    need_s: bool,
    need_w: bool,
    perm: Tensor | None = None,
    out: Tensor | None = None,
) -> tuple[Tensor | None, Tensor | None]:
    """The gradients to ``s`` and ``w`` (``None`` where not needed) of the ``mode`` output
    given its incoming gradient ``grad`` (the kernel must be available: :func:`forward`
    ran and gave the weights; ``perm`` as given to it; ``out``: its output, for
    ``"exp"``). With ``perm``, ``grad`` and the gradients are in the output's order."""
    lib = _library()
    assert lib is not None
    grad = grad.contiguous()
    if out is not None:
        out = out.contiguous()
    n = start.shape[-1]
    rows = start.numel() // n if n else 0
    grad_s = torch.empty(start.shape, dtype=grad.dtype) if need_s else None
    grad_w = torch.empty(start.shape, dtype=grad.dtype) if need_w else None
    kernel = getattr(lib, f"hg_pav_backward_{_SUFFIX[grad.dtype]}")
    status = kernel(
        int(kl), MODES[mode], rows, n, start.data_ptr(), _pointer(weight_s), _pointer(weight_w),
        _pointer(perm), grad.data_ptr(), _pointer(out), _pointer(grad_s), _pointer(grad_w),
    )  # fmt: skip
    if status != 0:
        raise MemoryError("hardgrad: the PAV kernel could not allocate its scratch memory")
    return grad_s, grad_w


def sort_descending(x: Tensor) -> tuple[Tensor, Tensor] | None:
    """``torch.sort(x, stable=True, dim=-1, descending=True)``, values and int64 indices
    bit for bit (equal entries keep their order; -0.0 equals 0.0 and NaN comes first), by
    the kernel's radix sort, where it is faster (see :data:`SORT_MIN_LENGTH` and
    :data:`TORCH_PARALLEL_ENTRIES`); ``None`` where it is not or the kernel is not
    available."""
    lib = _library()
    n = x.shape[-1]
    if lib is None or not SORT_MIN_LENGTH[x.dtype] <= n < 2**31:
        return None
    if x.numel() < SORT_MIN_ENTRIES * (x.element_size() // 4):
        return None
    threads = torch.get_num_threads()
    if threads > 1 and x.numel() >= TORCH_PARALLEL_ENTRIES and threads >= (2 if n < 256 else 4):
        return None  # torch.sort splits the rows over its threads; the radix sort does not
    rows = x.numel() // n
    x_rows, x_stride = _rows(x, n)
    values = torch.empty(x.shape, dtype=x.dtype)
    indices = torch.empty(x.shape, dtype=torch.int64)
    kernel = getattr(lib, f"hg_sort_descending_{_SUFFIX[x.dtype]}")
    status = kernel(rows, n, x_rows.data_ptr(), x_stride, values.data_ptr(), indices.data_ptr())
    if status != 0:
        raise MemoryError("hardgrad: the sort kernel could not allocate its scratch memory")
    return values, indices
