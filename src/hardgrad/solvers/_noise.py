"""The noise of the perturbed optimizer and I-MLE: standard Gumbel and normal draws, and the
Gamma and Sum-of-Gamma samplers (Niepert et al. 2021, https://arxiv.org/abs/2106.01798)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._core.kernels import opmath_dtype, random_tensor
from .._core.validation import check_int, check_positive

_GAMMA_ROUNDS = 8  # Marsaglia-Tsang accepts >= 95 % per round: all 8 fail w.p. < 4e-11


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
