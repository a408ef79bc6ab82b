"""The stochastic units of Bengio, Léonard & Courville (2013), https://arxiv.org/abs/1308.3432:
:func:`stochastic_times_smooth` and :func:`noisy_rectifier`."""

from __future__ import annotations

import torch
from torch import Tensor

from .._core.kernels import random_tensor
from .._core.validation import check_floating, check_real
from ..estimators._noise import noise_dtype, uniform
from ._checks import _check_generator


def stochastic_times_smooth(logits: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
    r"""The stochastic-times-smooth (STS) unit of Bengio et al. (2013): a sparse gate whose
    smooth part carries the gradient.

    .. math::

        p = \sigma(a), \qquad b \sim \operatorname{Bern}(\sqrt p), \qquad h = b \sqrt p,

    so :math:`E[h] = p`. The binary part :math:`b` is treated as a constant in backward; the
    smooth part is differentiated exactly:
    :math:`\partial h / \partial a = b \sqrt p\,(1 - p)/2`, computed as
    :math:`\sqrt p = \exp(\tfrac12 \log\sigma(a))` so that it stays finite for very
    negative :math:`a`. A biased estimator of :math:`\partial E[L]/\partial a` in general.
    Bengio, Léonard & Courville (2013), https://arxiv.org/abs/1308.3432.

    Args:
        logits: floating tensor of pre-activations :math:`a`.
        generator: the source of randomness for :math:`b`.

    Example:
        >>> import torch, hardgrad as hg
        >>> a = torch.zeros(6, requires_grad=True)
        >>> h = hg.stochastic_times_smooth(a, generator=torch.Generator().manual_seed(0))
        >>> h.detach()  # each entry is 0 or sqrt(sigmoid(0)) = 0.7071
        tensor([0.7071, 0.0000, 0.7071, 0.7071, 0.7071, 0.7071])
    """
    check_floating(logits, "logits")
    _check_generator(generator)
    smooth = torch.exp(0.5 * torch.nn.functional.logsigmoid(logits.to(noise_dtype(logits))))
    gate = (uniform(logits, generator) < smooth.detach()).to(smooth.dtype)
    return (gate * smooth).to(logits.dtype)


def noisy_rectifier(
    x: Tensor, *, sigma: float = 1.0, generator: torch.Generator | None = None
) -> Tensor:
    r"""A rectifier with Gaussian noise injected before the threshold (Bengio et al. 2013).

    .. math:: h = \max(0,\ x + \sigma z), \qquad z \sim \mathcal N(0, 1),

    differentiated along the path: :math:`\partial h / \partial x = \mathbb 1[x + \sigma z > 0]`,
    so units below the threshold still receive a gradient whenever the noise lifts them
    above it. ``sigma=0`` is the plain ReLU. Bengio, Léonard & Courville (2013),
    https://arxiv.org/abs/1308.3432.

    Args:
        x: floating tensor of pre-activations.
        sigma: noise standard deviation, >= 0.
        generator: the source of randomness.

    Example:
        >>> import torch, hardgrad as hg
        >>> h = hg.noisy_rectifier(torch.zeros(4), sigma=0.5, generator=torch.Generator().manual_seed(0))
        >>> bool((h >= 0).all()), h.shape
        (True, torch.Size([4]))
    """
    check_floating(x, "x")
    _check_generator(generator)
    scale = check_real(sigma, "sigma")
    if not 0 <= scale < float("inf"):
        raise ValueError(f"Expected `sigma` >= 0 and finite, but found sigma={sigma!r}")
    noise = random_tensor(torch.randn, x.shape, generator, dtype=noise_dtype(x), device=x.device)
    return torch.relu(x.to(noise.dtype) + scale * noise).to(x.dtype)
