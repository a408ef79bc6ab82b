r"""The Hard Concrete gate module for L0 regularisation (Louizos et al. 2018,
https://arxiv.org/abs/1712.01312)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .. import gates
from .._core.checkpoint import SettingsInState
from .._core.kernels import cast, opmath, opmath_dtype
from .._core.validation import check_dim, check_floating, check_int, check_real


class HardConcreteGate(SettingsInState, nn.Module):
    r"""Multiplies ``features`` groups of its input by Hard Concrete gates.

    In training, ``forward(x)`` returns :math:`x \odot z` with :math:`z` =
    :func:`hardgrad.hard_concrete` of the learned :math:`\log\alpha` (one sample per call,
    shared by the batch: every example sees the same pruned network), broadcast along
    ``dim`` (size ``features``); in eval mode :math:`z` is the deterministic
    :func:`hardgrad.gates.hard_concrete_mean`. :meth:`l0` is the expected number of
    non-zero gates, the differentiable L0 penalty to add to the loss (times a weight).
    :math:`\log\alpha` starts at :math:`\log(p/(1-p))` with ``p = init_keep`` (the paper
    initialises by its dropout rate).

    Args:
        features: the number of gates.
        dim: the dimension of the input the gates run along.
        init_keep: initial :math:`\sigma(\log\alpha)`, in (0, 1).
        beta, gamma, zeta: the Hard Concrete's temperature and stretch.
        generator: the source of the noise.

    Example:
        >>> import torch, hardgrad as hg
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> gate = hg.nn.HardConcreteGate(4)
        >>> y = gate(torch.ones(2, 4)); y.shape, gate.l0()
        (torch.Size([2, 4]), tensor(3.9121, grad_fn=<SumBackward0>))
        >>> gate.eval()(torch.ones(1, 4))
        tensor([[0.9800, 0.9800, 0.9800, 0.9800]], grad_fn=<MulBackward0>)
    """

    def __init__(
        self,
        features: int,
        *,
        dim: int = -1,
        init_keep: float = 0.9,
        beta: float = gates.BETA,
        gamma: float = gates.GAMMA,
        zeta: float = gates.ZETA,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        self.features = check_int(features, "features", low=1)
        self.dim = check_int(dim, "dim")
        keep = check_real(init_keep, "init_keep")
        if not 0 < keep < 1:
            raise ValueError(f"Expected `init_keep` in (0, 1), but found init_keep={init_keep!r}")
        self.init_keep = keep
        self.beta, self.gamma, self.zeta = gates._check_stretch(beta, gamma, zeta)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
            )
        self.generator = generator
        self.log_alpha = nn.Parameter(torch.full((features,), math.log(keep / (1 - keep))))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """``log_alpha`` back to ``log(p/(1-p))``, ``p = init_keep`` (for deferred
        initialisation: ``torch.device("meta")``, ``to_empty``, then this)."""
        self.log_alpha.fill_(math.log(self.init_keep / (1 - self.init_keep)))

    def _checkpoint_settings(self) -> dict[str, Any]:
        return {
            "features": self.features,
            "beta": self.beta,
            "gamma": self.gamma,
            "zeta": self.zeta,
        }

    def gates(self) -> Tensor:
        """The gates of this call: a sample in training, the deterministic gate in eval."""
        if self.training:
            # (the settings were checked once, in __init__)
            return gates.sample(self.log_alpha, self.beta, self.gamma, self.zeta, self.generator)
        return gates.hard_concrete_mean(self.log_alpha, gamma=self.gamma, zeta=self.zeta)

    def forward(self, x: Tensor) -> Tensor:
        check_floating(x, "x")  # gating integers would truncate the gated values
        ndim = x.dim()
        d = self.dim % ndim if -ndim <= self.dim < ndim else check_dim(x, self.dim, "dim")
        if x.shape[d] != self.features:
            raise ValueError(
                f"Expected the input's size along dim={self.dim} to be features={self.features}, "
                f"but found shape {tuple(x.shape)}"
            )
        # In the compute dtype (float32 for half inputs): one rounding of the product, and
        # the gates' gradient (a sum over the batch) does not overflow a half type.
        z = cast(self.gates(), opmath_dtype(x.dtype))
        if d != x.dim() - 1:  # gates along an inner dim broadcast over the ones after it
            z = z.reshape((-1,) + (1,) * (x.dim() - 1 - d))
        return cast(opmath(x) * z, x.dtype)

    def l0(self) -> Tensor:
        """The expected number of non-zero gates (differentiable)."""
        return gates.nonzero_probability(self.log_alpha, self.beta, self.gamma, self.zeta).sum()

    def sparsity(self) -> float:
        """The share of gates that are exactly 0 at test time."""
        with torch.no_grad():
            mean = gates.hard_concrete_mean(self.log_alpha, gamma=self.gamma, zeta=self.zeta)
        return float((mean == 0).float().mean())

    def extra_repr(self) -> str:
        return (
            f"{self.features}, dim={self.dim}, beta={self.beta:.4g}, gamma={self.gamma}, "
            f"zeta={self.zeta}"
        )
