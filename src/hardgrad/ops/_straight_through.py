r"""Build your own straight-through op from any hard function and any soft one."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .. import surrogates as _surrogates
from .._validation import check_floating
from ._autograd import apply_surrogate

TensorFn = Callable[[Tensor], Tensor]


def _name(fn: object) -> str:
    return getattr(fn, "__name__", None) or repr(fn)


class StraightThrough:
    """The callable that :func:`straight_through` returns: ``y(x)``."""

    def __init__(self, hard: TensorFn, soft: TensorFn | _surrogates.Surrogate | None) -> None:
        self.hard = hard
        self.soft = soft

    def __repr__(self) -> str:
        soft = (
            "None"
            if self.soft is None or isinstance(self.soft, _surrogates.Surrogate)
            else _name(self.soft)
        )
        if isinstance(self.soft, _surrogates.Surrogate):
            soft = repr(self.soft)
        return f"straight_through(hard={_name(self.hard)}, soft={soft})"

    def __call__(self, x: Tensor) -> Tensor:
        check_floating(x, "x")
        if self.soft is None or isinstance(self.soft, _surrogates.Surrogate):
            surrogate = _surrogates.get("identity") if self.soft is None else self.soft
            y = apply_surrogate(x, self.hard, surrogate)
            _check_like(y, x, "hard(x)")
            return y
        hard = self.hard(x)
        _check_like(hard, x, "hard(x)")
        hard = hard.detach()
        soft = self.soft(x)
        _check_like(soft, x, "soft(x)")
        # y = hard - (sg[soft] - soft): the subtracted term is +0 wherever soft(x) is finite,
        # so y equals hard(x) bit for bit (signed zeros, inf and NaN included), while its
        # gradient is that of soft. Where soft(x) is not finite the term is dropped.
        frozen = soft.detach()
        zero = torch.where(torch.isfinite(frozen), frozen - soft, 0)
        return hard - zero


def _check_like(y: Tensor, x: Tensor, name: str, like: str = "x") -> None:
    if not isinstance(y, Tensor):
        raise TypeError(f"Expected `{name}` to return a tensor, but found {type(y).__name__}")
    if y.shape != x.shape or y.dtype != x.dtype:
        raise ValueError(
            f"Expected `{name}` to have the shape and dtype of `{like}` "
            f"({tuple(x.shape)}, {x.dtype}), but found ({tuple(y.shape)}, {y.dtype})"
        )


def straight_through(
    hard: TensorFn, soft: TensorFn | str | _surrogates.Surrogate | None = None
) -> StraightThrough:
    r"""Make an op whose forward is ``hard(x)`` exactly and whose backward is ``soft``'s.

    .. math::

        y = h(x), \qquad \frac{\partial L}{\partial x} =
        \frac{\partial L}{\partial y} \, s'(x),

    where :math:`s` is ``soft``: ``None`` for the identity (plain straight-through,
    Bengio et al. 2013, https://arxiv.org/abs/1308.3432), a surrogate (name or instance,
    :mod:`hardgrad.surrogates`), or any differentiable callable, whose full vector-Jacobian
    product is used (so a ``soft`` that mixes entries, like a softmax, works too).
    ``hard`` must map ``x`` to a tensor of the same shape and dtype.

    With a callable ``soft`` the value is ``hard(x) - (sg[soft(x)] - soft(x))``: the
    subtracted term is exactly +0 where ``soft(x)`` is finite, so the forward is
    bit-identical to ``hard(x)`` (unlike the common ``soft + (hard - soft).detach()``,
    which rounds), and it composes with ``torch.compile`` and ``torch.func``.

    Example:
        >>> import torch, hardgrad as hg
        >>> stair = hg.straight_through(torch.round, torch.sin)
        >>> x = torch.tensor([0.4, 2.6], requires_grad=True)
        >>> y = stair(x); y.sum().backward()
        >>> y.detach(), x.grad
        (tensor([0., 3.]), tensor([ 0.9211, -0.8569]))
    """
    if not callable(hard):
        raise TypeError(f"Expected `hard` to be callable, but found {type(hard).__name__}")
    if isinstance(soft, str):
        _surrogates.SURROGATES.get(soft, "soft")  # an unknown name: ValueError naming `soft`
        return StraightThrough(hard, _surrogates.get(soft))
    if soft is None or isinstance(soft, _surrogates.Surrogate) or callable(soft):
        return StraightThrough(hard, soft)
    raise TypeError(
        "Expected `soft` to be None, a surrogate name or instance, or a callable, "
        f"but found {type(soft).__name__}"
    )
