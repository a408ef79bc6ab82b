r"""Combinatorial solvers as layers: a chosen gradient through ``y = solver(theta)``.

Papers:

* Perturbed optimizers and the Fenchel-Young loss: Berthet et al. (2020),
  https://arxiv.org/abs/2002.08676.
* Implicit maximum-likelihood estimation (I-MLE) and Sum-of-Gamma noise: Niepert et al.
  (2021), https://arxiv.org/abs/2106.01798.
* Blackbox differentiation of combinatorial solvers: Vlastelica et al. (2020),
  https://arxiv.org/abs/1912.02175.
* The identity (straight-through) and negative-identity backward with projections:
  Sahoo et al. (2023), https://arxiv.org/abs/2205.15213.

Convention: a *solver* is any function ``solver(theta) -> y`` that maps a batch of scores
``theta`` of shape ``(N, *event)`` to the solutions ``y`` of the same shape, where ``y`` is
a maximiser of the linear objective :math:`\langle \theta, y \rangle` over a discrete set
(one-hot vectors, k-subsets, paths on a grid, permutation matrices ...). Each factory here
(:func:`perturbed`, :func:`imle`, :func:`blackbox`, :func:`identity_solver`) returns a
function of ``theta`` whose forward calls the solver on a batch (all samples at once, one
call) and whose backward is the chosen estimator. For a solver that *minimises* a cost
:math:`\langle c, y\rangle` (Dijkstra), pass ``minimize=True`` and the costs: the layer
then works with :math:`\theta = -c` (and the gradient reaches ``c`` through the negation).

The first dimension of ``theta`` is the batch; all others are the solution's dimensions
(inner products :math:`\langle\cdot,\cdot\rangle` sum over them). A 1-D ``theta`` of
shape ``(n,)`` is one instance: the solver sees it as a batch of one, ``(1, n)``, and the
layer returns shape ``(n,)`` (a scalar Fenchel-Young loss). Noise is drawn from
``generator`` on ``theta``'s device (float32 for half types); the solver is called on
tensors of ``theta``'s dtype; no autograd ``Function`` class is created per call.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ._core.compat import fresh_output
from ._core.kernels import opmath, opmath_dtype, random_tensor
from ._core.validation import check_floating, check_int, check_positive
from .ops._autograd import (
    IdentityGradient,
    apply_function,
    cached_signature,
    forward_mode,
    mark_non_differentiable,
)

__all__ = [
    "IMLE_NOISES",
    "PERTURBED_NOISES",
    "BlackboxSolver",
    "IMLESolver",
    "IdentitySolver",
    "PerturbedSolver",
    "blackbox",
    "gamma_noise",
    "identity_solver",
    "imle",
    "perturbed",
    "sum_of_gamma_noise",
]

Solver = Callable[[Tensor], Tensor]

#: Noise distributions of :func:`perturbed`.
PERTURBED_NOISES = ("gumbel", "normal")
#: Noise distributions of :func:`imle`.
IMLE_NOISES = ("sum_of_gamma", "gumbel", "normal", "none")

_GAMMA_ROUNDS = 8  # Marsaglia-Tsang accepts >= 95 % per round: all 8 fail w.p. < 4e-11


# --------------------------------------------------------------------------- checks


def _check_solver(solver: Any) -> Solver:
    if not callable(solver):
        raise TypeError(f"Expected `solver` to be callable, but found {type(solver).__name__}")
    return solver


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"Expected `{name}` to be one of {', '.join(map(repr, choices))}, but found {value!r}"
        )
    return value


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, but found {type(value).__name__}")
    return value


def _check_generator(generator: Any) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
        )
    return generator


def _check_theta(theta: Any) -> Tensor:
    check_floating(theta, "theta")
    if theta.dim() == 0:
        raise ValueError(
            "Expected `theta` to have a batch dimension (shape (N, *event)), but found a 0-dim tensor"
        )
    return theta


def _solve(solver: Solver, theta: Tensor) -> Tensor:
    """``solver(theta)`` with its output checked (a tensor of ``theta``'s shape), in
    ``theta``'s dtype."""
    y = solver(theta)
    if not isinstance(y, Tensor):
        raise TypeError(
            f"Expected `solver` to return a torch.Tensor, but it returned {type(y).__name__}"
        )
    if y.shape != theta.shape:
        raise ValueError(
            f"Expected `solver` to return a solution of the scores' shape {tuple(theta.shape)}, "
            f"but it returned shape {tuple(y.shape)}"
        )
    return y.to(theta.dtype)


def _solve_samples(solver: Solver, perturbed: Tensor, dtype: torch.dtype) -> Tensor:
    """The solutions for a ``(M, N, *event)`` stack of scores, in one solver call on the
    flattened ``(M * N, *event)`` batch; returned in the compute dtype of ``perturbed``."""
    flat = perturbed.reshape((-1, *perturbed.shape[2:])).to(dtype)
    return _solve(solver, flat).reshape(perturbed.shape).to(perturbed.dtype)


def _inner(a: Tensor, b: Tensor) -> Tensor:
    """:math:`\\langle a, b\\rangle` over the event dimensions of ``(M, N, *event)`` stacks:
    shape ``(M, N, 1, ..., 1)`` (broadcastable back)."""
    p = a * b
    return p.sum(dim=tuple(range(2, p.dim())), keepdim=True) if p.dim() > 2 else p


def _negated(solver: Solver, theta: Tensor) -> Tensor:
    return solver(-theta)


# --------------------------------------------------------------------------- noise


def _noise(kind: str, theta: Tensor, num_samples: int, generator: torch.Generator | None) -> Tensor:
    """``num_samples`` draws of standard ``kind`` noise shaped like ``theta``, stacked."""
    dtype = opmath_dtype(theta.dtype)
    shape = (num_samples, *theta.shape)
    if kind == "normal":
        return random_tensor(torch.randn, shape, generator, dtype=dtype, device=theta.device)
    info = torch.finfo(dtype)
    u = random_tensor(torch.rand, shape, generator, dtype=dtype, device=theta.device)
    u = u.clamp(info.tiny, 1 - info.eps)
    return -torch.log(-torch.log(u))


def gamma_noise(
    alpha: float,
    shape: tuple[int, ...],
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Draws of :math:`\operatorname{Gamma}(\alpha, 1)` (shape :math:`\alpha`, scale 1) from
    ``generator``.

    Marsaglia and Tsang's method (2000, https://doi.org/10.1145/358407.358414) for
    :math:`a = \alpha \ge 1`: with :math:`d = a - 1/3`, :math:`c = 1/\sqrt{9d}`, draw
    :math:`x \sim N(0, 1)`, :math:`u \sim U(0, 1)`, :math:`v = (1 + cx)^3`, and accept
    :math:`dv` when :math:`v > 0` and :math:`\log u < x^2/2 + d - dv + d\log v`; for
    :math:`\alpha < 1` the draw for :math:`\alpha + 1` times :math:`u'^{1/\alpha}`. Eight
    proposals per element are drawn at once (no data-dependent loop); each is accepted with
    probability above 0.95, so an element whose eight are all rejected (probability below
    4e-11) gets :math:`d`, the distribution's mode. ``torch.distributions.Gamma`` takes no
    generator, hence this sampler.

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> x = hg.solvers.gamma_noise(0.5, (100000,), generator=g, dtype=torch.float64)
        >>> round(x.mean().item(), 2), round(x.var().item(), 2)
        (0.5, 0.49)
    """
    alpha = check_positive(alpha, "alpha")
    a = alpha + 1.0 if alpha < 1 else alpha
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    device = torch.device("cpu") if device is None else torch.device(device)
    info = torch.finfo(dtype)
    size = (_GAMMA_ROUNDS, *shape)
    x = random_tensor(torch.randn, size, generator, dtype=dtype, device=device)
    u = random_tensor(torch.rand, size, generator, dtype=dtype, device=device).clamp_min(info.tiny)
    v = (1.0 + c * x).clamp_min(info.tiny) ** 3
    accept = (1.0 + c * x > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * torch.log(v))
    first = accept.to(torch.uint8).argmax(0, keepdim=True)  # the first accepted proposal
    sample = d * v.gather(0, first).squeeze(0)
    sample = torch.where(accept.any(0), sample, torch.full_like(sample, d))
    if alpha < 1:
        boost = random_tensor(torch.rand, tuple(shape), generator, dtype=dtype, device=device)
        sample = sample * boost.clamp_min(info.tiny) ** (1.0 / alpha)
    return sample


def sum_of_gamma_noise(
    shape: tuple[int, ...],
    k: int,
    *,
    tau: float = 1.0,
    num_terms: int = 10,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Sum-of-Gamma noise for k-subsets (Niepert et al. 2021, https://arxiv.org/abs/2106.01798).

    .. math::

        \epsilon = \frac{\tau}{k}\Big(\sum_{i=1}^{s} G_i - \log s\Big), \qquad
        G_i \sim \operatorname{Gamma}\big(\tfrac1k, \tfrac{k}{i}\big)
        \text{ (shape, scale)}, \quad s = \texttt{num\_terms}.

    As :math:`s \to \infty`, the sum of ``k`` independent draws of
    :math:`\epsilon \cdot k / \tau` is a standard Gumbel variable, which makes perturb-and-MAP
    over k-subsets follow the k-subset distribution more closely than Gumbel noise does.
    Mean :math:`\frac{\tau}{k}(H_s - \log s)`, variance
    :math:`\frac{\tau^2}{k}\sum_{i=1}^s i^{-2}`.

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> hg.solvers.sum_of_gamma_noise((4,), 2, generator=g).shape
        torch.Size([4])
    """
    k = check_int(k, "k", low=1)
    tau = check_positive(tau, "tau")
    s = check_int(num_terms, "num_terms", low=1)
    gammas = gamma_noise(1.0 / k, (s, *shape), generator=generator, dtype=dtype, device=device)
    scale = k / torch.arange(1, s + 1, dtype=dtype, device=gammas.device)
    total = (gammas * scale.reshape((s,) + (1,) * len(shape))).sum(0)
    return (tau / k) * (total - math.log(s))


# --------------------------------------------------------------------------- Functions


@cached_signature
class _Perturbed(torch.autograd.Function):
    """Forward: the mean (or the unperturbed solution) of ``solver(theta + sigma Z_m)``;
    backward: Berthet et al.'s Jacobian estimate."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        theta: Tensor, noise: Tensor, solver: Solver, sigma: float, kind: str, hard: bool
    ) -> tuple[Tensor, Tensor]:
        ys = _solve_samples(solver, opmath(theta).unsqueeze(0) + sigma * noise, theta.dtype)
        y = _solve(solver, theta) if hard else ys.mean(0).to(theta.dtype)
        return fresh_output(y), ys

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _, noise, _, sigma, kind, _ = inputs
        mark_non_differentiable(ctx, output[1])
        ctx.save_for_backward(noise, output[1])
        ctx.sigma, ctx.kind = sigma, kind

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_ys: Any) -> tuple[Tensor | None, ...]:
        noise, ys = ctx.saved_tensors
        score = noise if ctx.kind == "normal" else 1.0 - torch.exp(-noise)  # grad of -log density
        inner = _inner(opmath(grad).unsqueeze(0), ys)
        return (inner * score).mean(0).div(ctx.sigma).to(grad.dtype), None, None, None, None, None


@cached_signature
class _PerturbedFenchelYoung(torch.autograd.Function):
    """Forward: the perturbed Fenchel-Young loss (without the constant Omega(target));
    backward: ``y_sigma(theta) - target``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        theta: Tensor, target: Tensor, noise: Tensor, solver: Solver, sigma: float
    ) -> tuple[Tensor, Tensor]:
        perturbed = opmath(theta).unsqueeze(0) + sigma * noise
        ys = _solve_samples(solver, perturbed, theta.dtype)
        value = _inner(perturbed, ys).mean(0) - _inner(
            opmath(theta).unsqueeze(0), opmath(target).unsqueeze(0)
        ).squeeze(0)
        return fresh_output(value.reshape(theta.shape[:1]).to(theta.dtype)), ys.mean(0)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _, target, *_ = inputs
        mark_non_differentiable(ctx, output[1])
        ctx.save_for_backward(target, output[1])

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_mean: Any) -> tuple[Tensor | None, ...]:
        target, mean = ctx.saved_tensors
        g = opmath(grad).reshape(grad.shape + (1,) * (mean.dim() - 1))
        return (g * (mean - opmath(target))).to(grad.dtype), None, None, None, None


