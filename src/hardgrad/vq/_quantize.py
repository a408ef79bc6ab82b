r""":func:`vector_quantize`, the op: the nearest code, exactly, with the gradient to ``z``
chosen by name (straight through, the rotation trick) or by a pathwise estimator
(the code then drawn from the softmax of the negative distances)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import estimators as _estimators
from .. import ops
from .._core.validation import check_all_finite, check_dim, check_floating, check_positive
from ..ops._autograd import apply_function
from ..ops._straight_through import value_with_identity_gradient
from ..stochastic import categorical
from ._common import (
    _check_choice,
    _check_codebook,
    _compute_dtype,
    _flatten,
    code_back,
    code_last_shape,
)
from ._rotation import _RotationGradient
from ._search import DISTANCES, _expanded_distances, _nearest

# The gradient estimators of :func:`vector_quantize` by name (documented as
# :data:`hardgrad.vq.VQ_ESTIMATORS`).
VQ_ESTIMATORS = ("st", "rotation", "gumbel")

EstimatorLike = str | _estimators.Estimator


def _resolve_estimator(estimator: Any) -> str | _estimators.Estimator:
    if isinstance(estimator, _estimators.Estimator):
        chosen = _estimators.resolve(estimator, pathwise=True, where="hg.vector_quantize")
    elif isinstance(estimator, str):
        if estimator not in VQ_ESTIMATORS:
            raise ValueError(
                f"Expected `estimator` to be one of {', '.join(map(repr, VQ_ESTIMATORS))} or a "
                f"pathwise hardgrad.estimators.Estimator instance, but found {estimator!r}"
            )
        if estimator != "gumbel":
            return estimator
        chosen = _estimators.STGumbel()
    else:
        raise TypeError(
            "Expected `estimator` to be a name or a hardgrad.estimators.Estimator, "
            f"but found {type(estimator).__name__}"
        )
    if not chosen.discrete:
        raise ValueError(
            f"Expected a pathwise `estimator` with exact one-hot samples (z_q must be a "
            f"codebook row), but found {chosen!r}, a relaxation; use e.g. "
            "hg.estimators.STGumbel(tau=...) or GumbelRao"
        )
    return chosen


def vector_quantize(
    z: Tensor,
    codebook: Tensor,
    *,
    dim: int = -1,
    estimator: EstimatorLike = "st",
    distance: str = "l2",
    tau: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Replace each vector of ``z`` along ``dim`` by a codebook row; choose its gradient.

    Forward: :math:`k = \arg\min_k d(z, c_k)` (:func:`nearest_code`: squared Euclidean or
    cosine distance, each computed directly, ties to the lowest index) and
    :math:`z_q = c_k`, bit for bit ``codebook[indices]`` moved to ``dim``. Backward to
    ``z`` (van den Oord et al. 2017, https://arxiv.org/abs/1711.00937), by ``estimator``:

    * ``"st"``: straight through, :math:`\partial L/\partial z = \partial L/\partial z_q`
      (:func:`hardgrad.straight_through`; the same as ``z + (z_q - z).detach()`` but
      with ``z_q``'s value exactly);
    * ``"rotation"``: the rotation trick, :math:`\partial L/\partial z =
      (\lVert z_q\rVert/\lVert z\rVert)\, R^\top\, \partial L/\partial z_q` with :math:`R`
      the rotation taking :math:`z/\lVert z\rVert` to :math:`z_q/\lVert z_q\rVert`, treated
      as a constant (Fifty et al. 2024, https://arxiv.org/abs/2410.06424); the exact
      variant and its safe values at :math:`z = 0`, :math:`z_q = 0` and
      :math:`z_q \parallel -z` are in :func:`rotation_gradient`;
    * ``"gumbel"`` or a pathwise estimator instance with exact samples (e.g.
      ``hg.estimators.STGumbel(tau=0.5)``, ``GumbelRao``, ``ReinMax``): the code is *drawn*,
      :math:`D = ` ``hg.categorical(-d(z, c)/tau, estimator=...)`` (``"gumbel"`` means
      ``STGumbel(tau=1.0)``), :math:`z_q = c_k` for the drawn :math:`k`, and the gradient
      is the estimator's through :math:`\tilde z_q = D\,\operatorname{sg}[C]`, so
      :math:`\partial L/\partial z = \sum_k \frac{\partial L}{\partial z_q}\!\cdot\! c_k\,
      \frac{\partial D_k}{\partial \ell}\,\frac{\partial \ell}{\partial z}` with
      :math:`\ell = -d/\tau` (for ``"l2"``,
      :math:`\partial \ell_k/\partial z = -2(z - c_k)/\tau`). Biased, like the estimator;
      ``indices`` are then the drawn codes, not the nearest ones.

    The codebook gets no gradient through ``z_q`` (nor through the distances): train it
    with its own loss :math:`\lVert \operatorname{sg}[z] - c_k\rVert^2` or an EMA
    (:class:`hardgrad.nn.VectorQuantize` does both); the backward uses the codebook's
    value at the call (a stochastic estimator keeps a copy), so it may be updated in place
    between the forward and the backward. Half-precision inputs are handled in
    float32 inside (distances, the rotation) and rounded once.

    Args:
        z: floating tensor with the code dimension ``dim`` of size D.
        codebook: (K, D) floating tensor, K >= 2, of ``z``'s dtype and device.
        dim: the code dimension of ``z``.
        estimator: ``"st"``, ``"rotation"``, ``"gumbel"``, or a pathwise estimator instance.
        distance: ``"l2"`` or ``"cosine"``.
        tau: the temperature of the code logits :math:`-d/\tau` (stochastic estimator only).
        generator: randomness of the stochastic estimator.

    Returns:
        ``(z_q, indices)``: ``z_q`` of ``z``'s shape; int64 ``indices`` of ``z``'s shape
        without ``dim``.

    Raises:
        TypeError: ``z`` or ``codebook`` not floating or not dense, or of different dtypes.
        ValueError: bad ``dim``; ``codebook`` not (K, D) with D matching ``z``, K < 2;
            unknown ``estimator`` or ``distance``; ``tau <= 0``; while validation is on,
            inf or NaN in ``z`` or ``codebook``.

    Example:
        >>> import torch, hardgrad as hg
        >>> codebook = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
        >>> z = torch.tensor([[0.9, 0.2], [-0.4, -0.7]], requires_grad=True)
        >>> z_q, indices = hg.vector_quantize(z, codebook, estimator="rotation")
        >>> z_q, indices
        (tensor([[ 1.,  0.],
                [-1., -1.]], grad_fn=<_RotationGradientBackward>), tensor([0, 2]))
        >>> z_q.sum().backward()
        >>> z.grad
        tensor([[0.8235, 1.2941],
                [1.2308, 2.1538]])

        The stochastic variant draws the code:

        >>> g = torch.Generator().manual_seed(0)
        >>> hg.vector_quantize(z, codebook, estimator="gumbel", tau=0.1, generator=g)[1]
        tensor([0, 2])
    """
    check_floating(z, "z")
    d = check_dim(z, dim)
    _check_codebook(z, codebook, d)
    _check_choice(distance, "distance", DISTANCES)
    chosen = _resolve_estimator(estimator)
    tau = check_positive(tau, "tau")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            "Expected `generator` to be a torch.Generator or None, "
            f"but found {type(generator).__name__}"
        )
    frozen = codebook.detach()
    moved_shape = code_last_shape(z, d)
    if isinstance(chosen, str):
        indices = _nearest(z, frozen, d, distance, validate=True)
        # index_select, not frozen[indices]: the same rows, at a fifth of the cost
        value = code_back(frozen.index_select(0, indices.reshape(-1)).reshape(moved_shape), d)
        if chosen == "st":
            return value_with_identity_gradient(value, z), indices
        # (z and the codebook were checked: the Function itself, not rotation_gradient)
        rotated: Tensor = apply_function(_RotationGradient, z, value, d - z.dim())
        return rotated, indices
    check_all_finite(z, "z")
    check_all_finite(codebook, "codebook")
    compute = _compute_dtype(z.dtype)
    rows = _flatten(z, d).to(compute)
    # A copy (K x D, small beside the N x K logits): the backward reads the codebook as it
    # was at this call, and the caller may update it in place before backward (an EMA
    # step, a dead-code restart), which would otherwise void the saved tensor.
    codes = frozen.to(compute, copy=True)
    logits = -_expanded_distances(rows, codes, distance) / tau
    sample = categorical(logits, estimator=chosen, generator=generator)
    indices = sample.detach().argmax(-1)
    soft = (sample @ codes).to(z.dtype)
    value = frozen[indices]
    z_q = ops.straight_through(value)(soft)
    shape = z.shape[:d] + z.shape[d + 1 :]
    return code_back(z_q.reshape(moved_shape), d), indices.reshape(shape)
