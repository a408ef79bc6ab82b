"""The surrogate base classes, the registry of named surrogates, and :func:`get` and
:func:`resolve`, which turn a name or an instance into the surrogate an op uses."""

from __future__ import annotations

import abc
from dataclasses import fields
from typing import Any, ClassVar

import torch
from torch import Tensor

from .._core.registry import Registry
from .._core.ulp import evaluate
from .._core.validation import check_positive

#: Every family of hard op a surrogate can serve.
FAMILIES = frozenset({"staircase", "step", "clamp"})

#: Float dtypes whose bounds and constants the surrogates precompute.
_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


class Surrogate(abc.ABC):
    """Base class of every surrogate gradient.

    Subclasses implement :meth:`function` and :meth:`derivative` in torch operations that
    keep the input's dtype and device. A surrogate should be immutable (a frozen dataclass
    is the easy way): ops may cache and compare instances.

    Class attributes:
        name: the registry name (empty for user-defined surrogates).
        applies_to: the op families it can serve (``"staircase"``, ``"step"``, ``"clamp"``).
        kind: how an op stores what backward needs: ``"identity"`` (nothing),
            ``"indicator"`` (a mask from :meth:`support`: bool, 1 byte per element, or 0/1
            in the input's dtype below 65,536 elements in eager mode, where that is
            faster), or ``"smooth"`` (the input).
    """

    name: ClassVar[str] = ""
    applies_to: ClassVar[frozenset[str]] = frozenset({"step"})
    kind: ClassVar[str] = "smooth"

    @abc.abstractmethod
    def function(self, x: Tensor) -> Tensor:
        """The smooth function :math:`s(x)` whose derivative backward uses."""

    @abc.abstractmethod
    def derivative(self, x: Tensor) -> Tensor:
        """:math:`s'(x)`: what backward multiplies the incoming gradient by."""

    def support(self, x: Tensor) -> Tensor:
        """For ``kind == "indicator"``: the bool mask where :meth:`derivative` is 1."""
        raise NotImplementedError(f"{type(self).__name__} is not an indicator surrogate")

    def _support_into(self, x: Tensor, out: Tensor) -> Tensor:
        """:meth:`support` as 0/1 written into ``out`` (a float tensor like ``x``), which
        the ops save for backward on small tensors; subclasses write it directly."""
        return out.copy_(self.support(x))

    def backward(self, grad: Tensor, x: Tensor) -> Tensor:
        """The op's input gradient, ``grad * derivative(x)``.

        Override only to compute the same product faster or more accurately (a fused
        kernel); the result must equal ``grad * self.derivative(x)`` up to rounding.
        """
        return grad * self.derivative(x)


class _Kernel(Surrogate):
    r"""A registered smooth surrogate: :meth:`derivative` and :meth:`backward` share one kernel.

    The kernel computes :math:`g\, s'(x)` in a numerically stable form; float16 and bfloat16
    inputs are computed in float32 and rounded once, so that their result is within one ulp
    of :math:`g\, s'(x)` evaluated exactly.
    """

    def derivative(self, x: Tensor) -> Tensor:
        """:math:`s'(x)`: what backward multiplies the incoming gradient by."""
        return evaluate(self._kernel, None, x)

    def backward(self, grad: Tensor, x: Tensor) -> Tensor:
        """The op's input gradient :math:`g\\, s'(x)`, computed in one rounding-aware kernel."""
        dtype = x.dtype
        if grad.dtype == dtype and (dtype == torch.float32 or dtype == torch.float64):
            return self._kernel(grad, x, dtype)  # what ops call: no conversions
        return evaluate(self._kernel, grad, x)

    @abc.abstractmethod
    def _kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        """``grad * s'(x)`` for ``grad`` and ``x`` of one dtype (float32 or float64), to be
        rounded to ``dtype`` (the same, or a half type)."""


_SURROGATES: Registry[type[Surrogate]] = Registry("surrogate")
#: The registry of named surrogates, name to class; ``SURROGATES.names()`` lists them.
SURROGATES = _SURROGATES


def _check_params(surrogate: Surrogate) -> None:
    for field in fields(surrogate):  # type: ignore[arg-type]
        check_positive(getattr(surrogate, field.name), field.name)


def _remember(surrogate: Surrogate, **values: Any) -> None:
    """Attach precomputed constants to a frozen dataclass instance (not fields: they take
    no part in ``==``, ``hash`` or ``repr``)."""
    for key, value in values.items():
        object.__setattr__(surrogate, key, value)


def get(name: str) -> Surrogate:
    """The default instance of the surrogate registered as ``name``.

    Example:
        >>> import hardgrad as hg
        >>> hg.surrogates.get("sigmoid")
        Sigmoid(slope=1.0)
    """
    instance: Surrogate = _SURROGATES.default(name, "surrogate")
    return instance


def resolve(surrogate: str | Surrogate, *, family: str, op: str) -> Surrogate:
    """Turn ``surrogate`` (a name or an instance) into an instance usable by ``op``.

    Raises:
        TypeError: ``surrogate`` is neither a string nor a :class:`Surrogate`.
        ValueError: unknown name, or a surrogate that does not serve ``family``.
    """
    if isinstance(surrogate, str):
        cached = _RESOLVED.get((surrogate, family))
        if cached is not None:
            return cached
        instance = get(surrogate)
    elif isinstance(surrogate, Surrogate):
        instance = surrogate
    else:
        raise TypeError(
            "Expected `surrogate` to be a name or a hardgrad.surrogates.Surrogate, "
            f"but found {type(surrogate).__name__}"
        )
    if family not in instance.applies_to:
        usable = ", ".join(repr(n) for n, cls in _SURROGATES.items() if family in cls.applies_to)
        raise ValueError(
            f"Expected `surrogate` to be one that serves {family!r} ops like `{op}`, but found "
            f"{instance!r}, which serves {sorted(instance.applies_to)}; usable: {usable}"
        )
    if isinstance(surrogate, str):
        _RESOLVED[surrogate, family] = instance
    return instance


#: ``(name, family) -> default instance`` for names :func:`resolve` has accepted: a name's
#: default instance is made once and never replaced, so the checks need not run again
#: (they cost a tenth of a microsecond on every call of a small op).
_RESOLVED: dict[tuple[str, str], Surrogate] = {}
