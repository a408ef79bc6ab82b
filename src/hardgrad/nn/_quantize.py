r"""Fake quantization with a learned step size as a module: LSQ, Esser et al. (2020),
https://arxiv.org/abs/1902.08153.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .. import ops
from .. import surrogates as _surrogates
from .._kernels import opmath_dtype
from .._validation import check_floating, check_int
from ..ops._autograd import apply_function, cached_signature
from ._hard import SurrogateLike


def _compute_step_bounds(
    dtype: torch.dtype, stored: torch.dtype, levels: int
) -> tuple[float, float]:
    """``(s_min, s_max)`` of :class:`Quantize` for inputs of ``dtype``, a scale stored in
    ``stored`` and a grid reaching ``levels`` steps from 0."""
    compute = torch.finfo(opmath_dtype(dtype))
    kept = torch.finfo(stored)
    high = torch.finfo(dtype).max / levels * (1 - compute.eps)
    return max(compute.tiny, kept.tiny), min(high, kept.max)


_STEP_BOUNDS: dict[tuple[torch.dtype, torch.dtype, int], tuple[float, float]] = {}


def _step_bounds(dtype: torch.dtype, stored: torch.dtype, levels: int) -> tuple[float, float]:
    """:func:`_compute_step_bounds`, cached in eager mode (``finfo`` lookups cost more than
    the scalar arithmetic they feed; Dynamo folds them to constants anyway)."""
    if torch.compiler.is_compiling():
        return _compute_step_bounds(dtype, stored, levels)
    key = (dtype, stored, levels)
    bounds = _STEP_BOUNDS.get(key)
    if bounds is None:
        bounds = _STEP_BOUNDS[key] = _compute_step_bounds(dtype, stored, levels)
    return bounds


@cached_signature
class _StepSize(torch.autograd.Function):
    r""":math:`\hat s = \min(\max(|s|, s_{\min}), s_{\max})`; backward
    :math:`\operatorname{sign}(s)` with :math:`\operatorname{sign}(0) = 1`, straight through the
    bounds (see :class:`Quantize`)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(scale: Tensor, low: float, high: float) -> Tensor:
        return scale.abs().clamp(low, high)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (scale,) = ctx.saved_tensors
        return torch.where(scale < 0, -grad, grad), None, None


