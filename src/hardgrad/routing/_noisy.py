r"""Noisy top-k gating (Shazeer et al. 2017, https://arxiv.org/abs/1701.06538): the noisy
logits and the smooth load estimator (private; re-exported by :mod:`hardgrad.routing`)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._core.kernels import random_tensor
from .._core.validation import check_all_finite, check_floating, check_real
from ..stochastic._checks import _check_generator
from ._settings import _check_indices


def noisy_logits(
    clean_logits: Tensor,
    noise_logits: Tensor,
    *,
    noise_epsilon: float = 1e-2,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    r"""The noisy router logits of noisy top-k gating (Shazeer et al. 2017, eq. 4).

    .. math::

        H(x)_i = (x W_g)_i + \varepsilon_i\, \sigma_i, \qquad
        \sigma_i = \operatorname{Softplus}((x W_{\text{noise}})_i) + \epsilon_\sigma, \qquad
        \varepsilon_i \sim \mathcal N(0, 1),

    for ``clean_logits`` :math:`x W_g` and ``noise_logits`` :math:`x W_{\text{noise}}` of
    one shape. :math:`\epsilon_\sigma` = ``noise_epsilon`` (default 0.01, the published
    code's; the paper's formula has none) keeps :math:`\sigma` away from 0. Returns
    ``(noisy, noise_std)``, :math:`H` and :math:`\sigma`. Backward: autograd (the noise is
    a constant), :math:`\partial H_i/\partial (xW_g)_i = 1`, :math:`\partial H_i/\partial
    (xW_{\text{noise}})_i = \varepsilon_i \operatorname{sigmoid}((xW_{\text{noise}})_i)`.
    The normal draws come from ``generator`` on the logits' device and dtype; the rest is
    computed in float32 (float64 for float64 logits) and rounded once. Route on ``noisy``
    (:func:`topk_route`, with ``return_threshold=True`` for the load) and pass both to
    :func:`prob_in_top_k`.

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> noisy, std = hg.routing.noisy_logits(torch.zeros(1, 3), torch.zeros(1, 3), generator=g)
        >>> noisy, std   # std = softplus(0) + 0.01
        (tensor([[ 1.0835, -0.2063, -1.5320]]), tensor([[0.7031, 0.7031, 0.7031]]))
    """
    check_floating(clean_logits, "clean_logits")
    check_floating(noise_logits, "noise_logits")
    if noise_logits.shape != clean_logits.shape:
        raise ValueError(
            f"Expected `noise_logits` of the clean logits' shape {tuple(clean_logits.shape)}, "
            f"but found shape {tuple(noise_logits.shape)}"
        )
    eps = check_real(noise_epsilon, "noise_epsilon")
    if not 0 <= eps < float("inf"):
        raise ValueError(
            f"Expected `noise_epsilon` >= 0 and finite, but found noise_epsilon={noise_epsilon!r}"
        )
    _check_generator(generator)
    check_all_finite(clean_logits, "clean_logits")
    check_all_finite(noise_logits, "noise_logits")
    return _noisy_logits(clean_logits, noise_logits, eps, generator)


def _noisy_logits(
    clean: Tensor, raw: Tensor, eps: float, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """:func:`noisy_logits` after its checks."""
    compute = torch.float64 if clean.dtype == torch.float64 else torch.float32
    noise = random_tensor(
        torch.randn, clean.shape, generator, dtype=clean.dtype, device=clean.device
    )
    std = torch.nn.functional.softplus(raw.to(compute)) + eps
    noisy = clean.to(compute) + noise.to(compute) * std
    return noisy.to(clean.dtype), std.to(clean.dtype)


def prob_in_top_k(
    clean_logits: Tensor,
    noisy_logits: Tensor,
    noise_std: Tensor,
    indices: Tensor,
    threshold: Tensor,
) -> Tensor:
    r"""The smooth load estimator of noisy top-k gating (Shazeer et al. 2017, eq. 8-9):
    the probability that expert :math:`i` stays in the top k when its own noise is drawn
    again, the other experts' noisy logits held fixed.

    .. math::

        P(x, i) = \Phi\Big(\frac{(xW_g)_i - \operatorname{kth\_excluding}(H(x), k, i)}
        {\sigma_i}\Big),

    :math:`\Phi` the standard normal CDF. The k-th largest noisy logit of the *other*
    experts is, as in the published code (tensor2tensor ``expert_utils._prob_in_top_k``),
    the (k+1)-th largest of all when :math:`i` is among the selected (``threshold``, from
    :func:`topk_route` with ``return_threshold=True``) and the k-th largest (the least
    selected noisy logit) when it is not. Here "selected" means :math:`i` is in
    ``indices`` (the published code tests ``H_i >`` the (k+1)-th value: the same but on
    exact ties). ``threshold`` = -inf (k = E) gives :math:`P = 1` with zero gradient.
    Backward: autograd through :math:`xW_g`, :math:`\sigma` and both thresholds (which
    depend on the logits through :math:`H`). The load of expert :math:`i` is
    :math:`\sum_x P(x, i)`; its :func:`cv_squared` is the paper's load loss.

    Args:
        clean_logits: :math:`xW_g`, ``(..., E)``.
        noisy_logits: :math:`H(x)` (:func:`noisy_logits`), same shape.
        noise_std: :math:`\sigma`, same shape, > 0.
        indices: the k experts routed to (int64 ``(..., k)``), the top k of ``noisy_logits``.
        threshold: the (k+1)-th largest noisy logit, ``(..., 1)``.

    Returns:
        :math:`P`, of the clean logits' shape and dtype (computed in float32, float64 for
        float64 logits).

    Example:
        >>> import torch, hardgrad as hg
        >>> clean = torch.tensor([[2.0, 1.0, 0.0]])
        >>> noisy = torch.tensor([[2.5, 0.5, 0.2]])
        >>> gates, indices, threshold = hg.topk_route(noisy, 1, return_threshold=True)
        >>> hg.routing.prob_in_top_k(clean, noisy, torch.ones(1, 3), indices, threshold)  # Phi(1.5), Phi(-1.5), Phi(-2.5)
        tensor([[0.9332, 0.0668, 0.0062]])
    """
    for value, name in ((clean_logits, "clean_logits"), (noisy_logits, "noisy_logits")):
        check_floating(value, name)
    check_floating(noise_std, "noise_std")
    check_floating(threshold, "threshold")
    shape = clean_logits.shape
    if clean_logits.dim() == 0:
        raise ValueError("Expected `clean_logits` of shape (*batch, E), but found a 0-dim tensor")
    for value, name in ((noisy_logits, "noisy_logits"), (noise_std, "noise_std")):
        if value.shape != shape:
            raise ValueError(
                f"Expected `{name}` of the clean logits' shape {tuple(shape)}, but found "
                f"shape {tuple(value.shape)}"
            )
    _check_indices(indices, shape[:-1])
    if threshold.shape != (*shape[:-1], 1):
        raise ValueError(
            f"Expected `threshold` of shape {(*shape[:-1], 1)}, but found shape "
            f"{tuple(threshold.shape)}"
        )
    check_all_finite(clean_logits, "clean_logits")
    check_all_finite(noisy_logits, "noisy_logits")
    return _prob_in_top_k(clean_logits, noisy_logits, noise_std, indices, threshold)


def _prob_in_top_k(
    clean: Tensor, noisy: Tensor, std: Tensor, indices: Tensor, threshold: Tensor
) -> Tensor:
    """:func:`prob_in_top_k` after its checks."""
    compute = torch.float64 if clean.dtype == torch.float64 else torch.float32
    noisy_c = noisy.to(compute)
    kth = noisy_c.gather(-1, indices).amin(-1, keepdim=True)
    selected = torch.zeros(noisy.shape, dtype=torch.bool, device=noisy.device)
    selected = selected.scatter(-1, indices, True)
    finite = torch.isfinite(threshold)  # -inf for k = E: always in
    safe = torch.where(finite, threshold.to(compute), torch.zeros_like(kth))
    bar = torch.where(selected, safe, kth)
    always = selected & ~finite
    z = (clean.to(compute) - bar) / torch.where(always, 1.0, std.to(compute))
    prob = torch.where(always, torch.ones_like(z), torch.special.ndtr(z))
    return prob.to(clean.dtype)
