r"""The top-k routing op: deterministic top-k softmax gates, stochastic routing by Gumbel
top-k with a pathwise estimator, and :func:`topk_route`, which picks among them and the
sparse mixers (private; documented and re-exported by :mod:`hardgrad.routing`, whose
docstring has the papers and notation)."""

from __future__ import annotations

import math
from typing import Literal, overload

import torch
from torch import Tensor

from .. import estimators as _estimators
from .._core.validation import check_all_finite, check_real
from ..stochastic._checks import _check_generator
from ._settings import SparseMixer, _check_logits, _check_normalize, _resolve
from ._sparse_mixer import _sparsemixer

# --------------------------------------------------------------------------- gates


def _renormalized(top: Tensor, eps: float) -> Tensor:
    """``top / (top.sum() + eps)`` along the last dim (no addition when ``eps`` is 0)."""
    total = top.sum(-1, keepdim=True)
    return top / (total + eps if eps else total)


def _weights(logits: Tensor, indices: Tensor, normalize: str, eps: float = 0.0) -> Tensor:
    """The gates of the experts ``indices`` (last dim) for logits (..., E), autograd-able."""
    if normalize == "none":
        return torch.softmax(logits, -1).gather(-1, indices)
    if normalize == "selected":
        return torch.softmax(logits.gather(-1, indices), -1)
    return _renormalized(torch.softmax(logits, -1).gather(-1, indices), eps)


