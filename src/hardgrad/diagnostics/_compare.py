r"""How good is an estimator on *your* objective: bias, spread and cost against the exact gradient.

For an estimator with draws :math:`\hat g_1, \dots, \hat g_D` (each shaped like the
logits), mean :math:`\bar g`, per-coordinate variance :math:`v_i`, and the exact gradient
:math:`g^*`:

* ``bias`` :math:`= \lVert \bar g - g^* \rVert / \lVert g^* \rVert` (relative L2);
* ``std`` :math:`= \sqrt{\textstyle\sum_i v_i} / \lVert g^* \rVert` (relative);
* ``cosine`` :math:`= \langle \bar g, g^* \rangle / (\lVert \bar g \rVert \lVert g^* \rVert)`;
* ``snr`` :math:`= \lVert \bar g \rVert / \sqrt{\textstyle\sum_i v_i}` (no reference needed);
* ``mse`` :math:`= \tfrac1D \sum_d \lVert \hat g_d - g^* \rVert^2 / \lVert g^* \rVert^2`
  (relative; equals ``bias**2 + std**2`` up to the :math:`(D-1)/D` of the variance);
* ``seconds_per_draw``: wall time of the draws over their number.

Without an exact reference (``exact=False``) the relative figures are taken against
:math:`\lVert \bar g \rVert` of the estimator itself and ``bias``/``cosine``/``mse`` are
``None``. Where a norm is 0 the ratio is reported as ``None`` rather than NaN.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..estimators import Estimator, resolve
from ..estimators._problem import Objective
from ..routing import SparseMixer, TopK
from ..stochastic._checks import _one_of
from ._gradients import exact_gradient, gradient_samples
from ._routing import compare_routing


@dataclass(frozen=True)
class ComparisonRow:
    """One estimator's figures (see :mod:`hardgrad.diagnostics` for their definitions)."""

    estimator: str
    bias: float | None
    std: float | None
    cosine: float | None
    snr: float | None
    mse: float | None
    seconds_per_draw: float
    num_draws: int


