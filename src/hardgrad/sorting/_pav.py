r"""Pool-adjacent-violators for the soft sorts, batched in tensor operations: which entries
pool into one block of the decreasing isotonic solution (see
:mod:`hardgrad.sorting._isotonic` for the two problems, ``"l2"`` and ``"kl"``).

Paper: Best & Chakravarti (1990), "Active set algorithms for isotonic regression; a unifying
framework", https://doi.org/10.1007/BF01580873 (merging adjacent violators in any order
reaches the same solution).

All rows at once, in float64, on a table of blocks (one column per block, padded rows):

* every pass merges each run of adjacent violators (block values increasing) into one block,
  with the exact block values (sums, or log-sum-exps shifted by the block's first entry);
* in the same pass, a *cascade* from each end of the row: the blocks before the last one
  that the suffix's value would absorb, one after another as PAV would, from suffix sums in
  one scan (and the same from the first block forwards); a decision within a rounding
  margin of a tie is left to the exact merges of the next pass;
* a row with no violator left is final: from the second pass (third for l2) the finished
  rows are set aside, so the later passes (kl soft_rank: up to ~10) touch only the rows
  still merging; the padding holds finite statistics (no ``log 0`` or ``exp(-inf)``,
  whose slow paths cost several times a plain call);
* rows that still have violators after :data:`MAX_PASSES` passes finish with a sequential
  PAV over their blocks (a Python scan, rare: random rows need 1 to 10 passes).

Merging a pair of adjacent violators is always part of the solution (the pooled problem has
the same solution), so the blocks equal the sequential scan's, ties included (adjacent
blocks of equal value stay apart).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["MAX_PASSES", "pav_starts"]

#: Passes of batched merges before the rows still unsolved finish sequentially.
MAX_PASSES = 24

_F64 = torch.float64


# --------------------------------------------------------------------------- batched


def _all_after(pred: Tensor) -> Tensor:
    """``out[..., j] = pred[..., j:].all()``."""
    return torch.cummin(pred.flip(-1).to(torch.uint8), -1).values.flip(-1).bool()


def _all_before(pred: Tensor) -> Tensor:
    """``out[..., j] = pred[..., :j + 1].all()``."""
    return torch.cummin(pred.to(torch.uint8), -1).values.bool()


def _cascades(value: Tensor, stats: tuple[Tensor, ...], valid: Tensor, kl: bool) -> Tensor:
    """Boundaries ``j | j+1`` that the cascades from the row's two ends merge: the last block
    absorbs block ``j`` while ``value[j] <`` the value of blocks ``j+1..`` (suffix), the
    first block absorbs ``j + 1`` while the value of blocks ``..j`` (prefix) is below
    ``value[j+1]``; each comparison by more than a rounding margin."""
    if kl:
        ls, lw, _ = stats
        last = valid.sum(-1, keepdim=True) - 1
        # Suffix log-sum-exps shifted by the last block's (the smallest entries: the terms
        # only grow leftwards; an overflow gives a non-finite value, which merges nothing).
        cs, cw = ls.gather(-1, last), lw.gather(-1, last)
        live = valid.to(_F64)
        tail = (
            cs
            + (torch.exp((ls - cs) * live) * live).flip(-1).cumsum(-1).flip(-1).clamp_min(1.0).log()
        ) - (
            cw
            + (torch.exp((lw - cw) * live) * live).flip(-1).cumsum(-1).flip(-1).clamp_min(1.0).log()
        )
        # Prefix ones shifted by the first block's (entries decrease: no overflow).
        hs, hw = ls[..., :1], lw[..., :1]
        head = (hs + torch.exp((ls - hs) * live).cumsum(-1).log()) - (
            hw + torch.exp((lw - hw) * live).cumsum(-1).log()
        )
        margin = (cs.abs() + cw.abs() + hs.abs() + hw.abs() + 1) * (value.shape[-1] * 2.0**-44)
    else:
        tot, count = stats
        both = torch.stack([tot, count])
        suffix = both.flip(-1).cumsum(-1).flip(-1)
        prefix = both.cumsum(-1)
        tail, head = suffix[0] / suffix[1], prefix[0] / prefix[1]
        margin = tot.abs().sum(-1, keepdim=True) * (value.shape[-1] * 2.0**-50)
    after = valid[..., 1:]
    suffix_ok = torch.isfinite(tail[..., 1:]) & (value[..., :-1] < tail[..., 1:] - margin)
    from_tail = _all_after(suffix_ok | ~after)
    prefix_ok = torch.isfinite(head[..., :-1]) & (head[..., :-1] < value[..., 1:] - margin)
    from_head = _all_before(prefix_ok)
    return (from_tail | from_head) & after


def _merge(
    g: Tensor, starts: Tensor, width: int, stats: tuple[Tensor, ...], kl: bool
) -> tuple[Tensor, ...]:
    """The blocks' statistics after merging into the groups ``g`` (``starts``: the blocks
    that open a group; padding goes to column ``width``, dropped)."""
    rows = g.shape[0]

    def add(t: Tensor) -> Tensor:
        return torch.zeros(rows, width + 1, dtype=_F64, device=g.device).scatter_add_(-1, g, t)

    if not kl:
        tot, count = stats
        return add(tot)[:, :width], add(count)[:, :width]
    # Log-sum-exps shifted by the group's first block's: entries decrease along the row, so
    # every term is at most the group's size and the first is 1 (no overflow, sum >= 1).
    columns = torch.arange(g.shape[-1], device=g.device)
    first = torch.cummax(columns * starts, -1).values
    out = []
    for lse in stats[:2]:
        shift = lse.gather(-1, first)
        total = add(torch.exp(lse - shift)).clamp_min(1.0).log() + add(shift * starts)
        out.append(total[:, :width])
    return out[0], out[1], add(stats[2])[:, :width]


def _batched(s: Tensor, w: Tensor, kl: bool) -> tuple[tuple[Tensor, ...], Tensor]:
    """Blocks of every row (``stats``: l2 ``(totals, counts)``, kl ``(lse_s, lse_w,
    counts)`` per block, padding with count 0) and which rows still have violators. A row
    with no violator left is final: it is stored and leaves the passes (later passes touch
    only the rows still merging)."""
    rows, n = s.shape
    count = torch.ones(rows, n, dtype=_F64, device=s.device)
    if kl:
        stats: tuple[Tensor, ...] = (s, w, count)
    else:
        # y = s - w over a power of two >= 2n: every block's sum stays finite for any finite
        # entries, and the scaling changes no comparison of means.
        scale = 2.0 ** -(2 * n).bit_length()
        stats = (s * scale - w * scale, count)
    done: tuple[Tensor, ...] | None = None  # the final rows, once some have left
    todo = torch.arange(rows, device=s.device)  # the rows in ``stats``
    early = 1 if kl else 2  # the passes before finished rows may leave
    for index in range(MAX_PASSES + 1):
        count = stats[-1]
        valid = count > 0
        value = stats[0] - stats[1] if kl else stats[0] / count  # padding: nan, never merges
        violates = value[:, :-1] < value[:, 1:]
        if kl:  # padding: 0 - 0, masked
            violates &= valid[:, 1:]
        if index < early and index < MAX_PASSES:
            # Most l2 rows finish within two passes: no per-row bookkeeping before.
            if not bool(violates.any()):
                return stats, violates.any(-1)
            pending = None
            last = False
        else:
            pending = violates.any(-1)
            left = int(pending.sum())
            last = left == 0 or index == MAX_PASSES
            if done is None and last:
                return stats, pending
        # Set the finished rows aside once a quarter of them are (fewer: not worth a copy).
        if pending is not None and (last or 4 * left <= 3 * todo.shape[0]):
            if done is None:
                # (widths only shrink from here)
                shape = (rows, count.shape[-1])
                done = tuple(torch.zeros(shape, dtype=_F64, device=s.device) for _ in stats)
            finished = torch.ones_like(pending) if last else ~pending
            rows_out = todo[finished]
            for table, stat in zip(done, stats, strict=True):
                table[rows_out, : stat.shape[-1]] = stat[finished]
            if last:
                unsolved = torch.zeros(rows, dtype=torch.bool, device=s.device)
                return done, unsolved.index_fill_(0, todo[pending], True)
            todo = todo[pending]
            stats = tuple(stat[pending] for stat in stats)
            value, valid, violates = value[pending], valid[pending], violates[pending]
        merge = violates
        if index > 0 and value.shape[-1] > 2:  # after a first pass of plain merges
            merge = merge | _cascades(value, stats, valid, kl)
        starts = torch.cat([valid[:, :1], ~merge], -1)
        width = int((starts & valid).sum(-1).max())
        # Padding opens groups of its own past the row's blocks: beyond ``width``, dropped,
        # or within it, where they gather only padding (all statistics 0).
        g = (starts.cumsum(-1) - 1).clamp_max_(width)
        stats = _merge(g, starts, width, stats, kl)
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- sequential


def _log_add_exp(a: float, b: float) -> float:
    if a < b:
        a, b = b, a
    return a + math.log1p(math.exp(b - a))


def _sequential(stats: list[list[float]], kl: bool) -> list[float]:
    """PAV over one row's blocks (statistics as in :func:`_batched`); the merged counts."""
    tops: list[float] = []
    bottoms: list[float] = []
    counts: list[float] = []
    for *pair, count in zip(*stats, strict=True):
        if count == 0:
            break
        top, bottom = pair
        # kl: value top - bottom (log-sum-exps); l2: top / count (totals; bottom unused).
        while counts and (
            tops[-1] - bottoms[-1] < top - bottom if kl else tops[-1] / counts[-1] < top / count
        ):
            count += counts.pop()
            if kl:
                top = _log_add_exp(top, tops.pop())
                bottom = _log_add_exp(bottom, bottoms.pop())
            else:
                top += tops.pop()
                bottoms.pop()
        tops.append(top)
        bottoms.append(bottom)
        counts.append(count)
    return counts


