r"""PACT, a ReLU with a learned clipping level whose output is quantized: Choi et al.
(2018), "PACT: Parameterized Clipping Activation for Quantized Neural Networks",
https://arxiv.org/abs/1805.06085.

One autograd node per call: the clamp, the quantizer and both straight-through masks in
one Function, where ``hg.clamp(x, 0, alpha)`` followed by ``hg.quantize`` records two.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .._core.checkpoint import SettingsInState
from .._core.compat import fresh_output
from .._core.kernels import cast, constant, eager_plain, opmath_dtype, rounded_to, storable_mask
from .._core.validation import _is_transformed, check_floating, check_int, check_positive
from ..ops._autograd import (
    apply_function,
    cached_signature,
    float_mask,
    forward_mode,
    keeps_float_mask,
    mark_non_differentiable,
    masked,
)
from ._sharding import accept_scalar_entry, as_scalar, copy_into

_BOUNDS: dict[tuple[torch.dtype, int], tuple[float, float]] = {}


def alpha_bounds(dtype: torch.dtype, levels: int) -> tuple[float, float]:
    r"""``(low, high)`` for :math:`\hat\alpha` with inputs of ``dtype`` and ``levels``
    steps: ``levels`` times the compute dtype's smallest normal number (so that the step
    :math:`\hat\alpha/n` is normal), and just below the largest finite value of ``dtype``
    (every level then stays finite there). Both are numbers of the compute dtype."""
    key = (dtype, levels)
    found = _BOUNDS.get(key)
    if found is None:
        compute = opmath_dtype(dtype)
        info = torch.finfo(compute)
        # (1 - 4 eps) leaves room for the step's and the level's roundings; rounding the
        # bound into the compute dtype moves it by far less than that margin.
        high = rounded_to(torch.finfo(dtype).max * (1 - 4 * info.eps), compute)
        found = _BOUNDS[key] = (levels * info.tiny, high)
    return found


def _host_path(x: Tensor, alpha: Tensor) -> bool:
    """Whether the forward reads the clipping level on the host: both on the CPU, in plain
    eager mode (a Python number then costs every kernel less than a 0-d tensor made per
    call, and the clamp takes the two-number kernel)."""
    return x.is_cpu and alpha.is_cpu and eager_plain(x) and not _is_transformed(alpha)


def _pact_values(
    x: Tensor,
    alpha: Tensor,
    levels: int,
    bounds: tuple[float, float],
    need_keep: bool,
    need_above: bool,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    r"""``(y, keep, above)``: the output, the input's mask :math:`[0 \le x < \hat\alpha]`
    and the clipping level's :math:`[x \ge \hat\alpha]` (``None`` where not needed), in
    ``x``'s dtype, computed in its compute dtype (float32 for half types: rounded once)."""
    dtype = opmath_dtype(x.dtype)
    low, high = bounds
    xc = cast(x, dtype)
    if _host_path(x, alpha):
        level_alpha = min(max(rounded_to(alpha.item(), dtype), low), high)
        step = rounded_to(level_alpha / levels, dtype)
        inverse = rounded_to(1.0 / step, dtype)
        level = torch.clamp(xc, 0.0, level_alpha).mul_(inverse).round_()
        # 0 + step * level: one kernel, and +0.0 where clamp kept an input's -0.0
        y = torch.add(constant(0.0, level), level, alpha=step, out=level)
        keep, above = _masks(x, xc, level_alpha, need_keep, need_above)
        return cast(y, x.dtype), keep, above
    bound = cast(alpha, dtype).clamp(low, high)
    step_t = bound / levels
    clipped = torch.minimum(torch.clamp_min(xc, 0.0), bound)
    y = torch.round(clipped * torch.reciprocal(step_t)) * step_t + 0.0  # (+0.0: as above)
    keep, above = _masks(x, xc, bound, need_keep, need_above)
    return y.to(x.dtype), keep, above


def _masks(
    x: Tensor, xc: Tensor, level_alpha: Tensor | float, need_keep: bool, need_above: bool
) -> tuple[Tensor | None, Tensor | None]:
    r""":math:`[0 \le x < \hat\alpha]` and :math:`[x \ge \hat\alpha]` (NaN: in neither), as
    0/1 in ``x``'s dtype on small eager tensors (:func:`keeps_float_mask`), else bool."""
    if not (need_keep or need_above):
        return None, None
    if keeps_float_mask(x):
        above = float_mask(torch.ge, xc, level_alpha, x.dtype)
        keep = float_mask(torch.ge, xc, 0.0, x.dtype).sub_(above) if need_keep else None
        return keep, above if need_above else None
    above = torch.ge(xc, level_alpha)
    keep = (xc >= 0) & ~above if need_keep else None
    return keep, above if need_above else None


