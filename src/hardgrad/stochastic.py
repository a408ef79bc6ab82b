r"""Stochastic binary and categorical units with pathwise gradient estimators.

``hg.categorical`` draws an exact one-hot sample of :math:`\operatorname{Cat}(\operatorname{softmax}(\ell))`
(Gumbel-max: :math:`\arg\max_i \ell_i + g_i`, :math:`g_i` standard Gumbel) whose backward is
the chosen estimator; ``hg.bernoulli`` is, by definition, the categorical unit on the
two-class logits :math:`[0, \ell]` (class 1 = "on"), so the two share every estimator.

Randomness comes only from ``generator`` (the global RNG when it is ``None``); noise is
drawn on the logits' device, in their dtype, or in float32 for float16/bfloat16 logits so
that samples stay exact draws. Uniforms are kept in :math:`[\text{tiny}, 1 - \epsilon]`, so
no sample or gradient is NaN for finite logits.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import estimators as _estimators
from ._kernels import random_tensor
from ._validation import check_dim, check_floating, check_normal, check_real
from .estimators._base import noise_dtype, uniform

__all__ = ["bernoulli", "categorical", "noisy_rectifier", "stochastic_times_smooth"]

EstimatorLike = str | _estimators.Estimator


def _check_generator(generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
        )


def _resolve(estimator: EstimatorLike, logits: Tensor, where: str) -> _estimators.Estimator:
    """The pathwise estimator, with its temperature checked against the logits' dtype: it
    must be a normal number of the dtype the backward computes in (float32 for half
    types), or logits / tau and the division by tau would give inf and NaN."""
    chosen = _estimators.resolve(estimator, pathwise=True, where=where)
    tau = getattr(chosen, "tau", None)
    if isinstance(tau, float):
        check_normal(tau, "tau", noise_dtype(logits))
    return chosen


def categorical(
    logits: Tensor,
    *,
    dim: int = -1,
    estimator: EstimatorLike = "st",
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""A one-hot sample of :math:`\operatorname{Cat}(\operatorname{softmax}(\ell))` along ``dim``.

    Forward: :math:`D = \operatorname{onehot}(\arg\max_i \ell_i + g_i)`, an exact draw
    (for ``"gumbel_softmax"``, the relaxed :math:`\operatorname{softmax}((\ell + g)/\tau)`
    instead). Backward: the estimator's, see :mod:`hardgrad.estimators` for each one's
    formula and bias.

    Args:
        logits: floating tensor; unnormalised log-probabilities along ``dim``. ``-inf``
            excludes a category; ``+inf`` forces it. NaN is not rejected (scanning for it
            would cost a pass and a device synchronisation per call): it counts as the
            largest logit, as in :func:`torch.argmax`, so a NaN category is chosen, and the
            backward reads it as 0, so the gradient stays finite. :func:`hardgrad.expectation`
            rejects NaN logits.
        dim: the category dimension.
        estimator: a pathwise estimator, by name or instance (e.g.
            ``hg.estimators.GumbelRao(tau=0.5, k=10)``). Its ``tau`` must be a normal
            number of the dtype the backward computes in (float32 for half types, so
            ``tau >= 1.2e-38`` there); ``ValueError`` otherwise.
        generator: the source of randomness; the same seed gives the same sample and
            gradient. Under ``torch.compile(fullgraph=True)`` pass ``None`` (torch 2.13's
            dynamo cannot trace a ``torch.Generator`` argument; the global RNG is used).

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([[1.0, 2.0, 0.5]], requires_grad=True)
        >>> y = hg.categorical(logits, estimator="st_gumbel", generator=torch.Generator().manual_seed(0))
        >>> y
        tensor([[0., 1., 0.]], grad_fn=<_GumbelStraightThroughSampleBackward>)
    """
    check_floating(logits, "logits")
    d = check_dim(logits, dim)
    if logits.shape[d] == 0:
        raise ValueError(
            f"Expected `logits` to have at least one category along dim={dim}, "
            f"but found shape {tuple(logits.shape)}"
        )
    _check_generator(generator)
    chosen = _resolve(estimator, logits, "hg.categorical")
    return chosen.categorical(logits, chosen.noise(logits, generator), d)


def bernoulli(
    logits: Tensor,
    *,
    estimator: EstimatorLike = "st",
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""A sample :math:`b \in \{0, 1\}` of :math:`\operatorname{Bern}(\sigma(\ell))`, elementwise.

    Defined as the categorical unit on the two-class logits :math:`[0, \ell]` with class 1
    = "on", so every estimator means the same thing for both: e.g. ``"st"`` backpropagates
    :math:`\sigma'(\ell/\tau)/\tau` (the sigmoid-adjusted straight-through of Bengio et
    al. 2013, https://arxiv.org/abs/1308.3432) and ``"gumbel_softmax"`` returns the binary
    Concrete relaxation :math:`\sigma((\ell + L)/\tau)` with logistic noise :math:`L`.

    Args:
        logits: floating tensor of log-odds (any shape, 0-dim included). ``-inf`` gives 0
            and ``+inf`` gives 1; NaN gives 1 (the class-1 logit of ``[0, NaN]`` counts as
            the larger, as in :func:`categorical`), with a finite gradient.
        estimator: a pathwise estimator, by name or instance; its ``tau`` is checked as
            in :func:`categorical`.
        generator: the source of randomness.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([-3.0, 0.0, 3.0], requires_grad=True)
        >>> b = hg.bernoulli(logits, generator=torch.Generator().manual_seed(0))
        >>> b.tolist()
        [0.0, 1.0, 1.0]
    """
    check_floating(logits, "logits")
    _check_generator(generator)
    chosen = _resolve(estimator, logits, "hg.bernoulli")
    two_class_like = logits.unsqueeze(-1).expand(*logits.shape, 2)  # a view: shape for the noise
    return chosen.bernoulli(logits, chosen.noise(two_class_like, generator))


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
