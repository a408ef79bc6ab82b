r"""Hard Concrete gates for L0 regularisation (Louizos et al. 2018,
https://arxiv.org/abs/1712.01312).

A gate :math:`z \in [0, 1]` per weight group, exactly 0 or 1 with positive probability, whose
sample is a differentiable function of its parameter :math:`\log\alpha` and uniform noise,
so that the expected number of non-zero gates (the L0 norm) is a differentiable penalty.
:class:`hardgrad.nn.HardConcreteGate` is the module.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ._core.kernels import cast, eager_plain, opmath, remember
from ._core.validation import check_floating, check_positive, check_real, value_checks_apply
from .estimators._noise import uniform

__all__ = ["expected_l0", "hard_concrete", "hard_concrete_mean"]

BETA, GAMMA, ZETA = 2.0 / 3.0, -0.1, 1.1


def _check_stretch(beta: Any, gamma: Any, zeta: Any) -> tuple[float, float, float]:
    """``beta`` > 0 and ``gamma`` < 0 < 1 < ``zeta`` (the stretched interval must contain
    [0, 1] strictly, or no gate is ever exactly 0 or 1)."""
    beta = check_positive(beta, "beta")
    gamma = check_real(gamma, "gamma")
    zeta = check_real(zeta, "zeta")
    if not -math.inf < gamma < 0:
        raise ValueError(f"Expected `gamma` < 0 and finite, but found gamma={gamma!r}")
    if not 1 < zeta < math.inf:
        raise ValueError(f"Expected `zeta` > 1 and finite, but found zeta={zeta!r}")
    return beta, gamma, zeta


def _check_generator(generator: Any) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
        )


def hard_concrete(
    log_alpha: Tensor,
    *,
    beta: float = BETA,
    gamma: float = GAMMA,
    zeta: float = ZETA,
    generator: torch.Generator | None = None,
    noise: Tensor | None = None,
) -> Tensor:
    r"""A Hard Concrete sample (Louizos et al. 2018, https://arxiv.org/abs/1712.01312).

    .. math::

        u \sim U(0, 1), \quad
        s = \sigma\Big(\frac{\log u - \log(1 - u) + \log\alpha}{\beta}\Big), \quad
        z = \min\big(1, \max(0, s(\zeta - \gamma) + \gamma)\big),

    a binary Concrete variable stretched to :math:`(\gamma, \zeta)` and clipped to [0, 1]:
    exactly 0 with probability :math:`\sigma(\beta\log(-\gamma/\zeta) - \log\alpha)` and
    exactly 1 with probability :math:`\sigma(\log\alpha - \beta\log((1-\gamma)/(\zeta-1)))`.
    Backward: the reparameterisation (pathwise) gradient of this map in :math:`\log\alpha`,
    zero where the sample is clipped. Defaults :math:`\beta = 2/3`, :math:`\gamma = -0.1`,
    :math:`\zeta = 1.1` are the paper's. The noise comes from ``generator`` (float32 for
    half types, clamped to ``[tiny, 1 - eps]`` of that dtype), or is given as ``noise``:
    the uniforms :math:`u` themselves, a floating-point tensor whose shape broadcasts with
    ``log_alpha``'s, values strictly inside (0, 1) (checked while
    :func:`hardgrad.set_validation` is on), used as given (cast to the compute dtype, not
    clamped), so that the draws of another code base (the reference code draws
    ``uniform_(1e-6, 1 - 1e-6)``) are reproduced exactly. Give ``noise`` or ``generator``,
    not both. The sample has ``log_alpha``'s dtype and the broadcast shape.

    **Per-example gates.** One :math:`\log\alpha` per gate and a separate draw per example
    (the reference code's ``local_rep=True``): sample the expanded parameter,
    ``hard_concrete(log_alpha.expand(batch, n), generator=g)``, or give ``noise`` of shape
    ``(batch, n)``; the gradient of each gate sums into :math:`\log\alpha` over the batch.

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> log_alpha = torch.tensor([-4.0, 0.0, 0.0, 4.0], requires_grad=True)
        >>> z = hg.hard_concrete(log_alpha, generator=g); z
        tensor([0.0000, 0.9294, 0.0000, 1.0000], grad_fn=<ClampBackward1>)
        >>> z.sum().backward(); log_alpha.grad  # zero where clipped
        tensor([0.0000, 0.2195, 0.0000, 0.0000])

        Given uniforms, e.g. a published model's, and one gate per example and feature:

        >>> u = torch.tensor([[0.5, 0.9, 0.1, 0.5], [0.01, 0.5, 0.5, 0.99]])
        >>> hg.hard_concrete(log_alpha.detach(), noise=u)  # (2, 4): log_alpha broadcasts
        tensor([[0.0000, 1.0000, 0.0000, 1.0000],
                [0.0000, 0.5000, 0.5000, 1.0000]])
        >>> z = hg.hard_concrete(log_alpha.expand(3, 4), generator=g); z.shape
        torch.Size([3, 4])
    """
    check_floating(log_alpha, "log_alpha")
    beta, gamma, zeta = _check_stretch(beta, gamma, zeta)
    _check_generator(generator)
    if noise is None:
        return sample(log_alpha, beta, gamma, zeta, generator)
    _check_noise(noise, log_alpha, generator)
    return sample_given(log_alpha, noise, beta, gamma, zeta)


def _check_noise(noise: Any, log_alpha: Tensor, generator: Any) -> None:
    """``noise``: floating uniforms strictly inside (0, 1), broadcastable with
    ``log_alpha``, on its device, and not given with a ``generator``."""
    if generator is not None:
        raise ValueError(
            "Expected at most one of `noise` and `generator`, but found both (the noise "
            "given replaces the draw from the generator)"
        )
    check_floating(noise, "noise")
    try:
        torch.broadcast_shapes(noise.shape, log_alpha.shape)
    except RuntimeError:
        raise ValueError(
            f"Expected `noise` broadcastable with `log_alpha`'s shape {tuple(log_alpha.shape)}, "
            f"but found shape {tuple(noise.shape)}"
        ) from None
    if noise.device != log_alpha.device:
        raise ValueError(
            f"Expected `noise` on `log_alpha`'s device {log_alpha.device}, but found "
            f"device={noise.device}"
        )
    if value_checks_apply(noise) and noise.numel() > 0:
        low, high = torch.aminmax(noise.detach())
        low_, high_ = low.item(), high.item()
        if not (low_ > 0 and high_ < 1):  # (NaN fails too)
            raise ValueError(
                f"Expected `noise` strictly inside (0, 1), but found values in "
                f"[{low_!r}, {high_!r}]"
            )


def sample_given(
    log_alpha: Tensor, noise: Tensor, beta: float, gamma: float, zeta: float
) -> Tensor:
    """:func:`hard_concrete` of given uniforms ``noise``, without the argument checks."""
    q = opmath(log_alpha)
    u = cast(noise, q.dtype)
    logit = torch.log(u) - torch.log1p(-u) + q
    z = torch.sigmoid(logit / beta) * (zeta - gamma) + gamma
    return cast(z.clamp(0.0, 1.0), log_alpha.dtype)


def sample(
    log_alpha: Tensor, beta: float, gamma: float, zeta: float, generator: torch.Generator | None
) -> Tensor:
    """:func:`hard_concrete` without its argument checks, for callers that checked them
    once (:class:`hardgrad.nn.HardConcreteGate`)."""
    q = opmath(log_alpha)
    b: Tensor | float
    span: Tensor | float
    g: Tensor | float
    if eager_plain(log_alpha):
        # The numbers as cached 0-d tensors (the same values, ~1 µs less a kernel), all
        # found with one lookup: a small gated model's training step feels every Python
        # call. The draw goes through uniform() like every other (the CUDA tests replay
        # device noise on the CPU by patching it; an inlined rand_like escaped them).
        b, span, g, _, _, _ = _eager_constants(beta, gamma, zeta, q)
        u = uniform(q, generator)
    else:
        u = uniform(log_alpha, generator)
        b, span, g = beta, zeta - gamma, gamma
    logit = torch.log(u) - torch.log1p(-u) + q
    z = torch.sigmoid(logit / b) * span + g
    return cast(z.clamp(0.0, 1.0), log_alpha.dtype)


#: :func:`_eager_constants` by (beta, gamma, zeta, dtype, device); cleared when full.
_EAGER_CONSTANTS: dict[tuple[Any, ...], tuple[Tensor, Tensor, Tensor, Tensor, float, float]] = {}
_MAX_EAGER_CONSTANTS = 64


def _eager_constants(
    beta: float, gamma: float, zeta: float, like: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, float, float]:
    r""":math:`\beta`, :math:`\zeta - \gamma`, :math:`\gamma` and the L0 shift
    :math:`\beta\log(-\gamma/\zeta)` as 0-d tensors of ``like``'s dtype and device, and
    the uniforms' range ``[tiny, 1 - eps]`` of that dtype (what :func:`uniform` clamps to).
    Made once, outside inference mode (never modify them)."""
    key = (beta, gamma, zeta, like.dtype, like.device)
    found = _EAGER_CONSTANTS.get(key)
    if found is None:
        info = torch.finfo(like.dtype)
        with torch.inference_mode(False):
            b, span, g, shift = (
                torch.tensor(value, dtype=like.dtype, device=like.device)
                for value in (beta, zeta - gamma, gamma, beta * math.log(-gamma / zeta))
            )
        found = (b, span, g, shift, info.tiny, 1 - info.eps)
        remember(_EAGER_CONSTANTS, key, found, _MAX_EAGER_CONSTANTS)
    return found


def hard_concrete_mean(log_alpha: Tensor, *, gamma: float = GAMMA, zeta: float = ZETA) -> Tensor:
    r"""The deterministic test-time gate :math:`\hat z = \min(1, \max(0,
    \sigma(\log\alpha)(\zeta - \gamma) + \gamma))` (Louizos et al. 2018, eq. 13).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.gates.hard_concrete_mean(torch.tensor([-4.0, 0.0, 4.0]))
        tensor([0.0000, 0.5000, 1.0000])
    """
    check_floating(log_alpha, "log_alpha")
    _, gamma, zeta = _check_stretch(BETA, gamma, zeta)
    return cast(mean_gate(opmath(log_alpha), gamma, zeta), log_alpha.dtype)


def mean_gate(log_alpha: Tensor, gamma: float, zeta: float) -> Tensor:
    """:func:`hard_concrete_mean` without its argument checks, in ``log_alpha``'s dtype."""
    return (torch.sigmoid(log_alpha) * (zeta - gamma) + gamma).clamp(0.0, 1.0)


def expected_l0(
    log_alpha: Tensor, *, beta: float = BETA, gamma: float = GAMMA, zeta: float = ZETA
) -> Tensor:
    r"""The probability that each gate is non-zero, whose sum is the expected L0 norm.

    .. math::

        P(z \ne 0) = \sigma\big(\log\alpha - \beta \log(-\gamma / \zeta)\big)

    (Louizos et al. 2018, eq. 12), elementwise; differentiable in :math:`\log\alpha`. Add
    ``lam * expected_l0(log_alpha).sum()`` to the loss.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.gates.expected_l0(torch.tensor([-4.0, 0.0, 4.0]))
        tensor([0.0831, 0.8318, 0.9963])
    """
    check_floating(log_alpha, "log_alpha")
    beta, gamma, zeta = _check_stretch(beta, gamma, zeta)
    return nonzero_probability(log_alpha, beta, gamma, zeta)


def nonzero_probability(log_alpha: Tensor, beta: float, gamma: float, zeta: float) -> Tensor:
    """:func:`expected_l0` without its argument checks (for callers that checked once)."""
    q = opmath(log_alpha)
    if eager_plain(q):
        offset: Tensor | float = _eager_constants(beta, gamma, zeta, q)[3]
    else:
        offset = beta * math.log(-gamma / zeta)
    return cast(torch.sigmoid(q - offset), log_alpha.dtype)
