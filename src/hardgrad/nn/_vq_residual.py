r"""Residual vector quantization (:class:`ResidualVQ`): several
:class:`~hardgrad.nn.VectorQuantize` stages, each on the residual the previous left, with
SoundStream's quantizer dropout (Zeghidour et al. 2021, https://arxiv.org/abs/2107.03312)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import vq as _vq
from .._core.checkpoint import SettingsInState
from .._core.compiler import compiler_disabled
from .._core.validation import check_int
from ..estimators import Estimator
from ..ops._straight_through import value_with_identity_gradient
from ._vq import VectorQuantize, _check_bool, _weights
from ._vq_codebook import _check_channels, _check_mask, _distributed

GRADIENTS = ("total", "per_stage")


class ResidualVQ(SettingsInState, nn.Module):
    r"""``num_quantizers`` codebooks applied in turn to what the previous ones left.

    ``forward(z, mask=None)`` returns ``(z_q, indices, loss)``. With :math:`r_0 = z`
    (projected by ``project_in`` when ``codebook_dim`` differs from ``dim``), stage
    :math:`i` quantizes :math:`r_i` with its own :class:`~hardgrad.nn.VectorQuantize`
    (its codebook, estimator, statistics and loss) and passes on
    :math:`r_{i+1} = r_i - \operatorname{sg}[c^{(i)}_{k_i}]`:

    .. math::

        z_q = \sum_{i < n} c^{(i)}_{k_i}, \qquad
        \mathcal L = \sum_{i < n} \mathcal L_i(r_i),

    with :math:`n` = ``num_quantizers`` or, in training with ``quantize_dropout``, a
    number drawn uniformly from ``quantize_dropout_cutoff_index + 1 .. num_quantizers``
    with the module's generator (seeded by ``seed``), **once per forward** for the whole
    batch as in vector-quantize-pytorch (SoundStream's paper draws it per example; mask a
    batch's rows for that). A dropped stage quantizes nothing, updates nothing, and its
    ``indices`` are -1. ``indices`` are stacked on a last dimension of size
    ``num_quantizers``. Because :math:`r_i = z - \operatorname{sg}[\sum_{j<i} c^{(j)}]`,
    every stage's commitment loss reaches ``z``.

    **Backward** to ``z``, by ``gradient``:

    * ``"total"`` (default): straight through the whole sum, :math:`\partial L/\partial z
      = \partial L/\partial z_q` (as EnCodec's and DAC's residual quantizers give); the
      stages' estimators then only choose codes (a stochastic one draws them);
    * ``"per_stage"``: the sum of each stage's estimator gradient at its residual,
      :math:`\sum_{i<n} J_i^\top \partial L/\partial z_q` (vector-quantize-pytorch's:
      with ``"st"`` everywhere that is :math:`n\,\partial L/\partial z_q`; with
      ``"rotation"`` each :math:`J_i` rotates :math:`r_i` onto its code).

    Args:
        num_quantizers: the number of stages, >= 1.
        num_codes: K >= 2, the codes of each stage.
        dim: the channels of ``z``.
        estimator: one estimator for every stage or a sequence of one per stage (see
            :class:`~hardgrad.nn.VectorQuantize`).
        codebook_dim: the size of the code vectors (default ``dim``): ``nn.Linear``
            projections in and out when it differs.
        quantize_dropout: draw the number of stages in training.
        quantize_dropout_cutoff_index: at least this many + 1 stages are kept.
        gradient: ``"total"`` or ``"per_stage"``.
        channel_dim: the channel dimension of ``z``.
        seed: the seed of the module's generator (stage :math:`i`'s is ``seed + 1 + i``).
        **kwargs: the other settings of every stage's
            :class:`~hardgrad.nn.VectorQuantize` (``codebook_update``, ``decay``,
            ``commitment_weight``, ``dead_code_threshold``, ``kmeans_init``, ``tau``, ...).

    Example:
        >>> import torch, hardgrad as hg
        >>> torch.manual_seed(0)  # the codebooks' initial values
        <torch._C.Generator object at ...>
        >>> rvq = hg.nn.ResidualVQ(3, 16, 2, codebook_update="ema", kmeans_init=True)
        >>> z = torch.randn(64, 2, generator=torch.Generator().manual_seed(1))
        >>> _ = rvq(z)  # training: each stage's k-means initialisation on its residual
        >>> _ = rvq.eval()
        >>> z_q, indices, loss = rvq(z)
        >>> indices.shape, torch.equal(rvq.decode(indices), z_q)
        (torch.Size([64, 3]), True)

        The residual's norm after 0, 1, 2 and 3 stages:

        >>> [round(float((z - rvq.decode(indices[:, :n])).norm()), 3) for n in range(4)]
        [11.206, 3.029, 0.634, 0.151]
    """

    def __init__(
        self,
        num_quantizers: int,
        num_codes: int,
        dim: int,
        *,
        estimator: str | Estimator | Sequence[str | Estimator] = "st",
        codebook_dim: int | None = None,
        quantize_dropout: bool = False,
        quantize_dropout_cutoff_index: int = 0,
        gradient: str = "total",
        channel_dim: int = -1,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.num_quantizers = check_int(num_quantizers, "num_quantizers", low=1)
        self.dim = check_int(dim, "dim", low=1)
        self.codebook_dim = check_int(
            self.dim if codebook_dim is None else codebook_dim, "codebook_dim", low=1
        )
        if isinstance(estimator, (str, Estimator)):
            estimators = [estimator] * self.num_quantizers
        elif isinstance(estimator, Sequence) and len(estimator) == self.num_quantizers:
            estimators = list(estimator)
        else:
            raise ValueError(
                f"Expected `estimator` to be one estimator or a sequence of "
                f"num_quantizers={num_quantizers} of them, but found {estimator!r}"
            )
        for name in ("heads", "separate_codebook_per_head", "channel_dim"):
            if name in kwargs:
                raise TypeError(f"ResidualVQ got an unexpected keyword argument {name!r}")
        self.quantize_dropout = _check_bool(quantize_dropout, "quantize_dropout")
        self.quantize_dropout_cutoff_index = check_int(
            quantize_dropout_cutoff_index,
            "quantize_dropout_cutoff_index",
            low=0,
            high=self.num_quantizers - 1,
        )
        self.gradient = _vq._check_choice(gradient, "gradient", GRADIENTS)
        self.channel_dim = check_int(channel_dim, "channel_dim")
        self.seed = check_int(seed, "seed", low=0)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.layers = nn.ModuleList(
            VectorQuantize(
                num_codes, self.codebook_dim, estimator=e, seed=self.seed + 1 + i, **kwargs
            )
            for i, e in enumerate(estimators)
        )
        inner, outer = self.codebook_dim, self.dim
        self.project_in = nn.Linear(outer, inner) if inner != outer else None
        self.project_out = nn.Linear(inner, outer) if inner != outer else None

    @property
    def num_codes(self) -> int:
        """K, the codes of each stage."""
        return self._stage(0).num_codes

    def _stage(self, i: int) -> VectorQuantize:
        return cast(VectorQuantize, self.layers[i])

    @compiler_disabled  # a host-side draw: outside graphs
    def _draw_stages(self) -> int:
        low = self.quantize_dropout_cutoff_index + 1
        drawn = torch.randint(low, self.num_quantizers + 1, (1,), generator=self.generator)
        if _distributed():  # every rank drops the same stages
            torch.distributed.broadcast(drawn, src=0)
        return int(drawn)

    def forward(self, z: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        d = _check_channels(z, self.channel_dim, self.dim, "`dim`")
        mask = _check_mask(mask, z, d)
        x = _vq.code_last(z, d)
        if self.project_in is not None:
            x = F.linear(x, *_weights(self.project_in, x.dtype))
        active = self.num_quantizers
        if self.training and self.quantize_dropout and self.num_quantizers > 1:
            active = self._draw_stages()
        residual = x
        total: Tensor | None = None  # the sum of the codes (values)
        stages: Tensor | None = None  # the sum of the stages' outputs (their gradients)
        indices: list[Tensor] = []
        loss: Tensor | None = None
        for i, layer in enumerate(self.layers):
            if i >= active:
                indices.append(torch.full(x.shape[:-1], -1, dtype=torch.long, device=x.device))
                continue
            z_q, idx, stage_loss = layer(residual, mask)
            code = z_q.detach()
            total = code if total is None else total + code
            if self.gradient == "per_stage":
                stages = z_q if stages is None else stages + z_q
            residual = residual - code
            indices.append(idx)
            loss = stage_loss if loss is None else loss + stage_loss
        assert total is not None and loss is not None  # (at least one stage runs)
        if self.gradient == "per_stage":
            assert stages is not None
            out = stages
        else:
            out = value_with_identity_gradient(total, x)
            if mask is not None:  # padding: no gradient, as in each stage
                out = torch.where(mask.unsqueeze(-1), out, total)
        if self.project_out is not None:
            out = F.linear(out, *_weights(self.project_out, out.dtype))
        return _vq.code_back(out, d), torch.stack(indices, -1), loss

    def decode(self, indices: Tensor) -> Tensor:
        """The sum of the codes of ``indices`` (..., n) of the first ``n`` stages (-1: a
        dropped stage, adds nothing), projected out, with the channels last."""
        _vq._check_indices(indices.clamp_min(0), self.num_codes)
        if indices.shape[-1] > self.num_quantizers:
            raise ValueError(
                f"Expected `indices` with at most {self.num_quantizers} stages on the last "
                f"dimension, but found shape {tuple(indices.shape)}"
            )
        out: Tensor | None = None
        for i in range(indices.shape[-1]):
            idx = indices[..., i]
            book = self._stage(i).codebook.detach()
            code = F.embedding(idx.clamp_min(0), book) * (idx >= 0).unsqueeze(-1).to(book.dtype)
            out = code if out is None else out + code
        if out is None:
            out = torch.zeros(*indices.shape[:-1], self.codebook_dim)
        if self.project_out is not None:
            out = F.linear(out, *_weights(self.project_out, out.dtype))
        return out

    def _checkpoint_settings(self) -> dict[str, Any]:
        return {
            "num_quantizers": self.num_quantizers,
            "num_codes": self.num_codes,
            "dim": self.dim,
            "codebook_dim": self.codebook_dim,
        }

    def get_extra_state(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if isinstance(state.get("generator"), Tensor):
            self.generator.set_state(state["generator"])

    def extra_repr(self) -> str:
        text = f"num_quantizers={self.num_quantizers}, dim={self.dim}, gradient={self.gradient!r}"
        if self.codebook_dim != self.dim:
            text += f", codebook_dim={self.codebook_dim}"
        if self.quantize_dropout:
            text += f", quantize_dropout=True, cutoff={self.quantize_dropout_cutoff_index}"
        return text
