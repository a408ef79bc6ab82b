r"""The routing ops' names and settings (:class:`SparseMixer`, :class:`TopK`) and the
argument checks they share, the estimator's resolution included (private; re-exported by
:mod:`hardgrad.routing`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .. import estimators as _estimators
from .._core.validation import check_dim, check_floating, check_int, check_real

#: The router-gradient estimators of :func:`topk_route` by name; besides these, any
#: discrete pathwise estimator of :mod:`hardgrad.estimators` selects stochastic routing.
ROUTING_ESTIMATORS = ("sparse", "dense", "sparsemixer", "sparsemixer_v1")
#: How the gates of the selected experts are normalised (see :func:`topk_route`).
NORMALIZATIONS = ("renormalize", "selected", "none")
#: Estimators of :func:`hardgrad.routing.expectation` that need the objective.
SCORE_FUNCTION = ("reinforce", "rloo", "exact")

# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class SparseMixer:
    r"""SparseMixer's settings (Liu et al. 2023, https://arxiv.org/abs/2310.00811).

    ``version=2`` (the default) is the form of GRIN / PhiMoE (Liu et al. 2024,
    https://arxiv.org/abs/2409.12136; ``sparsemixer`` in HF transformers'
    ``modeling_phimoe.py``), defined for top-1 and top-2; ``version=1`` is the original
    top-1 estimator of the 2023 paper's code (``sparsemixer/sparsemixer.py``).

    Args:
        jitter_eps: the sparsity threshold :math:`\epsilon`: an expert whose logit is more
            than :math:`2\epsilon` (relative) below the largest is never drawn. ``None``:
            0.01 for version 2 (PhiMoE's ``router_jitter_noise``), 0.1 for version 1.
        version: 1 or 2.

    Example:
        >>> import hardgrad as hg
        >>> hg.routing.SparseMixer()
        SparseMixer(jitter_eps=0.01, version=2)
    """

    jitter_eps: float | None = None
    version: int = 2

    def __post_init__(self) -> None:
        version = check_int(self.version, "version", low=1, high=2)
        eps = self.jitter_eps
        if eps is None:
            eps = 0.01 if version == 2 else 0.1
        eps = check_real(eps, "jitter_eps")
        if not 0 <= eps < math.inf:
            raise ValueError(f"Expected `jitter_eps` >= 0 and finite, but found jitter_eps={eps!r}")
        object.__setattr__(self, "jitter_eps", eps)
        object.__setattr__(self, "version", version)


@dataclass(frozen=True)
class TopK:
    """Stochastic top-k routing as a distribution for :mod:`hardgrad.diagnostics`.

    ``hg.diagnostics.compare(f, logits, estimators=[...], dist=hg.routing.TopK(2))``
    compares router-gradient estimators on ``f(gates, indices)`` against the exact gradient
    of :func:`expectation` (see there for ``f``).

    Args:
        k: experts per token.
        normalize: the gates' normalisation (see :func:`topk_route`).

    Example:
        >>> import hardgrad as hg
        >>> hg.routing.TopK(2)
        TopK(k=2, normalize='renormalize')
    """

    k: int
    normalize: str = "renormalize"

    def __post_init__(self) -> None:
        check_int(self.k, "k", low=1)
        _check_normalize(self.normalize)


def _check_normalize(normalize: Any) -> str:
    if not isinstance(normalize, str) or normalize not in NORMALIZATIONS:
        raise ValueError(
            f"Expected `normalize` to be one of {', '.join(map(repr, NORMALIZATIONS))}, "
            f"but found {normalize!r}"
        )
    return normalize


def _check_indices(indices: Any, batch: torch.Size | None = None, name: str = "indices") -> Tensor:
    """``indices`` must be a dense int64 tensor (the dtype :func:`topk_route` returns and
    ``scatter``/``gather`` take), with the batch shape ``batch`` where given."""
    if not isinstance(indices, Tensor):
        raise TypeError(
            f"Expected `{name}` to be a torch.Tensor, but found {type(indices).__name__}"
        )
    if indices.dtype != torch.int64:
        raise TypeError(f"Expected `{name}` to be an int64 tensor, but found dtype={indices.dtype}")
    if indices.layout != torch.strided:
        raise TypeError(
            f"Expected `{name}` to be a dense (strided) tensor, but found layout={indices.layout}"
        )
    if indices.dim() == 0 or (batch is not None and indices.shape[:-1] != batch):
        raise ValueError(
            f"Expected `{name}` of shape (*batch, k) with the logits' batch shape "
            f"{tuple(batch or ())}, but found shape {tuple(indices.shape)}"
        )
    return indices


def _check_logits(logits: Any, k: Any, dim: Any) -> tuple[int, int]:
    check_floating(logits, "logits")
    d = check_dim(logits, dim)
    experts = logits.shape[d]
    k = check_int(k, "k", low=1)
    if k > experts:
        raise ValueError(
            f"Expected `k` <= the number of experts logits.shape[{dim}] = {experts}, "
            f"but found k={k}"
        )
    return k, d


# --------------------------------------------------------------------------- the estimator


def _resolve(estimator: Any) -> str | SparseMixer | _estimators.Estimator:
    if isinstance(estimator, SparseMixer):
        return estimator
    if isinstance(estimator, str):
        if estimator in ROUTING_ESTIMATORS:
            if estimator == "sparsemixer":
                return SparseMixer()
            if estimator == "sparsemixer_v1":
                return SparseMixer(version=1)
            return estimator
        if estimator in SCORE_FUNCTION:
            raise ValueError(
                f"Expected a routing or pathwise `estimator`, but found {estimator!r}, which "
                "needs the objective: use hg.routing.expectation (or hg.diagnostics.compare)"
            )
    if isinstance(estimator, str) and estimator not in _estimators.ESTIMATORS:
        pathwise = [n for n, c in _estimators.ESTIMATORS.items() if c.pathwise and c.discrete]
        raise ValueError(
            f"Unknown `estimator` {estimator!r}; available: "
            f"{', '.join(map(repr, ROUTING_ESTIMATORS + tuple(pathwise)))}"
        )
    if not isinstance(estimator, (str, _estimators.Estimator)):
        raise TypeError(
            "Expected `estimator` to be a name, a hg.routing.SparseMixer or a "
            f"hardgrad.estimators.Estimator, but found {type(estimator).__name__}"
        )
    instance = _estimators.resolve(estimator, pathwise=True, where="hg.topk_route")
    if not instance.discrete:
        raise ValueError(
            f"Expected a discrete pathwise `estimator` (exact one-hot draws), but found "
            f"{instance!r}, whose samples are relaxed: the routing would not be sparse"
        )
    return instance
