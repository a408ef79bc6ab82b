r"""Isotonic regression for the soft sorts: which entries pool into one block, and the
blocks' values.

Papers: Blondel et al. (2020), "Fast Differentiable Sorting and Ranking",
https://arxiv.org/abs/2002.08871 (the soft sort and rank are isotonic regressions);
pool-adjacent-violators: Best & Chakravarti (1990), "Active set algorithms for isotonic
regression; a unifying framework", https://doi.org/10.1007/BF01580873.

The problems, row by row (last dimension), with a decreasing solution:

* ``"l2"``: :math:`v = \arg\min_{v_1 \ge \dots \ge v_n} \tfrac12 \lVert v - (s - w)\rVert^2`,
  block value :math:`\bar s_B - \bar w_B` (means over the block :math:`B`);
* ``"kl"``: :math:`v = \arg\min_{v\downarrow} \langle e^{s - v}, 1\rangle + \langle e^w, v\rangle`,
  block value :math:`\log\sum_B e^{s} - \log\sum_B e^{w}`.

The solution is constant on blocks of consecutive entries. Finding the blocks is the only
non-smooth step, done without gradient in one of two ways:

* pool-adjacent-violators (PAV): merging adjacent blocks whose values violate the order
  until none do, all rows at once in batched tensor passes (:mod:`hardgrad.sorting._pav`),
  in float64, run as the opaque operator ``hardgrad::isotonic_blocks`` (so
  ``torch.compile`` keeps one graph and ``torch.vmap`` batches it);
* the min-max formula :math:`v_i = \min_{j \le i}\max_{k \ge i} m(j, k)` (:math:`m(j, k)`
  the value of the block :math:`j..k`): a handful of batched tensor operations on the
  input's device, but :math:`O(n^2)` time and memory per row.

:func:`block_statistics` uses the min-max formula for rows shorter than
:data:`PAV_MIN_LENGTH` (CPU; :data:`PAV_MIN_LENGTH_ACCELERATOR` elsewhere), where its
batched kernels win, and PAV from there on, and returns each entry's block statistics (means or log-sum-exps of ``s`` and ``w``
over its block) as differentiable tensors: autograd gives PAV's Jacobian exactly,
:math:`1/|B|` on the block's entries (``"l2"``) or their :math:`\operatorname{softmax}_B`
(``"kl"``), and exact second derivatives on both paths. The min-max path picks the statistics out of the :math:`n \times n` tables of
all blocks' statistics; the PAV path sums over the blocks (scatter-add), in
:math:`O(n)` memory.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import _native_pav
from ._pav import pav_starts

__all__ = ["PAV_MIN_LENGTH", "PAV_MIN_LENGTH_ACCELERATOR", "block_primal", "block_statistics"]

#: CPU rows of at least this many entries find their blocks by pool-adjacent-violators
#: (batched passes, :math:`O(n)` memory); shorter rows by the batched min-max formula
#: (:math:`O(n^2)`). Measured on 2 CPU cores with the sequential (Python) PAV this
#: replaced (soft_rank forward and backward): PAV faster from 32 entries at batches up to
#: 64 (n = 64: 1.7 vs 3.5 ms at batch 64; n = 128: 3.0 vs 24 ms; n = 1024: 20 ms vs 3.3 s).
PAV_MIN_LENGTH = 32
#: The same threshold for tensors on other devices, where every PAV pass waits for the
#: device (one sync per pass) and the min-max formula's kernels run in parallel. Not
#: measured on a GPU yet.
PAV_MIN_LENGTH_ACCELERATOR = 256


# --------------------------------------------------------------------------- PAV


@torch.library.custom_op("hardgrad::isotonic_blocks", mutates_args=())
def _pav_blocks(s: Tensor, w: Tensor, kl: bool) -> Tensor:
    """PAV's block start of every entry of the rows of ``s`` and ``w`` (int64, ``s``'s shape
    and device): by the compiled kernel (:mod:`hardgrad.sorting._native_pav`) on the CPU
    where it is built, else by the batched passes of :mod:`hardgrad.sorting._pav`; both in
    float64."""
    if _native_pav.available(s, w):
        native = _native_pav.forward(s, w, kl, None)
        if native is not None:
            return native[0]
    return pav_starts(s, w, kl)


@_pav_blocks.register_fake
def _(s: Tensor, w: Tensor, kl: bool) -> Tensor:
    return torch.empty(s.shape, dtype=torch.int64, device=s.device)


@torch.library.register_vmap("hardgrad::isotonic_blocks")  # type: ignore[untyped-decorator]
def _(info: Any, in_dims: tuple[int | None, ...], s: Tensor, w: Tensor, kl: bool) -> Any:
    # Rows are independent: move the batched dimension to the front of both and run once.
    s_dim, w_dim = in_dims[0], in_dims[1]
    size = info.batch_size
    s = s.movedim(s_dim, 0) if s_dim is not None else s.expand(size, *s.shape)
    w = w.movedim(w_dim, 0) if w_dim is not None else w.expand(size, *w.shape)
    s, w = torch.broadcast_tensors(s, w)
    return _pav_blocks(s.contiguous(), w.contiguous(), kl), 0


# --------------------------------------------------------------------------- min-max


def _range_logsumexp(a: Tensor) -> Tensor:
    r"""``out[..., j, k] = log sum_{t=j}^{k} exp(a_t)`` for ``j <= k`` (finite values
    elsewhere) and non-increasing rows ``a`` (what the soft sorts pass: both statistics'
    inputs are sorted decreasingly): row :math:`j` of the table is
    :math:`m_j + \log \sum_{t=j}^{k} e^{a_t - m_j}`, running sums along :math:`k` of terms
    shifted by the suffix maximum :math:`m_j = \max_{t \ge j} a_t` (held constant, so it
    changes no derivative), each at most 1 and the first exactly 1. (A row that rises far
    above an earlier entry would lose that entry's blocks to underflow.)

    Only ``exp``, ``cumsum`` and ``log``: autograd's second derivatives through them are
    exact. (``torch.logcumsumexp``'s backward, which an earlier form used, is not
    differentiable where its incoming gradient is 0, which most entries of these tables
    get: Hessian-vector products came out 10-90 % off.)"""
    n = a.shape[-1]
    idx = torch.arange(n, device=a.device)
    keep = idx.unsqueeze(-1) <= idx  # [j, t]: t >= j
    with torch.no_grad():
        shift = torch.cummax(a.flip(-1), -1).values.flip(-1).unsqueeze(-1)  # m_j
    # -inf before j (not a mask after exp: e^{a_t - m_j} may overflow there).
    gaps = torch.where(keep, a.unsqueeze(-2) - shift, torch.full_like(shift, -torch.inf))
    sums = torch.exp(gaps).cumsum(-1)
    out = shift + torch.log(sums.clamp_min(torch.finfo(a.dtype).tiny))
    # A block of one is a_j itself, bit for bit and with derivative exactly 1.
    return torch.where(idx.unsqueeze(-1) == idx, a.unsqueeze(-2), out)


def _range_mean(y: Tensor) -> Tensor:
    """``out[..., j, k] = mean(y[..., j:k+1])`` for ``j <= k`` (0 elsewhere): cumulative sums
    of the rows masked before ``j`` (no differences of prefix sums, so no cancellation)."""
    n = y.shape[-1]
    idx = torch.arange(n, device=y.device)
    keep = idx.unsqueeze(-1) <= idx  # [j, k]: k >= j
    # Sums of y / 2^m (2^m >= n, an exact scaling), then times 2^m / count: no overflow for
    # entries up to half the dtype's max, and a block of one is y itself, bit for bit.
    power = float(2 ** max(n - 1, 0).bit_length())
    scaled = y / power
    sums = torch.where(keep, scaled.unsqueeze(-2), torch.zeros_like(y).unsqueeze(-2)).cumsum(-1)
    counts = (idx - idx.unsqueeze(-1) + 1).clamp_min(1).to(y.dtype)
    return sums * (power / counts)


def _min_max(block: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r""":math:`v_i = \min_{j \le i} \max_{k \ge i} m(j, k)` from the block values
    ``block[..., j, k]`` (only ``j <= k`` read), with the block :math:`[j_i, k_i]` that
    attains it (``v_i = block[j_i, k_i]``)."""
    n = block.shape[-1]
    idx = torch.arange(n, device=block.device)
    upper = idx.unsqueeze(-1) <= idx  # [j, k]: k >= j
    low = torch.where(upper, block, torch.full_like(block, -torch.inf))
    # a[j, i] = max_{k >= i} m(j, k): a reverse running maximum along k.
    running = torch.cummax(low.flip(-1), -1)
    a = running.values.flip(-1)
    k_of = (n - 1) - running.indices.flip(-1)
    a = torch.where(upper, a, torch.full_like(a, torch.inf))  # keep j <= i only
    v, j = a.min(-2)
    k = k_of.gather(-2, j.unsqueeze(-2)).squeeze(-2)
    return v, j, k


def _pick(m: Tensor, j: Tensor, k: Tensor) -> Tensor:
    """``m[..., j_i, k_i]`` for every ``i``."""
    rows = m.gather(-2, j.unsqueeze(-1).expand(*j.shape, m.shape[-1]))
    return rows.gather(-1, k.unsqueeze(-1)).squeeze(-1)


def _blocks(s: Tensor, w: Tensor, regularization: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    r"""The block statistics of :math:`s` and :math:`w` (range means for ``"l2"``, range
    log-sum-exps for ``"kl"``) and each entry's block ``(j, k)`` in the decreasing isotonic
    solution of Blondel et al.'s (2020) dual: ``"l2"``:
    :math:`\arg\min_{v\downarrow} \frac12\lVert v - (s - w)\rVert^2`; ``"kl"``:
    :math:`\arg\min_{v\downarrow} \langle e^{s - v}, 1\rangle + \langle e^w, v\rangle`,
    whose block value is :math:`\log\sum_B e^{s} - \log\sum_B e^{w}`."""
    if regularization == "l2":
        ms, mw = _range_mean(s), _range_mean(w)
    else:
        ms, mw = _range_logsumexp(s), _range_logsumexp(w)
    with torch.no_grad():
        _, j, k = _min_max(ms - mw)
    return ms, mw, j, k


# --------------------------------------------------------------------------- both


def _segment_mean(y: Tensor, starts: Tensor) -> Tensor:
    """Each entry's block mean of ``y`` (blocks given by their first entry ``starts``):
    sums of ``y`` over a power of two >= n then times it over the count, so no overflow,
    and a block of one is ``y`` itself, bit for bit."""
    n = y.shape[-1]
    power = float(2 ** max(n - 1, 0).bit_length())
    sums = torch.zeros_like(y).scatter_add(-1, starts, y / power)
    counts = torch.zeros_like(y).scatter_add(-1, starts, torch.ones_like(y))
    return sums.gather(-1, starts) * (power / counts.gather(-1, starts))


def _segment_log_sum_exp(a: Tensor, starts: Tensor) -> Tensor:
    """Each entry's block log-sum-exp of ``a``, shifted by the block's maximum (held
    constant: the gradient does not depend on it), so a block of one is ``a`` itself."""
    with torch.no_grad():
        top = torch.full_like(a, -torch.inf).scatter_reduce(-1, starts, a, "amax")
        shift = top.gather(-1, starts)
    sums = torch.zeros_like(a).scatter_add(-1, starts, torch.exp(a - shift))
    return shift + torch.log(sums.gather(-1, starts))


def _by_pav(s: Tensor, w: Tensor) -> bool:
    """Whether :func:`block_statistics` finds these rows' blocks by PAV: on the CPU where the
    compiled kernel runs (then the same blocks as the eager Functions, ties included), and
    for rows of :data:`PAV_MIN_LENGTH` entries or more (:data:`PAV_MIN_LENGTH_ACCELERATOR`
    off the CPU); else the min-max formula."""
    if s.device.type == "cpu" and _native_pav.available(s, w):
        return True
    threshold = PAV_MIN_LENGTH if s.device.type == "cpu" else PAV_MIN_LENGTH_ACCELERATOR
    return s.shape[-1] >= threshold


def _segment_gap(a: Tensor, starts: Tensor) -> Tensor:
    """``a`` minus its block's log-sum-exp, as ``(a - max) - log sum e^(a - max)`` (the
    maximum held constant): no cancellation when the block's entries are large and close
    (two entries of 1e16 keep their ``-log 2``)."""
    with torch.no_grad():
        top = torch.full_like(a, -torch.inf).scatter_reduce(-1, starts, a, "amax")
        shift = top.gather(-1, starts)
    shifted = a - shift
    sums = torch.zeros_like(a).scatter_add(-1, starts, torch.exp(shifted))
    return shifted - torch.log(sums.gather(-1, starts))


def block_statistics(s: Tensor, w: Tensor, regularization: str) -> tuple[Tensor, Tensor]:
    r"""Each entry's block statistic of ``s`` and of ``w`` (means for ``"l2"``, log-sum-exps
    for ``"kl"``) in the decreasing isotonic solution (see the module's text), so that
    :math:`v = ` ``stat_s - stat_w``. Differentiable (the blocks are held fixed). The
    blocks come from PAV or the min-max formula (see :func:`_by_pav`)."""
    if _by_pav(s, w):
        with torch.no_grad():
            starts = _pav_blocks(s, w, regularization == "kl")
        if regularization == "l2":
            return _segment_mean(s, starts), _segment_mean(w, starts)
        return _segment_log_sum_exp(s, starts), _segment_log_sum_exp(w, starts)
    ms, mw, j, k = _blocks(s, w, regularization)
    return _pick(ms, j, k), _pick(mw, j, k)


def block_primal(s: Tensor, w: Tensor, regularization: str) -> Tensor:
    r""":math:`s - v` as differentiable operations (see :func:`block_statistics`), for
    ``"kl"`` on the PAV path as :math:`(s - \max_B s) - \log\sum_B e^{s - \max_B s} +
    ar w_B` (no cancellation of the log-sum-exp against a large :math:`s`)."""
    if regularization == "kl" and _by_pav(s, w):
        with torch.no_grad():
            starts = _pav_blocks(s, w, True)
        return _segment_gap(s, starts) + _segment_log_sum_exp(w, starts)
    stat_s, stat_w = block_statistics(s, w, regularization)
    return (s - stat_s) + stat_w