# --------------------------------------------------------------------------- entry point


def pav_starts(s: Tensor, w: Tensor, kl: bool) -> Tensor:
    """Each entry's block start (int64) in the decreasing isotonic solution of the rows
    (last dimension) of ``s`` and ``w`` (any float dtype, computed in float64)."""
    n = s.shape[-1]
    if s.numel() == 0:
        return torch.zeros(s.shape, dtype=torch.int64, device=s.device)
    # float64 where the device has it (the MPS backend does not: there, on the CPU).
    device = s.device if s.device.type in ("cpu", "cuda") else torch.device("cpu")
    rows_s = s.detach().reshape(-1, n).to(device, _F64)
    rows_w = w.detach().reshape(-1, n).to(device, _F64)
    stats, unsolved = _batched(rows_s, rows_w, kl)
    count = stats[-1]
    if bool(unsolved.any()):
        todo = unsolved.nonzero().flatten()
        pairs = (stats[0], stats[1]) if kl else (stats[0], torch.zeros_like(count))
        table = torch.stack([pairs[0], pairs[1], count], 1)[todo].cpu().tolist()
        width = count.shape[-1]
        merged = [c + [0.0] * (width - len(c)) for c in (_sequential(t, kl) for t in table)]
        count = count.index_copy(0, todo, torch.tensor(merged, dtype=_F64, device=count.device))
    # Entry-level starts from the blocks' counts.
    sizes = count.long()
    first = sizes.cumsum(-1) - sizes
    mark = torch.zeros(count.shape[0], n + 1, dtype=torch.int64, device=count.device)
    mark.scatter_(-1, torch.where(sizes > 0, first, n), 1)
    block = mark[:, :n].cumsum(-1) - 1
    return first.gather(-1, block).reshape(s.shape).to(s.device)
