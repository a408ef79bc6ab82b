r"""Random k-subsets with gradients: Gumbel top-k with straight-through or relaxed backwards,
and exact k-subset marginals (SIMPLE).

Papers:

* Gumbel top-k (sampling k items without replacement by perturbing log-weights with Gumbel
  noise): Kool et al. (2019), https://arxiv.org/abs/1903.06059.
* The continuous relaxation of top-k (successive softmaxes): Xie & Ermon (2019),
  https://arxiv.org/abs/1901.10517.
* SIMPLE, exact sampling and exact marginals of the k-subset distribution with a
  straight-through gradient through the marginals: Ahmed et al. (2023),
  https://arxiv.org/abs/2210.01941.

Two distributions over k-subsets are involved, both parametrised by ``logits``
:math:`\ell`:

* Gumbel top-k samples *without replacement* from the categorical
  :math:`\operatorname{softmax}(\ell)` (Plackett-Luce), ``estimator="st"`` and
  ``"relaxed"``;
* SIMPLE samples the *conditional Bernoulli* (:math:`p(z) \propto \prod_i e^{\ell_i z_i}`
  over :math:`\{z \in \{0,1\}^n : \sum z = k\}`), whose marginals
  :func:`k_subset_marginals` computes exactly by dynamic programming in :math:`O(nk)`.

Noise comes from ``generator`` (the global RNG when None) on the logits' device, in float32
for half types.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ._core.compat import fresh_output
from ._core.kernels import opmath, opmath_dtype, random_tensor
from ._core.validation import check_dim, check_floating, check_int, check_positive
from .ops._autograd import apply_function, cached_signature, forward_mode, jvp_by_reverse_mode

__all__ = ["SUBSET_ESTIMATORS", "k_subset_marginals", "relaxed_topk", "subset"]

#: The estimators of :func:`subset`.
SUBSET_ESTIMATORS = ("st", "relaxed", "simple")

_NEG = -1e30  # "log 0" that stays finite (and keeps logaddexp's gradient finite)


# --------------------------------------------------------------------------- helpers


def _check_generator(generator: Any) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
        )


def _check_subset(logits: Any, k: Any, dim: Any) -> tuple[int, int]:
    check_floating(logits, "logits")
    d = check_dim(logits, dim)
    n = logits.shape[d]
    if n == 0:
        raise ValueError(
            f"Expected `logits` to have at least one entry along dim={dim}, but found shape {tuple(logits.shape)}"
        )
    return check_int(k, "k", low=0, high=n), d


def _uniform(like: Tensor, generator: torch.Generator | None) -> Tensor:
    dtype = opmath_dtype(like.dtype)
    u = random_tensor(torch.rand, like.shape, generator, dtype=dtype, device=like.device)
    info = torch.finfo(dtype)
    return u.clamp(info.tiny, 1 - info.eps)


def _k_hot(keys: Tensor, k: int) -> Tensor:
    """The 0/1 mask of the ``k`` largest ``keys`` along the last dimension."""
    index = torch.topk(keys, k, -1).indices
    return torch.zeros_like(keys).scatter(-1, index, 1.0)


def _log1m_softmax(z: Tensor) -> tuple[Tensor, Tensor]:
    r""":math:`\alpha = \operatorname{softmax}(z)` and :math:`\log(1 - \alpha)` along the
    last dimension (at least 2 finite entries), without forming :math:`1 - \alpha`: where
    :math:`\alpha_i \le 1/2`, ``log1p(-alpha)``; the one entry that can exceed 1/2 gets
    :math:`\log \sum_{j \ne i} \alpha_j` as a log-sum-exp of the others'
    :math:`\log\alpha_j`, exact even when :math:`\alpha_i` rounds to 1."""
    log_alpha = torch.log_softmax(z, -1)
    alpha = torch.exp(log_alpha)
    big = alpha > 0.5  # at most one per row
    # (0 where not taken: log1p(-1) = -inf would give a NaN gradient through torch.where.)
    below = torch.log1p(-alpha.masked_fill(big, 0.0))
    others = torch.logsumexp(log_alpha.masked_fill(big, -torch.inf), -1, keepdim=True)
    return alpha, torch.where(big, others, below)


def relaxed_topk(keys: Tensor, k: int, *, tau: float = 1.0) -> Tensor:
    r"""Xie & Ermon's (2019, https://arxiv.org/abs/1901.10517) relaxed k-hot vector of ``keys``
    along the last dimension.

    .. math::

        w^{(1)} = \texttt{keys}, \quad \alpha^{(j)} = \operatorname{softmax}(w^{(j)}/\tau),
        \quad w^{(j+1)} = w^{(j)} + \log(1 - \alpha^{(j)}), \qquad
        a = \sum_{j=1}^{k} \alpha^{(j)},

    non-negative values summing to ``k`` (at high temperature an entry can exceed 1: a key far
    above the rest keeps weight in every round); as :math:`\tau \to 0`, the k-hot mask of
    the ``k`` largest keys. With Gumbel-perturbed logits as keys, a relaxed sample of a k-subset.

    :math:`\log(1 - \alpha)` is computed without forming :math:`1 - \alpha` (for the
    largest entry, :math:`\log\sum_{j\ne i} e^{w_j/\tau} - \log\sum_j e^{w_j/\tau}`),
    so keys any distance apart are right in every dtype (with ``1 - alpha`` floored at the
    smallest normal number, float32 gave a key more than ~87 above the rest, minus the log
    of that number, the weight of several rounds). In float32 for half types (rounded once at the end); infinite keys act as
    :math:`\pm` a quarter of the dtype's maximum (as do :math:`w/\tau` beyond it).

    Args:
        keys: floating tensor with at least one entry along the last dimension.
        k: how many rounds (items), ``0 <= k <= keys.shape[-1]``.
        tau: temperature, > 0.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.subsets.relaxed_topk(torch.tensor([3.0, 1.0, 2.0, -1.0]), 2, tau=0.1)
        tensor([9.9995e-01, 4.5421e-05, 1.0000e+00, 9.3619e-14])
    """
    check_floating(keys, "keys")
    if keys.dim() == 0 or keys.shape[-1] == 0:
        raise ValueError(
            "Expected `keys` to have at least one entry along the last dimension, "
            f"but found shape {tuple(keys.shape)}"
        )
    k = check_int(k, "k", low=0, high=keys.shape[-1])
    return _relaxed_topk(keys, k, check_positive(tau, "tau"))


def _relaxed_topk(keys: Tensor, k: int, tau: float) -> Tensor:
    """:func:`relaxed_topk` without the checks (``k`` and ``tau`` already checked)."""
    w = opmath(keys)
    big = torch.finfo(w.dtype).max / 4
    # 0 * w: zeros on the graph (k = 0 still has a gradient, of zeros); w clamped, so finite.
    total = torch.zeros_like(w).add(w.clamp(-big, big), alpha=0)
    z = (w / tau).clamp(-big, big)
    for j in range(k):
        if j == k - 1:  # the last round's update is never read
            total = total + torch.softmax(z, -1)
            break
        alpha, log1m = _log1m_softmax(z)
        total = total + alpha
        z = (z + log1m / tau).clamp(-big, big)
    return total.to(keys.dtype)


# --------------------------------------------------------------------------- exact marginals


def _log_esp_prefix(logw: Tensor, k: int) -> Tensor:
    """``L[..., i, j] = log e_j(w_1, ..., w_i)`` for ``i = 0..n``, ``j = 0..k`` (elementary
    symmetric polynomials of the weights ``w = exp(logw)``, last dimension)."""
    n = logw.shape[-1]
    row = torch.full((*logw.shape[:-1], k + 1), _NEG, dtype=logw.dtype, device=logw.device)
    row = torch.cat([torch.zeros_like(row[..., :1]), row[..., 1:]], -1)
    rows = [row]
    for i in range(n):
        shifted = torch.cat([torch.full_like(row[..., :1], _NEG), row[..., :-1]], -1)
        row = torch.logaddexp(row, shifted + logw[..., i : i + 1])
        rows.append(row)
    return torch.stack(rows, -2)


def _marginals(logits: Tensor, k: int) -> Tensor:
    """Exact conditional-Bernoulli marginals along the last dimension (compute dtype)."""
    n = logits.shape[-1]
    if k == 0:
        return torch.zeros_like(logits)
    if k == n:
        return torch.ones_like(logits)
    logw = opmath(logits).clamp(-1e6, 1e6)
    prefix = _log_esp_prefix(logw, k)  # (..., n + 1, k + 1)
    suffix = _log_esp_prefix(logw.flip(-1), k).flip(-2)  # suffix[..., i, j] = log e_j(w_{i+1..n})
    log_z = prefix[..., n, k]
    # P(z_i = 1) = w_i * sum_j e_j(before i) e_{k-1-j}(after i) / e_k
    before = prefix[..., :n, :k]  # j = 0..k-1 over w_1..w_{i-1}
    after = suffix[..., 1:, :k].flip(-1)  # k-1-j over w_{i+1..n}
    inner = torch.logsumexp(before + after, -1)
    return torch.exp(logw + inner - log_z.unsqueeze(-1)).clamp(0.0, 1.0)


def k_subset_marginals(logits: Tensor, k: int, *, dim: int = -1) -> Tensor:
    r"""Exact marginals :math:`P(z_i = 1)` of the k-subset (conditional Bernoulli) distribution.

    .. math::

        p(z) = \frac{\prod_i w_i^{z_i}}{e_k(w)}, \quad z \in \{0,1\}^n,\ \textstyle\sum z = k,
        \qquad P(z_i = 1) = \frac{w_i\, e_{k-1}(w_{-i})}{e_k(w)}, \quad w = e^{\ell},

    with :math:`e_j` the elementary symmetric polynomials, computed by the log-space
    recursion :math:`e_j(w_{1..i}) = e_j(w_{1..i-1}) + w_i e_{j-1}(w_{1..i-1})` from both
    ends in :math:`O(nk)` (Ahmed et al. 2023, https://arxiv.org/abs/2210.01941). The
    marginals sum to ``k``. Differentiable (autograd through the recursion). Logits are
    clamped to :math:`\pm 10^6`.

    Example:
        >>> import torch, hardgrad as hg
        >>> m = hg.subsets.k_subset_marginals(torch.tensor([1.0, 0.0, 0.0, -1.0]), 2)
        >>> m, m.sum()
        (tensor([0.7876, 0.5000, 0.5000, 0.2124]), tensor(2.0000))
    """
    k, d = _check_subset(logits, k, dim)
    out = _marginals(logits.movedim(d, -1), k)
    return out.movedim(-1, d).to(logits.dtype)


def _conditional_bernoulli_sample(logits: Tensor, u: Tensor, k: int) -> Tensor:
    """An exact sample of the k-subset distribution along the last dimension, from the
    uniforms ``u``: backwards through the items, item ``i`` is in with probability
    ``w_i e_{r-1}(w_1..w_{i-1}) / e_r(w_1..w_i)`` given ``r`` items still to choose."""
    n = logits.shape[-1]
    logw = opmath(logits).clamp(-1e6, 1e6)
    prefix = _log_esp_prefix(logw, k)
    remaining = torch.full(logits.shape[:-1], k, dtype=torch.long, device=logits.device)
    picks = []
    for i in range(n - 1, -1, -1):
        r = remaining.unsqueeze(-1)
        here = prefix[..., i + 1, :].gather(-1, r).squeeze(-1)
        before = prefix[..., i, :].gather(-1, (r - 1).clamp_min(0)).squeeze(-1)
        p = torch.exp(logw[..., i] + before - here)
        take = (remaining > 0) & (u[..., i] < p)
        picks.append(take)
        remaining = remaining - take.long()
    return torch.stack(picks[::-1], -1).to(logits.dtype)


# --------------------------------------------------------------------------- the op


@cached_signature
class _HardWithRelaxedBackward(torch.autograd.Function):
    """Forward ``hard(logits, noise)``; backward the VJP of ``relaxed(logits, noise)`` in
    ``logits``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        logits: Tensor,
        noise: Tensor,
        hard: Callable[[Tensor, Tensor], Tensor],
        relaxed: Callable[[Tensor, Tensor], Tensor],
    ) -> Tensor:
        return fresh_output(hard(logits, noise))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, noise, _, relaxed = inputs
        ctx.save_for_backward(logits, noise)
        ctx.relaxed = relaxed

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        logits, noise = ctx.saved_tensors
        vjp = torch.func.vjp(lambda t: ctx.relaxed(t, noise), opmath(logits))[1]
        (g,) = vjp(opmath(grad))
        return g.to(grad.dtype), None, None, None