class Quantize(nn.Module):
    r"""Fake quantization with a learned step size (LSQ), for weights or activations.

    Forward: :func:`hardgrad.quantize` with the range of ``bits``-bit integers
    (``[-2^{b-1}, 2^{b-1} - 1]`` when ``signed``, else ``[0, 2^b - 1]``), zero point 0, and
    the module's ``scale``: one per tensor, or one per channel along ``per_channel_dim``.
    Backward: masked straight-through for the input (by default) and the LSQ gradient for
    the scale, scaled by :math:`g = 1/\sqrt{N q_+}` with :math:`N` elements per scale, as
    Esser et al. (2020) recommend, https://arxiv.org/abs/1902.08153.

    The scale is initialised from the first non-empty batch the module sees,
    :math:`s = 2\,\overline{|x|} / \sqrt{q_+}` (per channel if ``per_channel_dim`` is set;
    averaged across ranks when ``torch.distributed`` is initialised, so DDP replicas
    agree; the mean is taken without overflow for magnitudes up to the dtype's largest
    value). Until then it is a placeholder of shape ``()`` (or ``(1,)``): create the
    optimizer before or after the first batch alike, since the parameter object stays the
    same; only an optimizer *step* before the first batch would be meaningless. An empty
    batch is passed through and leaves the scale uninitialised. With
    ``learn_scale=False`` the scale is a buffer fixed after the first batch (calibration).

    The step size the forward uses is the stored :math:`s` made positive and bounded,

    .. math::

        \hat s = \min\big(\max(|s|,\ s_{\min}),\ s_{\max}\big), \qquad
        \frac{\partial \hat s}{\partial s} = \operatorname{sign}(s) \quad
        (\operatorname{sign}(0) = 1),

    where :math:`s_{\min}` is the smallest positive normal number of the dtype the
    quantization is computed in (float32 for half inputs) and
    :math:`s_{\max} = (1 - \epsilon)\,\max_x / \max(|q_-|, q_+)` with :math:`\max_x` the
    largest finite value of the input's dtype, so that every level :math:`q \hat s` of the
    grid is finite in that dtype. An optimizer step that drives a learned :math:`s` to 0 or
    below (e.g. SGD with a large learning rate) therefore leaves the forward finite: a
    negative :math:`s` quantizes like :math:`|s|`. The gradient passes straight through the
    bounds and is mirrored for negative :math:`s`, so such a scale keeps learning (its
    magnitude moves as a positive scale's would).

    Args:
        bits: integer bit width (2 to 16 when signed, 1 to 16 unsigned).
        signed: signed (weights) or unsigned (post-ReLU activations) range.
        per_channel_dim: the channel dimension for per-channel scales, or None.
        learn_scale: make ``scale`` a trainable parameter.
        surrogate: ``"masked"`` (default) or ``"identity"`` backward for the input.

    Example:
        >>> import torch, hardgrad as hg
        >>> q = hg.nn.Quantize(bits=4, per_channel_dim=0)
        >>> q
        Quantize(bits=4, signed=True, per_channel_dim=0, learn_scale=True)
        >>> w = torch.tensor([[0.5, -1.0, 0.25], [2.0, 0.0, -4.0]], requires_grad=True)
        >>> q(w)
        tensor([[ 0.4410, -0.8819,  0.4410],
                [ 1.5119,  0.0000, -4.5356]], grad_fn=<_FakeQuantizeBackward>)
        >>> q.scale
        Parameter containing:
        tensor([0.4410, 1.5119], requires_grad=True)
    """

    scale: Tensor

    def __init__(
        self,
        bits: int = 8,
        signed: bool = True,
        per_channel_dim: int | None = None,
        learn_scale: bool = True,
        *,
        surrogate: SurrogateLike = "masked",
    ) -> None:
        super().__init__()
        if not isinstance(signed, bool):
            raise TypeError(f"Expected `signed` to be a bool, but found {type(signed).__name__}")
        if not isinstance(learn_scale, bool):
            raise TypeError(
                f"Expected `learn_scale` to be a bool, but found {type(learn_scale).__name__}"
            )
        self.bits = check_int(bits, "bits", low=2 if signed else 1, high=16)
        self.signed = signed
        self.per_channel_dim = (
            None if per_channel_dim is None else check_int(per_channel_dim, "per_channel_dim")
        )
        self.learn_scale = learn_scale
        self.surrogate = _surrogates.resolve(surrogate, family="clamp", op="Quantize")
        if signed:
            self.quant_min, self.quant_max = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        else:
            self.quant_min, self.quant_max = 0, 2**bits - 1
        placeholder = torch.ones(() if per_channel_dim is None else (1,))
        if learn_scale:
            self.scale = nn.Parameter(placeholder)
        else:
            self.register_buffer("scale", placeholder)
        self._initialized = False

    @property
    def initialized(self) -> bool:
        """Whether the scale has been set from data (or loaded from a state dict)."""
        return self._initialized

    def _channel_dim(self, x: Tensor) -> int:
        dim = self.per_channel_dim
        assert dim is not None
        if not -x.dim() <= dim < x.dim():
            raise ValueError(
                f"Expected `per_channel_dim` in [{-x.dim()}, {x.dim() - 1}] for a "
                f"{x.dim()}-dim input, but found per_channel_dim={dim}"
            )
        return dim % x.dim()

    def _step_bounds(self, dtype: torch.dtype) -> tuple[float, float]:
        """``(s_min, s_max)`` for inputs of ``dtype`` (see the class docstring)."""
        return _step_bounds(dtype, self.scale.dtype, max(-self.quant_min, self.quant_max))

    def step_size(self, dtype: torch.dtype) -> Tensor:
        r"""The step size :math:`\hat s` the forward uses for inputs of ``dtype``: ``scale``
        made positive and bounded, with the gradient ``sign(scale)`` (class docstring)."""
        low, high = self._step_bounds(dtype)
        return apply_function(_StepSize, self.scale, low, high)

    @torch.no_grad()
    def _initialize(self, x: Tensor) -> None:
        if self.per_channel_dim is None:
            rows = x.detach().reshape(1, -1)
        else:
            dim = self._channel_dim(x)
            rows = x.detach().transpose(0, dim).reshape(x.shape[dim], -1)
        finite_batch = bool(torch.isfinite(rows).all())
        mean = rows.abs().to(self.scale.dtype).mean(1)
        if finite_batch and not bool(torch.isfinite(mean).all()):
            # A finite batch whose mean overflows (magnitudes near the dtype's largest
            # value): the mean of the magnitudes relative to their peak, times the peak.
            wide = rows.abs().double()
            peak = wide.amax(1, keepdim=True)
            ratio = wide / peak.clamp_min(torch.finfo(torch.float64).tiny)
            mean = (peak * ratio.mean(1, keepdim=True)).squeeze(1)
        if self.per_channel_dim is None:
            mean = mean.reshape(())
        scale = 2 * mean / math.sqrt(self.quant_max)
        if not finite_batch:
            scale = torch.full_like(scale, math.nan)  # every rank raises below, together
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(scale)
            scale /= torch.distributed.get_world_size()
        if bool(torch.isnan(scale).any()):
            raise ValueError(
                "Expected a finite first batch `x` to initialise `scale`, but found inf or NaN"
            )
        _, high = self._step_bounds(x.dtype)
        scale = scale.clamp(torch.finfo(self.scale.dtype).eps, high)
        self.scale.data = scale.to(device=self.scale.device, dtype=self.scale.dtype)
        self._initialized = True

    def forward(self, x: Tensor) -> Tensor:
        check_floating(x, "x")
        if not self._initialized and x.numel() > 0:
            self._initialize(x)
        scale = self.step_size(x.dtype)
        per_scale = x.numel()
        if self.per_channel_dim is not None:
            dim = self._channel_dim(x)
            shape = [1] * x.dim()
            shape[dim] = -1
            scale = scale.view(shape)
            per_scale = max(per_scale // max(x.shape[dim], 1), 1)
        grad_scale = 1.0 / math.sqrt(max(per_scale, 1) * self.quant_max)
        return ops.quantize(
            x,
            scale,
            quant_min=self.quant_min,
            quant_max=self.quant_max,
            surrogate=self.surrogate,
            grad_scale=grad_scale,
        )

    def get_extra_state(self) -> dict[str, Any]:
        return {"initialized": self._initialized}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._initialized = bool(state.get("initialized", False))

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # A per-channel scale only gets its shape on the first batch: adopt the stored one.
        stored = state_dict.get(prefix + "scale")
        if isinstance(stored, Tensor) and stored.shape != self.scale.shape:
            with torch.no_grad():
                self.scale.data = torch.empty_like(
                    stored, device=self.scale.device, dtype=self.scale.dtype
                )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def extra_repr(self) -> str:
        text = (
            f"bits={self.bits}, signed={self.signed}, per_channel_dim={self.per_channel_dim}, "
            f"learn_scale={self.learn_scale}"
        )
        if self.surrogate.name != "masked":
            text += f", surrogate={self.surrogate!r}"
        return text
