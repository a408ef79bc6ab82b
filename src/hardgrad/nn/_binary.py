r"""Binary and ternary layers: sign weights with a clipped straight-through estimator.

BinaryConnect / binarized networks: Courbariaux et al. (2015),
https://arxiv.org/abs/1511.00363, and Hubara et al. (2016), https://arxiv.org/abs/1602.02830
(clipped STE, latent weights clipped to [-1, 1]); XNOR-Net's per-channel scaling:
Rastegari et al. (2016), https://arxiv.org/abs/1603.05279; ternary weights (TWN):
Li, Zhang & Liu (2016), https://arxiv.org/abs/1605.04711.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .. import ops
from .. import surrogates as _surrogates
from .._core.checkpoint import SettingsInState
from .._core.validation import check_floating, check_positive
from ._hard import SurrogateLike
from ._linear_or_conv import LinearOrConv2dMixin

#: The weight formats of the binary layers.
WEIGHTS = ("binary", "ternary")


class _BinaryLayer(SettingsInState, LinearOrConv2dMixin):
    """What :class:`BinaryLinear` and :class:`BinaryConv2d` share."""

    weight: Tensor
    weights: str
    scale: bool
    activations: bool
    surrogate: _surrogates.Surrogate

    def _setup(
        self, weights: str, scale: bool, activations: bool, surrogate: SurrogateLike
    ) -> None:
        if not isinstance(weights, str) or weights not in WEIGHTS:
            raise ValueError(
                f"Expected `weights` to be one of {', '.join(map(repr, WEIGHTS))}, but found "
                f"{weights!r}"
            )
        for flag, name in ((scale, "scale"), (activations, "activations")):
            if not isinstance(flag, bool):
                raise TypeError(f"Expected `{name}` to be a bool, but found {type(flag).__name__}")
        if scale and weights == "ternary":
            raise ValueError(
                "Expected `scale=False` with weights='ternary' (ternary weights always carry "
                "TWN's own scale alpha), but found scale=True"
            )
        self.weights = weights
        self.scale = scale
        self.activations = activations
        self.surrogate = _surrogates.resolve(surrogate, family="step", op=type(self).__name__)

    def quantized_weight(self) -> Tensor:
        r"""The weight the forward uses: :math:`\operatorname{binarize}(W)` (times
        :math:`\alpha` with ``scale=True``) or TWN's ternary weight, per output channel."""
        if self.weights == "ternary":
            return ops.ternarize(self.weight, per_channel_dim=0)
        binary = ops.binarize(self.weight, surrogate=self.surrogate)
        if not self.scale:
            return binary
        dims = tuple(range(1, self.weight.dim()))
        alpha = self.weight.abs().mean(dims, keepdim=True)
        return alpha * binary

    def _input(self, x: Tensor) -> Tensor:
        check_floating(x, "x")
        return ops.binarize(x, surrogate=self.surrogate) if self.activations else x

    def forward(self, x: Tensor) -> Tensor:
        x = self._input(x)
        self._check_input_shape(x)
        return self._float_forward(x, self.quantized_weight())

    def _checkpoint_settings(self) -> dict[str, Any]:
        """What the latent weights are read as."""
        return {"weights": self.weights, "scale": self.scale, "activations": self.activations}

    def _settings_repr(self) -> str:
        text = f"weights={self.weights!r}"
        if self.scale:
            text += ", scale=True"
        if self.activations:
            text += ", activations=True"
        if self.surrogate.name != "clipped":
            text += f", surrogate={self.surrogate!r}"
        return text


_DOC_MATH = r"""
    **Forward.** The layer keeps real-valued *latent* weights :math:`W` (the ``weight``
    parameter, in the ``state_dict``) and computes with

    .. math::

        W_b = \operatorname{binarize}(W) \in \{-1, +1\}, \qquad
        W_b = \alpha \odot \operatorname{binarize}(W), \quad
        \alpha_o = \tfrac{1}{n} \textstyle\sum_{i} |W_{o,i}| \ (\texttt{scale=True}),

    :func:`hardgrad.binarize` (+1 at 0, never 0), and with ``scale=True`` XNOR-Net's one
    scale per output channel :math:`o`, the mean magnitude of its :math:`n` latent weights
    (Rastegari et al. 2016). ``weights="ternary"`` uses TWN's
    :func:`hardgrad.ternarize` per output channel instead (:math:`\{-\alpha_o, 0, \alpha_o\}`,
    :math:`\Delta_o = 0.7\,\overline{|W_o|}`). With ``activations=True`` the input is
    binarized too, :math:`x_b = \operatorname{binarize}(x)` (XNOR-Net's input scaling
    :math:`K` is not applied; with zero padding, a convolution pads :math:`x_b` with 0).

    **Backward.** The clipped straight-through estimator (Hubara et al. 2016):
    :math:`\partial L/\partial W = \partial L/\partial W_b \cdot \mathbb 1[|W| \le 1]` (the
    ``surrogate``'s derivative, ``"clipped"`` by default), and the same for a binarized
    input. With ``scale=True`` :math:`\alpha` is differentiated too, as in XNOR-Net's
    update: :math:`\partial L/\partial W_{o,i} = g_{o,i}\,\alpha_o\,\mathbb 1[|W_{o,i}| \le 1]
    + \tfrac{1}{n} \operatorname{sign}(W_{o,i}) \sum_j g_{o,j} \operatorname{binarize}(W_{o,j})`
    with :math:`g = \partial L/\partial W_b`. Ternary weights pass the gradient straight
    through. All through hardgrad's ops; no second gradient implementation.

    **Latent-weight clipping.** Binarized networks clip the latent weights to
    :math:`[-1, 1]` after every optimizer step (beyond it the clipped STE gives them no
    gradient, and they would drift): call :func:`clip_latent_weights_` after
    ``optimizer.step()``, or once :func:`clip_latent_weights_after_step` to hook it into
    the optimizer. Ternary layers are left unclipped (TWN does not clip).
"""

