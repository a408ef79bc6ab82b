r"""The rotation trick (Fifty et al. 2024, https://arxiv.org/abs/2410.06424): the value of
``z_q`` with the gradient to ``z`` turned by the rotation that takes ``z`` to ``z_q``."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .._core.validation import check_all_finite, check_dim, check_floating
from ..ops._autograd import apply_function, cached_signature, forward_mode
from ._common import _compute_dtype


def _unit_and_norm(x: Tensor) -> tuple[Tensor, Tensor]:
    """(x / |x|, |x|) along the last dim, scaled first so that neither under- nor overflows;
    a zero row gives (0, 0)."""
    peak = x.abs().amax(-1, keepdim=True)
    scaled = x / torch.where(peak > 0, peak, 1)
    norm = torch.linalg.vector_norm(scaled, dim=-1, keepdim=True)
    unit = scaled / torch.where(norm > 0, norm, 1)
    return unit, peak * norm


def _rotation_apply(z: Tensor, q: Tensor, v: Tensor, dim: int, transpose: bool) -> Tensor:
    r""":math:`\lambda R^\top v` (``transpose``) or :math:`\lambda R v` along ``dim``, in
    float32 (float64 for float64), rounded once to ``v``'s dtype; see :func:`rotation_gradient`."""
    compute = _compute_dtype(v.dtype)
    e_hat, e_norm = _unit_and_norm(z.movedim(dim, -1).to(compute))
    q_hat, q_norm = _unit_and_norm(q.movedim(dim, -1).to(compute))
    g = v.movedim(dim, -1).to(compute)
    bisector, b_norm = _unit_and_norm(e_hat + q_hat)
    tol = math.sqrt(torch.finfo(compute).eps)
    r = torch.where(b_norm > tol, bisector, 0)  # antipodal: the reflection I - 2 e e^T
    a, b = (e_hat, q_hat) if transpose else (q_hat, e_hat)
    turned = g - 2 * r * (r * g).sum(-1, keepdim=True) + 2 * a * (b * g).sum(-1, keepdim=True)
    scaled = q_norm * turned / torch.where(e_norm > 0, e_norm, 1)
    out = torch.where(e_norm > 0, scaled, g)  # z = 0: straight through
    return out.to(v.dtype).movedim(-1, dim)


@cached_signature
class _RotationGradient(torch.autograd.Function):
    """Forward: the value ``q`` (a view); backward: the rotation trick's gradient to ``z``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(z: Tensor, q: Tensor, dim: int) -> Tensor:
        return q.view_as(q)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        z, q, dim = inputs
        ctx.dim = dim
        ctx.save_for_backward(z, q)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        z, q = ctx.saved_tensors
        return _rotation_apply(z, q, grad, ctx.dim, transpose=True), None, None


@forward_mode(_RotationGradient)
@cached_signature
class _RotationGradientJVP(_RotationGradient):
    """:class:`_RotationGradient` with its forward-mode rule: the tangent times λR."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _RotationGradient.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0], inputs[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, _q: Any, _dim: Any) -> Tensor:
        z, q = ctx.saved_tensors
        return _rotation_apply(z, q, tangent, ctx.dim, transpose=False)


def rotation_gradient(z: Tensor, z_q: Tensor, *, dim: int = -1) -> Tensor:
    r"""The value of ``z_q`` with the rotation trick's gradient to ``z`` (Fifty et al. 2024).

    Forward: ``z_q`` (a view of it; nothing flows back to ``z_q``). Backward, per vector
    along ``dim``, with :math:`e = z`, :math:`q = z_q`, :math:`\hat e = e/\lVert e\rVert`,
    :math:`\hat q = q/\lVert q\rVert`, :math:`\lambda = \lVert q\rVert / \lVert e\rVert`:

    .. math::

        r = \frac{\hat e + \hat q}{\lVert \hat e + \hat q\rVert}, \qquad
        R = I - 2 r r^\top + 2 \hat q \hat e^\top, \qquad
        \frac{\partial L}{\partial e} = \lambda R^\top \frac{\partial L}{\partial q}
        = \lambda\Big(\bar q - 2 r (r^\top \bar q) + 2 \hat e (\hat q^\top \bar q)\Big),

    the paper's variant: :math:`R` is the rotation in the plane of :math:`e, q` that takes
    :math:`\hat e` to :math:`\hat q` (in the Householder form of their Eq. 4), and
    :math:`\lambda R` is treated as a constant (the forward is
    :math:`\tilde q = \operatorname{sg}[\lambda R]\, e`, which equals :math:`q`), so
    the gradient is the transpose of that linear map applied to the incoming gradient.
    Where the formula is undefined:

    * :math:`e = 0` (norm 0 after scaling): :math:`\partial L/\partial e = \partial L/\partial q`
      (straight through);
    * :math:`q = 0`: :math:`\lambda = 0`, so the gradient is 0 (the formula's limit);
    * antipodal, :math:`\lVert\hat e + \hat q\rVert \le \sqrt{\epsilon}` (:math:`\epsilon`
      of the compute dtype; within about :math:`\sqrt\epsilon` radians of
      :math:`\hat q = -\hat e`, where the rotation is not unique and :math:`r` loses its
      digits): :math:`r := 0`, i.e. :math:`R = I - 2\hat e \hat e^\top`, the reflection that
      takes :math:`\hat e` to :math:`-\hat e = \hat q`; orthogonal like a rotation, so the
      gradient's norm is :math:`\lambda \lVert\bar q\rVert` as everywhere else.

    Norms are taken after scaling by the largest magnitude (no overflow or underflow), in
    float32 (float64 for float64 inputs), and the result is rounded once to the gradient's
    dtype. Forward mode (``torch.func.jvp``) applies :math:`\lambda R` to the tangent.

    Args:
        z: floating tensor (the encoder output).
        z_q: its quantized value, same shape, dtype and device.
        dim: the vector dimension.

    Example:
        >>> import torch, hardgrad as hg
        >>> z = torch.tensor([[2.0, 0.0]], requires_grad=True)
        >>> z_q = torch.tensor([[0.0, 1.0]])
        >>> y = hg.vq.rotation_gradient(z, z_q)
        >>> y.backward(torch.tensor([[0.0, 1.0]]))
        >>> z.grad.round(decimals=6)  # R^T takes e_y back to e_x; times |z_q|/|z| = 1/2
        tensor([[0.5000, 0.0000]])
    """
    check_floating(z, "z")
    check_floating(z_q, "z_q")
    d = check_dim(z, dim)
    if z_q.shape != z.shape or z_q.dtype != z.dtype or z_q.device != z.device:
        raise ValueError(
            "Expected `z_q` to have the shape, dtype and device of `z` "
            f"({tuple(z.shape)}, {z.dtype}, {z.device}), but found "
            f"({tuple(z_q.shape)}, {z_q.dtype}, {z_q.device})"
        )
    check_all_finite(z, "z")
    check_all_finite(z_q, "z_q")
    out: Tensor = apply_function(_RotationGradient, z, z_q.detach(), d - z.dim())
    return out