def _alpha_grad(grad: Tensor, above: Tensor, alpha_like: tuple[torch.Size, torch.dtype]) -> Tensor:
    r""":math:`\sum_i \bar y_i\,[x_i \ge \hat\alpha]` in the clipping level's shape and
    dtype (``alpha_like``), summed in the compute dtype."""
    shape, dtype = alpha_like
    total = torch.sum(grad * above, dtype=opmath_dtype(grad.dtype))
    return total.to(dtype).reshape(shape)


class _PACT(torch.autograd.Function):
    """The PACT forward and its straight-through backward (see :class:`PACT`), with ``ctx``
    in ``forward`` (plain eager mode and ``torch.compile``): the masks are made with the
    output and saved; nothing else is."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, alpha: Tensor, levels: int, bounds: tuple[float, float]
    ) -> Tensor:
        need_keep, need_above = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        y, keep, above = _pact_values(x, alpha, levels, bounds, need_keep, need_above)
        ctx.alpha_like = (alpha.shape, alpha.dtype)
        ctx.save_for_backward(*(None if m is None else storable_mask(m) for m in (keep, above)))
        return fresh_output(y)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        keep, above = ctx.saved_tensors
        grad_x = None if keep is None else masked(grad, keep)
        grad_alpha = None if above is None else _alpha_grad(grad, above, ctx.alpha_like)
        return grad_x, grad_alpha, None, None


@forward_mode(_PACT)
@cached_signature
class _PACTJVP(torch.autograd.Function):
    r""":class:`_PACT` in the ``setup_context`` form ``torch.func`` transforms and forward
    mode need (both masks second and third outputs, not differentiable), with the
    forward-mode rule :math:`\dot y = [0 \le x < \hat\alpha]\,\dot x + [x \ge
    \hat\alpha]\,\dot\alpha`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        x: Tensor, alpha: Tensor, levels: int, bounds: tuple[float, float]
    ) -> tuple[Tensor, Tensor, Tensor]:
        y, keep, above = _pact_values(x, alpha, levels, bounds, True, True)
        assert keep is not None and above is not None
        return y, storable_mask(keep), storable_mask(above)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        y, keep, above = output
        mark_non_differentiable(ctx, keep, above)
        ctx.alpha_like = (inputs[1].shape, inputs[1].dtype)
        ctx.y_dtype = y.dtype
        ctx.save_for_backward(keep, above)
        ctx.save_for_forward(keep, above)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, *_masks: Any) -> tuple[Tensor | None, ...]:
        keep, above = ctx.saved_tensors
        return masked(grad, keep), _alpha_grad(grad, above, ctx.alpha_like), None, None

    @staticmethod
    def jvp(
        ctx: Any, x_dot: Tensor | None, alpha_dot: Tensor | None, *_settings: Any
    ) -> tuple[Tensor, None, None]:
        keep, above = ctx.saved_tensors
        y_dot = torch.zeros_like(keep, dtype=ctx.y_dtype)
        if x_dot is not None:
            y_dot = y_dot + (x_dot * keep).to(ctx.y_dtype)
        if alpha_dot is not None:
            y_dot = y_dot + (alpha_dot * above).to(ctx.y_dtype)
        return y_dot, None, None


def pact(x: Tensor, alpha: Tensor, levels: int) -> Tensor:
    """:class:`PACT`'s forward with ``levels`` = :math:`2^b - 1` (``x`` and ``levels``
    checked by the caller)."""
    y = apply_function(_PACT, x, alpha, levels, alpha_bounds(x.dtype, levels))
    return y if isinstance(y, Tensor) else y[0]