# The Args entries of what both layers add to the float layer's arguments.
_DOC_ARGS = r"""        weights: ``"binary"`` (default) or ``"ternary"``.
        scale: XNOR-Net's per-output-channel :math:`\alpha` (binary weights only).
        activations: binarize the input too.
        surrogate: the ``"step"`` surrogate of :func:`hardgrad.binarize` (``"clipped"``).
"""


class BinaryLinear(_BinaryLayer, nn.Linear):
    __doc__ = (
        r"""``nn.Linear`` with binary (or ternary) weights and, optionally, binary inputs.
    """
        + _DOC_MATH
        + r"""
    Args:
        in_features, out_features, bias: as for ``nn.Linear`` (the bias stays real).
"""
        + _DOC_ARGS
        + r"""
    Example:
        >>> import torch, hardgrad as hg
        >>> layer = hg.nn.BinaryLinear(3, 2, bias=False, scale=True)
        >>> with torch.no_grad():
        ...     _ = layer.weight.copy_(torch.tensor([[0.5, -0.25, 0.0], [-2.0, 1.0, 0.5]]))
        >>> layer.quantized_weight()
        tensor([[ 0.2500, -0.2500,  0.2500],
                [-1.1667,  1.1667,  1.1667]], grad_fn=<MulBackward0>)
        >>> layer(torch.tensor([[1.0, 1.0, 1.0]]))
        tensor([[0.2500, 1.1667]], grad_fn=<MmBackward0>)
        >>> layer
        BinaryLinear(in_features=3, out_features=2, bias=False, weights='binary', scale=True)
    """
    )

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        weights: str = "binary",
        scale: bool = False,
        activations: bool = False,
        surrogate: SurrogateLike = "clipped",
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        nn.Linear.__init__(self, in_features, out_features, bias, device=device, dtype=dtype)
        self._setup(weights, scale, activations, surrogate)


class BinaryConv2d(_BinaryLayer, nn.Conv2d):
    __doc__ = (
        r"""``nn.Conv2d`` with binary (or ternary) weights and, optionally, binary inputs.
    """
        + _DOC_MATH.replace(
            r"\tfrac{1}{n} \textstyle\sum_{i}", r"\tfrac{1}{n} \textstyle\sum_{c,k,l}"
        )
        + r"""
    Here :math:`\alpha_o` averages over the input channels and the kernel of output channel
    :math:`o` (:math:`n = C_{in} k_h k_w / \text{groups}`).

    Args:
        in_channels, out_channels, kernel_size: as for ``nn.Conv2d``.
        stride, padding, dilation, groups, bias, padding_mode: as for ``nn.Conv2d``.
"""
        + _DOC_ARGS
        + r"""
    Example:
        >>> import torch, hardgrad as hg
        >>> conv = hg.nn.BinaryConv2d(1, 2, 3, padding=1, scale=True)
        >>> conv(torch.randn(4, 1, 8, 8)).shape
        torch.Size([4, 2, 8, 8])
        >>> w = conv.quantized_weight()
        >>> torch.equal(w.abs().detach(), conv.weight.abs().mean((1, 2, 3), keepdim=True).expand_as(w))
        True
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
        weights: str = "binary",
        scale: bool = False,
        activations: bool = False,
        surrogate: SurrogateLike = "clipped",
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
        self._setup(weights, scale, activations, surrogate)


def clip_latent_weights_(module: nn.Module, bound: float = 1.0) -> nn.Module:
    r"""Clip the latent weights of every binary-weight layer in ``module`` to
    :math:`[-b, b]` in place (``bound`` :math:`b`, default 1), as binarized networks do after
    each optimizer step (Courbariaux et al. 2015, https://arxiv.org/abs/1511.00363;
    Hubara et al. 2016). Layers with ``weights="ternary"`` and every other parameter are
    left alone. Returns ``module``.

    Example:
        >>> import torch, hardgrad as hg
        >>> model = torch.nn.Sequential(hg.nn.BinaryLinear(4, 4), torch.nn.Linear(4, 2))
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=10.0)
        >>> model(torch.randn(8, 4)).square().sum().backward(); optimizer.step()
        >>> _ = hg.nn.clip_latent_weights_(model)
        >>> bool(model[0].weight.abs().max() <= 1)
        True
    """
    b = check_positive(bound, "bound")
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"Expected `module` to be a torch.nn.Module, but found {type(module).__name__}"
        )
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, _BinaryLayer) and layer.weights == "binary":
                layer.weight.clamp_(-b, b)
    return module


def clip_latent_weights_after_step(
    optimizer: torch.optim.Optimizer, module: nn.Module, bound: float = 1.0
) -> Any:
    """Hook :func:`clip_latent_weights_` into ``optimizer``: it runs after every
    ``optimizer.step()``. Returns the hook's handle (``handle.remove()`` undoes it).

    Example:
        >>> import torch, hardgrad as hg
        >>> model = hg.nn.BinaryLinear(4, 4)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=10.0)
        >>> handle = hg.nn.clip_latent_weights_after_step(optimizer, model)
        >>> model(torch.randn(8, 4)).square().sum().backward(); optimizer.step()
        >>> bool(model.weight.abs().max() <= 1)
        True
    """
    check_positive(bound, "bound")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"Expected `optimizer` to be a torch.optim.Optimizer, but found "
            f"{type(optimizer).__name__}"
        )

    def hook(*_: Any) -> None:
        clip_latent_weights_(module, bound)

    return optimizer.register_step_post_hook(hook)
