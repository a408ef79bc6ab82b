r"""Quantization-aware training layers: LSQ weight and activation quantizers around
``Linear``/``Conv2d``, and freezing to integers (the converter for existing models,
``quantize_``, is in :mod:`hardgrad.nn._qat_convert`).

LSQ: Esser et al. (2020), https://arxiv.org/abs/1902.08153; fake quantization and its
straight-through estimator: Jacob et al. (2018), https://arxiv.org/abs/1712.05877.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .._core.checkpoint import SettingsInState
from .._core.validation import check_floating, check_int
from ._linear_or_conv import LinearOrConv2dMixin
from ._quantize import Quantize


def _check_bits(value: Any, name: str, *, signed: bool) -> int | None:
    if value is None:
        return None
    return check_int(value, name, low=2 if signed else 1, high=16)


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, but found {type(value).__name__}")
    return value


class _QuantLayer(SettingsInState, LinearOrConv2dMixin):
    """What :class:`QuantLinear` and :class:`QuantConv2d` share."""

    weight: Tensor
    weight_quantizer: Quantize | None
    act_quantizer: Quantize | None
    weight_bits: int | None
    act_bits: int | None
    act_signed: bool
    frozen: bool
    _frozen_dtype: torch.dtype

    def _setup(self, weight_bits: Any, act_bits: Any, act_signed: Any, learn_scale: Any) -> None:
        _check_flag(act_signed, "act_signed")
        _check_flag(learn_scale, "learn_scale")
        self.weight_bits = _check_bits(weight_bits, "weight_bits", signed=True)
        self.act_bits = _check_bits(act_bits, "act_bits", signed=act_signed)
        self.act_signed = act_signed
        self.frozen = False
        weight = self.weight
        assert weight is not None
        self.weight_quantizer = None
        if self.weight_bits is not None:
            self.weight_quantizer = Quantize(
                self.weight_bits,
                signed=True,
                per_channel_dim=0,
                learn_scale=learn_scale,
                num_channels=weight.shape[0],
            ).to(weight.device)
            if not weight.is_meta:  # (on the meta device: set by reset_parameters)
                self.weight_quantizer.init_from(weight.detach())
        self.act_quantizer = None
        if self.act_bits is not None:
            self.act_quantizer = Quantize(
                self.act_bits, signed=act_signed, learn_scale=learn_scale
            ).to(weight.device)

    def reset_parameters(self) -> None:
        """New weights as the float layer draws them, the weight scales set from them and
        the activation scale back to its first-batch placeholder, as at construction (for
        deferred initialisation: ``torch.device("meta")``, ``to_empty``, then this)."""
        if getattr(self, "frozen", False):
            return  # the integer weights are the state
        super().reset_parameters()  # type: ignore[misc]  # nn.Linear's / nn.Conv2d's
        weight_quantizer = getattr(self, "weight_quantizer", None)  # (None in the base init)
        if weight_quantizer is not None and not self.weight.is_meta:
            weight_quantizer.init_from(self.weight.detach())
        act_quantizer = getattr(self, "act_quantizer", None)
        if act_quantizer is not None:
            act_quantizer.reset_parameters()

    def quantized_weight(self, dtype: torch.dtype | None = None) -> Tensor:
        """The weight the forward uses (fake-quantized, or rebuilt from the frozen integers)."""
        if self.frozen:
            q: Tensor = getattr(self, "weight_int")  # noqa: B009 (a buffer)
            s: Tensor = getattr(self, "weight_scale")  # noqa: B009
            shape = (-1,) + (1,) * (q.dim() - 1)
            weight = q.to(s.dtype) * s.view(shape)  # as the fake quantization computes it
            return weight.to(self._frozen_dtype if dtype is None else dtype)
        weight = self.weight
        assert weight is not None
        if self.weight_quantizer is None:
            return weight
        out: Tensor = self.weight_quantizer(weight)
        return out

    def _quantize_input(self, x: Tensor) -> Tensor:
        check_floating(x, "x")
        if self.act_quantizer is None:
            return x
        out: Tensor = self.act_quantizer(x)
        return out

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_shape(x)
        x = self._quantize_input(x)
        return self._float_forward(x, self.quantized_weight(x.dtype))

    @torch.no_grad()
    def integer_weight(self) -> tuple[Tensor, Tensor]:
        r"""The weight as integers and per-output-channel scales: ``(q, s)`` with
        ``q * s.view(-1, 1, ...)`` equal to :meth:`quantized_weight` bit for bit; ``q`` is
        ``int8`` for up to 8 bits, else ``int16``; ``s`` has the weight's dtype (float32
        for half weights)."""
        if self.frozen:
            return getattr(self, "weight_int").clone(), getattr(self, "weight_scale").clone()  # noqa: B009
        if self.weight_quantizer is None:
            raise ValueError(
                "Expected a layer with a weight quantizer (`weight_bits` set), but found "
                "weight_bits=None"
            )
        weight = self.weight
        fake = self.weight_quantizer(weight)
        scale = self.weight_quantizer.step_size(weight.dtype)
        compute = torch.float32 if weight.dtype in (torch.float16, torch.bfloat16) else weight.dtype
        scale = scale.to(compute)
        shape = (-1,) + (1,) * (weight.dim() - 1)
        q = torch.round(fake.to(compute) / scale.view(shape))
        int_dtype = torch.int8 if self.weight_quantizer.bits <= 8 else torch.int16
        return q.to(int_dtype), scale.detach().clone()

    @torch.no_grad()
    def freeze(self) -> _QuantLayer:
        r"""Replace the latent float weight by its integers and scales, in place.

        Afterwards the layer holds buffers ``weight_int`` (``int8``/``int16``) and
        ``weight_scale`` (one per output channel) instead of the ``weight`` parameter and
        its quantizer, and its forward computes with ``weight_int * weight_scale``, which
        equals the fake-quantized weight bit for bit: the outputs are unchanged. The
        activation quantizer stays (its scale is the input's step size). The
        ``state_dict`` then holds the integers; load it into a frozen layer. Returns the layer.
        """
        if self.frozen:
            return self
        q, scale = self.integer_weight()
        self._frozen_dtype = self.weight.dtype
        self.register_buffer("weight_int", q)
        self.register_buffer("weight_scale", scale)
        self.register_parameter("weight", None)
        self.weight_quantizer = None
        self.frozen = True
        return self

    def _checkpoint_settings(self) -> dict[str, Any]:
        """The bit widths and whether the weight is stored as integers."""
        return {
            "weight_bits": self.weight_bits,
            "act_bits": self.act_bits,
            "act_signed": self.act_signed,
            "frozen": self.frozen,
        }

    def _settings_repr(self) -> str:
        text = f"weight_bits={self.weight_bits}, act_bits={self.act_bits}"
        if not self.act_signed:
            text += ", act_signed=False"
        if self.frozen:
            text += ", frozen=True"
        return text


_DOC_MATH = r"""
    **Forward.** The input is fake-quantized per tensor to ``act_bits``-bit integers
    (signed, or unsigned with ``act_signed=False`` for post-ReLU inputs) and the weight per
    output channel to ``weight_bits``-bit signed integers, each by a
    :class:`hardgrad.nn.Quantize` with a learned step size (LSQ, Esser et al. 2020,
    https://arxiv.org/abs/1902.08153):

    .. math::

        \hat x = \operatorname{clamp}(\lfloor x / s_x \rceil, q^x_-, q^x_+)\, s_x, \qquad
        \hat W_o = \operatorname{clamp}(\lfloor W_o / s_o \rceil, q^w_-, q^w_+)\, s_o,

    and the layer computes its float operation on :math:`\hat x` and :math:`\hat W`; the
    bias stays real. ``None`` for a bit width leaves that side in floating point.

    **Backward.** Masked straight-through for :math:`x` and :math:`W` (the gradient passes
    where the value is inside the integer range), and LSQ's step-size gradient for
    :math:`s_x` and :math:`s_o`, scaled by :math:`1/\sqrt{N q_+}` (see
    :class:`~hardgrad.nn.Quantize`), all through :func:`hardgrad.quantize`.

    **Initialisation.** The weight scales are set from the weights at construction
    (:math:`s_o = 2\,\overline{|W_o|}/\sqrt{q_+}`); :func:`quantize_` sets them again from
    the trained weights it keeps. The activation scale is set from the first batch
    (averaged across ranks under ``torch.distributed``): run one batch before
    ``torch.compile(fullgraph=True)``, ``torch.export`` or wrapping in DDP.

    **Deployment.** :meth:`integer_weight` gives the integer weights and their scales;
    :meth:`freeze` stores them in place of the float weight (outputs unchanged, bit for
    bit). A trained layer runs under ``torch.export.export``.
"""


class QuantLinear(_QuantLayer, nn.Linear):
    __doc__ = (
        r"""``nn.Linear`` with LSQ fake quantization of its input and weight.
    """
        + _DOC_MATH
        + r"""
    Args:
        in_features, out_features, bias: as for ``nn.Linear``.
        weight_bits: weight bit width (2 to 16), or ``None``.
        act_bits: input bit width (2 to 16, or 1 to 16 unsigned), or ``None``.
        act_signed: signed input range (default) or unsigned (inputs after a ReLU).
        learn_scale: learn the step sizes (LSQ); ``False`` keeps them at their initial
            values (calibration only).

    Example:
        >>> import torch, hardgrad as hg
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> layer = hg.nn.QuantLinear(4, 3, weight_bits=4, act_bits=8)
        >>> layer
        QuantLinear(
          in_features=4, out_features=3, bias=True, weight_bits=4, act_bits=8
          (weight_quantizer): Quantize(bits=4, signed=True, per_channel_dim=0, learn_scale=True)
          (act_quantizer): Quantize(bits=8, signed=True, per_channel_dim=None, learn_scale=True)
        )
        >>> y = layer(torch.randn(5, 4))
        >>> q, s = layer.integer_weight()
        >>> q.dtype, int(q.min()) >= -8 and int(q.max()) <= 7, s.shape
        (torch.int8, True, torch.Size([3]))
        >>> torch.equal(q * s[:, None], layer.quantized_weight().detach())
        True
    """
    )

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        weight_bits: int | None = 8,
        act_bits: int | None = 8,
        act_signed: bool = True,
        learn_scale: bool = True,
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        nn.Linear.__init__(self, in_features, out_features, bias, device=device, dtype=dtype)
        self._setup(weight_bits, act_bits, act_signed, learn_scale)


class QuantConv2d(_QuantLayer, nn.Conv2d):
    __doc__ = (
        r"""``nn.Conv2d`` with LSQ fake quantization of its input and weight.
    """
        + _DOC_MATH
        + r"""
    Args:
        in_channels, out_channels, kernel_size: as for ``nn.Conv2d``.
        stride, padding, dilation, groups, bias, padding_mode: as for ``nn.Conv2d``.
        weight_bits: weight bit width (2 to 16), or ``None``.
        act_bits: input bit width (2 to 16, or 1 to 16 unsigned), or ``None``.
        act_signed: signed input range (default) or unsigned (inputs after a ReLU).
        learn_scale: learn the step sizes (LSQ).

    Example:
        >>> import torch, hardgrad as hg
        >>> conv = hg.nn.QuantConv2d(3, 8, 3, padding=1, weight_bits=4, act_bits=None)
        >>> conv(torch.randn(2, 3, 16, 16)).shape
        torch.Size([2, 8, 16, 16])
        >>> [len(torch.unique(w)) <= 16 for w in conv.quantized_weight()][:3]
        [True, True, True]
    """
    )

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: Any = "zeros",
        *,
        weight_bits: int | None = 8,
        act_bits: int | None = 8,
        act_signed: bool = True,
        learn_scale: bool = True,
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        nn.Conv2d.__init__(
            self,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device=device,
            dtype=dtype,
        )
        self._setup(weight_bits, act_bits, act_signed, learn_scale)
