r"""The policy-gradient loss over per-token log-probabilities (sequence mean, token mean, token
sum) and the per-token KL-to-reference estimators k1, k2, k3."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.kernels import opmath_dtype
from .._core.validation import check_floating, check_positive, check_tensor

__all__ = ["AGGREGATIONS", "KL_ESTIMATORS", "kl_penalty", "policy_loss"]

#: The values of :func:`policy_loss`'s ``aggregation``.
AGGREGATIONS = ("sequence-mean", "token-mean", "token-sum")

#: The values of :func:`kl_penalty`'s ``estimator``.
KL_ESTIMATORS = ("k1", "k2", "k3")


def _check_mask(mask: Any, like: Tensor, name: str = "mask") -> Tensor:
    """``mask``: bool, integer or floating 0/1 weights of the shape of ``like``."""
    check_tensor(mask, name)
    if mask.shape != like.shape:
        raise ValueError(
            f"Expected `{name}` of the shape of `logprobs` {tuple(like.shape)}, but found "
            f"shape {tuple(mask.shape)}"
        )
    if mask.is_complex():
        raise TypeError(f"Expected `{name}` to be a bool or real tensor, but found {mask.dtype}")
    return mask != 0 if mask.dtype is not torch.bool else mask


def policy_loss(
    logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    aggregation: str = "sequence-mean",
    normalizer: float | None = None,
) -> Tensor:
    r"""The REINFORCE loss to minimise: :math:`-A_i \log\pi(y_{i,t} \mid y_{i,<t})`, summed
    over the valid tokens and aggregated as named.

    With :math:`\ell_{i,t}` = ``logprobs``, :math:`m_{i,t}` = ``mask``, :math:`A_i` =
    ``advantages`` (detached: no gradient flows into them), :math:`|y_i| = \sum_t m_{i,t}`:

    =================== ====================================================================
    ``aggregation``     loss
    =================== ====================================================================
    ``"sequence-mean"`` :math:`-\frac1N \sum_i \frac{1}{|y_i|} \sum_t m_{i,t} A_i \ell_{i,t}`
                        (GRPO's original)
    ``"token-mean"``    :math:`-\frac{1}{\sum_{i} |y_i|} \sum_{i,t} m_{i,t} A_i \ell_{i,t}`
                        (DAPO's, https://arxiv.org/abs/2503.14476)
    ``"token-sum"``     :math:`-\frac{1}{c} \sum_{i,t} m_{i,t} A_i \ell_{i,t}`,
                        :math:`c` = ``normalizer``, a constant (Dr. GRPO's)
    =================== ====================================================================

    Since :math:`\sum_t \nabla \ell_{i,t} = \nabla \log\pi(y_i)`, the negative gradient of
    ``"token-sum"`` is :math:`\frac1c \sum_i A_i \nabla\log\pi(y_i)`: with an unbiased
    advantage (:func:`rloo_advantages`, :func:`reinforce_advantages`) and :math:`c = N` it
    is an **unbiased** estimate of :math:`\nabla_\theta \mathbb{E}[R]`, and with any other
    constant it is unbiased in direction. The other two are **biased** when lengths vary:
    ``"sequence-mean"`` weights each sequence by :math:`1/|y_i|` (its expected gradient is
    that of a reward :math:`R/|y|`-like objective: short correct answers are pushed up more,
    long wrong ones pushed down less, Liu et al. 2025,
    https://arxiv.org/abs/2503.20783), and ``"token-mean"`` divides by the batch's random
    token count. With equal lengths :math:`L` (no padding), all three are the same up to the
    constant factor: sequence-mean = token-mean = token-sum with :math:`c = NL`.

    A sequence with no valid token contributes 0 (its length is clamped to 1, as TRL does);
    an empty batch gives 0. Values of ``logprobs`` at masked positions are ignored, even
    ``-inf`` or NaN.

    Args:
        logprobs: ``(N, T)`` floating per-token log-probabilities of the sampled tokens,
            with gradient (the current policy's).
        advantages: ``(N,)`` per sequence, or ``(N, T)`` per token.
        mask: ``(N, T)`` bool (or 0/1) marking the valid tokens.
        aggregation: ``"sequence-mean"`` (default), ``"token-mean"`` or ``"token-sum"``.
        normalizer: the constant :math:`c > 0` of ``"token-sum"``, required there and only
            there.

    Returns:
        A 0-dim loss, dtype and device of ``logprobs`` (summed in float32 for half types).

    Example:
        >>> import torch, hardgrad as hg
        >>> logprobs = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]], requires_grad=True)
        >>> mask = torch.tensor([[True, True, False], [True, True, True]])
        >>> advantages = torch.tensor([1.0, -1.0])
        >>> hg.policy.policy_loss(logprobs, advantages, mask)  # (3/2 - 1/2) / 2
        tensor(0.5000, grad_fn=<DivBackward0>)
        >>> hg.policy.policy_loss(logprobs, advantages, mask, aggregation="token-mean")
        tensor(0.3000, grad_fn=<DivBackward0>)
        >>> hg.policy.policy_loss(logprobs, advantages, mask, aggregation="token-sum", normalizer=2)
        tensor(0.7500, grad_fn=<DivBackward0>)
    """
    check_floating(logprobs, "logprobs")
    if logprobs.dim() != 2:
        raise ValueError(
            f"Expected `logprobs` of shape (N, T), but found shape {tuple(logprobs.shape)}"
        )
    valid = _check_mask(mask, logprobs)
    check_floating(advantages, "advantages")
    n = logprobs.shape[0]
    if advantages.shape == (n,):
        advantages = advantages[:, None]
    elif advantages.shape != logprobs.shape:
        raise ValueError(
            f"Expected `advantages` of shape (N,) = ({n},) or (N, T) = {tuple(logprobs.shape)}, "
            f"but found shape {tuple(advantages.shape)}"
        )
    if aggregation not in AGGREGATIONS:
        raise ValueError(
            f"Expected `aggregation` to be one of {', '.join(AGGREGATIONS)}, but found "
            f"aggregation={aggregation!r}"
        )
    if aggregation == "token-sum":
        if normalizer is None:
            raise ValueError(
                "Expected a `normalizer` (a constant > 0, e.g. N or N * max_length) with "
                "aggregation='token-sum', but found normalizer=None"
            )
        c = check_positive(normalizer, "normalizer")
    elif normalizer is not None:
        raise ValueError(
            f"Expected `normalizer` only with aggregation='token-sum', but found "
            f"normalizer={normalizer!r} with aggregation={aggregation!r}"
        )
    wide = opmath_dtype(logprobs.dtype)
    lp = torch.where(valid, logprobs, torch.zeros((), dtype=logprobs.dtype, device=logprobs.device))
    terms = -(advantages.detach().to(wide) * lp.to(wide))
    terms = torch.where(valid, terms, torch.zeros((), dtype=wide, device=terms.device))
    if aggregation == "sequence-mean":
        lengths = valid.sum(dim=1).clamp_min(1).to(wide)
        loss = (terms.sum(dim=1) / lengths).sum() / max(n, 1)
    elif aggregation == "token-mean":
        loss = terms.sum() / valid.sum().clamp_min(1).to(wide)
    else:
        loss = terms.sum() / c
    return loss.to(logprobs.dtype)


def kl_penalty(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    *,
    estimator: str = "k1",
    mask: Tensor | None = None,
) -> Tensor:
    r"""Per-token estimates of :math:`\mathrm{KL}(\pi \,\|\, \pi_{\mathrm{ref}})` from tokens
    sampled from :math:`\pi` (Schulman 2020, "Approximating KL divergence",
    http://joschu.net/blog/kl-approx.html).

    With :math:`\delta = \log\pi(y_t) - \log\pi_{\mathrm{ref}}(y_t)` (``logprobs -
    ref_logprobs``) and :math:`\rho = e^{-\delta} = \pi_{\mathrm{ref}}/\pi`:

    ========= ================================ ===================== ==========================
    estimator value                            value unbiased for    expected gradient as a
                                                                     loss term (sample fixed)
    ========= ================================ ===================== ==========================
    ``"k1"``  :math:`\delta`                   KL(π‖ref): yes        0 (the score's mean)
    ``"k2"``  :math:`\tfrac12 \delta^2`        no (biased, ≥ 0)      ∇ KL(π‖ref)
    ``"k3"``  :math:`\rho - 1 + \delta`        KL(π‖ref): yes, ≥ 0   ∇ KL(ref‖π)
    ========= ================================ ===================== ==========================

    The value columns hold per token for samples from :math:`\pi`. The gradient column is
    what differentiating the penalty through ``logprobs`` gives in expectation, for one
    token (or a single-step policy): :math:`\mathbb{E}_\pi[\nabla \delta] = 0`;
    :math:`\mathbb{E}_\pi[\delta \nabla\log\pi] = \nabla \mathrm{KL}(\pi\|\mathrm{ref})`;
    :math:`\mathbb{E}_\pi[(1 - \rho)\nabla\log\pi] = -\sum_y \pi_{\mathrm{ref}}(y)
    \nabla\log\pi(y) = \nabla \mathrm{KL}(\mathrm{ref}\|\pi)`. So **k1 as a loss term does
    nothing on average**, k3 in the loss (GRPO's choice) optimises the *reverse* KL, and k2
    in the loss has the gradient of the forward KL. Over sequences, a per-token loss term
    misses how earlier tokens change later tokens' KL: the unbiased gradient of the
    sequence-level :math:`\mathrm{KL}(\pi\|\mathrm{ref})` comes from putting
    :math:`-\beta \sum_t k1_t` (detached) **in the reward** before computing advantages.

    Args:
        logprobs: per-token log-probabilities of the sampled tokens under :math:`\pi`.
        ref_logprobs: the same tokens' log-probabilities under the reference, same shape.
        estimator: ``"k1"`` (default), ``"k2"`` or ``"k3"``.
        mask: optional bool mask of the valid tokens; the penalty is 0 elsewhere (also where
            the log-probabilities are -inf or NaN).

    Returns:
        The per-token penalty, shape and dtype of ``logprobs`` (computed in float32 for half
        types, so ``k3``'s exponential does not overflow early).

    Example:
        >>> import torch, hardgrad as hg
        >>> logprobs = torch.tensor([-1.0, -2.0])
        >>> ref = torch.tensor([-1.5, -1.0])
        >>> hg.policy.kl_penalty(logprobs, ref, estimator="k3")
        tensor([0.1065, 0.7183])
    """
    check_floating(logprobs, "logprobs")
    check_floating(ref_logprobs, "ref_logprobs")
    if ref_logprobs.shape != logprobs.shape:
        raise ValueError(
            f"Expected `ref_logprobs` of the shape of `logprobs` {tuple(logprobs.shape)}, but "
            f"found shape {tuple(ref_logprobs.shape)}"
        )
    if estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"Expected `estimator` to be one of {', '.join(KL_ESTIMATORS)}, but found "
            f"estimator={estimator!r}"
        )
    wide = opmath_dtype(logprobs.dtype)
    delta = logprobs.to(wide) - ref_logprobs.to(wide)
    if mask is not None:
        valid = _check_mask(mask, logprobs)
        delta = torch.where(valid, delta, torch.zeros((), dtype=wide, device=delta.device))
    if estimator == "k1":
        kl = delta
    elif estimator == "k2":
        kl = 0.5 * delta**2
    else:
        kl = torch.expm1(-delta) + delta
    return kl.to(logprobs.dtype)
