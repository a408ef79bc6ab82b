"""``compiler_disabled``: :func:`torch.compiler.disable` applied at the first call (private).

``torch.compiler.disable`` imports ``torch._dynamo`` (and with it sympy, which adds a
``warnings`` filter, and a second or more of imports). Used as a decorator in a module
body it did so at ``import hardgrad``; this wrapper defers it to the first call of the
function, where it is scoped in :func:`warnings.catch_warnings`, and only once Dynamo has
been imported: before that nothing can be compiling, and ``fn`` is simply called (so a first
eager training step does not import Dynamo either). Under ``torch.compile`` the wrapper is
traced, the disabled function is made (or found) and called outside the graph, as the
decorator's would be.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


def compiler_disabled(fn: F) -> F:
    """``fn`` run outside ``torch.compile`` graphs, like ``@torch.compiler.disable``, with
    ``torch._dynamo`` imported only when ``fn`` is first called.

    Example:
        >>> import torch
        >>> @compiler_disabled
        ... def positives(x):
        ...     return x[x > 0]
        >>> positives(torch.tensor([-1.0, 2.0]))
        tensor([2.])
    """
    disabled: Callable[..., Any] | None = None

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal disabled
        if not torch.compiler.is_compiling() and "torch._dynamo" not in sys.modules:
            # Nothing can be compiling without Dynamo imported: plain eager, where the
            # decorator would change nothing. Skipping it keeps a first training step
            # from importing Dynamo and sympy (about 2 s).
            return fn(*args, **kwargs)
        if disabled is None:
            with warnings.catch_warnings():  # importing dynamo (sympy) adds a filter
                disabled = torch.compiler.disable(fn)
        return disabled(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
