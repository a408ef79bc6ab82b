r"""The quantizers without a learned codebook: finite scalar quantization (:class:`FSQ`,
Mentzer et al. 2023, https://arxiv.org/abs/2309.15505) and lookup-free quantization
(:class:`LFQ`, Yu et al. 2023, https://arxiv.org/abs/2310.05737). The math is in
:mod:`hardgrad.vq`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import vq as _vq
from .._core.compiler import compiler_disabled
from .._core.kernels import opmath_dtype
from .._core.validation import check_all_finite, check_int, check_positive, check_real
from ..vq._fsq import _check_noise_dropout, _check_symmetry, _fsq_noise
from ._vq_codebook import _check_channels


class FSQ(nn.Module):
    r"""Finite scalar quantization (Mentzer et al. 2023, https://arxiv.org/abs/2309.15505):
    :func:`hardgrad.vq.fsq` with fixed ``levels``; no codebook, no auxiliary loss.

    ``forward(z)`` returns ``(z_q, indices)``; ``z`` has ``len(levels)`` channels along
    ``channel_dim``. ``preserve_symmetry=True`` takes the symmetric grid (both ends of
    :math:`[-1, 1]` included, even levels too; Parker et al. 2024,
    https://arxiv.org/abs/2411.19842). :meth:`indices_to_codes` and :meth:`codes_to_indices` convert both ways.

    With ``noise_dropout`` = :math:`p > 0`, in training mode only, each element's rounding
    is replaced with probability :math:`p` by uniform noise one step wide (Parker et al.'s
    noise substitution; :func:`hardgrad.vq.fsq`), drawn with the module's CPU generator
    (seeded by ``seed``; not saved in checkpoints); ``indices`` are the rounded codes'. In
    eval mode the output is the plain FSQ's.

    Example:
        >>> import torch, hardgrad as hg
        >>> fsq = hg.nn.FSQ([8, 5, 5, 5])
        >>> fsq, fsq.codebook_size
        (FSQ(levels=(8, 5, 5, 5)), 1000)
        >>> z_q, indices = fsq(torch.tensor([[0.3, -2.0, 0.1, 4.0]]))
        >>> z_q, indices
        (tensor([[ 0.2500, -1.0000,  0.0000,  1.0000]]), tensor([885]))
        >>> fsq.indices_to_codes(indices)
        tensor([[ 0.2500, -1.0000,  0.0000,  1.0000]])
    """

    def __init__(
        self,
        levels: Any,
        *,
        channel_dim: int = -1,
        preserve_symmetry: bool = False,
        noise_dropout: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.levels = _vq._check_levels(levels)
        self.channel_dim = check_int(channel_dim, "channel_dim")
        self.preserve_symmetry = _check_symmetry(preserve_symmetry)
        self.noise_dropout = _check_noise_dropout(noise_dropout)
        self.seed = check_int(seed, "seed", low=0)
        self.generator = torch.Generator().manual_seed(self.seed)

    @property
    def codebook_size(self) -> int:
        """The number of codes, :math:`\\prod_i L_i`."""
        size = 1
        for v in self.levels:
            size *= v
        return size

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        d = _check_channels(z, self.channel_dim, len(self.levels), "len(levels)")
        check_all_finite(z, "z")
        p = self.noise_dropout if self.training else 0.0
        noise = _fsq_noise(z, d, p, self.generator)
        return _vq._checked_fsq(z, self.levels, d, self.preserve_symmetry, noise)

    def indices_to_codes(self, indices: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """The codes of ``indices`` (:func:`hardgrad.vq.fsq_indices_to_codes`)."""
        return _vq.fsq_indices_to_codes(
            indices,
            self.levels,
            dim=self.channel_dim,
            dtype=dtype,
            preserve_symmetry=self.preserve_symmetry,
        )

    def codes_to_indices(self, codes: Tensor) -> Tensor:
        """The indices of ``codes`` (:func:`hardgrad.vq.fsq_codes_to_indices`)."""
        return _vq.fsq_codes_to_indices(
            codes, self.levels, dim=self.channel_dim, preserve_symmetry=self.preserve_symmetry
        )

    def extra_repr(self) -> str:
        symmetric = ", preserve_symmetry=True" if self.preserve_symmetry else ""
        noise = f", noise_dropout={self.noise_dropout}" if self.noise_dropout else ""
        return f"levels={self.levels}{symmetric}{noise}"


class LFQ(nn.Module):
    r"""Lookup-free quantization with its entropy loss (Yu et al. 2023, MAGVIT-v2,
    https://arxiv.org/abs/2310.05737).

    ``forward(z)`` returns ``(z_q, indices, loss)``: ``z_q = ±1`` per channel with a
    straight-through gradient (:func:`hardgrad.vq.lfq`), and

    .. math::

        \mathcal L = w_H \big(\mathbb E_z[H(q(\cdot\mid z))] - \gamma\,
        H(\mathbb E_z[q(\cdot\mid z)])\big) + \beta\,\overline{\lVert z - \operatorname{sg}[z_q]\rVert^2}

    with the soft assignment :math:`q(c\mid z) \propto \exp(-\lVert z - c\rVert^2/\tau)`
    (:func:`hardgrad.vq.lfq_entropy`; exact for ``dim`` <= 16), :math:`w_H` =
    ``entropy_weight``, :math:`\gamma` = ``diversity_gamma`` and :math:`\beta` =
    ``commitment_weight``.

    With ``num_codebooks`` = :math:`G` > 1 the ``dim`` channels are :math:`G` groups of
    ``dim // G`` bits, each its own codebook of :math:`2^{\text{dim}/G}` codes: ``indices``
    gain a last dimension of size :math:`G`, and both entropies are the means over the
    groups of each group's (as vector-quantize-pytorch's ``num_codebooks``). With
    ``frac_per_sample_entropy`` < 1, in training the entropies are computed from
    ``max(1, int(frac * N))`` of the :math:`N` vectors, drawn without replacement with the
    module's generator (seeded by ``seed``; not saved in checkpoints): less memory for the
    :math:`N \times 2^d` assignments, the loss an unbiased estimate of the per-sample term
    only (as there, the codebook term is the entropy of the subset's mean).

    ``codebook_scale`` = :math:`s` > 0 makes the codes :math:`\pm s` (vector-quantize-pytorch's
    ``codebook_scale``, e.g. halved per stage of a residual LFQ): ``z_q`` is :math:`s` times the
    signs with the surrogate's gradient unscaled (the identity by default, as there), the
    soft assignment is to the scaled codes, :math:`q(c_i = +1\mid z_i) = \sigma(4 s z_i/\tau)`,
    and the commitment is :math:`\lVert z - \operatorname{sg}[z_q]\rVert^2` to them.

    Example:
        >>> import torch, hardgrad as hg
        >>> lfq = hg.nn.LFQ(3)
        >>> z_q, indices, loss = lfq(torch.tensor([[0.5, -0.2, 1.5], [-1.0, 0.3, -0.1]]))
        >>> z_q, indices
        (tensor([[ 1., -1.,  1.],
                [-1.,  1., -1.]]), tensor([5, 2]))
    """

    def __init__(
        self,
        dim: int,
        *,
        entropy_weight: float = 0.1,
        diversity_gamma: float = 1.0,
        commitment_weight: float = 0.25,
        tau: float = 1.0,
        surrogate: Any = "identity",
        channel_dim: int = -1,
        num_codebooks: int = 1,
        frac_per_sample_entropy: float = 1.0,
        seed: int = 0,
        codebook_scale: float = 1.0,
    ) -> None:
        super().__init__()
        self.codebook_scale = check_positive(codebook_scale, "codebook_scale")
        self.num_codebooks = check_int(num_codebooks, "num_codebooks", low=1)
        self.dim = check_int(dim, "dim", low=1, high=62 * self.num_codebooks)
        if self.dim % self.num_codebooks:
            raise ValueError(
                f"Expected `dim` divisible by `num_codebooks`, but found dim={dim}, "
                f"num_codebooks={num_codebooks}"
            )
        self.frac_per_sample_entropy = check_real(
            frac_per_sample_entropy, "frac_per_sample_entropy"
        )
        if not 0 < self.frac_per_sample_entropy <= 1:
            raise ValueError(
                "Expected `frac_per_sample_entropy` in (0, 1], but found "
                f"frac_per_sample_entropy={frac_per_sample_entropy!r}"
            )
        self.seed = check_int(seed, "seed", low=0)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.entropy_weight = check_real(entropy_weight, "entropy_weight")
        self.diversity_gamma = check_real(diversity_gamma, "diversity_gamma")
        self.commitment_weight = check_real(commitment_weight, "commitment_weight")
        self.tau = check_positive(tau, "tau")
        self.surrogate = surrogate
        self.channel_dim = check_int(channel_dim, "channel_dim")

    @property
    def codebook_size(self) -> int:
        """The number of codes of each codebook, :math:`2^{\\text{dim}/G}`."""
        return 2 ** (self.dim // self.num_codebooks)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        d = _check_channels(z, self.channel_dim, self.dim, "the number of bits `dim`")
        groups, bits = self.num_codebooks, self.dim // self.num_codebooks
        if groups == 1:
            z_q, indices = _vq.lfq(z, dim=d, surrogate=self.surrogate)
        else:  # the signs of every channel; the indices per group of bits
            x = _vq.code_last(z, d).unflatten(-1, (groups, bits))
            z_q, indices = _vq.lfq(x, dim=-1, surrogate=self.surrogate)
            z_q = _vq.code_back(z_q.flatten(-2), d)
        if self.codebook_scale != 1:  # the value s * sign, the surrogate's gradient
            z_q = (z_q * self.codebook_scale).detach() + (z_q - z_q.detach())
        compute = opmath_dtype(z.dtype)  # float32 for half types, else z's own
        if z.numel() == 0:
            return z_q, indices, z.new_zeros((), dtype=compute)
        rows = _vq.code_last(z, d).reshape(-1, groups, bits)
        if self.training and self.frac_per_sample_entropy < 1:
            rows = rows[self._draw_rows(len(rows)).to(rows.device)]
        tau = self.tau / self.codebook_scale  # 4 s z / tau: the scaled codes' assignment
        entropies = [_vq._lfq_entropy(rows[:, g], 1, tau) for g in range(groups)]
        per_sample = torch.stack([e[0] for e in entropies]).mean()
        codebook = torch.stack([e[1] for e in entropies]).mean()
        entropy = per_sample - self.diversity_gamma * codebook
        commitment = F.mse_loss(z.to(compute), z_q.detach().to(compute))
        loss = self.entropy_weight * entropy + self.commitment_weight * commitment
        return z_q, indices, loss

    @compiler_disabled  # a host-side draw: outside graphs
    def _draw_rows(self, count: int) -> Tensor:
        keep = max(1, int(count * self.frac_per_sample_entropy))
        return torch.randperm(count, generator=self.generator)[:keep]

    def indices_to_codes(self, indices: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """The ±``codebook_scale`` codes of ``indices`` (:func:`hardgrad.vq.lfq_indices_to_codes`
        times the scale; with several codebooks ``indices`` end in the codebook dimension)."""
        if self.num_codebooks == 1:
            codes = _vq.lfq_indices_to_codes(indices, self.dim, dim=self.channel_dim, dtype=dtype)
        else:
            bits = self.dim // self.num_codebooks
            codes = _vq.lfq_indices_to_codes(indices, bits, dtype=dtype).flatten(-2)
            codes = codes.movedim(-1, self.channel_dim)
        return codes * self.codebook_scale if self.codebook_scale != 1 else codes

    def extra_repr(self) -> str:
        text = (
            f"dim={self.dim}, entropy_weight={self.entropy_weight}, "
            f"diversity_gamma={self.diversity_gamma}, commitment_weight={self.commitment_weight}"
        )
        if self.num_codebooks > 1:
            text += f", num_codebooks={self.num_codebooks}"
        if self.frac_per_sample_entropy < 1:
            text += f", frac_per_sample_entropy={self.frac_per_sample_entropy}"
        if self.codebook_scale != 1:
            text += f", codebook_scale={self.codebook_scale}"
        return text
