"""Work-arounds for older torch releases (private).

hardgrad is written against torch 2.13 and supports torch 2.11 on; what differs between
them is kept here, each with the versions it concerns, so that it can go when the oldest
supported torch no longer needs it.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Whether Dynamo drops a custom ``autograd.Function``'s backward for outputs that alias
#: a tensor made inside ``forward`` (see :func:`fresh_output`): torch 2.11 and 2.12 (read
#: once, at import).
_ALIASED_OUTPUT_LOSES_BACKWARD = torch.torch_version.TorchVersion(torch.__version__) < (2, 13)


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
    if _ALIASED_OUTPUT_LOSES_BACKWARD and torch.compiler.is_compiling():
        return y.clone()
    return y
