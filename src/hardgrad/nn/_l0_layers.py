r"""Linear and convolutional layers with L0-gated weight groups (Louizos, Welling & Kingma
2018, https://arxiv.org/abs/1712.01312), as the authors' ``L0Dense`` and ``L0Conv2d``
(https://github.com/AMLab-Amsterdam/L0_regularization): Hard Concrete gates on the input
features of a linear layer and on the output channels of a convolution."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import gates as _gates
from .._core.checkpoint import SettingsInState
from .._core.kernels import cast, opmath, opmath_dtype
from .._core.validation import (
    check_conv2d_input,
    check_floating,
    check_linear_input,
    check_real,
)
from ._linear_or_conv import LinearOrConv2dMixin

#: ``constrain_parameters`` clamps :math:`\log\alpha` to this range, as the reference does.
LOG_ALPHA_RANGE = (math.log(1e-2), math.log(1e2))


def _check_settings(
    droprate_init: Any,
    temperature: Any,
    limit_a: Any,
    limit_b: Any,
    weight_decay: Any,
    lamba: Any,
    local_rep: Any,
    generator: Any,
) -> dict[str, Any]:
    droprate = check_real(droprate_init, "droprate_init")
    if not 0 < droprate < 1:
        raise ValueError(
            f"Expected `droprate_init` in (0, 1), but found droprate_init={droprate_init!r}"
        )
    beta, gamma, zeta = _gates._check_stretch(temperature, limit_a, limit_b)
    decay = check_real(weight_decay, "weight_decay")
    strength = check_real(lamba, "lamba")
    for value, name in ((decay, "weight_decay"), (strength, "lamba")):
        if not 0 <= value < math.inf:
            raise ValueError(f"Expected `{name}` >= 0 and finite, but found {name}={value!r}")
    if not isinstance(local_rep, bool):
        raise TypeError(f"Expected `local_rep` to be a bool, but found {type(local_rep).__name__}")
    _gates._check_generator(generator)
    return {
        "droprate_init": droprate,
        "temperature": beta,
        "limit_a": gamma,
        "limit_b": zeta,
        "weight_decay": decay,
        "lamba": strength,
        "local_rep": local_rep,
        "generator": generator,
    }


class _L0Layer(SettingsInState, LinearOrConv2dMixin):
    """What :class:`L0Linear` and :class:`L0Conv2d` share: the gates, the penalties."""

    weight: Tensor
    bias: Any
    log_alpha: nn.Parameter
    droprate_init: float
    temperature: float
    limit_a: float
    limit_b: float
    weight_decay: float
    lamba: float
    local_rep: bool
    generator: torch.Generator | None

    def _setup(self, settings: dict[str, Any], gates: int, factory: dict[str, Any]) -> None:
        for name, value in settings.items():
            setattr(self, name, value)
        self.log_alpha = nn.Parameter(torch.empty(gates, **factory))
        self._reset_log_alpha()

    @torch.no_grad()
    def _reset_log_alpha(self) -> None:
        p = self.droprate_init
        self.log_alpha.normal_(math.log(1 - p) - math.log(p), 1e-2)

    def reset_parameters(self) -> None:
        """He-normal weight, zero bias, ``log_alpha`` from ``droprate_init``."""
        # The reference's He initialisation (its fan is the number of inputs of an output).
        nn.init.kaiming_normal_(self.weight, mode="fan_in")
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        if "log_alpha" in self._parameters:  # (not yet made while nn.Linear.__init__ runs)
            self._reset_log_alpha()

    def _checkpoint_settings(self) -> dict[str, Any]:
        """The distribution ``log_alpha`` parameterises."""
        return {"temperature": self.temperature, "limit_a": self.limit_a, "limit_b": self.limit_b}

    def gates(self, batch_shape: tuple[int, ...] = ()) -> Tensor:
        """The gates of this call, in the compute dtype (float32 for half types): a Hard
        Concrete sample of shape ``(*batch_shape, n)`` in training (``batch_shape`` for
        ``local_rep=True``), the deterministic test-time gate of shape ``(n,)`` in eval."""
        q = opmath(self.log_alpha)
        if not self.training:
            return _gates.mean_gate(q, self.limit_a, self.limit_b)
        if batch_shape:
            q = q.expand(*batch_shape, q.shape[0])
        return _gates.sample(q, self.temperature, self.limit_a, self.limit_b, self.generator)

    def _probabilities(self) -> Tensor:
        q = opmath(self.log_alpha)
        return _gates.nonzero_probability(q, self.temperature, self.limit_a, self.limit_b)

    def l0(self) -> Tensor:
        r"""The expected number of non-zero gates, :math:`\sum_g P(z_g \ne 0)`,
        :math:`P(z_g \ne 0) = \sigma(\log\alpha_g - \beta\log(-\gamma/\zeta))`
        (differentiable; float32 for half types)."""
        return self._probabilities().sum()

    def _group_squares(self) -> Tensor:
        raise NotImplementedError

    def _weights_per_gate(self) -> int:
        raise NotImplementedError

    def penalty(self) -> Tensor:
        """The expected L0 norm of the weights with the expected-L2 reweighting, the
        quantity to add to the loss (divided by the training-set size ``N``, as the
        reference's models do; see the class docstring)."""
        p = self._probabilities()
        w2 = self._group_squares()
        cost = self.lamba * self._weights_per_gate() + 0.5 * self.weight_decay * w2
        return (p * cost).sum() + self._bias_penalty(p)

    def _bias_penalty(self, p: Tensor) -> Tensor | float:
        raise NotImplementedError

    def regularization(self) -> Tensor:
        """``-penalty()``: the reference's ``regularization()``, a log-prior, with its sign
        (its models add ``-regularization() / N`` to the loss)."""
        return -self.penalty()

    @torch.no_grad()
    def constrain_parameters(self) -> None:
        r"""Clamp :math:`\log\alpha` to :math:`[\log 0.01, \log 100]` in place, as the
        reference's training scripts do after every optimizer step."""
        self.log_alpha.clamp_(*LOG_ALPHA_RANGE)

    def sparsity(self) -> float:
        """The share of gates that are exactly 0 at test time."""
        with torch.no_grad():
            mean = _gates.mean_gate(opmath(self.log_alpha), self.limit_a, self.limit_b)
        return float((mean == 0).float().mean())

    def _settings_repr(self) -> str:
        text = (
            f"droprate_init={self.droprate_init:.4g}, temperature={self.temperature:.4g}, "
            f"weight_decay={self.weight_decay:.4g}, lamba={self.lamba:.4g}"
        )
        if (self.limit_a, self.limit_b) != (_gates.GAMMA, _gates.ZETA):
            text += f", limit_a={self.limit_a}, limit_b={self.limit_b}"
        if self.local_rep:
            text += ", local_rep=True"
        return text


_DOC_COMMON = r"""
    **Gates.** :math:`\log\alpha` (``log_alpha``, one per gate) parameterises a Hard
    Concrete gate :math:`z \in [0, 1]` (:func:`hardgrad.hard_concrete` with
    :math:`\beta` = ``temperature``, :math:`(\gamma, \zeta)` = ``(limit_a, limit_b)``). In
    training each call draws one gate sample shared by the batch (``local_rep=False``, the
    reference's default), or one per example (``local_rep=True``); the backward is the
    pathwise gradient of the sample (zero where a gate is clipped). In eval mode the gate
    is deterministic, :math:`\hat z = \min(1, \max(0, \sigma(\log\alpha)(\zeta - \gamma) +
    \gamma))` (the temperature does not enter). Initially :math:`\log\alpha \sim
    N(\log\frac{1 - p}{p}, 0.01^2)`, ``p = droprate_init``; the weight is He-normal (fan-in)
    and the bias 0, as in the reference.

    **Penalties.** :meth:`l0` is the expected number of non-zero gates,
    :math:`\sum_g \pi_g`, :math:`\pi_g = P(z_g \ne 0) = \sigma(\log\alpha_g -
    \beta\log(-\gamma/\zeta))`. :meth:`penalty` is the reference's regulariser with the
    sign of a loss: each weight :math:`\theta_j` of group :math:`g` costs
    :math:`\lambda_0 + \tfrac{\lambda_2}{2}\theta_j^2` if its gate is on,

    .. math::

        R = \sum_g \pi_g \sum_{j \in g} \Big(\lambda_0 + \frac{\lambda_2}{2}\theta_j^2\Big)
        + R_{\text{bias}},

    with :math:`\lambda_0` = ``lamba`` and :math:`\lambda_2` = ``weight_decay`` (the
    paper's eq. 7 and section 3.2's expected L2, whose :math:`\hat z^2` the reference
    replaces by :math:`\pi`). The reference's models add :math:`R / N` (``N`` the size of
    the training set) to the mean loss of a mini-batch, with ``weight_decay`` there set to
    ``N`` times the L2 coefficient for MLPs:
    ``loss = ce + sum(m.penalty() for m in l0_layers) / N``. :meth:`regularization` is
    :math:`-R`, the reference's method with its sign. :meth:`constrain_parameters` clamps
    :math:`\log\alpha` as the reference does after each optimizer step.

    Computes in the input's dtype (float32 for half types, rounded once); the penalties
    are float32 for half-type parameters. Randomness from ``generator`` (or the global
    RNG).
"""

# The Args entries of what both layers add to the float layer's arguments.
_DOC_ARGS = r"""        droprate_init: the initial probability of a gate being dropped, in (0, 1).
        temperature: :math:`\beta` of the Hard Concrete (the reference's 2/3).
        limit_a, limit_b: the stretch :math:`(\gamma, \zeta)`, -0.1 and 1.1.
        weight_decay: :math:`\lambda_2`, the weight of the expected L2 in :meth:`penalty`.
        lamba: :math:`\lambda_0`, the L0 cost of one weight (named as in the reference).
        local_rep: one gate sample per example in training (else one per call).
        generator: the source of the gate noise.
        device, dtype: of the parameters.
"""


class L0Linear(_L0Layer, nn.Linear):
    __doc__ = (
        r"""``nn.Linear`` whose input features are switched on and off by learned Hard
    Concrete gates (the reference's ``L0Dense``).

    **Forward.** :math:`y = (x \odot z) W^\top + b`, one gate per input feature (a gate at
    0 removes a column of :math:`W`: the input is pruned); the bias is not gated. With
    ``local_rep=False`` in training the gates multiply the weight's columns,
    :math:`y = x (W \operatorname{diag} z)^\top + b`, as the reference does.
    """
        + _DOC_COMMON
        + r"""
    Here a gate's group is the column :math:`W_{:,i}` (``out_features`` weights) and
    :math:`R_{\text{bias}} = \tfrac{\lambda_2}{2}\lVert b \rVert^2` (ungated, no L0 cost),
    as in the reference.

    :meth:`expected_flops` counts, as the reference does, per example,
    :math:`(2L - 1)\,\text{out} + \text{out}` with a bias, :math:`L` = :meth:`l0`
    (:math:`L` multiplications and :math:`L - 1` additions per output; negative below
    :math:`L = 1/2`, as there). The reference's expected L0 of the weights is
    ``l0() * out_features`` (``+ out_features`` with a bias).

    Args:
        in_features, out_features, bias: as for ``nn.Linear``.
"""
        + _DOC_ARGS
        + r"""
    Example:
        >>> import torch, hardgrad as hg
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> layer = hg.nn.L0Linear(5, 3, generator=torch.Generator().manual_seed(0))
        >>> layer(torch.randn(4, 5)).shape
        torch.Size([4, 3])
        >>> layer.l0()  # 5 gates, each on with probability ~0.83
        tensor(4.1556, grad_fn=<SumBackward0>)
        >>> layer.expected_flops()  # (2 * 4.16 - 1) * 3 + 3
        tensor(24.9338, grad_fn=<AddBackward0>)
        >>> layer.eval().gates()  # the test-time gate at log_alpha ~ 0
        tensor([0.5004, 0.4983, 0.5011, 0.4973, 0.4955], grad_fn=<ClampBackward1>)
        >>> layer
        L0Linear(in_features=5, out_features=3, bias=True, droprate_init=0.5, temperature=0.6667, weight_decay=1, lamba=1)
    """
    )

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        droprate_init: float = 0.5,
        temperature: float = _gates.BETA,
        limit_a: float = _gates.GAMMA,
        limit_b: float = _gates.ZETA,
        weight_decay: float = 1.0,
        lamba: float = 1.0,
        local_rep: bool = False,
        generator: torch.Generator | None = None,
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        settings = _check_settings(
            droprate_init, temperature, limit_a, limit_b, weight_decay, lamba, local_rep, generator
        )
        nn.Linear.__init__(self, in_features, out_features, bias, device=device, dtype=dtype)
        self._setup(settings, in_features, {"device": device, "dtype": dtype})

    def forward(self, x: Tensor) -> Tensor:
        check_floating(x, "x")
        check_linear_input(x, self.in_features)
        dtype = opmath_dtype(x.dtype)
        w = cast(self.weight, dtype)
        b = None if self.bias is None else cast(self.bias, dtype)
        xc = cast(x, dtype)
        if self.training and not self.local_rep:
            y = F.linear(xc, w * self.gates(), b)
        else:
            z = self.gates(tuple(x.shape[:-1]) if self.training else ())
            y = F.linear(xc * z, w, b)
        return cast(y, x.dtype)

    def _group_squares(self) -> Tensor:
        return opmath(self.weight).square().sum(0)

    def _weights_per_gate(self) -> int:
        return self.out_features

    def _bias_penalty(self, p: Tensor) -> Tensor | float:
        if self.bias is None:
            return 0.0
        return 0.5 * self.weight_decay * opmath(self.bias).square().sum()

    def expected_flops(self) -> Tensor:
        """The expected floating-point operations of one example's forward (see above)."""
        flops = (2 * self.l0() - 1) * self.out_features
        return flops + self.out_features if self.bias is not None else flops


class L0Conv2d(_L0Layer, nn.Conv2d):
    __doc__ = (
        r"""``nn.Conv2d`` whose output channels are switched on and off by learned Hard
    Concrete gates (the reference's ``L0Conv2d``).

    **Forward.** :math:`y_{:,o} = z_o\,(W_o \star x + b_o)`, one gate per output channel
    (a gate at 0 removes a filter and its bias). With ``local_rep=False`` in training the
    gates multiply the filters and biases, :math:`(z_o W_o) \star x + z_o b_o`, the same
    map. (The reference drops the bias in that one mode, passing ``None``; here the bias
    is used, gated, in every mode, as the reference does in its others.)
    """
        + _DOC_COMMON
        + r"""
    Here a gate's group is the filter :math:`W_o` (:math:`n = C_{in} k_h k_w /
    \text{groups}` weights) and :math:`R_{\text{bias}} = \sum_o \pi_o (\lambda_0 +
    \tfrac{\lambda_2}{2} b_o^2)`: a gated bias costs like a weight. (The reference
    subtracts :math:`\lambda_0 \pi_o` there instead, rewarding a kept bias; a sign slip,
    small beside the filter's :math:`n\lambda_0\pi_o`.)

    :meth:`expected_flops` counts, per example,
    :math:`L\,H'W'\,(2n - 1) + L\,H'W'` with a bias, :math:`L` = :meth:`l0` and
    :math:`H' \times W'` the output's spatial size for the input size given (or that of
    the last input seen in eager mode): the reference's count, with the output size as
    ``nn.Conv2d`` computes it (the reference takes :math:`(H - k + 2p)/s + 1` unrounded,
    ignores dilation and groups, and reads :math:`H, W` from ``input.size()[1:3]``, the
    channels and height of an NCHW input). The reference's expected L0 of the weights is
    ``l0() * n`` (``+ l0()`` with a bias).

    Args:
        in_channels, out_channels, kernel_size: as for ``nn.Conv2d``.
        stride, padding, dilation, groups, bias, padding_mode: as for ``nn.Conv2d``.
"""
        + _DOC_ARGS
        + r"""
    Example:
        >>> import torch, hardgrad as hg
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> conv = hg.nn.L0Conv2d(1, 4, 3, padding=1, generator=torch.Generator().manual_seed(0))
        >>> conv(torch.randn(2, 1, 8, 8)).shape
        torch.Size([2, 4, 8, 8])
        >>> conv.l0()
        tensor(3.3233, grad_fn=<SumBackward0>)
        >>> conv.expected_flops()  # 3.33 open filters * 64 positions * (2 * 9 - 1 + 1)
        tensor(3828.4756, grad_fn=<AddBackward0>)
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
        droprate_init: float = 0.5,
        temperature: float = _gates.BETA,
        limit_a: float = _gates.GAMMA,
        limit_b: float = _gates.ZETA,
        weight_decay: float = 1.0,
        lamba: float = 1.0,
        local_rep: bool = False,
        generator: torch.Generator | None = None,
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        settings = _check_settings(
            droprate_init, temperature, limit_a, limit_b, weight_decay, lamba, local_rep, generator
        )
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
        self._input_size: tuple[int, int] | None = None
        self._setup(settings, out_channels, {"device": device, "dtype": dtype})

    def forward(self, x: Tensor) -> Tensor:
        check_floating(x, "x")
        check_conv2d_input(x, self.in_channels)
        if not torch.compiler.is_compiling():
            self._input_size = (int(x.shape[-2]), int(x.shape[-1]))
        dtype = opmath_dtype(x.dtype)
        w = cast(self.weight, dtype)
        b = None if self.bias is None else cast(self.bias, dtype)
        xc = cast(x, dtype)
        if self.training and not self.local_rep:
            z = self.gates()
            y = self._conv_forward(xc, w * z.view(-1, 1, 1, 1), None if b is None else b * z)
        else:
            batch = tuple(x.shape[:-3]) if self.training else ()
            z = self.gates(batch)
            y = self._conv_forward(xc, w, b) * z.reshape(*z.shape, 1, 1)
        return cast(y, x.dtype)

    def _group_squares(self) -> Tensor:
        return opmath(self.weight).square().sum((1, 2, 3))

    def _weights_per_gate(self) -> int:
        return self.weight[0].numel()

    def _bias_penalty(self, p: Tensor) -> Tensor | float:
        if self.bias is None:
            return 0.0
        return (p * (self.lamba + 0.5 * self.weight_decay * opmath(self.bias).square())).sum()

    def output_size(self, input_size: tuple[int, int]) -> tuple[int, int]:
        """The spatial size ``(H', W')`` of the output for an input of size ``(H, W)``."""
        if self.padding == "same":
            return (int(input_size[0]), int(input_size[1]))
        padding: tuple[int, ...] = (0, 0) if self.padding == "valid" else self.padding  # type: ignore[assignment]
        h, w = (
            (int(n) + 2 * p - d * (k - 1) - 1) // s + 1
            for n, p, d, k, s in zip(
                input_size, padding, self.dilation, self.kernel_size, self.stride, strict=True
            )
        )
        return h, w

    def expected_flops(self, input_size: tuple[int, int] | None = None) -> Tensor:
        """The expected floating-point operations of one example's forward (see above),
        for inputs of spatial size ``input_size`` ``(H, W)``, by default that of the last
        input seen in eager mode."""
        if input_size is None:
            input_size = self._input_size
            if input_size is None:
                raise ValueError(
                    "Expected `input_size` (H, W), or a forward call before (whose input's "
                    "size is used), but found neither"
                )
        elif (
            not isinstance(input_size, (tuple, list))
            or len(input_size) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in input_size)
        ):
            raise ValueError(
                f"Expected `input_size` to be two positive ints (H, W), but found {input_size!r}"
            )
        h, w = self.output_size(tuple(input_size))  # type: ignore[arg-type]
        positions = max(h, 0) * max(w, 0)
        n = self._weights_per_gate()
        flops = self.l0() * positions * (2 * n - 1)
        return flops + self.l0() * positions if self.bias is not None else flops