@forward_mode(_HardWithRelaxedBackward)
@cached_signature
class _HardWithRelaxedBackwardJVP(_HardWithRelaxedBackward):
    """Forward mode: the JVP of ``relaxed(logits, noise)`` in ``logits``."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _HardWithRelaxedBackward.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0], inputs[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_rest: Any) -> Tensor:
        logits, noise = ctx.saved_tensors
        relaxed = ctx.relaxed
        t = jvp_by_reverse_mode(lambda z: relaxed(z, noise), opmath(logits), opmath(tangent))
        return t.to(tangent.dtype)


def _gumbel_hard(logits: Tensor, noise: Tensor, k: int) -> Tensor:
    return _k_hot(opmath(logits) + noise, k).to(logits.dtype)


def _gumbel_relaxed(logits: Tensor, noise: Tensor, k: int, tau: float) -> Tensor:
    return _relaxed_topk(logits + noise, k, tau)


def _simple_hard(logits: Tensor, noise: Tensor, k: int) -> Tensor:
    return _conditional_bernoulli_sample(logits, noise, k)


def _simple_relaxed(logits: Tensor, noise: Tensor, k: int) -> Tensor:
    return _marginals(logits, k)


def subset(
    logits: Tensor,
    k: int,
    *,
    dim: int = -1,
    estimator: str = "st",
    tau: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""A random k-subset as a k-hot mask along ``dim``, with a chosen gradient.

    * ``"st"`` (default): forward the exact Gumbel top-k sample
      :math:`\operatorname{topk}(\ell + g)`, :math:`g` i.i.d. standard Gumbel: ``k`` items
      drawn without replacement from :math:`\operatorname{softmax}(\ell)` (Kool et al.
      2019, https://arxiv.org/abs/1903.06059); backward through the relaxed sample
      :func:`relaxed_topk` of the same keys :math:`\ell + g` at temperature ``tau`` (Xie &
      Ermon 2019, https://arxiv.org/abs/1901.10517). Biased.
    * ``"relaxed"``: forward that relaxed sample itself (non-negative values summing to
      ``k``, not discrete), with its exact pathwise gradient.
    * ``"simple"``: forward an exact sample of the conditional Bernoulli
      :math:`p(z) \propto \prod_i e^{\ell_i z_i}`, :math:`\sum z = k`; backward through
      its exact marginals :func:`k_subset_marginals` (SIMPLE, Ahmed et al. 2023,
      https://arxiv.org/abs/2210.01941): :math:`\partial L/\partial \ell =
      J_\mu(\ell)^\top\, \partial L / \partial z`. Biased (straight-through in the
      marginals), low variance. ``tau`` is not used. :math:`O(nk)` sequential steps.

    Args:
        logits: floating tensor.
        k: subset size, ``0 <= k <= logits.shape[dim]``.
        dim: the item dimension.
        estimator: ``"st"``, ``"relaxed"`` or ``"simple"``.
        tau: temperature of the relaxation (``"st"``, ``"relaxed"``), > 0.
        generator: the source of the noise.

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> logits = torch.tensor([2.0, 0.0, 1.0, -1.0], requires_grad=True)
        >>> z = hg.subset(logits, 2, generator=g); z
        tensor([1., 1., 0., 0.], grad_fn=<_HardWithRelaxedBackwardBackward>)
        >>> (z * torch.tensor([1.0, 0.0, 0.0, 0.0])).sum().backward(); logits.grad
        tensor([ 0.2595, -0.1721, -0.0741, -0.0133])
    """
    k, d = _check_subset(logits, k, dim)
    if not isinstance(estimator, str) or estimator not in SUBSET_ESTIMATORS:
        raise ValueError(
            f"Expected `estimator` to be one of {', '.join(map(repr, SUBSET_ESTIMATORS))}, "
            f"but found {estimator!r}"
        )
    tau = check_positive(tau, "tau")
    _check_generator(generator)
    x = logits.movedim(d, -1)
    u = _uniform(x, generator)
    if estimator == "simple":
        hard = functools.partial(_simple_hard, k=k)
        relaxed: Callable[[Tensor, Tensor], Tensor] = functools.partial(_simple_relaxed, k=k)
        noise = u
    else:
        noise = -torch.log(-torch.log(u))
        if estimator == "relaxed":
            return _gumbel_relaxed(x, noise, k, tau).to(logits.dtype).movedim(-1, d)
        hard = functools.partial(_gumbel_hard, k=k)
        relaxed = functools.partial(_gumbel_relaxed, k=k, tau=tau)
    out = apply_function(_HardWithRelaxedBackward, x, noise, hard, relaxed)
    return out if d == logits.dim() - 1 else out.movedim(-1, d)
