"""Work-arounds for older torch releases (private).

hardgrad is written against torch 2.13 and supports torch 2.11 on; what differs between
them is kept here, each with the versions it concerns, so that it can go when the oldest
supported torch no longer needs it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

#: Whether Dynamo drops a custom ``autograd.Function``'s backward for outputs that alias
#: a tensor made inside ``forward`` (see :func:`fresh_output`): torch 2.11 and 2.12 (read
#: once, at import).
ALIASED_OUTPUT_LOSES_BACKWARD = torch.torch_version.TorchVersion(torch.__version__) < "2.13"


def fresh_output(y: Tensor) -> Tensor:
    """``y`` itself, except under ``torch.compile`` on torch < 2.13, where it is
    ``y.clone()``: return it from an ``autograd.Function``'s ``forward``.

    On torch 2.11 (and 2.12), when the tensor a Function's ``forward`` returns was produced
    by an in-place op (``y.mul_(3)``), an ``out=`` op, or a call that returns its own input
    (a same-dtype ``y.to(dtype)``, ``y.float()`` of a float32 tensor, ``y.contiguous()``),
    Dynamo traces the Function as if ``backward`` were the autograd of ``forward``'s
    operations: the custom backward is dropped and the compiled gradient of a
    straight-through op comes out as the hard op's own, silently 0. Eager mode and torch
    2.13 are correct. A fresh tensor from an out-of-place op is unaffected, so the copy is
    made only where it is needed; inductor folds it into the kernel that writes ``y``. In
    eager mode it is never made, on any version.

    Example:
        >>> import torch
        >>> y = torch.ones(2)
        >>> fresh_output(y) is y  # eager mode: the tensor itself
        True
    """
    if ALIASED_OUTPUT_LOSES_BACKWARD and torch.compiler.is_compiling():
        return y.clone()
    return y


#: Whether ``torch.func.vmap`` lacks a batching rule for ``Tensor.view(dtype)`` (the
#: reinterpretation of a tensor's bits): torch 2.11 raises "Batching rule not implemented
#: for aten::view.dtype"; torch 2.13 has one.
VMAP_LACKS_VIEW_DTYPE = ALIASED_OUTPUT_LOSES_BACKWARD


def truncated_significand(x: Tensor, bits: int) -> Tensor:
    """``x`` with its binary significand truncated toward zero, keeping the bits of
    ``bits`` significant bits' worth of a normal number (float32 or float64): bit for bit
    what clearing the low fraction bits of its IEEE pattern gives, subnormals, zeros and
    infinities included (NaN stays NaN).

    For ``torch.func`` transforms on torch < 2.13, whose ``vmap`` has no batching rule for
    the bit reinterpretation ``x.view(int_type)``. With ``frexp``, ``x = m 2^e``,
    ``1/2 <= |m| < 1``; a normal number keeps the multiples of ``2^(e - bits)``, a
    subnormal those of the smallest normal exponent's quantum, so ``e`` is raised to that
    exponent first (every scaling below is by an exact power of two).

    Example:
        >>> import torch
        >>> truncated_significand(torch.tensor([1.0 + 2.0**-20, -3.75]), 2)
        tensor([ 1., -3.])
    """
    info = torch.finfo(x.dtype)
    low = int(math.log2(info.tiny)) + 1  # frexp's exponent of the smallest normal
    mantissa, exponent = torch.frexp(x)
    raised = exponent.clamp_min(low)
    whole = torch.trunc(torch.ldexp(mantissa, exponent - raised + bits))
    return torch.ldexp(whole, raised - bits)


#: Whether ``torch.compiler.is_exporting()`` reads True inside any ``torch.compile`` trace,
#: not only under ``torch.export``: torch 2.11 (fullgraph or not, every backend); torch
#: 2.13 reads False there.
IS_EXPORTING_UNDER_COMPILE = ALIASED_OUTPUT_LOSES_BACKWARD