@dataclass
class Comparison:
    """The result of :func:`compare`: one :class:`ComparisonRow` per estimator.

    ``str()`` prints the table; :meth:`to_markdown` and :meth:`to_dict` export it.
    """

    rows: list[ComparisonRow]
    exact: Tensor | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    COLUMNS: ClassVar[tuple[str, ...]] = (
        "estimator",
        "bias",
        "std",
        "cosine",
        "snr",
        "mse",
        "seconds_per_draw",
    )

    def _cells(self) -> list[list[str]]:
        return [[_fmt(getattr(row, c)) for c in self.COLUMNS] for row in self.rows]

    def to_markdown(self) -> str:
        """The table as GitHub-flavoured Markdown."""
        head = "| " + " | ".join(self.COLUMNS) + " |"
        rule = "|" + "|".join(["---"] + ["---:"] * (len(self.COLUMNS) - 1)) + "|"
        body = ["| " + " | ".join(cells) + " |" for cells in self._cells()]
        return "\n".join([head, rule, *body])

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-serialisable): the rows, the settings and the exact gradient."""
        return {
            "rows": [asdict(row) for row in self.rows],
            "exact": None if self.exact is None else self.exact.tolist(),
            "settings": dict(self.settings),
        }

    def __str__(self) -> str:
        cells = [list(self.COLUMNS), *self._cells()]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.COLUMNS))]
        lines = []
        for k, row in enumerate(cells):
            parts = [row[0].ljust(widths[0])] + [
                c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
            ]
            lines.append("  ".join(parts))
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def summarize(draws: Tensor, exact: Tensor | None, name: str, seconds: float) -> ComparisonRow:
    """The figures of one estimator from its draws ``(D, *shape)`` and the exact gradient."""
    flat = draws.detach().double().reshape(draws.shape[0], -1)
    mean = flat.mean(0)
    # Empty logits have no coordinate to vary (and torch warns on a variance of nothing).
    varies = flat.shape[0] > 1 and flat.shape[1] > 0
    spread = math.sqrt(float(flat.var(0, correction=1).sum())) if varies else 0.0
    mean_norm = float(mean.norm())
    snr = _ratio(mean_norm, spread)
    if exact is None:
        return ComparisonRow(
            name,
            None,
            _ratio(spread, mean_norm),
            None,
            snr,
            None,
            seconds / flat.shape[0],
            flat.shape[0],
        )
    reference = exact.detach().double().reshape(-1)
    ref_norm = float(reference.norm())
    bias = _ratio(float((mean - reference).norm()), ref_norm)
    cosine = _ratio(float(mean @ reference), mean_norm * ref_norm)
    mse = _ratio(float((flat - reference).square().sum(1).mean()), ref_norm**2)
    return ComparisonRow(
        name,
        bias,
        _ratio(spread, ref_norm),
        cosine,
        snr,
        mse,
        seconds / flat.shape[0],
        flat.shape[0],
    )


def compare(
    f: Objective,
    logits: Tensor | None = None,
    *,
    probs: Tensor | None = None,
    estimators: Sequence[str | Estimator | SparseMixer],
    dist: str | TopK = "bernoulli",
    num_draws: int = 1000,
    exact: bool = True,
    dim: int = -1,
    generator: torch.Generator | None = None,
) -> Comparison:
    r"""Bias, spread, cosine, SNR, MSE and cost of each estimator on ``f`` at ``logits``.

    Each estimator gives ``num_draws`` independent estimates of
    :math:`\nabla_\theta \sum_j E[f_j(b)]` (:func:`gradient_samples`, default
    ``num_samples``), compared with :func:`exact_gradient` when ``exact`` is true. With
    ``probs``, the gradients with respect to the probabilities.

    Args:
        f: the objective, ``(n, *logits.shape) -> (n, *prefix)``.
        logits: floating tensor.
        probs: floating tensor of probabilities (keyword only), instead of ``logits``.
        estimators: names or instances from :mod:`hardgrad.estimators`.
        dist: ``"bernoulli"`` or ``"categorical"``; or :class:`hardgrad.routing.TopK` for
            router gradients: then ``f(gates, indices)`` is the objective of
            :func:`hardgrad.routing.expectation`, the reference is the exact gradient of
            the expected loss under stochastic top-k routing (enumerating the
            :math:`\binom{E}{k}` subsets) and ``estimators`` may also name the routing
            estimators (``"sparse"``, ``"dense"``, ``"sparsemixer"``, ...).
        num_draws: estimates per estimator, >= 2.
        exact: compare with the exact gradient (enumeration: small problems only).
        dim: the category dimension (categorical only).
        generator: the source of randomness.

    Example:
        >>> import torch, hardgrad as hg
        >>> toy = lambda b: (b - 0.45).square().sum(-1)   # the Bernoulli toy, phi = 1
        >>> result = hg.diagnostics.compare(toy, torch.ones(1), estimators=["disarm", "st"],
        ...                                 num_draws=1000, generator=torch.Generator().manual_seed(0))
        >>> [(row.estimator, round(row.bias, 1)) for row in result.rows]  # ST's theory: 4.6
        [('disarm', 0.0), ('st', 4.6)]

        Router gradients (see :mod:`hardgrad.routing`):

        >>> outputs = torch.tensor([1.0, 0.0, 0.5, 2.0])   # the experts' outputs, one token
        >>> f = lambda gates, idx: ((gates * outputs[idx]).sum(-1) - 1.2).square()
        >>> result = hg.diagnostics.compare(f, torch.zeros(1, 4), estimators=["sparse", "rloo"],
        ...                                 dist=hg.routing.TopK(2), num_draws=2000,
        ...                                 generator=torch.Generator().manual_seed(0))
        >>> [(row.estimator, round(row.bias, 1)) for row in result.rows]
        [('sparse', 1.1), ('rloo', 0.0)]
    """
    if isinstance(estimators, (str, Estimator, SparseMixer)) or not isinstance(
        estimators, Sequence
    ):
        raise TypeError(
            "Expected `estimators` to be a list of names or Estimator instances, "
            f"but found {type(estimators).__name__}"
        )
    if not estimators:
        raise ValueError("Expected at least one estimator in `estimators`, but found none")
    if isinstance(num_draws, bool) or not isinstance(num_draws, int) or num_draws < 2:
        raise ValueError(f"Expected `num_draws` >= 2 (an int), but found num_draws={num_draws!r}")
    if isinstance(dist, TopK):
        return _compare_routing(f, logits, estimators, dist, num_draws, exact, generator)
    chosen = []
    for entry in estimators:
        try:
            chosen.append(resolve(entry))  # type: ignore[arg-type]  # (refuses a SparseMixer)
        except (TypeError, ValueError) as error:  # name the argument the caller passed
            raise type(error)(f"Bad entry {entry!r} in `estimators`: {error}") from None
    tensor, is_probs = _one_of(logits, probs)
    logits, probs = (None, tensor) if is_probs else (tensor, None)
    reference = exact_gradient(f, logits, probs=probs, dist=dist, dim=dim) if exact else None
    rows = []
    for spec, est in zip(estimators, chosen, strict=True):
        start = time.perf_counter()
        draws = gradient_samples(
            f,
            logits,
            probs=probs,
            estimator=est,
            dist=dist,
            num_draws=num_draws,
            dim=dim,
            generator=generator,
        )
        seconds = time.perf_counter() - start
        name = spec if isinstance(spec, str) else repr(est)
        rows.append(summarize(draws, reference, name, seconds))
    settings = {"dist": dist, "num_draws": num_draws, "dim": dim, "shape": list(tensor.shape)}
    if is_probs:
        settings["parameter"] = "probs"
    return Comparison(rows, reference, settings)


def _compare_routing(
    f: Any,
    logits: Tensor | None,
    estimators: Sequence[Any],
    dist: TopK,
    num_draws: int,
    exact: bool,
    generator: torch.Generator | None,
) -> Comparison:
    """:func:`compare` for router gradients (``dist`` a :class:`hardgrad.routing.TopK`)."""
    if logits is None:
        raise ValueError("Expected `logits` for dist=TopK (router logits), but found None")
    draws, reference = compare_routing(f, logits, dist, estimators, num_draws, exact, generator)
    rows = [summarize(d, reference, name, seconds) for name, d, seconds in draws]
    settings = {
        "dist": repr(dist),
        "num_draws": num_draws,
        "shape": list(logits.shape),
    }
    return Comparison(rows, reference, settings)


def compare_layers(
    objective: Callable[[Tensor], Tensor],
    theta: Tensor,
    *,
    layers: Mapping[str, Callable[[Tensor], Tensor]],
    reference: Tensor | Callable[[Tensor], Tensor] | None = None,
    num_draws: int = 100,
) -> Comparison:
    r"""Bias, spread, cosine, SNR, MSE and cost of the gradients that several layers give
    ``objective`` at ``theta``: solver layers (:func:`hardgrad.perturbed`,
    :func:`hardgrad.imle`, :func:`hardgrad.blackbox`, :func:`hardgrad.identity_solver`),
    sorts and ranks with chosen backwards, subset samplers, or any function of ``theta``.

    Each layer gives ``num_draws`` gradients of ``objective(layer(theta)).sum()`` (fresh
    noise in every call, for the random ones), summarised as in :func:`compare` against the
    reference: a tensor (an exact gradient you know), a callable (the gradient of
    ``objective(reference(theta))`` is computed once: a smooth function whose gradient the
    layers estimate, e.g. ``softmax(theta / sigma)`` for a perturbed argmax, a perturbed
    layer with many samples, or a relaxation at low strength), or None (``std`` and ``snr``
    only).

    Example:
        >>> import torch, hardgrad as hg
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> theta, w = torch.tensor([[1.0, 0.5, -0.5]]), torch.tensor([[1.0, -1.0, 2.0]])
        >>> layers = {"perturbed": hg.perturbed(hg.one_hot_argmax, sigma=0.5, num_samples=100),
        ...           "blackbox": hg.blackbox(hg.one_hot_argmax, lam=1.0)}
        >>> result = hg.diagnostics.compare_layers(lambda y: (y * w).sum(), theta,
        ...     layers=layers, reference=lambda t: torch.softmax(t / 0.5, -1), num_draws=200)
        >>> [(row.estimator, round(row.bias, 1)) for row in result.rows]  # perturbed: unbiased
        [('perturbed', 0.0), ('blackbox', 0.4)]
    """
    if not isinstance(theta, Tensor) or not theta.is_floating_point():
        raise TypeError(
            f"Expected `theta` to be a floating-point tensor, but found {type(theta).__name__}"
        )
    if not isinstance(layers, Mapping) or not layers:
        raise ValueError("Expected `layers` to be a non-empty mapping of names to callables")
    for name, layer in layers.items():
        if not callable(layer):
            raise TypeError(f"Expected `layers[{name!r}]` to be callable, but found {layer!r}")
    if isinstance(num_draws, bool) or not isinstance(num_draws, int) or num_draws < 2:
        raise ValueError(f"Expected `num_draws` >= 2 (an int), but found num_draws={num_draws!r}")

    def gradient(layer: Callable[[Tensor], Tensor]) -> Tensor:
        leaf = theta.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(objective(layer(leaf)).sum(), leaf, allow_unused=True)
        return torch.zeros_like(leaf) if grad is None else grad

    if reference is None or isinstance(reference, Tensor):
        exact = reference
    elif callable(reference):
        exact = gradient(reference)
    else:
        raise TypeError(
            f"Expected `reference` to be a tensor, a callable or None, but found {type(reference).__name__}"
        )
    rows = []
    for name, layer in layers.items():
        start = time.perf_counter()
        draws = torch.stack([gradient(layer) for _ in range(num_draws)])
        rows.append(summarize(draws, exact, name, time.perf_counter() - start))
    settings = {"num_draws": num_draws, "shape": list(theta.shape)}
    return Comparison(rows, exact, settings)
