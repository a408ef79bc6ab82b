"""Small problems with known answers that several test folders use (importable as
``from _references import ...``: ``tests/conftest.py`` puts this folder on ``sys.path``).

Two categorical variables (K = 3 classes, L = 2 variables) with a bilinear objective
``f(D) = D0^T A D1 + c . D0`` and its exact expected gradient in closed form.
"""

from __future__ import annotations

import torch
from torch import Tensor

CAT_LOGITS = torch.tensor([[0.3, -0.5, 1.1], [-0.2, 0.8, 0.0]], dtype=torch.float64)
CAT_A = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0], [2.0, 1.0, -0.5]], dtype=torch.float64)
CAT_C = torch.tensor([0.7, -0.3, 1.5], dtype=torch.float64)


def two_categoricals(d: Tensor) -> Tensor:
    """D0^T A D1 + c . D0 for one-hots D0, D1 (K = 3, L = 2)."""
    d0, d1 = d[..., 0, :], d[..., 1, :]
    return torch.einsum("...k,kl,...l->...", d0, CAT_A, d1) + d0 @ CAT_C


def two_categoricals_gradient(logits: Tensor) -> Tensor:
    """E f = p0^T A p1 + c . p0; the softmax Jacobian is diag(p) - p p^T."""
    p0, p1 = logits.softmax(-1)

    def jacobian(p: Tensor) -> Tensor:
        return torch.diag(p) - torch.outer(p, p)

    return torch.stack([jacobian(p0) @ (CAT_A @ p1 + CAT_C), jacobian(p1) @ (CAT_A.T @ p0)])
