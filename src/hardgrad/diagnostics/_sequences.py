r"""Policy-gradient estimators for sampled sequences against the exact gradient
(:func:`compare_sequence_estimators`): bias, variance and cosine, with standard errors.

The policy's sequences are enumerated once (:func:`hardgrad.policy.exact_sequence_gradient`'s
enumeration); the score :math:`\nabla_\theta \log\pi(y_t \mid y_{<t})` of every (prefix,
token) node of the tree is computed once (a Jacobian by batched backward passes), so each
Monte-Carlo draw's gradient is a weighted sum of scores: groups are drawn from the exact
distribution over sequences (seeded, the same draws for every estimator), each estimator turns
them into per-token weights (:math:`-\partial\,\text{loss}/\partial \log\pi`), and the
draws' gradients :math:`\hat g_1, \dots, \hat g_D` are summarised against the exact
:math:`g^* = \nabla_\theta \mathbb{E}[R]`:

* ``bias`` :math:`= \lVert \bar g - g^* \rVert` with its standard error by the delta method
  (``bias_se``), and ``noise_floor`` :math:`= \sqrt{\operatorname{tr}\hat\Sigma / D}`, the size
  of :math:`\bar g - g^*` an unbiased estimator shows by noise alone;
* ``variance`` :math:`= \operatorname{tr}\hat\Sigma`, the summed variance of one draw, with
  ``variance_se``;
* ``cosine`` :math:`= \langle\bar g, g^*\rangle / (\lVert\bar g\rVert\lVert g^*\rVert)` with
  ``cosine_se`` (delta method): the direction's bias, apart from the scale; noise alone
  lowers it by about ``cosine_noise`` :math:`= (\operatorname{tr}\hat\Sigma - \hat u^\top
  \hat\Sigma \hat u) / (2D\lVert\bar g\rVert^2)` (:math:`\hat u = \bar g/\lVert\bar
  g\rVert`), so a direction bias is measured when :math:`1 - \text{cosine} -
  \text{cosine\_noise}` exceeds a few ``cosine_se``;
* ``scale`` :math:`= \langle\bar g, g^*\rangle / \lVert g^*\rVert^2` (1 unbiased;
  :math:`(n-1)/n` for Dr. GRPO's advantages);
* ``exact_cosine``, ``exact_bias``: the same for the estimator's exact expectation, by
  enumerating all :math:`M^n` groups, where that is small enough (named estimators).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .._core.validation import check_int
from ..policy._estimators import (
    _expected_gradient_weights,
    _resolve_estimator,
    _SequenceEstimator,
)
from ..policy._exact import _check_policy_args, _enumerate, _params, _rewards
from ._compare import Comparison

LossFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class SequenceComparisonRow:
    """One estimator's figures (see :mod:`hardgrad.diagnostics._sequences`)."""

    estimator: str
    group_size: int
    bias: float
    bias_se: float
    noise_floor: float
    variance: float
    variance_se: float
    cosine: float | None
    cosine_se: float | None
    cosine_noise: float | None
    scale: float | None
    exact_bias: float | None
    exact_cosine: float | None
    seconds_per_draw: float
    num_draws: int


class SequenceComparison(Comparison):
    """The result of :func:`compare_sequence_estimators`: one :class:`SequenceComparisonRow`
    per estimator, ``exact`` the flattened exact gradient; ``str()``, :meth:`to_markdown`
    and :meth:`to_dict` as for :class:`Comparison`."""

    COLUMNS = (
        "estimator",
        "bias",
        "bias_se",
        "noise_floor",
        "variance",
        "variance_se",
        "cosine",
        "cosine_se",
        "scale",
        "exact_cosine",
    )


