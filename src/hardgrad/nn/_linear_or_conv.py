"""What the layers built on ``nn.Linear`` or ``nn.Conv2d`` (binary, quantized and L0-gated
layers) ask of the float layer beneath them, written once for both kinds."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .._core.validation import check_conv2d_input, check_linear_input


class LinearOrConv2dMixin(nn.Module):
    """Mixin for a subclass of ``nn.Linear`` or ``nn.Conv2d`` that computes the float
    layer's operation with weights of its own making (list it before the float layer).

    Subclasses implement :meth:`_settings_repr`; their ``extra_repr`` is the float layer's
    followed by those settings.
    """

    def _check_input_shape(self, x: Tensor) -> None:
        """``x`` of the float layer: ``in_features`` in its last dimension, or
        ``(N, C, H, W)`` / ``(C, H, W)`` with ``in_channels``."""
        if isinstance(self, nn.Conv2d):
            check_conv2d_input(x, self.in_channels)
        else:
            assert isinstance(self, nn.Linear)
            check_linear_input(x, self.in_features)

    def _float_forward(self, x: Tensor, weight: Tensor) -> Tensor:
        """The float layer's operation with ``weight`` in place of its own and its bias
        (``F.linear``, or the convolution with the layer's stride, padding, dilation,
        groups and padding mode)."""
        if isinstance(self, nn.Conv2d):
            return self._conv_forward(x, weight, self.bias)
        assert isinstance(self, nn.Linear)
        return F.linear(x, weight, self.bias)

    def _settings_repr(self) -> str:
        """The settings this layer adds, as ``extra_repr`` shows them."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        # super(): nn.Linear's or nn.Conv2d's, which follow this mixin in the layer's bases.
        return f"{super().extra_repr()}, {self._settings_repr()}"