def _deterministic(
    logits: Tensor, k: int, normalize: str, eps: float = 0.0, threshold: bool = False
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Standard top-k softmax routing along the last dim, written as the models write it;
    with ``threshold``, one top-(k+1) also gives the (k+1)-th largest logit."""
    m = k + 1 if threshold and k < logits.shape[-1] else k
    if normalize == "selected":
        top, indices = torch.topk(logits, m, -1)
        bar = _threshold_of(logits, top[..., k:], threshold)
        if m > k:
            top, indices = top[..., :k], indices[..., :k]
        return torch.softmax(top, -1), indices, bar
    probs = torch.softmax(logits, -1)
    top, indices = torch.topk(probs, m, -1)
    bar = _threshold_of(logits, logits.gather(-1, indices[..., k:]), True) if threshold else None
    if m > k:
        top, indices = top[..., :k], indices[..., :k]
    if normalize == "none":
        return top, indices, bar
    return _renormalized(top, eps), indices, bar


def _threshold_of(logits: Tensor, rest: Tensor, wanted: bool) -> Tensor | None:
    """The (k+1)-th largest logit ``rest`` (..., 1), or -inf (..., 1) when k = E."""
    if not wanted:
        return None
    if rest.shape[-1]:
        return rest
    return logits.new_full((*logits.shape[:-1], 1), -math.inf)


def _kth_plus_one(logits: Tensor, k: int) -> Tensor:
    """The (k+1)-th largest logit along the last dim (-inf when k = E), differentiable."""
    if k == logits.shape[-1]:
        return logits.new_full((*logits.shape[:-1], 1), -math.inf)
    return torch.topk(logits, k + 1, -1).values[..., k:]


# --------------------------------------------------------------------------- stochastic


def _gumbel_topk(
    logits: Tensor, k: int, chosen: _estimators.Estimator, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """k sequential draws without replacement (Plackett-Luce), each a one-hot of the
    estimator with the earlier experts masked out. Returns (one-hots (k, ..., E), indices)."""
    masked = logits
    taken = torch.zeros_like(logits, dtype=torch.bool)
    samples, indices = [], []
    for _ in range(k):
        sample = chosen.sample_categorical(masked, generator, masked.dim() - 1)
        index = sample.detach().argmax(-1, keepdim=True)
        samples.append(sample)
        indices.append(index)
        taken = taken.scatter(-1, index, True)
        masked = logits.masked_fill(taken, -math.inf)
    return torch.stack(samples), torch.cat(indices, -1)


def _stochastic(
    logits: Tensor,
    k: int,
    chosen: _estimators.Estimator,
    normalize: str,
    generator: torch.Generator | None,
    eps: float = 0.0,
) -> tuple[Tensor, Tensor]:
    samples, indices = _gumbel_topk(logits, k, chosen, generator)
    if normalize == "none":
        w = torch.softmax(logits, -1)  # the full softmax: a one-hot's relaxation sees every p_j
    else:  # defined on the drawn set only
        drawn = _weights(logits, indices, normalize, eps)
        w = torch.zeros_like(logits).scatter(-1, indices, drawn)
    gates = (samples * w).sum(-1)  # (k, ...): exactly w at the drawn expert (the rest add +0)
    return gates.movedim(0, -1), indices


# --------------------------------------------------------------------------- the op


@overload
def topk_route(
    logits: Tensor,
    k: int,
    *,
    dim: int = -1,
    estimator: str | SparseMixer | _estimators.Estimator = "sparse",
    normalize: str | None = None,
    generator: torch.Generator | None = None,
    training: bool = True,
    eps: float = 0.0,
    return_threshold: Literal[False] = False,
) -> tuple[Tensor, Tensor]: ...


@overload
def topk_route(
    logits: Tensor,
    k: int,
    *,
    dim: int = -1,
    estimator: str | SparseMixer | _estimators.Estimator = "sparse",
    normalize: str | None = None,
    generator: torch.Generator | None = None,
    training: bool = True,
    eps: float = 0.0,
    return_threshold: Literal[True],
) -> tuple[Tensor, Tensor, Tensor]: ...


def topk_route(
    logits: Tensor,
    k: int,
    *,
    dim: int = -1,
    estimator: str | SparseMixer | _estimators.Estimator = "sparse",
    normalize: str | None = None,
    generator: torch.Generator | None = None,
    training: bool = True,
    eps: float = 0.0,
    return_threshold: bool = False,
) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]:
    r"""Top-k mixture-of-experts routing: gate weights and selected experts, with a chosen
    router gradient.

    Forward (``estimator="sparse"`` or ``"dense"``): exactly standard top-k softmax
    routing, computed as the models write it, for each ``normalize``:

    * ``"renormalize"`` (default): :math:`p = \operatorname{softmax}(\theta)`, the top-k of
      :math:`p`, divided by their sum: :math:`g_i = p_i / \sum_{j\in S} p_j` (HF
      transformers' Mixtral, Qwen2/3-MoE with ``norm_topk_prob=True``, DeepSeek-V3);
    * ``"selected"``: the top-k of :math:`\theta`, softmax over those k logits (Mistral's
      reference Mixtral code). Equal to ``"renormalize"`` in exact arithmetic
      (:math:`e^{\theta_i}/\sum_{j \in S} e^{\theta_j}`), different in rounding;
    * ``"none"``: the top-k of :math:`p` as they are, :math:`g_i = p_i` (Switch Transformer
      top-1, GShard-style gating without renormalisation, Qwen1.5/2-MoE and OLMoE with
      ``norm_topk_prob=False``, DeepSeek-V2). With ``k=1`` the renormalised forms give
      gate 1 and no router gradient at all; top-1 routers use ``"none"``.

    Ties go as :func:`torch.topk` breaks them. Backward, by ``estimator``:

    * ``"sparse"``: autograd through the selected gates only (the baseline every framework
      uses): :math:`\partial L/\partial\theta = \sum_{i\in S} c_i\, \partial g_i/\partial\theta`,
      e.g. :math:`p \odot (c_S - \langle c_S, p\rangle)` for ``"none"``; nothing for the
      choice of :math:`S`. This is the true gradient of the deterministic top-k loss
      wherever the selection does not change (almost everywhere).
    * ``"dense"``: DenseMixer (Yao et al. 2025): the gradient of the dense output
      :math:`\sum_j w_j(\theta) E_j(x)`, forward sparse. The gates returned here carry its
      selected share, which equals the sparse gradient (:math:`w_S = g`); the unselected
      share needs the layer's output: pass it through :func:`dense_mixer`.
    * ``"sparsemixer"`` (or ``SparseMixer(version=2)``; GRIN / PhiMoE, ``k`` in {1, 2}):
      slot by slot, experts whose logit is more than :math:`2\epsilon` (relative,
      ``(max - θ_j) / max(|θ_j|, max) > 2ε``) below the largest remaining one are masked;
      with :math:`\pi = \operatorname{softmax}` of the masked logits the expert is *drawn*,
      :math:`D \sim \pi` (Gumbel-max; the earlier slot's expert removed for slot 2), and
      the gate is :math:`\omega \pi_D`, :math:`\omega = 1` if :math:`D` is the argmax of
      :math:`\pi` or with probability 1/4, else :math:`\omega = 0.3333` (Heun's
      third-order method). Backward: :math:`\partial L/\partial \theta = \bar g\, \pi_D
      (e_D - \pi)` per slot (the derivative of :math:`\pi_D`, not of :math:`\omega\pi_D`).
      With ``training=False``: :math:`D` the argmax, :math:`\omega = 1`.
    * ``"sparsemixer_v1"`` (``SparseMixer(version=1)``, the 2023 paper's code, ``k=1``):
      the same with :math:`\epsilon = 0.1`, :math:`\omega = 1` for the argmax or with
      probability 1/2, else :math:`\omega = 1/2`, and backward
      :math:`2\bar g\,\pi_D (e_D - \pi)` (the midpoint method); with ``training=False``
      the argmax, :math:`\omega = 1` and the plain derivative :math:`\bar g\,\pi_D (e_D - \pi)`.
    * a discrete pathwise estimator of :mod:`hardgrad.estimators` (``"st"``,
      ``"st_gumbel"``, ``"reinmax"``, ``"gumbel_rao"``, ``"gst"``, ``"st_identity"`` or an
      instance): stochastic routing. The k experts are drawn without replacement from
      :math:`p` (Plackett-Luce: slot :math:`r` is a categorical draw over the experts not
      yet chosen, i.e. Gumbel top-k), each draw a one-hot :math:`D_r` whose backward is
      the estimator; the gate of slot :math:`r` is :math:`\langle D_r, w\rangle` with
      :math:`w` = :math:`p` (``"none"``) or the softmax over the drawn experts (the
      renormalised forms), so the router gets both the gates' gradient and the estimator's.

    SparseMixer ignores ``normalize`` (its gates are its own) and rejects a value for it.
    Score-function estimators and exact enumeration need the objective: see
    :func:`expectation`.

    Args:
        logits: router logits, floating, the experts along ``dim``; finite (checked while
            validation is on).
        k: experts per token, ``1 <= k <= E``.
        dim: the experts' dimension.
        estimator: a name from :data:`ROUTING_ESTIMATORS`, a :class:`SparseMixer`, or a
            discrete pathwise estimator (name or instance).
        normalize: ``"renormalize"``, ``"selected"`` or ``"none"``; ``None`` is
            ``"renormalize"``.
        generator: randomness of the sampling estimators.
        training: SparseMixer's training mode (sampling and :math:`\omega`); ignored by
            the others.
        eps: added to the sum in ``normalize="renormalize"``,
            :math:`g_i = p_i / (\sum_{j\in S} p_j + \epsilon)` (what much hand-written MoE
            code does with 1e-6; DeepSeek-V3's uses 1e-20); default 0, the exact
            renormalisation. Must be 0 for the other normalisations and SparseMixer.
            DenseMixer's unselected share (:func:`dense_mixer`) keeps
            :math:`s = \sum_{j \in S} p_j`, an :math:`O(\epsilon)` difference.
        return_threshold: also return the (k+1)-th largest entry of ``logits`` along
            ``dim`` (for the deterministic forms, from the same top-k call), the
            threshold of noisy top-k gating's load estimator
            (:func:`hardgrad.routing.prob_in_top_k`), so that a load loss needs no second
            top-k. Of the logits' shape with ``dim`` of size 1, differentiable (its
            gradient goes to that logit); -inf where ``k`` = E.

    Returns:
        ``(gates, indices)``: gates of the logits' dtype and int64 indices, both of the
        logits' shape with ``dim`` of size ``k`` (slot order: decreasing for the
        deterministic forms, drawing order for the sampled ones); with
        ``return_threshold=True``, ``(gates, indices, threshold)``.

    Raises:
        TypeError: non-floating ``logits``; ``k`` not an int; bad ``estimator`` type.
        ValueError: ``k < 1`` or ``k > E``; unknown ``estimator`` or ``normalize``;
            SparseMixer with ``k > 2`` (``k > 1`` for version 1) or with ``normalize``;
            inf or NaN logits; ``eps`` negative, not finite, or nonzero without
            ``"renormalize"``.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([[1.0, 3.0, 0.0, 2.0]], requires_grad=True)
        >>> gates, indices = hg.topk_route(logits, 2)
        >>> gates, indices
        (tensor([[0.7311, 0.2689]], grad_fn=<DivBackward0>), tensor([[1, 3]]))
        >>> (gates * torch.tensor([[1.0, -1.0]])).sum().backward()
        >>> logits.grad.round(decimals=4) + 0.0   # the unselected experts get nothing
        tensor([[ 0.0000,  0.3932,  0.0000, -0.3932]])
        >>> g = torch.Generator().manual_seed(0)
        >>> hg.topk_route(logits, 2, estimator="st_gumbel", generator=g)[1]  # drawn
        tensor([[1, 3]])
        >>> hg.topk_route(logits, 2, return_threshold=True)[2]   # the 3rd largest logit
        tensor([[1.]], grad_fn=<GatherBackward0>)
    """
    k, d = _check_logits(logits, k, dim)
    chosen = _resolve(estimator)
    _check_generator(generator)
    if not isinstance(training, bool):
        raise TypeError(f"Expected `training` to be a bool, but found {type(training).__name__}")
    if isinstance(chosen, SparseMixer):
        if normalize is not None:
            raise ValueError(
                f"Expected `normalize`=None for SparseMixer (its gates are its own), but "
                f"found normalize={normalize!r}"
            )
        limit = 2 if chosen.version == 2 else 1
        if k > limit:
            raise ValueError(
                f"Expected `k` <= {limit} for {chosen!r} (published for top-{limit}), but "
                f"found k={k}"
            )
    norm = _check_normalize("renormalize" if normalize is None else normalize)
    eps = _check_eps(eps, norm)
    if eps and isinstance(chosen, SparseMixer):
        raise ValueError(
            f"Expected `eps`=0 for SparseMixer (its gates are its own), but found eps={eps!r}"
        )
    if not isinstance(return_threshold, bool):
        raise TypeError(
            f"Expected `return_threshold` to be a bool, but found {type(return_threshold).__name__}"
        )
    check_all_finite(logits, "logits")
    last = d == logits.dim() - 1
    moved = logits if last else logits.movedim(d, -1)
    threshold = None
    if isinstance(chosen, str):
        gates, indices, threshold = _deterministic(moved, k, norm, eps, return_threshold)
    elif isinstance(chosen, SparseMixer):
        gates, indices = _sparsemixer(moved, k, chosen, training, generator)
    else:
        gates, indices = _stochastic(moved, k, chosen, norm, generator, eps)
    if return_threshold and threshold is None:
        threshold = _kth_plus_one(moved, k)
    if not last:
        gates, indices = gates.movedim(-1, d), indices.movedim(-1, d)
        threshold = None if threshold is None else threshold.movedim(-1, d)
    if threshold is not None:
        return gates, indices, threshold
    return gates, indices


def _check_eps(eps: object, normalize: str) -> float:
    """The renormalisation's ``eps``: a finite float >= 0, nonzero only for
    ``"renormalize"``."""
    value = check_real(eps, "eps")
    if not 0 <= value < math.inf:
        raise ValueError(f"Expected `eps` >= 0 and finite, but found eps={eps!r}")
    if value and normalize != "renormalize":
        raise ValueError(
            f"Expected `eps`=0 unless normalize='renormalize' (the only form that divides "
            f"by a sum), but found eps={eps!r} with normalize={normalize!r}"
        )
    return value
