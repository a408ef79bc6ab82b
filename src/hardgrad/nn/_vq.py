r"""The learned-codebook quantizer :class:`VectorQuantize` (van den Oord et al. 2017,
https://arxiv.org/abs/1711.00937): its forward, losses, heads, projections and masks; the
codebook's upkeep (EMA, restarts, k-means) is in ``_vq_codebook``. The math is in
:mod:`hardgrad.vq`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import vq as _vq
from .._core.checkpoint import SettingsInState
from .._core.kernels import cast, opmath_dtype, without_grad
from .._core.validation import check_int, check_positive, check_real
from ..estimators import Estimator
from ..ops._straight_through import value_with_identity_gradient
from ._vq_codebook import CODEBOOK_UPDATES, CodebookUpkeep, _check_channels, _check_mask


class VectorQuantize(CodebookUpkeep, SettingsInState, nn.Module):
    r"""A learned codebook of ``num_codes`` vectors of size ``dim``, with a chosen gradient.

    ``forward(z, mask=None)`` returns ``(z_q, indices, loss)``: ``z_q, indices`` from
    :func:`hardgrad.vector_quantize` (the nearest code, exactly; the gradient to ``z`` by
    ``estimator``: ``"st"``, ``"rotation"``, ``"gumbel"`` or a pathwise estimator
    instance), and the scalar auxiliary loss of the VQ-VAE paper:

    .. math::

        \mathcal L = \underbrace{\overline{\lVert \operatorname{sg}[z] - c_k\rVert^2}}_{\text{codebook}}
        + \beta\, \underbrace{\overline{\lVert z - \operatorname{sg}[c_k]\rVert^2}}_{\text{commitment}}

    (means over elements; :math:`\beta` = ``commitment_weight``). With
    ``codebook_update="ema"`` the codebook is a buffer, the loss is the commitment term only,
    and in training mode each forward updates (Razavi et al. 2019,
    https://arxiv.org/abs/1906.00446; the Laplace smoothing as in their reference code)

    .. math::

        N_k \leftarrow \gamma N_k + (1-\gamma) n_k, \quad
        m_k \leftarrow \gamma m_k + (1-\gamma) \textstyle\sum_{i: k_i = k} z_i, \quad
        \tilde N_k = \frac{N_k + \epsilon}{\sum_j N_j + K\epsilon} \sum_j N_j, \quad
        c_k = m_k / \tilde N_k,

    with :math:`\gamma` = ``decay``, :math:`\epsilon` = ``eps`` and :math:`n_k` the batch's
    count of code :math:`k`. Under ``torch.distributed`` the counts and sums are
    all-reduced (summed) before the update, so every rank applies the same update, the one
    a single process would on the global batch. Eval mode updates nothing.

    **Dead codes.** :math:`N_k` (the buffer ``cluster_size``) is kept in both modes; with
    ``dead_code_threshold`` > 0, in training mode every code with :math:`N_k` below it is
    replaced by a vector of the current batch drawn with the module's own generator
    (seeded by ``seed``, saved in checkpoints; on rank 0 under ``torch.distributed``, then
    broadcast), and its :math:`N_k` (and :math:`m_k`) set as if it had just been used
    ``dead_code_threshold`` times.

    **Which codebook a step uses.** A training forward writes its EMA update and its
    dead-code restarts into ``codebook`` (in place) after it has chosen the codes: its
    ``z_q``, ``indices`` and loss, and the backward of every estimator (the stochastic
    ones read the code vectors, from a copy taken at the call), use the codebook as it was
    when the forward began; the updated one is the next forward's. With
    ``codebook_update="loss"`` the codebook loss's gradient is that of the rows this
    forward used; the optimizer applies it to the rows as they are, restarted ones included.

    **Initialisation.** The codebook starts as ``init_codebook`` (copied, in the default
    dtype) or as :math:`U(-1/K, 1/K)` (the VQ-VAE reference code's choice, drawn from the
    global RNG like ``nn.Linear``'s weights): codes near the origin, where a fresh
    encoder's outputs are. Codes of unit scale leave all but the code nearest the origin
    unused from the first step (we measured a 2 % usage on the ``vq`` benchmark).
    :math:`N_k` starts at ``init_cluster_size`` and :math:`m_k` at :math:`N_k c_k`; ``0``
    is the original VQ-VAE EMA code's start: the first update then moves each used code to
    its batch mean and every unused one to the origin (Irie et al. report a worse
    convergence from it; the default 1 keeps unused codes in place).

    **k-means initialisation.** With ``kmeans_init=True`` the first training batch sets
    the codebook by ``kmeans_iters`` Lloyd iterations from a k-means++ seeding drawn from
    the batch with the module's generator (rank 0's batch, broadcast, under ``torch.distributed``).

    **Metrics.** After each forward the buffer ``batch_counts`` holds the batch's count of
    each code (of the global batch in distributed training), and the properties ``usage``
    (the fraction of codes used) and ``perplexity`` (:func:`hardgrad.vq.codebook_usage`)
    are computed from it when read; ``cluster_size`` is the counts' moving average.

    **Padding masks.** ``vq(z, mask)`` with a bool ``mask`` of ``z``'s shape without the
    channel dimension (False: padding): masked positions are still quantized (``z_q`` holds
    their code and ``indices`` their index, so shapes stay static) but their ``z_q`` has no
    gradient to ``z``, and they count in nothing: not in the losses (means over the
    unmasked positions' elements), the EMA counts and sums, ``batch_counts``, dead-code
    restarts or the k-means initialisation. (vector-quantize-pytorch returns zeros and
    index -1 there.)

    **Heads and projections.** ``heads`` > 1 splits each ``z`` vector into ``heads`` parts
    of ``codebook_dim`` (default ``dim // heads``) channels, quantized by one shared codebook
    or, with ``separate_codebook_per_head``, by a codebook per head (``codebook`` then
    ``(heads, num_codes, codebook_dim)``, the statistics per head); ``indices`` gain a last
    dimension of size ``heads``. When ``heads * codebook_dim != dim``, ``nn.Linear``
    projections map ``z`` in (``project_in``) and ``z_q`` out (``project_out``); the
    losses are then those of the projected vectors.

    Args:
        num_codes: K >= 2.
        dim: D, the size of a code vector.
        estimator: the gradient to ``z`` (see :func:`hardgrad.vector_quantize`).
        distance: ``"l2"`` or ``"cosine"``.
        commitment_weight: :math:`\beta` >= 0.
        codebook_update: ``"loss"`` (the codebook is a parameter trained by the codebook
            loss) or ``"ema"``.
        decay: :math:`\gamma` in [0, 1).
        eps: Laplace smoothing :math:`\epsilon` > 0.
        dead_code_threshold: restart codes whose ``cluster_size`` is below it (0: never).
        kmeans_init: initialise the codebook from the first training batch.
        kmeans_iters: Lloyd iterations of that initialisation.
        channel_dim: the code dimension of ``z``.
        tau: the temperature of the code logits for a stochastic estimator.
        seed: the seed of the module's generator.
        heads: the number of parts each vector is split into.
        separate_codebook_per_head: one codebook per head (default: one shared).
        codebook_dim: the size of a code vector (default ``dim // heads``).
        init_codebook: the initial codebook, ``(num_codes, codebook_dim)`` (or
            ``(heads, num_codes, codebook_dim)`` with separate codebooks).
        init_cluster_size: the initial :math:`N_k` >= 0.

    Example:
        >>> import torch, hardgrad as hg
        >>> torch.manual_seed(0)  # the codebook's initial values
        <torch._C.Generator object at ...>
        >>> vq = hg.nn.VectorQuantize(8, 2, estimator="rotation", codebook_update="ema")
        >>> vq
        VectorQuantize(num_codes=8, dim=2, estimator='rotation', codebook_update='ema')
        >>> z = torch.randn(5, 2, generator=torch.Generator().manual_seed(1))
        >>> z_q, indices, loss = vq(z)
        >>> indices, round(float(loss), 4), float(vq.usage)
        (tensor([3, 3, 6, 6, 6]), 0.1026, 0.25)
    """

    codebook: Tensor
    cluster_size: Tensor
    embed_sum: Tensor
    batch_counts: Tensor

    def __init__(
        self,
        num_codes: int,
        dim: int,
        *,
        estimator: str | Estimator = "st",
        distance: str = "l2",
        commitment_weight: float = 0.25,
        codebook_update: str = "loss",
        decay: float = 0.99,
        eps: float = 1e-5,
        dead_code_threshold: float = 0.0,
        kmeans_init: bool = False,
        kmeans_iters: int = 10,
        channel_dim: int = -1,
        tau: float = 1.0,
        seed: int = 0,
        heads: int = 1,
        separate_codebook_per_head: bool = False,
        codebook_dim: int | None = None,
        init_codebook: Tensor | None = None,
        init_cluster_size: float = 1.0,
    ) -> None:
        super().__init__()
        self.num_codes = check_int(num_codes, "num_codes", low=2)
        self.dim = check_int(dim, "dim", low=1)
        _vq._resolve_estimator(estimator)  # checks the name or instance
        self.estimator = estimator
        self.distance = _vq._check_choice(distance, "distance", _vq.DISTANCES)
        self.commitment_weight = _non_negative(commitment_weight, "commitment_weight")
        self.codebook_update = _vq._check_choice(
            codebook_update, "codebook_update", CODEBOOK_UPDATES
        )
        self.decay = check_real(decay, "decay")
        if not 0 <= self.decay < 1:
            raise ValueError(f"Expected `decay` in [0, 1), but found decay={decay!r}")
        self.eps = check_positive(eps, "eps")
        self.dead_code_threshold = _non_negative(dead_code_threshold, "dead_code_threshold")
        self.kmeans_init = _check_bool(kmeans_init, "kmeans_init")
        self.kmeans_iters = check_int(kmeans_iters, "kmeans_iters", low=0)
        self.channel_dim = check_int(channel_dim, "channel_dim")
        self.tau = check_positive(tau, "tau")
        self.seed = check_int(seed, "seed", low=0)
        self.heads = check_int(heads, "heads", low=1)
        self.separate_codebook_per_head = _check_bool(
            separate_codebook_per_head, "separate_codebook_per_head"
        )
        if codebook_dim is None:
            if self.dim % self.heads:
                raise ValueError(
                    f"Expected `dim` divisible by `heads` (or a `codebook_dim`), but found "
                    f"dim={dim}, heads={heads}"
                )
            codebook_dim = self.dim // self.heads
        self.codebook_dim = check_int(codebook_dim, "codebook_dim", low=1)
        self.init_cluster_size = _non_negative(init_cluster_size, "init_cluster_size")
        self.generator = torch.Generator().manual_seed(self.seed)
        self._initialized = not kmeans_init
        inner = self.heads * self.codebook_dim
        self.project_in = nn.Linear(self.dim, inner) if inner != self.dim else None
        self.project_out = nn.Linear(inner, self.dim) if inner != self.dim else None
        groups = self.heads if self.separate_codebook_per_head else 1
        shape = (self.num_codes, self.codebook_dim)
        self._groups = shape if groups == 1 else (groups, *shape)  # (the codebook's shape)
        self._init_codebook = _check_init_codebook(init_codebook, self._groups)
        initial = torch.empty(self._groups)
        self._draw_codebook(initial)
        if self.codebook_update == "loss":
            self.codebook = nn.Parameter(initial)
        else:
            self.register_buffer("codebook", initial)
            self.register_buffer("embed_sum", initial * self.init_cluster_size)
        counts = self._groups[:-1]
        self.register_buffer("cluster_size", torch.full(counts, self.init_cluster_size))
        # The last batch's code counts; usage and perplexity are read from them on demand
        # (computing them on every forward was ~10 kernels of a VQ-VAE step's few hundred).
        self.register_buffer("batch_counts", torch.zeros(counts), persistent=False)

    def _draw_codebook(self, out: Tensor) -> None:
        # The VQ-VAE reference code's initialisation: U(-1/K, 1/K), codes near the origin
        # where a freshly initialised encoder's outputs are (N(0, 1) codes collapse there).
        if self._init_codebook is not None:
            out.copy_(self._init_codebook)
        else:
            out.uniform_(-1 / self.num_codes, 1 / self.num_codes)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The codebook drawn again as at construction (or ``init_codebook`` copied again),
        the statistics and projections reset (for deferred initialisation:
        ``torch.device("meta")``, ``to_empty``, then this)."""
        self._draw_codebook(self.codebook)
        if self.codebook_update != "loss":
            torch.mul(self.codebook, self.init_cluster_size, out=self.embed_sum)
        self.cluster_size.fill_(self.init_cluster_size)
        self.batch_counts.zero_()
        for projection in (self.project_in, self.project_out):
            if projection is not None:
                projection.reset_parameters()
        self._initialized = not self.kmeans_init

    @property
    def usage(self) -> Tensor:
        """The fraction of codes the last forward's batch used (0-d tensor; 0 before any;
        over every head's codes with separate codebooks)."""
        return _vq.usage_from_counts(self.batch_counts.reshape(-1))[0]

    @property
    def perplexity(self) -> Tensor:
        """The perplexity of the last forward's code distribution (0-d tensor, between 1
        and ``num_codes``; 1 before any forward; over every head's codes with separate
        codebooks)."""
        return _vq.usage_from_counts(self.batch_counts.reshape(-1))[1]

    @property
    def initialized(self) -> bool:
        """False until the k-means initialisation ran (always True without ``kmeans_init``)."""
        return self._initialized

    def forward(self, z: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        d = _check_channels(z, self.channel_dim, self.dim, "the code size `dim`")
        mask = _check_mask(mask, z, d)
        if self.project_in is None and self.heads == 1:
            self._maybe_kmeans(z, d, mask, None)
            return self._quantize(z, d, self.codebook.to(z.dtype), mask, None)
        x = _vq.code_last(z, d)
        if self.project_in is not None:
            x = F.linear(x, *_weights(self.project_in, x.dtype))
        if self.heads > 1:
            x = x.unflatten(-1, (self.heads, self.codebook_dim))
            if mask is not None:
                mask = mask.unsqueeze(-1).expand(x.shape[:-1])
        last = x.dim() - 1
        if not self.separate_codebook_per_head:
            self._maybe_kmeans(x, last, mask, None)
            z_q, indices, loss = self._quantize(x, last, self.codebook.to(z.dtype), mask, None)
        else:  # each head by its own codebook (the losses: means of equal-sized parts)
            parts = [x[..., h, :] for h in range(self.heads)]
            keeps = [None if mask is None else mask[..., h] for h in range(self.heads)]
            for h in range(self.heads):
                self._maybe_kmeans(parts[h], last - 1, keeps[h], h)
            codebook = self.codebook.to(z.dtype)
            outs = [
                self._quantize(parts[h], last - 1, codebook[h], keeps[h], h)
                for h in range(self.heads)
            ]
            z_q = torch.stack([o[0] for o in outs], -2)
            indices = torch.stack([o[1] for o in outs], -1)
            loss = torch.stack([o[2] for o in outs]).mean()
        if self.heads > 1:
            z_q = z_q.flatten(-2)
        if self.project_out is not None:
            z_q = F.linear(z_q, *_weights(self.project_out, z_q.dtype))
        return _vq.code_back(z_q, d), indices, loss

    def _maybe_kmeans(self, z: Tensor, d: int, mask: Tensor | None, group: int | None) -> None:
        if self.training and not self._initialized and z.numel() > 0:
            rows = _vq.code_last(z.detach(), d).reshape(-1, self.codebook_dim)
            done = self._kmeans(rows, None if mask is None else mask.reshape(-1), group)
            if group is None or group == self.heads - 1:
                self._initialized = done

    def _quantize(
        self, z: Tensor, d: int, codebook: Tensor, mask: Tensor | None, group: int | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(z_q, indices, loss)`` of one codebook, ``z``'s code dimension ``d``."""
        if self.estimator == "st" and self.codebook_update == "loss" and z.numel() > 0:
            return self._straight_through_with_loss(z, codebook, d, mask, group)
        # A stochastic estimator samples codes in training only; evaluation takes the
        # nearest code (its mode), as Gumbel-VQ models do at test time.
        deterministic = self.estimator in ("st", "rotation")
        z_q, indices = _vq.vector_quantize(
            z,
            codebook,
            dim=d,
            estimator=self.estimator if self.training or deterministic else "st",
            distance=self.distance,
            tau=self.tau,
        )
        compute = opmath_dtype(z.dtype)  # float32 for half types, else z's own
        if z.numel() == 0:  # sums of nothing: 0, with zero gradients of the right shapes
            # to z and (codebook loss) the codebook, which a DDP rank with no tokens needs
            loss = cast(z, compute).sum()
            if self.codebook_update == "loss":
                loss = loss + cast(F.embedding(indices.reshape(-1), codebook), compute).sum()
            return z_q, indices, loss
        keep = None if mask is None else _vq.code_back(mask.unsqueeze(-1), d)
        loss = self.commitment_weight * _mse(z.to(compute), z_q.detach().to(compute), keep)
        if self.codebook_update == "loss":
            # F.embedding, not codebook[indices]: its backward is a dense scatter-add
            # (47 against 133 µs for 1,024 rows of 256 x 32 codes)
            rows = F.embedding(indices.reshape(-1), codebook)
            rows = _vq.code_back(rows.reshape(_vq.code_last_shape(z, d)), d)
            loss = loss + _mse(rows.to(compute), z.detach().to(compute), keep)
        if keep is not None:  # (the same values; no gradient at masked positions)
            z_q = torch.where(keep, z_q, z_q.detach())
        flat = _vq.code_last(z.detach(), d).reshape(-1, self.codebook_dim)
        flat_mask = None if mask is None else mask.reshape(-1)
        without_grad(self._update, flat, indices.reshape(-1), flat_mask, group)
        return z_q, indices, loss

    def _straight_through_with_loss(
        self, z: Tensor, codebook: Tensor, d: int, mask: Tensor | None, group: int | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`_quantize` for ``estimator="st"`` with the codebook loss: what
        :func:`hardgrad.vector_quantize` and the loss compute (the same values and gradients
        bit for bit), from one gather of the chosen codes instead of two. ``F.embedding``
        gathers them with the codebook's gradient, for the codebook loss; the
        straight-through and the commitment loss take their detached value. About 30 µs
        less a VQ-VAE training step (1,024 rows of 256 x 32 codes): 1.023 -> 0.995 of the
        hand-written layer's step, 15 interleaved rounds."""
        _vq._check_codebook(z, codebook, d)
        indices = _vq._nearest(z, codebook.detach(), d, self.distance, validate=True)
        flat_indices = indices.reshape(-1)
        gathered = F.embedding(flat_indices, codebook).reshape(_vq.code_last_shape(z, d))
        rows = _vq.code_back(gathered, d)
        value = rows.detach()
        z_q = value_with_identity_gradient(value, z)
        compute = opmath_dtype(z.dtype)  # float32 for half types, else z's own
        keep = None if mask is None else _vq.code_back(mask.unsqueeze(-1), d)
        loss = self.commitment_weight * _mse(cast(z, compute), cast(value, compute), keep)
        loss = loss + _mse(cast(rows, compute), cast(z.detach(), compute), keep)
        if keep is not None:
            z_q = torch.where(keep, z_q, value)
        flat = _vq.code_last(z.detach(), d).reshape(-1, self.codebook_dim)
        flat_mask = None if mask is None else mask.reshape(-1)
        without_grad(self._update, flat, flat_indices, flat_mask, group)
        return z_q, indices, loss

    def _checkpoint_settings(self) -> dict[str, Any]:
        return {
            "num_codes": self.num_codes,
            "dim": self.dim,
            "codebook_update": self.codebook_update,
            "decay": self.decay,
            "eps": self.eps,
            "distance": self.distance,
            "heads": self.heads,
            "separate_codebook_per_head": self.separate_codebook_per_head,
            "codebook_dim": self.codebook_dim,
        }

    def get_extra_state(self) -> dict[str, Any]:
        return {"initialized": self._initialized, "generator": self.generator.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self._initialized = bool(state.get("initialized", True))
        if isinstance(state.get("generator"), Tensor):
            self.generator.set_state(state["generator"])

    def extra_repr(self) -> str:
        text = f"num_codes={self.num_codes}, dim={self.dim}, estimator={self.estimator!r}"
        if self.distance != "l2":
            text += f", distance={self.distance!r}"
        text += f", codebook_update={self.codebook_update!r}"
        if self.dead_code_threshold:
            text += f", dead_code_threshold={self.dead_code_threshold}"
        if self.kmeans_init:
            text += ", kmeans_init=True"
        if self.heads > 1:
            text += f", heads={self.heads}"
            if self.separate_codebook_per_head:
                text += ", separate_codebook_per_head=True"
        if self.codebook_dim * self.heads != self.dim:
            text += f", codebook_dim={self.codebook_dim}"
        return text


def _mse(a: Tensor, b: Tensor, keep: Tensor | None) -> Tensor:
    """``F.mse_loss(a, b)``, or its mean over the elements where ``keep`` (broadcast)."""
    if keep is None:
        return F.mse_loss(a, b)
    weight = keep.to(a.dtype)
    count = weight.expand(a.shape).sum().clamp_min(1)
    return ((a - b).square() * weight).sum() / count


def _weights(layer: nn.Linear, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    bias = None if layer.bias is None else layer.bias.to(dtype)
    return layer.weight.to(dtype), bias


def _non_negative(value: Any, name: str) -> float:
    checked = check_real(value, name)
    if checked < 0:
        raise ValueError(f"Expected `{name}` >= 0, but found {name}={value!r}")
    return checked


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, but found {type(value).__name__}")
    return value


def _check_init_codebook(value: Any, shape: tuple[int, ...]) -> Tensor | None:
    """A detached CPU copy of ``init_codebook`` in the default dtype (checked)."""
    if value is None:
        return None
    if not isinstance(value, Tensor) or not value.is_floating_point():
        found = value.dtype if isinstance(value, Tensor) else type(value).__name__
        raise TypeError(f"Expected `init_codebook` to be a floating tensor, but found {found}")
    if tuple(value.shape) != shape:
        raise ValueError(
            f"Expected `init_codebook` of shape {shape}, but found {tuple(value.shape)}"
        )
    copy = value.detach().to("cpu", torch.get_default_dtype(), copy=True)
    if not bool(torch.isfinite(copy).all()):
        raise ValueError("Expected `init_codebook` with finite values, but found inf or NaN")
    return copy
