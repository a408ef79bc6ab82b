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
from ._validation import check_dim, check_floating

__all__ = ["bernoulli", "categorical"]

EstimatorLike = str | _estimators.Estimator


def _check_generator(generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
        )


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
            excludes a category; ``+inf`` forces it.
        dim: the category dimension.
        estimator: a pathwise estimator, by name or instance (e.g.
            ``hg.estimators.GumbelRao(tau=0.5, k=10)``).
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
    chosen = _estimators.resolve(estimator, pathwise=True, where="hg.categorical")
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
        logits: floating tensor of log-odds (any shape, 0-dim included).
        estimator: a pathwise estimator, by name or instance.
        generator: the source of randomness.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([-3.0, 0.0, 3.0], requires_grad=True)
        >>> b = hg.bernoulli(logits, generator=torch.Generator().manual_seed(0))
        >>> b
        tensor([0., 0., 1.], grad_fn=<SelectBackward0>)
    """
    check_floating(logits, "logits")
    _check_generator(generator)
    chosen = _estimators.resolve(estimator, pathwise=True, where="hg.bernoulli")
    two_class = torch.stack((torch.zeros_like(logits), logits), dim=-1)
    sample = chosen.categorical(two_class, chosen.noise(two_class, generator), two_class.dim() - 1)
    return sample[..., 1]