@cached_signature
class _IMLE(torch.autograd.Function):
    """Forward: the mean of ``solver(theta + eps_m)``; backward:
    ``mean_m (solver(theta + eps_m) - solver(theta - lam g + eps_m)) / lam``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(theta: Tensor, noise: Tensor, solver: Solver, lam: float) -> tuple[Tensor, Tensor]:
        ys = _solve_samples(solver, opmath(theta).unsqueeze(0) + noise, theta.dtype)
        return fresh_output(ys.mean(0).to(theta.dtype)), ys

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        theta, noise, solver, lam = inputs
        mark_non_differentiable(ctx, output[1])
        ctx.save_for_backward(theta, noise, output[1])
        ctx.solver, ctx.lam = solver, lam

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_ys: Any) -> tuple[Tensor | None, ...]:
        theta, noise, ys = ctx.saved_tensors
        target = opmath(theta) - ctx.lam * opmath(grad)  # the target distribution's scores
        ys_target = _solve_samples(ctx.solver, target.unsqueeze(0) + noise, theta.dtype)
        return ((ys - ys_target).mean(0) / ctx.lam).to(grad.dtype), None, None, None


@cached_signature
class _Blackbox(torch.autograd.Function):
    """Forward ``solver(theta)``; backward ``(y - solver(theta - lam g)) / lam``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(theta: Tensor, solver: Solver, lam: float) -> Tensor:
        return fresh_output(_solve(solver, theta))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        theta, solver, lam = inputs
        ctx.save_for_backward(theta, output)
        ctx.solver, ctx.lam = solver, lam

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        theta, y = ctx.saved_tensors
        shifted = (opmath(theta) - ctx.lam * opmath(grad)).to(theta.dtype)
        y_lam = _solve(ctx.solver, shifted)
        return ((opmath(y) - opmath(y_lam)) / ctx.lam).to(grad.dtype), None, None


