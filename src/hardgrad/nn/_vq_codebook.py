r"""The upkeep of :class:`~hardgrad.nn.VectorQuantize`'s codebook: the usage counts and
their moving average, the EMA codebook (Razavi et al. 2019, https://arxiv.org/abs/1906.00446),
dead-code restarts, and the k-means initialisation (k-means++ seeding, Arthur &
Vassilvitskii 2007), each for one codebook (``group``: a head's own with
``separate_codebook_per_head``) and over the unmasked rows only."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import vq as _vq
from .._core.compiler import compiler_disabled
from .._core.kernels import eager_plain
from .._core.validation import check_floating

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


def _check_mask(mask: Any, z: Tensor, d: int) -> Tensor | None:
    """``mask``: None, or a bool tensor of ``z``'s shape without the channel dimension."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        found = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"Expected `mask` to be a bool tensor or None, but found {found}")
    shape = z.shape[:d] + z.shape[d + 1 :]
    if mask.shape != shape:
        raise ValueError(
            f"Expected `mask` of z's shape without the channel dimension, {tuple(shape)}, "
            f"but found {tuple(mask.shape)}"
        )
    if mask.device != z.device:
        raise ValueError(
            f"Expected `mask` on the device of `z` ({z.device}), but found {mask.device}"
        )
    return mask


def _part(t: Tensor, group: int | None) -> Tensor:
    """``t`` itself (one codebook) or the view of its ``group``-th codebook."""
    return t if group is None else t[group]


class CodebookUpkeep:
    """Mixin of :class:`~hardgrad.nn.VectorQuantize`: the statistics and the codebook's
    in-place updates, called without grad. ``rows`` are (N, D) detached code vectors,
    ``indices`` (N,) their codes, ``keep`` None or a bool (N,) of the rows that count."""

    codebook: Tensor
    cluster_size: Tensor
    embed_sum: Tensor
    batch_counts: Tensor
    num_codes: int
    codebook_update: str
    decay: float
    eps: float
    dead_code_threshold: float
    kmeans_iters: int
    generator: torch.Generator
    training: bool
    _initialized: bool

    def _update(
        self, rows: Tensor, indices: Tensor, keep: Tensor | None, group: int | None
    ) -> None:
        """The usage counts and their moving average (and the EMA codebook)."""
        counts = _part(self.batch_counts, group)
        if keep is None and eager_plain(indices):  # one kernel (integer counts, exact)
            counts.copy_(torch.bincount(indices, minlength=self.num_codes))
        else:  # bincount's size is data-dependent for the compiler; masked rows weigh 0
            ones = (
                torch.ones(indices.shape, device=rows.device, dtype=counts.dtype)
                if keep is None
                else keep.to(counts.dtype)
            )
            counts.zero_().index_add_(0, indices, ones)
        sums = None
        embed_sum = _part(self.embed_sum, group) if self.codebook_update == "ema" else None
        if self.training and embed_sum is not None:
            kept = rows if keep is None else torch.where(keep.unsqueeze(-1), rows, 0)
            sums = torch.zeros_like(embed_sum).index_add_(0, indices, kept.to(embed_sum.dtype))
        if self.training and _distributed():
            torch.distributed.all_reduce(counts)
            if sums is not None:
                torch.distributed.all_reduce(sums)
        if not self.training:
            return
        cluster_size = _part(self.cluster_size, group)
        cluster_size.lerp_(counts, 1 - self.decay)  # decay N + (1 - decay) n
        if sums is not None and embed_sum is not None:
            # (The product rounded on its own, then added: torch 2.11's compiled
            # ``add_(sums, alpha=...)`` does so, where its eager kernel fuses the two and
            # rounds once, so a compiled and an eager codebook drifted apart by an ulp.)
            embed_sum.mul_(self.decay).add_(sums.mul_(1 - self.decay))
            total = cluster_size.sum()
            smoothed = (cluster_size + self.eps) / (total + self.num_codes * self.eps) * total
            _part(self.codebook, group).copy_(embed_sum / smoothed.unsqueeze(-1))
        if self.dead_code_threshold > 0:
            self._restart_dead_codes(rows, keep, group)

    @compiler_disabled  # data-dependent: outside graphs
    @torch.no_grad()
    def _restart_dead_codes(self, rows: Tensor, keep: Tensor | None, group: int | None) -> None:
        cluster_size = _part(self.cluster_size, group)
        dead = cluster_size < self.dead_code_threshold
        count = int(dead.sum())
        if count == 0:
            return
        if keep is not None:
            rows = rows[keep]
        if _distributed():  # every rank must join the broadcast: rank 0 needs rows
            if len(rows) == 0 and torch.distributed.get_rank() == 0:
                return
        elif len(rows) == 0:  # every row masked: nothing to restart from
            return
        new = self._draw_rows(rows, count)
        _part(self.codebook, group)[dead] = new.to(self.codebook.dtype)
        cluster_size[dead] = self.dead_code_threshold
        if self.codebook_update == "ema":
            _part(self.embed_sum, group)[dead] = (
                new.to(self.embed_sum.dtype) * self.dead_code_threshold
            )

    def _draw_rows(self, rows: Tensor, count: int) -> Tensor:
        """``count`` rows of the batch drawn with the module's generator (with replacement
        when the batch is smaller), rank 0's under ``torch.distributed``, broadcast."""
        if len(rows) >= count:
            pick = torch.randperm(len(rows), generator=self.generator)[:count]
        elif len(rows) > 0:
            pick = torch.randint(len(rows), (count,), generator=self.generator)
        else:  # (a rank with no rows: receives rank 0's)
            return rows.new_zeros(count, rows.shape[-1])
        new = rows[pick.to(rows.device)].clone()  # (z's dtype: a float64 code stays exact)
        if _distributed():
            torch.distributed.broadcast(new, src=0)
        return new

    @compiler_disabled
    @torch.no_grad()
    def _kmeans(self, rows: Tensor, keep: Tensor | None, group: int | None) -> bool:
        """The codebook (of ``group``) set by k-means on the kept rows; False (nothing
        done) when every row is masked."""
        if keep is not None:
            rows = rows[keep]
        if len(rows) == 0:
            return False
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
        _part(self.codebook, group).copy_(centers.to(self.codebook.dtype))
        if self.codebook_update == "ema":
            sizes = _part(self.cluster_size, group).unsqueeze(-1)
            _part(self.embed_sum, group).copy_(centers.to(self.embed_sum.dtype) * sizes)
        return True

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