class PACT(SettingsInState, nn.Module):
    r"""PACT: a ReLU clipped at a learned level :math:`\alpha` and quantized to ``bits``
    unsigned bits (Choi et al. 2018, https://arxiv.org/abs/1805.06085), the activation
    quantizer that replaces ReLU in a quantized network.

    Forward, with :math:`n = 2^b - 1` levels above 0 and the step :math:`s = \hat\alpha / n`:

    .. math::

        y = \operatorname{round}\!\big(\operatorname{clamp}(x, 0, \hat\alpha) / s\big)\, s,

    computed as :func:`hardgrad.quantize` computes it (:math:`x/s` as :math:`x \cdot
    (1/s)`, ties to even): the same values as ``hg.quantize(hg.clamp(x, 0, a), a / n,
    quant_min=0, quant_max=n)`` with :math:`a = \hat\alpha`, bit for bit. float16 and
    bfloat16 inputs are computed in float32 and rounded once.
    :math:`\hat\alpha` is :math:`\alpha` in the compute dtype, bounded to
    :math:`[n\,\epsilon_{\min}, (1 - 4\epsilon)\max_x]` (the smallest normal number of the
    compute dtype, the largest finite value of the input's dtype): an optimizer step that
    drives :math:`\alpha` to 0 or below leaves the forward finite (every output 0 up to a
    tiny step) and the clipping level still learning.

    Backward, the straight-through estimates of the paper (eq. 3), the rounding taken as
    the identity:

    .. math::

        \frac{\partial y}{\partial x} = [0 \le x < \hat\alpha], \qquad
        \frac{\partial y}{\partial \alpha} = [x \ge \hat\alpha]

    (exactly one of the two at :math:`x = \hat\alpha`; a NaN input in neither), summed over
    the elements for :math:`\alpha`, straight through the bounds. The paper regularizes
    :math:`\alpha` with an L2 penalty: give it weight decay in the optimizer.

    Args:
        bits: integer bit width, 1 to 16.
        alpha: the initial clipping level, a positive finite number (the paper starts
            from 10).
        learn_alpha: make ``alpha`` a trainable parameter (else a buffer).

    One autograd node per call, on every device and under ``torch.compile``, ``vmap``,
    ``torch.func.grad`` and forward mode (``jvp``). On 64 x 256 CPU activations, forward
    and backward take about two thirds of the time of PACT's usual hand-written
    ``autograd.Function`` (``bench models``' ``pact-mlp``: 0.94x its training step).

    Example:
        >>> import torch, hardgrad as hg
        >>> act = hg.nn.PACT(bits=2, alpha=3.0)
        >>> act
        PACT(bits=2, learn_alpha=True)
        >>> x = torch.tensor([-1.0, 0.4, 1.6, 2.9, 3.0, 5.0], requires_grad=True)
        >>> y = act(x)
        >>> y.detach()
        tensor([0., 0., 2., 3., 3., 3.])
        >>> y.sum().backward()
        >>> x.grad, act.alpha.grad  # (alpha is stored with shape (1,), used as 0-d)
        (tensor([0., 1., 1., 1., 0., 0.]), tensor([2.]))
    """

    alpha: Tensor

    def __init__(self, bits: int = 4, alpha: float = 10.0, *, learn_alpha: bool = True) -> None:
        super().__init__()
        if not isinstance(learn_alpha, bool):
            raise TypeError(
                f"Expected `learn_alpha` to be a bool, but found {type(learn_alpha).__name__}"
            )
        self.bits = check_int(bits, "bits", low=1, high=16)
        self.levels = 2**self.bits - 1
        value = check_positive(alpha, "alpha")
        if not bool(torch.isfinite(torch.tensor(value, device="cpu"))):
            raise ValueError(f"Expected `alpha` to be finite, but found {alpha!r}")
        self._init_alpha = value
        self.learn_alpha = learn_alpha
        # Shape (1,), used as 0-d (fully_shard refuses 0-d parameters); the default device
        # (meta included: see reset_parameters).
        initial = torch.full((1,), value)
        if learn_alpha:
            self.alpha = nn.Parameter(initial)
        else:
            self.register_buffer("alpha", initial)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """``alpha`` back to its initial value (after ``to_empty`` from the meta device)."""
        copy_into(self.alpha, torch.full(self.alpha.shape, self._init_alpha))

    def forward(self, x: Tensor) -> Tensor:
        check_floating(x, "x")
        # (1,)-shaped alpha: as the 0-d one, bit for bit (the gradient is one sum); a
        # 0-d x takes the 0-d view, so that the output stays 0-d.
        return pact(x, self.alpha if x.dim() > 0 else as_scalar(self.alpha), self.levels)

    def _checkpoint_settings(self) -> dict[str, Any]:
        """What the clipping level's grid means: stored in checkpoints, checked on load."""
        return {"bits": self.bits}

    def _prepare_to_load(self, state_dict: dict[str, Any], prefix: str) -> None:
        accept_scalar_entry(state_dict, prefix + "alpha", self.alpha)  # saved 0-d, before (1,)

    def extra_repr(self) -> str:
        return f"bits={self.bits}, learn_alpha={self.learn_alpha}"
