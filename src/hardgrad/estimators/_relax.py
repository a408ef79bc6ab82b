r"""REBAR and RELAX: score-function estimators with a learned, reparameterised control variate.

Both draw :math:`b = H(z)` through a continuous variable :math:`z` (logistic for Bernoulli,
:math:`z = \theta + \log u - \log(1-u)`, :math:`b = \mathbb 1[z > 0]`; Gumbel for categorical,
:math:`z = \log\pi + g`, :math:`D = \operatorname{onehot}(\arg\max z)`), draw
:math:`\tilde z \sim p(z \mid b)` with the same :math:`\theta`, and use a control variate
:math:`c(\cdot)` twice:

.. math::

    \hat g = \big(f(b) - c(\tilde z)\big)\,\nabla_\theta \log p_\theta(b)
             + \nabla_\theta c(z) - \nabla_\theta c(\tilde z),

unbiased for any differentiable :math:`c`. Here
:math:`c(z) = \eta\, f(\sigma_\lambda(z)) + r_\rho(z)` with the relaxation
:math:`\sigma_\lambda(z) = \sigma(z/\lambda)` or :math:`\operatorname{softmax}(z/\lambda)`.
The scale :math:`\eta` (``scale``), the temperature :math:`\lambda` (stored as ``log_tau``)
and the parameters :math:`\rho` of the network :math:`r_\rho` are ``nn.Parameter``\ s that
:math:`\hat g` depends on; after
``backward()`` they hold :math:`\partial/\partial\phi\,\sum (w \odot \hat g)^2`, the gradient
of the estimator's variance (its mean does not depend on them), where :math:`w` is the
gradient flowing into :func:`hardgrad.expectation`'s result.

Distributed: under ``torch.distributed`` the parameters and buffers are broadcast from
rank 0 on first use (with gradients enabled), and each backward reduces the variance
gradients as :math:`\sum_r G_r / W^2` over the :math:`W` ranks. This assumes the
convention of ``DistributedDataParallel``, which averages the model's gradients across
ranks, so that training equals one process minimising the mean of the ranks' losses: in
it each example's :math:`w` is :math:`1/W` of the rank's, and the variance is quadratic in
:math:`w`. The result is the single process's variance gradient for the global batch,
identical on every rank (the mean over ranks would be :math:`W` times too large).

Cost: each sample evaluates ``f`` three times (at :math:`b`, :math:`\sigma_\lambda(z)` and
:math:`\sigma_\lambda(\tilde z)`), so ``f`` must accept relaxed inputs in (0, 1).
Eager autograd only: these estimators call ``torch.autograd.grad`` inside the forward and
the backward, which ``torch.compile(fullgraph=True)`` and ``torch.func`` cannot trace.

Probabilities. With ``probs=`` strictly inside (0, 1) the estimate is the one above at
:math:`\theta = \log p - \log(1-p)` (or :math:`\log q`) times :math:`d\theta/dp`, and the
variance the parameters are trained on is that of this probability-space estimate. At
probabilities of exactly 0 or 1 the relaxation :math:`z` is infinite (and so the control
variate's input), so a call that wants a gradient raises ``ValueError``; without one it
returns the value.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor

from .._core.checkpoint import SettingsInState
from .._core.kernels import eager_plain
from .._core.validation import check_normal, check_positive, check_real
from ..ops._autograd import apply_function, has_tangent
from ._base import ESTIMATORS, ScoreFunctionEstimator
from ._gumbel_rao_draws import conditional_gumbel
from ._noise import uniform
from ._problem import Problem
from ._score import attach_parameter_gradient, first_order_only

_FLOAT32_MAX = torch.finfo(torch.float32).max


class _GradientWithVariance(torch.autograd.Function):
    """Like ``_ScoreGradient``, and also hands the estimator's parameters the gradient of
    :math:`\\sum (w \\odot \\hat g)^2` through the graph :math:`\\hat g` was built with."""

    @staticmethod
    def forward(
        ctx: Any,
        logits: Tensor,
        gradient: Tensor,
        like: Tensor,
        graph: list[Tensor],
        *params: Tensor,
    ) -> Tensor:
        ctx.save_for_backward(gradient, logits)
        (ctx.graph,) = graph  # in a list, so that autograd adds no edge into its history
        ctx.params = params
        ctx.extra = gradient.dim() - like.dim()
        return torch.zeros_like(like)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        gradient, logits = ctx.saved_tensors
        spread = grad.reshape(tuple(grad.shape) + (1,) * ctx.extra).to(gradient.dtype)
        weighted = gradient * spread
        # retain_graph: a second backward(retain_graph=True) of the result needs it again;
        # it is freed with this node.
        variance_grads = torch.autograd.grad(
            ctx.graph,
            ctx.params,
            grad_outputs=2 * weighted * spread,
            allow_unused=True,
            retain_graph=True,
        )
        present = [
            torch.zeros_like(p) if g is None else g
            for p, g in zip(ctx.params, variance_grads, strict=True)
        ]
        grads = [_finite_or_zero(g) for g in _reduce_across_ranks(present)]
        return first_order_only(weighted, logits), None, None, None, *grads


def _reduce_across_ranks(grads: list[Tensor]) -> list[Tensor]:
    """The variance gradients of the whole global batch, from every rank's share.

    Under ``DistributedDataParallel`` (whose convention is the *mean* of the ranks'
    gradients), the single-process run on the global batch minimises the mean of the
    ranks' losses, so the gradient :math:`w` flowing into a rank's expectation is
    :math:`W` times (:math:`W` ranks) the one the single process would give the same
    examples. :math:`\\sum (w \\hat g)^2` is quadratic in :math:`w`, so a rank's variance
    gradient is :math:`W^2` times the single process's for its examples, and the global
    one is the *sum* over ranks divided by :math:`W^2` (the mean over ranks would be
    :math:`W` times too large). One ``all_reduce`` for all parameters (one per dtype and
    device); a no-op without a process group of more than one rank.
    """
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return grads
    world = dist.get_world_size()
    reduced = list(grads)
    groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for i, g in enumerate(grads):
        groups.setdefault((g.dtype, g.device), []).append(i)
    for members in groups.values():
        flat = torch.cat([grads[i].reshape(-1) for i in members])
        dist.all_reduce(flat)
        flat /= world * world
        for i, piece in zip(members, flat.split([grads[i].numel() for i in members]), strict=True):
            reduced[i] = piece.view_as(grads[i])
    return reduced


def _finite_or_zero(grad: Tensor) -> Tensor:
    """A variance gradient, or zeros when it is not finite.

    The variance gradient differentiates ``f`` (and the network) twice; an objective whose
    second derivative is infinite somewhere (``|x|^1.5`` at 0) gives an infinite or NaN
    value on the rare draws that land there. That step's update of the estimator's own
    parameters is then skipped instead of turning them (and the next gradients) into NaN;
    the logits' gradient is unaffected. Under ``torch.distributed`` it is applied after
    the reduction across ranks, so a non-finite value on any rank makes every rank skip
    the update together (as one process holding all their examples would).
    """
    if not bool(torch.isfinite(grad).all()):
        return torch.zeros_like(grad)
    return grad


class _LearnedControlVariate(SettingsInState, ScoreFunctionEstimator, torch.nn.Module):
    """The shared machinery of :class:`REBAR` and :class:`RELAX`."""

    evaluations_per_sample: ClassVar[int] = 3

    def __init__(
        self,
        *,
        tau: float,
        scale: float,
        control_variate: torch.nn.Module | None,
        use_objective: bool,
    ) -> None:
        super().__init__()
        # Both are kept as float32 parameters (log tau and the scale): tau must stay a
        # normal float32 after exp(log tau), the scale finite in float32.
        tau = check_normal(check_positive(tau, "tau"), "tau", torch.float32)
        scale = check_real(scale, "scale")
        if not abs(scale) <= _FLOAT32_MAX:
            raise ValueError(
                f"Expected `scale` finite and at most {_FLOAT32_MAX:.6g} in magnitude (it is "
                f"kept as a float32 parameter), but found scale={scale!r}"
            )
        if not isinstance(use_objective, bool):
            raise TypeError(
                f"Expected `use_objective` to be a bool, but found {type(use_objective).__name__}"
            )
        if control_variate is not None and not isinstance(control_variate, torch.nn.Module):
            raise TypeError(
                "Expected `control_variate` to be a torch.nn.Module or None, but found "
                f"{type(control_variate).__name__}"
            )
        if control_variate is None and not use_objective:
            raise ValueError(
                "Expected a `control_variate` when use_objective=False, but found None: "
                "the control variate would be zero"
            )
        self.use_objective = bool(use_objective)
        self.log_tau = torch.nn.Parameter(torch.tensor(math.log(tau)))
        self.scale = torch.nn.Parameter(torch.tensor(float(scale)))
        self.control_variate = control_variate
        self._synced = False

    @property
    def tau(self) -> float:
        """The relaxation's current temperature :math:`\\lambda`."""
        return float(self.log_tau.detach().exp())

    def _checkpoint_settings(self) -> dict[str, Any]:
        """Whether the learned control variate includes the relaxed objective: its
        parameters were trained for that form."""
        return {"use_objective": self.use_objective}

    def extra_repr(self) -> str:
        return f"tau={self.tau:.4g}, scale={float(self.scale.detach()):.4g}"

    # -- sampling -----------------------------------------------------------------------------
    def _noise(self, problem: Problem, theta: Tensor) -> tuple[Tensor, Tensor]:
        shape = (problem.num_samples, *theta.shape)
        return uniform(theta, problem.generator, shape), uniform(theta, problem.generator, shape)

    @staticmethod
    def _relaxation(problem: Problem, theta: Tensor, u: Tensor) -> Tensor:
        if problem.categorical:
            gumbel = -torch.log(-torch.log(u))
            return torch.log_softmax(theta, -1) + gumbel
        return theta + (torch.log(u) - torch.log1p(-u))

    @staticmethod
    def _hard(problem: Problem, z: Tensor) -> Tensor:
        if problem.categorical:
            return torch.zeros_like(z).scatter(-1, z.argmax(-1, keepdim=True), 1.0)
        return (z > 0).to(z.dtype)

    @staticmethod
    def _conditional(problem: Problem, theta: Tensor, hard: Tensor, v: Tensor) -> Tensor:
        r""":math:`\tilde z \sim p(z \mid b)`, reparameterised in :math:`\theta`."""
        if problem.categorical:
            log_e = torch.log(-torch.log(v))
            return conditional_gumbel(torch.log_softmax(theta, -1), hard > 0, log_e, -1)
        logit_v = torch.log(v) - torch.log1p(-v)
        softplus = torch.nn.functional.softplus
        on = softplus(logit_v + softplus(theta))
        off = -softplus(logit_v + softplus(-theta))
        return torch.where(hard > 0, on, off)

    def _control(self, problem: Problem, z: Tensor) -> Tensor:
        total: Tensor | None = None
        if self.use_objective:
            tau = self.log_tau.exp()
            relaxed = torch.softmax(z / tau, -1) if problem.categorical else torch.sigmoid(z / tau)
            total = self.scale * problem.evaluate(relaxed)
        if self.control_variate is not None:
            # The network sees z in its own parameters' dtype (a half-precision network gets
            # half z) and its output joins the estimator's dtype again.
            network_dtype = _parameter_dtype(self.control_variate)
            learned = self.control_variate(problem.to_caller(z.to(network_dtype or z.dtype)))
            if isinstance(learned, Tensor) and learned.is_floating_point():
                learned = learned.to(z.dtype)
            expected = (z.shape[0], *problem.prefix_shape)
            if not isinstance(learned, Tensor) or tuple(learned.shape) != expected:
                found = tuple(learned.shape) if isinstance(learned, Tensor) else type(learned)
                raise ValueError(
                    "Expected `control_variate` to map relaxed samples to one value per "
                    f"sample and prefix entry, shape {expected}, but found {found}"
                )
            total = learned if total is None else total + learned
        assert total is not None
        return total

    # -- the estimator ------------------------------------------------------------------------
    def expectation(self, problem: Problem) -> Tensor:
        if not eager_plain(problem.parameter):
            raise RuntimeError(
                f"{type(self).__name__} works in eager autograd only (it calls "
                "torch.autograd.grad), not under torch.compile or torch.func transforms"
            )
        if has_tangent(problem.parameter):
            raise RuntimeError(
                f"{type(self).__name__} has no forward mode (torch.autograd.forward_ad, "
                "torch.func.jvp): its estimate contains the reverse-mode gradient of its "
                "control variate (torch.autograd.grad inside the expectation) and trains the "
                "control variate by the gradient of its variance, which forward-mode AD does "
                "not run; use reverse mode (backward), or another estimator"
            )
        wants_gradient = problem.parameter.requires_grad and torch.is_grad_enabled()
        if wants_gradient and problem.at_endpoints():
            edge = "0" if problem.categorical else "0 or 1"
            raise ValueError(
                f"Expected `probs` strictly inside (0, 1) for {type(self).__name__}, whose "
                "relaxation log p - log(1 - p) + noise (and the control variate's input) is "
                f"infinite at probabilities of exactly 0 or 1, but found probabilities of "
                f"exactly {edge}; keep probs away from the end points (e.g. "
                "probs.clamp(eps, 1 - eps)), pass logits, or use another estimator "
                "(DisARM, REINFORCE and RLOO give finite gradients there)"
            )
        theta0 = problem.work_logits
        u, v = self._noise(problem, theta0)
        hard = self._hard(problem, self._relaxation(problem, theta0, u))
        values = problem.evaluate(hard)
        if not wants_gradient:
            return values.mean(0)
        self._sync_across_ranks()
        params = [p for p in self.parameters() if p.requires_grad]
        n = problem.num_samples
        with torch.enable_grad():
            theta = theta0.clone().requires_grad_()
            c_z = self._control(problem, self._relaxation(problem, theta, u))
            c_tilde = self._control(problem, self._conditional(problem, theta, hard, v))
            difference = (c_z - c_tilde).sum()
            if difference.requires_grad:
                (pathwise,) = torch.autograd.grad(
                    difference, theta, create_graph=bool(params), allow_unused=True
                )
            else:
                pathwise = None
            f = values.detach().to(theta.dtype)
            score = problem.score(hard, theta0)
            gradient = (problem.spread(f - c_tilde.to(theta.dtype)) * score).mean(0)
            if pathwise is not None:
                gradient = gradient + pathwise / n
            chain = problem.logits_to_parameter(problem.work)
            if chain is not None:  # probabilities strictly inside (0, 1): the chain rule
                gradient = gradient * chain.to(gradient.dtype)
        if not params:
            return attach_parameter_gradient(problem, values.mean(0), gradient)
        logits, mean = problem.parameter, values.mean(0)
        zero = apply_function(
            _GradientWithVariance,
            logits,
            gradient.detach().to(logits.dtype),
            mean.detach(),
            [gradient],
            *params,
        )
        return mean + zero

    def _sync_across_ranks(self) -> None:
        """Start every rank from rank 0's parameters and buffers (once)."""
        dist = torch.distributed
        if self._synced or not (dist.is_available() and dist.is_initialized()):
            return
        with torch.no_grad():
            for tensor in [*self.parameters(), *self.buffers()]:
                dist.broadcast(tensor, src=0)
        self._synced = True