class _SequenceProblem:
    """A small policy enumerated once: probabilities, rewards, lengths, the score of every
    node (``scores`` ``(K, P)`` over the flattened ``params``) and the exact gradient."""

    def __init__(
        self,
        policy: Callable[[Tensor], Tensor],
        reward: Callable[[Tensor], Tensor],
        *,
        vocab_size: int,
        length: int,
        params: Tensor | Iterable[Tensor],
        eos_token: int | None = None,
        max_sequences: int = 10**5,
    ) -> None:
        vocab_size, length, eos_token = _check_policy_args(policy, vocab_size, length, eos_token)
        max_sequences = check_int(max_sequences, "max_sequences", low=1)
        if vocab_size**length > max_sequences:
            raise ValueError(
                f"Expected `vocab_size`**`length` <= max_sequences={max_sequences} sequences to "
                f"enumerate, but found {vocab_size}**{length} = {vocab_size**length}"
            )
        items = _params(params)
        tree = _enumerate(policy, vocab_size, length, eos_token, items[0].device)
        logprobs = tree.per_token.sum(dim=1)
        self.sequences = tree.sequences
        self.mask = ~tree.ended
        self.rewards = _rewards(reward, tree.sequences).detach().to(logprobs.dtype)
        self.probs = logprobs.detach().exp()
        self.lengths = self.mask.sum(dim=1).to(logprobs.dtype)
        self.token_logprobs = tree.per_token.detach()
        value = (logprobs.exp() * self.rewards).sum()
        grads = torch.autograd.grad(value, items, retain_graph=True, allow_unused=True)
        self.exact = torch.cat(
            [
                (torch.zeros_like(p) if g is None else g).reshape(-1)
                for p, g in zip(items, grads, strict=True)
            ]
        ).double()
        used, rows = torch.unique(tree.nodes[self.mask], return_inverse=True)
        self.node_rows = torch.full_like(tree.nodes, -1)
        self.node_rows[self.mask] = rows
        self.scores = _jacobian(tree.node_logprobs[used], items)  # (K, P) float64
        safe = self.node_rows.clamp_min(0)
        per_token = self.scores[safe.reshape(-1)].reshape(*safe.shape, -1)
        self.sequence_scores = (per_token * self.mask[..., None]).sum(dim=1)  # (M, P)

    def sample(self, count: int, generator: torch.Generator | None) -> Tensor:
        """``(count,)`` indices of sequences drawn from the policy."""
        probs = self.probs.double().cpu()
        return torch.multinomial(probs, count, replacement=True, generator=generator).to(
            self.probs.device
        )

    def draws(
        self,
        estimator: _SequenceEstimator | LossFn,
        index: Tensor,
        group_size: int,
        num_groups: int,
    ) -> Tensor:
        """``(D, P)`` the gradient estimates of ``D`` batches (rows of ``index`` ``(D, N)``,
        ``N = num_groups * group_size``)."""
        num_draws, size = index.shape
        flat = index.reshape(-1)
        if isinstance(estimator, _SequenceEstimator):
            groups = torch.arange(num_draws * num_groups, device=flat.device)
            groups = groups.repeat_interleave(group_size)
            k = estimator.weights(self.rewards[flat], groups, self.lengths[flat], num_draws)
            return _accumulate(self.sequence_scores, flat, k.double(), num_draws, size)
        groups = torch.arange(num_groups, device=flat.device).repeat_interleave(group_size)
        weights = torch.empty(num_draws, size, self.mask.shape[1], dtype=torch.float64)
        for d in range(num_draws):
            rows = index[d]
            leaf = self.token_logprobs[rows].clone().requires_grad_(True)
            loss = estimator(self.rewards[rows], groups, leaf, self.mask[rows])
            if not isinstance(loss, Tensor) or loss.numel() != 1:
                raise ValueError(
                    f"Expected an estimator to return a scalar loss tensor, but found "
                    f"{tuple(loss.shape) if isinstance(loss, Tensor) else type(loss).__name__}"
                )
            (grad,) = torch.autograd.grad(loss.reshape(()), leaf, allow_unused=True)
            weights[d] = 0.0 if grad is None else -grad.detach().double().cpu()
        node = self.node_rows[index.reshape(-1)].reshape(-1)  # (D * N * L,)
        valid = node >= 0
        token_weights = weights.reshape(-1).to(self.scores.device)
        batch = torch.arange(num_draws, device=node.device).repeat_interleave(
            size * self.mask.shape[1]
        )
        return _accumulate(self.scores, node[valid], token_weights[valid], num_draws, batch[valid])

    def expected(self, estimator: _SequenceEstimator, group_size: int) -> Tensor:
        """``(P,)`` the exact expectation of a named estimator's gradient (one group per
        batch), by enumerating all groups."""
        c = _expected_gradient_weights(
            estimator.advantages,
            estimator.aggregation,
            self.probs,
            self.rewards,
            self.lengths,
            group_size,
        )
        return c.double() @ self.sequence_scores


