r"""Differentiable sorting and ranking: exact sorts and ranks with chosen backwards, and
their relaxations.

Papers:

* Soft sort and soft rank by projection onto the permutahedron, computed by isotonic
  regression: Blondel et al. (2020), "Fast Differentiable Sorting and Ranking",
  https://arxiv.org/abs/2002.08871.
* NeuralSort: Grover et al. (2019), https://arxiv.org/abs/1903.08850.
* SoftSort: Prillo & Eisenschlos (2020), https://arxiv.org/abs/2006.16038.

:func:`soft_sort` and :func:`soft_rank` are smooth functions (their gradient is exact);
as ``strength`` goes to 0 they equal the hard sort and rank. :func:`sort` and :func:`rank`
return the exact sorted values and ranks (ranks are 1-based, in the input's dtype), with the
gradient of a chosen relaxation: ``backward="soft"`` (the isotonic soft sort/rank),
``"neuralsort"`` or ``"softsort"`` (relaxed permutation matrices, see
:func:`neural_sort_permutation`, :func:`soft_sort_permutation`).

Isotonic regression: the projections reduce to
:math:`\arg\min_{v_1 \ge \dots \ge v_n} \sum_i \ell_i(v_i)`, whose solution is piecewise
constant on blocks. :mod:`hardgrad.sorting._isotonic` finds the blocks by pool-adjacent-violators
(PAV, :math:`O(n)` per row after the :math:`O(n \log n)` sort; a Python scan on the CPU,
wrapped as an operator that ``torch.compile`` and ``torch.vmap`` accept) for rows of
:data:`~hardgrad.sorting._isotonic.PAV_MIN_LENGTH` entries or more, and for shorter rows by the
equivalent min-max formula :math:`v_i = \min_{j \le i}\max_{k \ge i} m(j, k)`
(:math:`m(j, k)` the solution on the block :math:`j..k`; :math:`O(n^2)` but a handful of
batched kernels on the input's device). Autograd differentiates the blocks' statistics
exactly: PAV's Jacobian (the block's mean).
Computed in float32 for half types (and returned in the input's dtype).
The relaxations read NaN as 0 and cap magnitudes at the dtype's maximum over :math:`8n`
(beyond every regularisation's reach), so every result and gradient is finite for any
finite input and any positive ``strength`` or ``tau``; :func:`sort` and :func:`rank` keep
``torch.sort``'s exact forward (NaN sorts last).
"""

from __future__ import annotations

from ._common import REGULARIZATIONS, SORT_BACKWARDS
from ._hard import argsort, rank, sort
from ._permutations import neural_sort_permutation, soft_sort_permutation
from ._quantiles import quantile, soft_quantile
from ._soft import isotonic_regression, soft_rank, soft_sort

__all__ = [
    "REGULARIZATIONS",
    "SORT_BACKWARDS",
    "argsort",
    "isotonic_regression",
    "neural_sort_permutation",
    "quantile",
    "rank",
    "soft_quantile",
    "soft_rank",
    "soft_sort",
    "soft_sort_permutation",
    "sort",
]
