"""Float64 Python references for the soft sorts, shared by the sorting tests (importable
as ``from _sorting_references import ...``: ``tests/conftest.py`` puts this folder on
``sys.path``): pool-adjacent-violators for both isotonic problems (Best & Chakravarti
1990), as values and as block starts (with the arithmetic the kernel and the batched
passes use, so that blocks compare entry for entry), and the soft sort and soft rank of
Blondel et al. (2020)."""

from __future__ import annotations

import math

__all__ = ["pav_decreasing", "ref_soft_rank_asc", "ref_soft_sort_desc", "reference_starts"]


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


def reference_starts(s: list[float], w: list[float], kl: bool) -> list[int]:
    """Each entry's block start by sequential PAV (Python floats) for the decreasing fit: block values mean(s - w) (l2) or
    log sum e^s - log sum e^w (kl); merge while the previous block's value is below."""
    blocks: list[list[float]] = []  # [start, count, a, b]
    for i, (a, b) in enumerate(zip(s, w, strict=True)):
        start, count = i, 1
        a, b = (a, b) if kl else (a - b, 0.0)
        while blocks:
            p_start, p_count, pa, pb = blocks[-1]
            prev = pa - pb if kl else pa / p_count
            cur = a - b if kl else a / count
            if not prev < cur:
                break
            blocks.pop()
            start, count = p_start, count + p_count
            if kl:
                a = max(a, pa) + math.log1p(math.exp(-abs(a - pa)))
                b = max(b, pb) + math.log1p(math.exp(-abs(b - pb)))
            else:
                a += pa
        blocks.append([start, count, a, b])
    out: list[int] = []
    for start, count, _, _ in blocks:
        out += [int(start)] * int(count)
    return out
