r"""Logits shifted so that their largest entry along the category axis is exactly 0.

The categorical samplers draw :math:`\arg\max_i (\ell_i + g_i)`. Added to a logit of
magnitude :math:`10^7`, a Gumbel :math:`g` of magnitude ~1 loses most of its bits (float32's
spacing there is 1), so ties between equal logits were decided by the rounding of
:math:`\ell + g`, not by :math:`g` (class 0 drawn 62 % of the time for two logits of
:math:`10^7`); at :math:`3\cdot10^{38}` the noise vanished altogether. The law
:math:`\operatorname{softmax}(\ell)` depends only on differences of logits, so the samplers
draw from :math:`s = \ell - \max_j \ell_j` instead (computed without autograd: the backward
formulas are written in terms of softmaxes, which the shift does not change).

Infinities, along the category axis:

* :math:`-\infty` excludes its category exactly: :math:`s_i = -\infty` and no noise can lift it;
* :math:`+\infty` is a point mass: the entries equal to :math:`+\infty` get :math:`s_i = 0`,
  every other :math:`s_i = -\infty` (several :math:`+\infty` in one row share the mass
  equally, the limit of equal logits growing together);
* a row of :math:`-\infty` only has no distribution: ``ValueError`` naming ``logits`` while
  value checks apply (:func:`hardgrad.set_validation`); unchecked it is drawn uniformly;
* NaN (not rejected by the samplers): a row holding NaN is left unshifted, so the NaN
  counts as the largest entry, as in :func:`torch.argmax`, and is drawn.

Invariant: where :math:`\ell + c` is computed exactly (e.g. integer-valued logits and
shift within float's integer range), :math:`(\ell + c) - \max(\ell + c)` and
:math:`\ell - \max \ell` are the same floats (both are the rounding of the same real
difference), so the same noise gives the same sample: exactly, not only in law.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._core.kernels import eager_plain, finite
from .._core.validation import value_checks_apply


def shift_to_zero(x: Tensor, dim: int, *, check: str | None = None) -> Tensor:
    r""":math:`x - \max_{\text{dim}} x` with the infinities of the module docstring, as a new
    tensor in ``x``'s dtype (no autograd: for Function forwards and backwards).

    ``check``: the argument's name; while value checks apply, a row whose entries are all
    :math:`-\infty` raises ``ValueError`` naming it (one reduction of the row maxima and a
    read-back).
    """
    top = x.amax(dim, keepdim=True)
    if not eager_plain(x):  # (no value checks under compile or torch.func)
        top = torch.where(top != top, 0.0, top)
        return torch.where(x == top, 0.0, x - top)
    # NaN maxima (a NaN in the row) -> 0: the row unshifted, so its NaN is drawn.
    top.nan_to_num_(0.0, posinf=math.inf, neginf=-math.inf)
    checked = check is not None and top.numel() > 0 and value_checks_apply(x)
    if checked or (x.is_cpu and top.numel() > 0):
        # The row maxima read back (a small tensor; on CPU no synchronisation to save, and
        # a check reads them anyway): rows with an infinite maximum are rare, and only
        # they need the fix-up below, two more passes over x.
        low, high = torch.aminmax(top)
        lowest, highest = low.item(), high.item()
        if checked and lowest == -math.inf:
            raise_all_excluded(x, top, dim, str(check))
        if -math.inf < lowest and highest < math.inf:
            return torch.sub(x, top)
    shifted = torch.sub(x, top)
    # Entries equal to an infinite maximum are inf - inf = NaN: they are the row's
    # largest, so 0 (for a finite maximum the difference is 0 there already).
    return shifted.masked_fill_(x == top, 0.0)


def finite_shifted(x: Tensor, dim: int) -> Tensor:
    r""":func:`shift_to_zero` then :func:`~hardgrad._core.kernels.finite`: logits for a backward's
    softmax, largest 0, :math:`-\infty` as a large negative number, which after the shift is
    far below the maximum whatever the finite entries are (the old ``finite(x)`` alone mapped
    :math:`-\infty` to :math:`-\text{max}/4`, above a finite logit of :math:`-10^{38}`)."""
    return finite(shift_to_zero(x, dim))


def raise_all_excluded(x: Tensor, top: Tensor, dim: int, name: str) -> None:
    """``ValueError``: a row of ``x`` along ``dim`` is all :math:`-\\infty` (``top`` its maxima)."""
    index = tuple(int(i) for i in torch.nonzero(top == -math.inf)[0].tolist())
    raise ValueError(
        f"Expected `{name}` to have at least one category above -inf along dim={dim} (a "
        f"row of -inf logits excludes every category and has no distribution), but found "
        f"all -inf at batch index {tuple(i for j, i in enumerate(index) if j != dim % x.dim())}"
    )
