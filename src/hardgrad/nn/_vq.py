r"""Vector-quantization modules: a learned codebook (:class:`VectorQuantize`, van den Oord
et al. 2017, https://arxiv.org/abs/1711.00937), finite scalar quantization (:class:`FSQ`,
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
from .._core.checkpoint import SettingsInState
from .._core.compiler import compiler_disabled
from .._core.kernels import cast, eager_plain, opmath_dtype, without_grad
from .._core.validation import (
    check_all_finite,
    check_floating,
    check_int,
    check_positive,
    check_real,
)
from ..estimators import Estimator
from ..ops._straight_through import value_with_identity_gradient

CODEBOOK_UPDATES = ("loss", "ema")


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _check_channels(z: Tensor, channel_dim: int, size: int, what: str) -> int:
    check_floating(z, "z")
    if not -z.dim() <= channel_dim < z.dim():
        raise ValueError(
            f"Expected `channel_dim` in [{-z.dim()}, {z.dim() - 1}] for a {z.dim()}-dim `z`, "
            f"but found channel_dim={channel_dim}"
        )
    d = channel_dim % z.dim()
    if z.shape[d] != size:
        raise ValueError(
            f"Expected z.shape[{d}] == {size} ({what}), but found shape {tuple(z.shape)}"
        )
    return d


class VectorQuantize(SettingsInState, nn.Module):
    r"""A learned codebook of ``num_codes`` vectors of size ``dim``, with a chosen gradient.

    ``forward(z)`` returns ``(z_q, indices, loss)``: ``z_q, indices`` from
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

    **Initialisation.** The codebook starts as :math:`U(-1/K, 1/K)` (the VQ-VAE reference
    code's choice, drawn from the global RNG like ``nn.Linear``'s weights): codes near the
    origin, where a fresh encoder's outputs are. Codes of unit scale leave all but the
    code nearest the origin unused from the first step (we measured a 2 % usage on the
    ``vq`` benchmark).

    **k-means initialisation.** With ``kmeans_init=True`` the first training batch sets
    the codebook by ``kmeans_iters`` Lloyd iterations from a k-means++ seeding drawn from
    the batch with the module's generator (rank 0's batch, broadcast, under ``torch.distributed``).

    **Metrics.** After each forward the buffer ``batch_counts`` holds the batch's count of
    each code (of the global batch in distributed training), and the properties ``usage``
    (the fraction of codes used) and ``perplexity`` (:func:`hardgrad.vq.codebook_usage`)
    are computed from it when read; ``cluster_size`` is the counts' moving average.

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
    ) -> None:
        super().__init__()
        self.num_codes = check_int(num_codes, "num_codes", low=2)
        self.dim = check_int(dim, "dim", low=1)
        _vq._resolve_estimator(estimator)  # checks the name or instance
        self.estimator = estimator
        self.distance = _vq._check_choice(distance, "distance", _vq.DISTANCES)
        self.commitment_weight = check_real(commitment_weight, "commitment_weight")
        if self.commitment_weight < 0:
            raise ValueError(
                f"Expected `commitment_weight` >= 0, but found commitment_weight={commitment_weight!r}"
            )
        self.codebook_update = _vq._check_choice(
            codebook_update, "codebook_update", CODEBOOK_UPDATES
        )
        self.decay = check_real(decay, "decay")
        if not 0 <= self.decay < 1:
            raise ValueError(f"Expected `decay` in [0, 1), but found decay={decay!r}")
        self.eps = check_positive(eps, "eps")
        self.dead_code_threshold = check_real(dead_code_threshold, "dead_code_threshold")
        if self.dead_code_threshold < 0:
            raise ValueError(
                f"Expected `dead_code_threshold` >= 0, but found {dead_code_threshold!r}"
            )
        if not isinstance(kmeans_init, bool):
            raise TypeError(
                f"Expected `kmeans_init` to be a bool, but found {type(kmeans_init).__name__}"
            )
        self.kmeans_init = kmeans_init
        self.kmeans_iters = check_int(kmeans_iters, "kmeans_iters", low=0)
        self.channel_dim = check_int(channel_dim, "channel_dim")
        self.tau = check_positive(tau, "tau")
        self.seed = check_int(seed, "seed", low=0)
        self.generator = torch.Generator().manual_seed(self.seed)
        self._initialized = not kmeans_init
        # The VQ-VAE reference code's initialisation: U(-1/K, 1/K), codes near the origin
        # where a freshly initialised encoder's outputs are (N(0, 1) codes collapse there).
        initial = torch.empty(self.num_codes, self.dim).uniform_(-1 / num_codes, 1 / num_codes)
        if self.codebook_update == "loss":
            self.codebook = nn.Parameter(initial)
        else:
            self.register_buffer("codebook", initial)
            self.register_buffer("embed_sum", initial.clone())
        self.register_buffer("cluster_size", torch.ones(self.num_codes))
        # The last batch's code counts; usage and perplexity are read from them on demand
        # (computing them on every forward was ~10 kernels of a VQ-VAE step's few hundred).
        self.register_buffer("batch_counts", torch.zeros(self.num_codes), persistent=False)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The codebook drawn again as at construction, the statistics reset (for
        deferred initialisation: ``torch.device("meta")``, ``to_empty``, then this)."""
        self.codebook.uniform_(-1 / self.num_codes, 1 / self.num_codes)
        if self.codebook_update != "loss":
            self.embed_sum.copy_(self.codebook)
        self.cluster_size.fill_(1.0)
        self.batch_counts.zero_()
        self._initialized = not self.kmeans_init

    @property
    def usage(self) -> Tensor:
        """The fraction of codes the last forward's batch used (0-d tensor; 0 before any)."""
        return _vq.usage_from_counts(self.batch_counts)[0]

    @property
    def perplexity(self) -> Tensor:
        """The perplexity of the last forward's code distribution (0-d tensor, between 1
        and ``num_codes``; 1 before any forward)."""
        return _vq.usage_from_counts(self.batch_counts)[1]

    @property
    def initialized(self) -> bool:
        """False until the k-means initialisation ran (always True without ``kmeans_init``)."""
        return self._initialized

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        d = _check_channels(z, self.channel_dim, self.dim, "the code size `dim`")
        if self.training and not self._initialized and z.numel() > 0:
            self._kmeans(z.detach().movedim(d, -1).reshape(-1, self.dim))
        codebook = self.codebook.to(z.dtype)
        if self.estimator == "st" and self.codebook_update == "loss" and z.numel() > 0:
            return self._straight_through_with_loss(z, codebook, d)
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
        loss = self.commitment_weight * F.mse_loss(z.to(compute), z_q.detach().to(compute))
        if self.codebook_update == "loss":
            # F.embedding, not codebook[indices]: its backward is a dense scatter-add
            # (47 against 133 µs for 1,024 rows of 256 x 32 codes)
            rows = F.embedding(indices.reshape(-1), codebook)
            rows = _vq.code_back(rows.reshape(_vq.code_last_shape(z, d)), d)
            loss = loss + F.mse_loss(rows.to(compute), z.detach().to(compute))
        flat = _vq.code_last(z.detach(), d).reshape(-1, self.dim)
        without_grad(self._update, flat, indices.reshape(-1))
        return z_q, indices, loss

    def _straight_through_with_loss(
        self, z: Tensor, codebook: Tensor, d: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`forward` for ``estimator="st"`` with the codebook loss: what
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
        loss = self.commitment_weight * F.mse_loss(cast(z, compute), cast(value, compute))
        loss = loss + F.mse_loss(cast(rows, compute), cast(z.detach(), compute))
        flat = _vq.code_last(z.detach(), d).reshape(-1, self.dim)
        without_grad(self._update, flat, flat_indices)
        return z_q, indices, loss

    def _update(self, rows: Tensor, indices: Tensor) -> None:
        """The usage counts and their moving average (and the EMA codebook); called
        without grad."""
        counts = self.batch_counts
        if eager_plain(indices):  # one kernel (integer counts, exact), converted as copied
            counts.copy_(torch.bincount(indices, minlength=self.num_codes))
        else:  # bincount's size is data-dependent for the compiler
            counts.zero_().index_add_(
                0, indices, torch.ones(indices.shape, device=rows.device, dtype=counts.dtype)
            )
        sums = None
        if self.training and self.codebook_update == "ema":
            sums = torch.zeros_like(self.embed_sum).index_add_(
                0, indices, rows.to(self.embed_sum.dtype)
            )
        if self.training and _distributed():
            torch.distributed.all_reduce(counts)
            if sums is not None:
                torch.distributed.all_reduce(sums)
        if not self.training:
            return
        self.cluster_size.lerp_(counts, 1 - self.decay)  # decay N + (1 - decay) n
        if sums is not None:
            # (The product rounded on its own, then added: torch 2.11's compiled
            # ``add_(sums, alpha=...)`` does so, where its eager kernel fuses the two and
            # rounds once, so a compiled and an eager codebook drifted apart by an ulp.)
            self.embed_sum.mul_(self.decay).add_(sums.mul_(1 - self.decay))
            total = self.cluster_size.sum()
            smoothed = (self.cluster_size + self.eps) / (total + self.num_codes * self.eps) * total
            self.codebook.copy_(self.embed_sum / smoothed.unsqueeze(-1))
        if self.dead_code_threshold > 0:
            self._restart_dead_codes(rows)

    @compiler_disabled  # data-dependent: outside graphs
    @torch.no_grad()
    def _restart_dead_codes(self, rows: Tensor) -> None:
        dead = self.cluster_size < self.dead_code_threshold
        count = int(dead.sum())
        if count == 0:
            return
        new = self._draw_rows(rows, count)
        self.codebook[dead] = new.to(self.codebook.dtype)
        self.cluster_size[dead] = self.dead_code_threshold
        if self.codebook_update == "ema":
            self.embed_sum[dead] = new.to(self.embed_sum.dtype) * self.dead_code_threshold

    def _draw_rows(self, rows: Tensor, count: int) -> Tensor:
        """``count`` rows of the batch drawn with the module's generator (with replacement
        when the batch is smaller), rank 0's under ``torch.distributed``, broadcast."""
        if len(rows) >= count:
            pick = torch.randperm(len(rows), generator=self.generator)[:count]
        else:
            pick = torch.randint(len(rows), (count,), generator=self.generator)
        new = rows[pick.to(rows.device)].clone()  # (z's dtype: a float64 code stays exact)
        if _distributed():
            torch.distributed.broadcast(new, src=0)
        return new

    @compiler_disabled
    @torch.no_grad()
    def _kmeans(self, rows: Tensor) -> None:
        rows = rows.double() if self.codebook.dtype == torch.float64 else rows.float()
        centers = self._kmeans_plus_plus(rows)
        for _ in range(self.kmeans_iters):
            assign = _vq._nearest_rows(rows, centers, "l2")
            counts = torch.zeros(self.num_codes, device=rows.device).index_add_(
                0, assign, torch.ones(len(assign), device=rows.device)
            )
            sums = torch.zeros_like(centers).index_add_(0, assign, rows)
            if _distributed():
                torch.distributed.all_reduce(counts)
                torch.distributed.all_reduce(sums)
            used = counts > 0
            centers[used] = sums[used] / counts[used].unsqueeze(-1)
        self.codebook.copy_(centers.to(self.codebook.dtype))
        if self.codebook_update == "ema":
            self.embed_sum.copy_(centers.to(self.embed_sum.dtype) * self.cluster_size.unsqueeze(-1))
        self._initialized = True

    def _kmeans_plus_plus(self, rows: Tensor) -> Tensor:
        """k-means++ seeding (Arthur & Vassilvitskii 2007): each next center drawn from
        the batch with probability proportional to its squared distance to the nearest
        center so far, with the module's generator; rank 0's choice under
        ``torch.distributed``."""
        pick = int(torch.randint(len(rows), (1,), generator=self.generator))
        centers = [rows[pick]]
        nearest = (rows - rows[pick]).square().sum(-1)
        for _ in range(1, self.num_codes):
            weights = nearest.double().cpu()
            if float(weights.sum()) <= 0:
                weights = torch.ones_like(weights)
            pick = int(torch.multinomial(weights, 1, generator=self.generator))
            centers.append(rows[pick])
            nearest = torch.minimum(nearest, (rows - rows[pick]).square().sum(-1))
        out = torch.stack(centers).clone()
        if _distributed():
            torch.distributed.broadcast(out, src=0)
        return out

    def _checkpoint_settings(self) -> dict[str, Any]:
        return {
            "num_codes": self.num_codes,
            "dim": self.dim,
            "codebook_update": self.codebook_update,
            "decay": self.decay,
            "eps": self.eps,
            "distance": self.distance,
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
        return text


class FSQ(nn.Module):
    r"""Finite scalar quantization (Mentzer et al. 2023, https://arxiv.org/abs/2309.15505):
    :func:`hardgrad.vq.fsq` with fixed ``levels``; no codebook, no auxiliary loss.

    ``forward(z)`` returns ``(z_q, indices)``; ``z`` has ``len(levels)`` channels along
    ``channel_dim``. :meth:`indices_to_codes` and :meth:`codes_to_indices` convert both ways.

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

    def __init__(self, levels: Any, *, channel_dim: int = -1) -> None:
        super().__init__()
        self.levels = _vq._check_levels(levels)
        self.channel_dim = check_int(channel_dim, "channel_dim")

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
        return _vq._checked_fsq(z, self.levels, d)

    def indices_to_codes(self, indices: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """The codes of ``indices`` (:func:`hardgrad.vq.fsq_indices_to_codes`)."""
        return _vq.fsq_indices_to_codes(indices, self.levels, dim=self.channel_dim, dtype=dtype)

    def codes_to_indices(self, codes: Tensor) -> Tensor:
        """The indices of ``codes`` (:func:`hardgrad.vq.fsq_codes_to_indices`)."""
        return _vq.fsq_codes_to_indices(codes, self.levels, dim=self.channel_dim)

    def extra_repr(self) -> str:
        return f"levels={self.levels}"


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
    ) -> None:
        super().__init__()
        self.dim = check_int(dim, "dim", low=1, high=62)
        self.entropy_weight = check_real(entropy_weight, "entropy_weight")
        self.diversity_gamma = check_real(diversity_gamma, "diversity_gamma")
        self.commitment_weight = check_real(commitment_weight, "commitment_weight")
        self.tau = check_positive(tau, "tau")
        self.surrogate = surrogate
        self.channel_dim = check_int(channel_dim, "channel_dim")

    @property
    def codebook_size(self) -> int:
        """The number of codes, :math:`2^d`."""
        return 2**self.dim

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        d = _check_channels(z, self.channel_dim, self.dim, "the number of bits `dim`")
        z_q, indices = _vq.lfq(z, dim=d, surrogate=self.surrogate)
        compute = opmath_dtype(z.dtype)  # float32 for half types, else z's own
        if z.numel() == 0:
            return z_q, indices, z.new_zeros((), dtype=compute)
        per_sample, codebook = _vq._lfq_entropy(z, d, self.tau)  # (z checked by lfq)
        entropy = per_sample - self.diversity_gamma * codebook
        commitment = F.mse_loss(z.to(compute), z_q.detach().to(compute))
        loss = self.entropy_weight * entropy + self.commitment_weight * commitment
        return z_q, indices, loss

    def indices_to_codes(self, indices: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """The ±1 codes of ``indices`` (:func:`hardgrad.vq.lfq_indices_to_codes`)."""
        return _vq.lfq_indices_to_codes(indices, self.dim, dim=self.channel_dim, dtype=dtype)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, entropy_weight={self.entropy_weight}, "
            f"diversity_gamma={self.diversity_gamma}, commitment_weight={self.commitment_weight}"
        )
