r"""Score-function estimators and exact enumeration, used through :func:`hardgrad.expectation`:
the plumbing they share (the estimate injected as a gradient); the estimators are in
``_reinforce`` (REINFORCE, RLOO), ``_arm`` (ARM, DisARM) and ``_exact``.

Notation: logits :math:`\theta`, samples :math:`b` (one-hot :math:`D` for categorical),
:math:`p = \sigma(\theta)` or :math:`\pi = \operatorname{softmax}(\theta)`, the score
:math:`s(b) = \nabla_\theta \log p_\theta(b) = b - p` (or :math:`D - \pi`), and :math:`n`
evaluations :math:`f_1, \dots, f_n` of the objective. Each estimator returns the Monte-Carlo
estimate :math:`\bar f = \tfrac1n \sum_s f_s` as its value; the value's gradient with
respect to the logits is the estimator :math:`\hat g`, and with respect to ``f``'s own
parameters the ordinary :math:`\tfrac1n \sum_s \nabla_\psi f_s`.

The estimate is injected with an autograd Function whose forward is exactly zero, so the
value is bit-for-bit the Monte-Carlo mean; its backward multiplies :math:`\hat g` by the
incoming gradient. It is first-order: differentiating the gradient again raises (the
second derivative of :math:`E[f]` is not :math:`\nabla \hat g`). :class:`Exact` is plain
autograd and supports every order.

Probabilities. With ``probs=`` the estimators compute in probability space: the score is
:math:`b/p - (1-b)/(1-p)` (categorical :math:`D_i/q_i - 1/\sum_j q_j`, through the
normalisation), written with ``torch.where`` so that it is :math:`-1` at :math:`p = 0` and
:math:`+1` at :math:`p = 1`, the values the sample takes there; ARM's and DisARM's weights
are divided by :math:`p(1-p)` (each class says its value at 0 and 1). Inside (0, 1) that is
the logits estimate times :math:`d\ell/dp`, and unbiased where it was; exactly at 0 or 1
no estimator that only evaluates :math:`f` at samples is unbiased (the sample never takes
the other value, whose :math:`f` the derivative needs).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.kernels import eager_plain
from ..ops._autograd import apply_function, cached_signature, has_tangent
from ._base import ScoreFunctionEstimator
from ._problem import Problem


class _FirstOrderOnly(torch.autograd.Function):
    """Identity in ``x``, tied to ``anchor`` (the logits) so that any second derivative
    with respect to them (``backward``, ``autograd.grad``, ``autograd.functional.hessian``)
    reaches this node, whose backward raises."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, anchor: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        raise RuntimeError(
            "hg.expectation's score-function estimators (REINFORCE, RLOO, ARM, DisARM, REBAR, "
            "RELAX) are first-order: their gradient cannot be differentiated again (its "
            "derivative is not the second derivative of E[f]); use estimator='exact' for "
            "higher orders"
        )


def first_order_only(gradient: Tensor, logits: Tensor) -> Tensor:
    """``gradient``, made to raise if a second derivative (``create_graph=True``) reaches it.

    Eager autograd only: under ``torch.func`` transforms and ``torch.compile`` the gradient
    is returned as is, so a nested ``torch.func.grad`` sees the estimate as a constant (its
    second derivative comes out 0: not supported).
    """
    if not torch.is_grad_enabled() or not eager_plain(gradient):
        return gradient
    return apply_function(_FirstOrderOnly, gradient.detach(), logits)


@cached_signature
class _ScoreGradient(torch.autograd.Function):
    """Forward: zeros shaped like ``like`` (the prefix). Backward: ``gradient`` times the
    incoming gradient, broadcast over the logits' trailing dimensions."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gradient: Tensor, like: Tensor) -> Tensor:
        return torch.zeros_like(like)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, gradient, _ = inputs
        ctx.save_for_backward(gradient, logits)
        ctx.extra = gradient.dim() - output.dim()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        gradient, logits = ctx.saved_tensors
        spread = grad.reshape(tuple(grad.shape) + (1,) * ctx.extra)  # () for 0-dim logits
        return first_order_only((gradient * spread).to(gradient.dtype), logits), None, None


def attach_gradient(problem: Problem, value: Tensor, gradient: Tensor) -> Tensor:
    """``value`` (exactly) whose gradient with respect to the logits is ``gradient`` times
    the incoming gradient.

    ``gradient`` is with respect to the logits (:attr:`Problem.work_logits`). When the caller
    passed ``probs``, it is turned into their gradient by the chain rule,
    ``gradient * problem.logits_to_parameter(problem.work)`` (0 where ``gradient`` is 0): an
    estimator that wants finite gradients at probabilities of exactly 0 and 1 computes in
    probability space and calls :func:`attach_parameter_gradient` instead.
    """
    chain = problem.logits_to_parameter(problem.work)
    if chain is not None:
        gradient = torch.where(gradient == 0, 0, gradient * chain)
    return attach_parameter_gradient(problem, value, gradient)


def attach_parameter_gradient(problem: Problem, value: Tensor, gradient: Tensor) -> Tensor:
    """``value`` (exactly) whose gradient with respect to :attr:`Problem.parameter` (the
    logits, or the probabilities the caller passed) is ``gradient`` times the incoming
    gradient."""
    parameter = problem.parameter
    if not (parameter.requires_grad and torch.is_grad_enabled()) and not has_tangent(parameter):
        return value
    zero = apply_function(
        _ScoreGradient, parameter, gradient.detach().to(parameter.dtype), value.detach()
    )
    return value + zero


class _WithoutSettings(ScoreFunctionEstimator):
    """An estimator with no settings: ``Name()``, and all instances are equal."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))