# --------------------------------------------------------------------------- forward mode
# The perturbed optimizer's backward is a linear map of the incoming gradient (an
# estimated Jacobian), so its forward-mode twin applies the transposed map to the tangent
# (the identity solver is IdentityGradient, which has its own). I-MLE's and blackbox's backwards solve a problem moved
# by the gradient itself: not linear in it, so no Jacobian and no JVP exists.


@forward_mode(_Perturbed)
@cached_signature
class _PerturbedJVP(_Perturbed):
    r""":math:`\dot y = \frac{1}{M\sigma}\sum_m y_m \langle s_m, \dot\theta\rangle`, the
    transpose of backward's :math:`\frac{1}{M\sigma}\sum_m s_m \langle g, y_m\rangle` (:math:`s_m`
    the noise's score)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _Perturbed.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[1], output[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_rest: Any) -> tuple[Tensor, None]:
        noise, ys = ctx.saved_tensors
        score = noise if ctx.kind == "normal" else 1.0 - torch.exp(-noise)
        inner = _inner(opmath(tangent).unsqueeze(0), score)
        return (inner * ys).mean(0).div(ctx.sigma).to(tangent.dtype), None


@forward_mode(_PerturbedFenchelYoung)
@cached_signature
class _PerturbedFenchelYoungJVP(_PerturbedFenchelYoung):
    r""":math:`\dot L = \langle y_\sigma(\theta) - t, \dot\theta\rangle` per row (the target
    held constant, as in backward)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _PerturbedFenchelYoung.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[1], output[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_rest: Any) -> tuple[Tensor, None]:
        target, mean = ctx.saved_tensors
        t = opmath(tangent) * (mean - opmath(target))
        value = t.sum(dim=tuple(range(1, t.dim()))) if t.dim() > 1 else t
        return value.to(tangent.dtype), None