def _jacobian(outputs: Tensor, items: tuple[Tensor, ...], chunk: int = 512) -> Tensor:
    """``(K, P)`` float64 gradients of each of ``outputs`` ``(K,)`` over the flattened
    ``items``: batched backward passes (``is_grads_batched``), or one at a time where the
    graph does not allow batching."""

    def flat(grads: Sequence[Tensor | None], rows: int) -> Tensor:
        return torch.cat(
            [
                (
                    torch.zeros(rows, p.numel(), dtype=p.dtype, device=p.device)
                    if g is None
                    else g.reshape(rows, -1)
                )
                for p, g in zip(items, grads, strict=True)
            ],
            dim=1,
        ).double()

    blocks = []
    eye = torch.eye(len(outputs), dtype=outputs.dtype, device=outputs.device)
    for start in range(0, len(outputs), chunk):
        basis = eye[start : start + chunk]
        try:
            grads = torch.autograd.grad(
                outputs, items, basis, retain_graph=True, is_grads_batched=True, allow_unused=True
            )
            blocks.append(flat(grads, len(basis)))
        except RuntimeError:  # an op without a batching rule: one row at a time
            for row in basis:
                grads = torch.autograd.grad(
                    outputs, items, row, retain_graph=True, allow_unused=True
                )
                blocks.append(flat([None if g is None else g[None] for g in grads], 1))
    if not blocks:
        return torch.zeros(0, sum(p.numel() for p in items), dtype=torch.float64)
    return torch.cat(blocks)


def _accumulate(
    scores: Tensor, rows: Tensor, weights: Tensor, num_draws: int, batch: Tensor | int
) -> Tensor:
    """``(D, P)``: :math:`\\sum_j w_j\\, s_{r_j}` per batch, in chunks (``batch`` the batch
    of each term, or the number of consecutive terms per batch)."""
    if isinstance(batch, int):
        batch = torch.arange(num_draws, device=rows.device).repeat_interleave(batch)
    out = torch.zeros(num_draws, scores.shape[1], dtype=torch.float64, device=scores.device)
    step = max(1, 2**22 // max(1, scores.shape[1]))
    for start in range(0, len(rows), step):
        part = slice(start, start + step)
        out.index_add_(0, batch[part], weights[part, None] * scores[rows[part]])
    return out


def summarize_draws(
    draws: Tensor,
    exact: Tensor,
    name: str,
    group_size: int,
    seconds: float,
    expected: Tensor | None = None,
) -> SequenceComparisonRow:
    """A :class:`SequenceComparisonRow` from ``(D, P)`` draws and the exact gradient."""
    g = draws.double()
    count = g.shape[0]
    mean = g.mean(dim=0)
    spread = ((g - mean) ** 2).sum(dim=1)
    variance = float(spread.sum()) / (count - 1)
    variance_se = float(spread.std()) / math.sqrt(count)
    diff = mean - exact
    bias = float(diff.norm())
    bias_se = float((g @ (diff / bias)).std()) / math.sqrt(count) if bias > 0 else 0.0
    exact_norm, mean_norm = float(exact.norm()), float(mean.norm())
    cosine = cosine_se = cosine_noise = scale = None
    if exact_norm > 0 and mean_norm > 0:
        u = exact / exact_norm
        cosine = float(mean @ u) / mean_norm
        direction = (u - cosine * mean / mean_norm) / mean_norm
        cosine_se = float((g @ direction).std()) / math.sqrt(count)
        along = float((g @ (mean / mean_norm)).var())
        cosine_noise = max(0.0, variance - along) / (2 * count * mean_norm**2)
        scale = float(mean @ exact) / exact_norm**2
    exact_bias = exact_cosine = None
    if expected is not None:
        exact_bias = float((expected - exact).norm())
        norms = float(expected.norm()) * exact_norm
        exact_cosine = float(expected @ exact) / norms if norms > 0 else None
    return SequenceComparisonRow(
        name,
        group_size,
        bias,
        bias_se,
        math.sqrt(variance / count),
        variance,
        variance_se,
        cosine,
        cosine_se,
        cosine_noise,
        scale,
        exact_bias,
        exact_cosine,
        seconds / count,
        count,
    )


def _entries(estimators: Any) -> list[tuple[str, _SequenceEstimator | LossFn]]:
    if isinstance(estimators, Mapping):
        pairs = list(estimators.items())
    elif isinstance(estimators, (str, bytes)) or not isinstance(estimators, Sequence):
        raise TypeError(
            "Expected `estimators` to be a list (or a dict by label) of estimator names or "
            f"loss callables, but found {type(estimators).__name__}"
        )
    else:
        pairs = [
            (e if isinstance(e, str) else getattr(e, "__name__", repr(e)), e) for e in estimators
        ]
    if not pairs:
        raise ValueError("Expected at least one estimator in `estimators`, but found none")
    out: list[tuple[str, _SequenceEstimator | LossFn]] = []
    for label, entry in pairs:
        if isinstance(entry, str):
            try:
                out.append((str(label), _resolve_estimator(entry)))
            except ValueError as error:
                raise ValueError(f"Bad entry {entry!r} in `estimators`: {error}") from None
        elif callable(entry):
            out.append((str(label), entry))
        else:
            raise TypeError(
                f"Bad entry {entry!r} in `estimators`: expected a name or a callable "
                f"(rewards, groups, logprobs, mask) -> loss"
            )
    return out
