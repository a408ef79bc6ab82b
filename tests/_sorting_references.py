"""Float64 Python references for the soft sorts, shared by the sorting tests (importable
as ``from _sorting_references import ...``: ``tests/conftest.py`` puts this folder on
``sys.path``): pool-adjacent-violators for both isotonic problems (Best & Chakravarti
1990) and, from it, the soft sort and soft rank of Blondel et al. (2020)."""

from __future__ import annotations

import math

__all__ = ["pav_decreasing", "ref_soft_rank_asc", "ref_soft_sort_desc"]


def pav_decreasing(s, w, reg="l2"):
    """argmin_{v decreasing} of the l2 or kl isotonic problem, by PAV (lists of floats)."""
    blocks = []  # [start, end) with value

    def value(a, b):
        if reg == "l2":
            return sum(s[i] - w[i] for i in range(a, b)) / (b - a)
        return math.log(sum(math.exp(s[i]) for i in range(a, b))) - math.log(
            sum(math.exp(w[i]) for i in range(a, b))
        )

    for i in range(len(s)):
        blocks.append([i, i + 1, value(i, i + 1)])
        while len(blocks) > 1 and blocks[-2][2] < blocks[-1][2]:  # violates v_prev >= v
            b = blocks.pop()
            blocks[-1][1] = b[1]
            blocks[-1][2] = value(blocks[-1][0], blocks[-1][1])
    out = [0.0] * len(s)
    for a, b, v in blocks:
        for i in range(a, b):
            out[i] = v
    return out


def ref_soft_sort_desc(x, eps, reg="l2"):
    n = len(x)
    z = [(n - i) / eps for i in range(n)]
    w = sorted(x, reverse=True)
    v = pav_decreasing(z, w, reg)
    return [z[i] - v[i] for i in range(n)]


def ref_soft_rank_asc(x, eps, reg="l2"):
    n = len(x)
    order = sorted(range(n), key=lambda i: -x[i])
    s = [x[i] / eps for i in order]
    rho = [float(n - i) for i in range(n)]
    w = rho if reg == "l2" else [math.log(r) for r in rho]
    v = pav_decreasing(s, w, reg)
    out = [0.0] * n
    for pos, i in enumerate(order):
        primal = s[pos] - v[pos]
        out[i] = primal if reg == "l2" else math.exp(primal)
    return out
