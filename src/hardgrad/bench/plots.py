r"""``hardgrad plot``: pictures of every op, surrogate and estimator, drawn from the registries.

* ``op_<name>.png`` for every elementwise op of :data:`hardgrad.ops.OPS`: the hard forward
  (top) and the backward :math:`\partial y / \partial x` with every surrogate that applies
  to it (bottom), measured through autograd on the real op, so the picture shows what the
  code does, not what the docs say.
* ``estimators_toy.png``: the distribution of every Bernoulli-capable estimator's gradient
  on the Bernoulli toy :math:`E[(b - t)^2]` (:func:`hardgrad.diagnostics.gradient_samples`),
  with the exact gradient marked.

Nothing is listed by hand: a newly registered op, surrogate or estimator appears on the
next run. Needs matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .. import surrogates as _surrogates
from ..diagnostics import exact_gradient, gradient_samples
from ..estimators import ESTIMATORS
from ..ops import OPS, OpSpec
from ._pyplot import legend_outside, save_figure


def _pyplot() -> Any:
    import matplotlib  # raises where the bench extra is missing (the command line says so)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def surrogates_for(spec: OpSpec) -> list[str]:
    """The registered surrogates that apply to ``spec``'s family, registry order."""
    if spec.family is None:
        return []
    return [name for name, cls in _surrogates.SURROGATES.items() if spec.family in cls.applies_to]


def op_curves(spec: OpSpec, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The forward of ``spec`` at ``x`` and its autograd derivative per surrogate."""
    forward = spec(x.detach()).detach()
    backward = {}
    for name in surrogates_for(spec):
        leaf = x.detach().clone().requires_grad_()
        (grad,) = torch.autograd.grad(spec(leaf, surrogate=name).sum(), leaf)
        backward[name] = grad
    return forward, backward


def plot_op(spec: OpSpec, out: Path) -> Path:
    """``out/op_<name>.png``: forward and backward-per-surrogate of one elementwise op."""
    plt = _pyplot()
    x = torch.linspace(-3, 3, 1201, dtype=torch.float64)
    forward, backward = op_curves(spec, x)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.6, 6.0), sharex=True, layout="constrained")
    top.plot(x, forward, color="black", drawstyle="steps-mid")
    top.set_ylabel(f"hg.{spec.name}(x)")
    top.set_title(f"hg.{spec.name}: exact forward, backward per surrogate")
    for name, grad in backward.items():
        bottom.plot(x, grad, label=name)
    bottom.set_ylabel("d y / d x")
    bottom.set_xlabel("x")
    legend_outside(bottom)
    for axis in (top, bottom):
        axis.grid(alpha=0.3)
    name = save_figure(fig, out, f"op_{spec.name}.png")
    return out / name


def bernoulli_estimators() -> list[str]:
    """Registered estimators defined for Bernoulli variables (all but exact enumeration)."""
    return [
        name
        for name, cls in ESTIMATORS.items()
        if "bernoulli" in getattr(cls, "dists", ("bernoulli",)) and name != "exact"
    ]


def plot_estimators(out: Path, *, phi: float = 0.5, t: float = 0.45, draws: int = 20000,
                    seed: int = 0) -> Path:  # fmt: skip
    """``out/estimators_toy.png``: each estimator's gradient distribution on the toy."""
    plt = _pyplot()

    def toy(b: torch.Tensor) -> torch.Tensor:
        return (b - t).square().sum(-1)

    logits = torch.full((1,), phi, dtype=torch.float64)
    exact = float(exact_gradient(toy, logits))
    names = bernoulli_estimators()
    columns = 4
    rows = -(-len(names) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3.2 * columns, 2.5 * rows), squeeze=False, layout="constrained"
    )
    generator = torch.Generator().manual_seed(seed)
    for axis, name in zip(axes.flat, names, strict=False):
        samples = gradient_samples(
            toy, logits, estimator=name, num_draws=draws, generator=generator
        )
        values = samples.reshape(-1).numpy()
        axis.hist(values, bins=60, color="tab:blue", alpha=0.8)
        axis.axvline(exact, color="black", linestyle="--", linewidth=1)
        axis.axvline(float(values.mean()), color="tab:red", linewidth=1)
        axis.set_title(f"{name}\nmean {values.mean():.4f}, std {values.std():.3f}", fontsize=9)
        axis.tick_params(labelsize=7)
        axis.locator_params(axis="x", nbins=4)  # tick labels that do not collide
    for axis in list(axes.flat)[len(names) :]:
        axis.set_visible(False)
    fig.suptitle(
        f"Gradient distributions on E[(b - {t})^2], phi = {phi}: exact {exact:.4f} (dashed), "
        "mean (red)",
        fontsize=10,
    )
    name = save_figure(fig, out, "estimators_toy.png")
    return out / name


def plot_all(out: Path, *, draws: int = 20000, seed: int = 0) -> list[Path]:
    """Every picture, into ``out`` (created); returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [plot_op(spec, out) for _, spec in OPS.items() if spec.family is not None]
    paths.append(plot_estimators(out, draws=draws, seed=seed))
    return paths