def _parameter_dtype(module: torch.nn.Module) -> torch.dtype | None:
    """The dtype of ``module``'s first floating-point parameter, or ``None`` if it has none."""
    for parameter in module.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return None


@ESTIMATORS.register("rebar")
class REBAR(_LearnedControlVariate):
    r"""REBAR: the relaxed objective as a control variate, with learned scale and temperature.

    The control-variate estimator above with :math:`c(z) = \eta\, f(\sigma_\lambda(z))`:

    .. math::

        \hat g = \big(f(b) - \eta f(\sigma_\lambda(\tilde z))\big)\nabla_\theta\log p_\theta(b)
                 + \eta\nabla_\theta f(\sigma_\lambda(z)) - \eta\nabla_\theta f(\sigma_\lambda(\tilde z)).

    Unbiased. ``scale`` (:math:`\eta`) and ``log_tau`` (:math:`\log\lambda`) are parameters
    that receive the gradient of the estimator's variance; put them in the optimizer to
    tune them. ``f`` is evaluated 3 times per sample and must accept relaxed inputs.
    Under ``DistributedDataParallel`` the parameters start from rank 0's and their
    variance gradients are summed across the :math:`W` ranks and divided by :math:`W^2`:
    the single-process gradient for the global batch, given DDP's averaging of gradients
    (module docstring). Tucker et al. (2017), https://arxiv.org/abs/1703.07370.

    Args:
        tau: initial temperature :math:`\lambda` > 0, within float32's normal range (it is
            kept as the float32 parameter ``log_tau``).
        scale: initial :math:`\eta`, a finite number within float32's range.

    Example:
        >>> import torch, hardgrad as hg
        >>> rebar = hg.estimators.REBAR(tau=0.5)
        >>> logits = torch.zeros(4, requires_grad=True)
        >>> value = hg.expectation(lambda b: (b - 0.45).square().sum(-1), logits, estimator=rebar,
        ...                        generator=torch.Generator().manual_seed(0))
        >>> value.backward()
        >>> rebar.scale.grad is not None and rebar.log_tau.grad is not None
        True
    """

    name: ClassVar[str] = "rebar"

    def __init__(self, tau: float = 0.5, scale: float = 1.0) -> None:
        super().__init__(tau=tau, scale=scale, control_variate=None, use_objective=True)