def _no_jvp(name: str) -> type:
    """A forward-mode twin that explains why there is none."""

    def jvp(ctx: Any, *_args: Any) -> Any:
        raise NotImplementedError(
            f"{name}'s backward is not linear in the incoming gradient (it calls the solver at "
            "scores moved by that gradient), so it has no Jacobian and forward mode "
            "(torch.func.jvp, jacfwd, forward_ad) cannot be defined; use reverse mode "
            "(backward, torch.func.grad, vjp, jacrev)"
        )

    return staticmethod(jvp)  # type: ignore[return-value]


@forward_mode(_IMLE)
@cached_signature
class _IMLENoJVP(_IMLE):
    jvp = _no_jvp("hg.imle")


@forward_mode(_Blackbox)
@cached_signature
class _BlackboxNoJVP(_Blackbox):
    jvp = _no_jvp("hg.blackbox")


# --------------------------------------------------------------------------- layers


class _SolverLayer:
    """Shared parts of the solver layers: the solver, ``minimize`` and the theta check."""

    solver: Solver
    minimize: bool

    def _scores(self, theta: Any) -> tuple[Tensor, Solver]:
        """The scores the Function sees (a 1-D ``theta`` as a batch of one; ``-theta`` for a
        minimiser) and the solver to call on them."""
        theta = _check_theta(theta)
        if theta.dim() == 1:
            theta = theta.unsqueeze(0)
        if self.minimize:
            return -theta, functools.partial(_negated, self.solver)
        return theta, self.solver

    @staticmethod
    def _unbatch(theta: Tensor, out: Tensor) -> Tensor:
        """``out`` without the batch dimension that :meth:`_scores` added to a 1-D ``theta``."""
        return out.squeeze(0) if theta.dim() == 1 else out

    def _settings(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        name = getattr(self.solver, "__name__", type(self.solver).__name__)
        return f"{type(self).__name__}({name}, {self._settings()})"


class PerturbedSolver(_SolverLayer):
    """The layer :func:`perturbed` returns; see there."""

    def __init__(
        self,
        solver: Solver,
        *,
        noise: str,
        sigma: float,
        num_samples: int,
        hard: bool,
        minimize: bool,
        generator: torch.Generator | None,
    ) -> None:
        self.solver = _check_solver(solver)
        self.noise = _check_choice(noise, "noise", PERTURBED_NOISES)
        self.sigma = check_positive(sigma, "sigma")
        self.num_samples = check_int(num_samples, "num_samples", low=1)
        self.hard = _check_bool(hard, "hard")
        self.minimize = _check_bool(minimize, "minimize")
        self.generator = _check_generator(generator)

    def _settings(self) -> str:
        return (
            f"noise={self.noise!r}, sigma={self.sigma}, num_samples={self.num_samples}, "
            f"hard={self.hard}, minimize={self.minimize}"
        )

    def __call__(self, theta: Tensor) -> Tensor:
        scores, solver = self._scores(theta)
        z = _noise(self.noise, scores, self.num_samples, self.generator)
        y, _ = apply_function(_Perturbed, scores, z, solver, self.sigma, self.noise, self.hard)
        return self._unbatch(theta, y)

    def fenchel_young_loss(self, theta: Tensor, target: Tensor) -> Tensor:
        r"""The perturbed Fenchel-Young loss of ``theta`` against the solutions ``target``.

        .. math::

            \ell(\theta; y) = F_\sigma(\theta) - \langle \theta, y \rangle, \qquad
            F_\sigma(\theta) = E\big[\max_{y'} \langle \theta + \sigma Z, y' \rangle\big]
            \approx \frac1M \sum_m \langle \theta + \sigma Z_m, y_m \rangle,

        per batch entry (shape ``(N,)``), up to the constant :math:`\Omega(y)`, which does
        not depend on :math:`\theta` (so the value may be below 0). Its gradient is
        :math:`\nabla_\theta \ell = y_\sigma(\theta) - y`, with :math:`y_\sigma` estimated by
        the mean of the same samples (Berthet et al. 2020, Prop. 4.1); convex in
        :math:`\theta`, no Jacobian estimate needed. With ``minimize=True``, ``theta`` are
        costs and :math:`\theta = -c` inside. ``target`` gets no gradient.

        Example:
            >>> import torch, hardgrad as hg
            >>> argmax = lambda t: hg.one_hot_argmax(t)
            >>> layer = hg.perturbed(argmax, sigma=0.5, num_samples=1000,
            ...                      generator=torch.Generator().manual_seed(0))
            >>> theta = torch.tensor([[1.0, 0.0, -1.0]], requires_grad=True)
            >>> loss = layer.fenchel_young_loss(theta, torch.tensor([[0.0, 1.0, 0.0]]))
            >>> loss.sum().backward(); theta.grad  # softmax(theta / 0.5) - target, roughly
            tensor([[ 0.8720, -0.8890,  0.0170]])
        """
        scores, solver = self._scores(theta)
        check_floating(target, "target")
        if target.shape != theta.shape:
            raise ValueError(
                f"Expected `target` to have `theta`'s shape {tuple(theta.shape)}, but found "
                f"shape {tuple(target.shape)}"
            )
        z = _noise(self.noise, scores, self.num_samples, self.generator)
        loss, _ = apply_function(
            _PerturbedFenchelYoung, scores, target.detach().reshape(scores.shape), z, solver,
            self.sigma,
        )  # fmt: skip
        return self._unbatch(theta, loss)


def perturbed(
    solver: Solver,
    *,
    noise: str = "gumbel",
    sigma: float = 1.0,
    num_samples: int = 10,
    hard: bool = False,
    minimize: bool = False,
    generator: torch.Generator | None = None,
) -> PerturbedSolver:
    r"""Perturbed optimizer (Berthet et al. 2020, https://arxiv.org/abs/2002.08676).

    The returned layer maps scores :math:`\theta` to

    .. math::

        y_\sigma(\theta) = E_Z\big[y^*(\theta + \sigma Z)\big] \approx
        \frac1M \sum_{m=1}^M y^*(\theta + \sigma Z_m), \qquad
        y^*(\theta) = \arg\max_{y} \langle \theta, y\rangle = \texttt{solver}(\theta),

    with :math:`M` = ``num_samples`` i.i.d. draws :math:`Z_m` of standard ``noise``
    (``"gumbel"`` or ``"normal"``), all solved in one solver call. Backward: the Jacobian
    estimate of the same samples (Berthet et al., Prop. 3.1),

    .. math::

        \frac{\partial L}{\partial \theta} = \frac{1}{M\sigma}\sum_{m=1}^M
        \Big\langle \frac{\partial L}{\partial y}, y^*(\theta + \sigma Z_m)\Big\rangle
        \nabla\nu(Z_m), \qquad
        \nabla\nu(z) = z \text{ (normal)}, \quad 1 - e^{-z} \text{ (Gumbel)},

    where :math:`\nu = -\log` (noise density). It is unbiased for the gradient of
    :math:`y_\sigma` (a smooth function), hence biased for the hard solver's (zero)
    gradient. With Gumbel noise and a one-hot argmax solver,
    :math:`y_\sigma(\theta) = \operatorname{softmax}(\theta/\sigma)` exactly (Gumbel-max).
    With ``hard=True`` the forward is the unperturbed solution :math:`y^*(\theta)` (one
    more solver call; the backward is unchanged: a straight-through use of the perturbed
    Jacobian). :meth:`PerturbedSolver.fenchel_young_loss` gives the matching loss.

    Args:
        solver: ``solver(theta) -> y`` for a batch ``(N, *event)``; see :mod:`hardgrad.solvers`.
        noise: ``"gumbel"`` or ``"normal"``.
        sigma: noise scale, > 0.
        num_samples: :math:`M`, >= 1.
        hard: forward the unperturbed solution instead of the mean.
        minimize: the solver minimises :math:`\langle c, y\rangle`; the layer takes costs.
        generator: the source of the noise (the global RNG when None).

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> layer = hg.perturbed(hg.one_hot_argmax, sigma=1.0, num_samples=20000, generator=g)
        >>> theta = torch.tensor([[2.0, 1.0, 0.0]])
        >>> layer(theta), torch.softmax(theta, -1)
        (tensor([[0.6732, 0.2385, 0.0883]]), tensor([[0.6652, 0.2447, 0.0900]]))
    """
    return PerturbedSolver(
        solver,
        noise=noise,
        sigma=sigma,
        num_samples=num_samples,
        hard=hard,
        minimize=minimize,
        generator=generator,
    )


class IMLESolver(_SolverLayer):
    """The layer :func:`imle` returns; see there."""

    def __init__(
        self,
        solver: Solver,
        *,
        lam: float,
        noise: str | None,
        k: int | None,
        tau: float,
        num_samples: int,
        num_terms: int,
        minimize: bool,
        generator: torch.Generator | None,
    ) -> None:
        self.solver = _check_solver(solver)
        self.lam = check_positive(lam, "lam")
        if noise is None:  # Sum-of-Gamma for a subset size, Gumbel otherwise
            noise = "gumbel" if k is None else "sum_of_gamma"
        self.noise = _check_choice(noise, "noise", IMLE_NOISES)
        if noise == "sum_of_gamma":
            if k is None:
                raise ValueError(
                    "Expected `k` (the subset size) for noise='sum_of_gamma', but found k=None"
                )
            k = check_int(k, "k", low=1)
        elif k is not None:
            k = check_int(k, "k", low=1)
        self.k = k
        self.tau = check_positive(tau, "tau")
        self.num_samples = check_int(num_samples, "num_samples", low=1)
        self.num_terms = check_int(num_terms, "num_terms", low=1)
        self.minimize = _check_bool(minimize, "minimize")
        self.generator = _check_generator(generator)

    def _settings(self) -> str:
        k = "" if self.k is None else f", k={self.k}"
        return (
            f"lam={self.lam}, noise={self.noise!r}{k}, tau={self.tau}, "
            f"num_samples={self.num_samples}, minimize={self.minimize}"
        )

    def _draw(self, scores: Tensor) -> Tensor:
        dtype = opmath_dtype(scores.dtype)
        shape = (self.num_samples, *scores.shape)
        if self.noise == "none":
            return torch.zeros(shape, dtype=dtype, device=scores.device)
        if self.noise == "sum_of_gamma":
            assert self.k is not None  # checked in __init__
            return sum_of_gamma_noise(
                shape,
                self.k,
                tau=self.tau,
                num_terms=self.num_terms,
                generator=self.generator,
                dtype=dtype,
                device=scores.device,
            )
        return self.tau * _noise(self.noise, scores, self.num_samples, self.generator)

    def __call__(self, theta: Tensor) -> Tensor:
        scores, solver = self._scores(theta)
        y, _ = apply_function(_IMLE, scores, self._draw(scores), solver, self.lam)
        return self._unbatch(theta, y)


def imle(
    solver: Solver,
    *,
    lam: float = 10.0,
    noise: str | None = None,
    k: int | None = None,
    tau: float = 1.0,
    num_samples: int = 1,
    num_terms: int = 10,
    minimize: bool = False,
    generator: torch.Generator | None = None,
) -> IMLESolver:
    r"""Implicit maximum-likelihood estimation (Niepert et al. 2021, https://arxiv.org/abs/2106.01798).

    Forward: perturb-and-MAP samples, averaged over ``num_samples`` (an exact discrete
    sample for the default of one),

    .. math::

        y = \frac1M\sum_{m=1}^M y^*(\theta + \epsilon_m), \qquad
        y^*(\theta) = \arg\max_y \langle\theta, y\rangle = \texttt{solver}(\theta).

    Backward: the difference between the solutions for the current scores and for the
    *target distribution* :math:`\theta' = \theta - \lambda\,\partial L/\partial y`, with
    the same noise, divided by :math:`\lambda`,

    .. math::

        \frac{\partial L}{\partial \theta} = \frac{1}{M\lambda}\sum_{m=1}^M
        \Big(y^*(\theta + \epsilon_m) - y^*\big(\theta - \lambda \tfrac{\partial L}{\partial y}
        + \epsilon_m\big)\Big).

    The :math:`1/\lambda` makes it a finite-difference estimate whose size does not grow
    with :math:`\lambda` (the reference implementation, torch-imle, leaves it out: its
    gradient is this one times :math:`\lambda`). Biased. Noise :math:`\epsilon`:
    ``"sum_of_gamma"`` (:func:`sum_of_gamma_noise` with subset size ``k`` and temperature
    ``tau``; for k-subset solvers; the default when ``k`` is given, Gumbel otherwise), ``tau``
    times standard ``"gumbel"`` or ``"normal"``
    noise, or ``"none"`` (then it equals :func:`blackbox`). Two solver calls per step (one
    in forward, one in backward), each on the whole batch of samples.

    Args:
        solver: ``solver(theta) -> y``; see :mod:`hardgrad.solvers`.
        lam: :math:`\lambda` > 0, the step to the target distribution.
        noise: one of ``"sum_of_gamma"``, ``"gumbel"``, ``"normal"``, ``"none"``; the
            default ``None`` means ``"sum_of_gamma"`` when ``k`` is given, else ``"gumbel"``.
        k: the subset size, required by ``"sum_of_gamma"``.
        tau: temperature (scale) of the noise, > 0.
        num_samples: :math:`M` >= 1.
        num_terms: :math:`s`, the Gamma terms of Sum-of-Gamma noise.
        minimize: the solver minimises :math:`\langle c, y\rangle`; the layer takes costs.
        generator: the source of the noise.

    Example:
        >>> import torch, hardgrad as hg
        >>> top2 = lambda t: hg.topk_mask(t, 2)
        >>> layer = hg.imle(top2, k=2, lam=4.0, generator=torch.Generator().manual_seed(0))
        >>> theta = torch.tensor([[3.0, 2.0, 0.0, -1.0]], requires_grad=True)
        >>> y = layer(theta); y
        tensor([[1., 1., 0., 0.]], grad_fn=<_IMLEBackward>)
        >>> (y * torch.tensor([[0.0, 2.0, 0.0, 0.0]])).sum().backward(); theta.grad
        tensor([[ 0.0000,  0.2500, -0.2500,  0.0000]])
    """
    return IMLESolver(
        solver,
        lam=lam,
        noise=noise,
        k=k,
        tau=tau,
        num_samples=num_samples,
        num_terms=num_terms,
        minimize=minimize,
        generator=generator,
    )


class BlackboxSolver(_SolverLayer):
    """The layer :func:`blackbox` returns; see there."""

    def __init__(self, solver: Solver, *, lam: float, minimize: bool) -> None:
        self.solver = _check_solver(solver)
        self.lam = check_positive(lam, "lam")
        self.minimize = _check_bool(minimize, "minimize")

    def _settings(self) -> str:
        return f"lam={self.lam}, minimize={self.minimize}"

    def __call__(self, theta: Tensor) -> Tensor:
        scores, solver = self._scores(theta)
        return self._unbatch(theta, apply_function(_Blackbox, scores, solver, self.lam))


def blackbox(solver: Solver, *, lam: float, minimize: bool = False) -> BlackboxSolver:
    r"""Blackbox differentiation of a combinatorial solver (Vlastelica et al. 2020,
    https://arxiv.org/abs/1912.02175).

    Forward: the exact solution :math:`y = y^*(\theta) = \texttt{solver}(\theta)`. Backward:
    the gradient of the piecewise-linear interpolation of :math:`L(y^*(\cdot))` at
    :math:`\theta`, from one more solver call at the shifted scores,

    .. math::

        \frac{\partial L}{\partial \theta} = \frac{1}{\lambda}\Big(y^*(\theta) -
        y^*\big(\theta - \lambda \tfrac{\partial L}{\partial y}\big)\Big).

    (The paper writes it for a cost minimiser: :math:`w' = w + \lambda\,\partial L/\partial y`,
    :math:`\partial L/\partial w = -(y(w) - y(w'))/\lambda`; ``minimize=True`` is exactly
    that.) :math:`\lambda` trades the interpolation's faithfulness (small) against
    informative gradients (large). Biased; zero when the shifted solution is unchanged.

    Args:
        solver: ``solver(theta) -> y``; see :mod:`hardgrad.solvers`.
        lam: :math:`\lambda` > 0.
        minimize: the solver minimises :math:`\langle c, y\rangle`; the layer takes costs.

    Example:
        >>> import torch, hardgrad as hg
        >>> layer = hg.blackbox(hg.one_hot_argmax, lam=2.0)
        >>> theta = torch.tensor([[1.0, 0.5, -1.0]], requires_grad=True)
        >>> y = layer(theta); y
        tensor([[1., 0., 0.]], grad_fn=<_BlackboxBackward>)
        >>> (y * torch.tensor([[1.0, 0.0, 0.0]])).sum().backward(); theta.grad
        tensor([[ 0.5000, -0.5000,  0.0000]])
    """
    return BlackboxSolver(solver, lam=lam, minimize=minimize)


_PROJECTIONS = ("none", "norm", "standardize")


class IdentitySolver(_SolverLayer):
    """The layer :func:`identity_solver` returns; see there."""

    def __init__(self, solver: Solver, *, project: str, minimize: bool) -> None:
        self.solver = _check_solver(solver)
        self.project = _check_choice(project, "project", _PROJECTIONS)
        self.minimize = _check_bool(minimize, "minimize")

    def _settings(self) -> str:
        return f"project={self.project!r}, minimize={self.minimize}"

    def __call__(self, theta: Tensor) -> Tensor:
        scores, solver = self._scores(theta)
        if self.project != "none":
            dims = tuple(range(1, scores.dim()))
            if self.project == "standardize" and dims:
                scores = scores - scores.mean(dims, keepdim=True)
            norm = scores.norm(dim=dims, keepdim=True) if dims else scores.abs()
            scores = scores / norm.clamp_min(torch.finfo(scores.dtype).tiny)
        return self._unbatch(
            theta, apply_function(IdentityGradient, scores, functools.partial(_solve, solver))
        )


def identity_solver(
    solver: Solver, *, project: str = "none", minimize: bool = False
) -> IdentitySolver:
    r"""The identity (straight-through) backward through a solver (Sahoo et al. 2023,
    https://arxiv.org/abs/2205.15213).

    Forward :math:`y = y^*(P(\theta))`, backward
    :math:`\partial L/\partial\theta = J_P^\top\, \partial L / \partial y`: the solver's
    Jacobian replaced by the identity. For a cost minimiser (``minimize=True``) the scores
    are :math:`-c`, so the costs get :math:`-\partial L/\partial y`: the paper's *negative
    identity*. The projection :math:`P` (differentiated by autograd) is ``"none"``,
    ``"norm"`` (:math:`\theta / \lVert\theta\rVert`, per batch entry) or ``"standardize"``
    (:math:`(\theta - \bar\theta)/\lVert\theta - \bar\theta\rVert`); the paper's
    projections keep the scores from drifting in scale or offset, to which the solution of a
    linear program is blind. ``"norm"`` leaves every linear argmax unchanged;
    ``"standardize"`` leaves it unchanged only for solutions of fixed size (k-subsets,
    permutations). Biased.

    Args:
        solver: ``solver(theta) -> y``; see :mod:`hardgrad.solvers`.
        project: ``"none"``, ``"norm"`` or ``"standardize"``.
        minimize: the solver minimises :math:`\langle c, y\rangle`; the layer takes costs.

    Example:
        >>> import torch, hardgrad as hg
        >>> def argmin(cost):  # a solver that minimises <cost, y> over one-hot y
        ...     return torch.nn.functional.one_hot(cost.argmin(-1), cost.shape[-1]).to(cost.dtype)
        >>> layer = hg.identity_solver(argmin, minimize=True)
        >>> cost = torch.tensor([[1.0, 0.5, 2.0]], requires_grad=True)
        >>> y = layer(cost); y
        tensor([[0., 1., 0.]], grad_fn=<IdentityGradientBackward>)
        >>> (y * torch.tensor([[1.0, 2.0, 3.0]])).sum().backward(); cost.grad
        tensor([[-1., -2., -3.]])
    """
    return IdentitySolver(solver, project=project, minimize=minimize)