@ESTIMATORS.register("relax")
class RELAX(_LearnedControlVariate):
    r"""RELAX: REBAR's control variate plus a learned network.

    The control-variate estimator

    .. math::

        \hat g = \big(f(b) - c(\tilde z)\big)\nabla_\theta\log p_\theta(b)
                 + \nabla_\theta c(z) - \nabla_\theta c(\tilde z),
        \qquad c(z) = \eta\, f(\sigma_\lambda(z)) + r_\rho(z),

    with :math:`r_\rho` = ``control_variate``.
    ``r`` receives :math:`z` in the caller's layout, shape ``(n, *logits.shape)`` (the
    logistic / Gumbel-perturbed logits, not the relaxed sample), and returns ``(n, *prefix)``;
    like ``f``, its value at a prefix entry may depend only on that entry's variables.
    :math:`z` has the dtype the estimator computes in: the logits' own for float32 and
    float64, float32 for float16 and bfloat16 logits. It is cast to the dtype of the
    network's floating-point parameters before the call (a ``.half()`` network gets float16
    :math:`z`), and the network's output back to the estimator's dtype; a float32 network
    next to half-precision logits, as in mixed-precision training, keeps the most
    precision. With
    ``use_objective=False`` the control variate is :math:`r_\rho` alone, so ``f`` needs no
    relaxed evaluations (one evaluation per sample; ``f`` may then be non-differentiable,
    as in reinforcement learning). ``control_variate=None`` makes RELAX equal to REBAR.

    Unbiased. Every parameter (:math:`\eta`, :math:`\log\lambda`, :math:`\rho`) receives
    the gradient of the estimator's variance; under ``DistributedDataParallel`` as for
    :class:`REBAR` (broadcast from rank 0, summed across ranks and divided by
    :math:`W^2`). Grathwohl et al. (2018), https://arxiv.org/abs/1711.00123.

    Args:
        control_variate: an ``nn.Module`` :math:`r_\rho`, or ``None``.
        tau: initial temperature :math:`\lambda` > 0, within float32's normal range.
        scale: initial :math:`\eta`, a finite number within float32's range.
        use_objective: a bool: include :math:`\eta f(\sigma_\lambda(z))` in the control variate.

    Example:
        >>> import torch, hardgrad as hg
        >>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1),
        ...                           torch.nn.Flatten(-2))
        >>> relax = hg.estimators.RELAX(net)
        >>> logits = torch.zeros(2, 4, requires_grad=True)   # 2 examples, 4 bits each
        >>> value = hg.expectation(lambda b: (b - 0.45).square().sum(-1), logits, estimator=relax,
        ...                        generator=torch.Generator().manual_seed(0))
        >>> value.sum().backward()
        >>> net[0].weight.grad.shape
        torch.Size([8, 4])
    """

    name: ClassVar[str] = "relax"

    def __init__(
        self,
        control_variate: torch.nn.Module | None = None,
        *,
        tau: float = 0.5,
        scale: float = 1.0,
        use_objective: bool = True,
    ) -> None:
        super().__init__(
            tau=tau, scale=scale, control_variate=control_variate, use_objective=use_objective
        )

    @property
    def evaluations_per_sample(self) -> int:  # type: ignore[override]
        return 3 if self.use_objective else 1
