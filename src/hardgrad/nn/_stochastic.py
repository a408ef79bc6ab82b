r"""Stochastic binary and categorical units as modules, over :func:`hardgrad.bernoulli` and
:func:`hardgrad.categorical` (stochastic neurons: Bengio et al. 2013,
https://arxiv.org/abs/1308.3432).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .. import estimators as _estimators
from .. import stochastic
from .._core.checkpoint import SettingsInState
from .._core.compiler import compiler_disabled
from .._core.validation import check_int, check_positive
from ..stochastic._checks import _one_of
from ._anneal import Anneal

TemperatureLike = float | Callable[[int], float] | None


class _StochasticUnit(SettingsInState, nn.Module):
    """Shared state of the stochastic modules: estimator, temperature schedule, step.

    The step (the argument of a ``tau`` schedule) is saved in the ``state_dict`` with the
    schedule (a number or :func:`anneal`; other callables are not stored), and
    ``load_state_dict`` refuses a step counted along another schedule. The estimator is
    not part of the state: a checkpoint loads into a unit with another estimator.

    Under ``torch.compile`` the unit compiles once: the step is a tensor incremented in the
    graph, and a number or ``None`` for ``tau`` compiles into one graph. With a callable
    ``tau`` (a schedule) the unit draws its sample eagerly, outside the graph (one graph
    break per call, so not with ``fullgraph=True``; the rest of the model still
    compiles): the estimators branch on the temperature as a Python number, so a graph
    taking it in would be recompiled for every new value, i.e. every step.
    """

    _steps: Tensor

    def __init__(
        self,
        estimator: str | _estimators.Estimator,
        tau: TemperatureLike,
        generator: torch.Generator | None,
    ) -> None:
        super().__init__()
        self.estimator = _estimators.resolve(estimator, pathwise=True, where=type(self).__name__)
        if tau is not None:
            if "tau" not in getattr(self.estimator, "__dataclass_fields__", {}):
                raise ValueError(
                    f"Expected `tau` to be None for {self.estimator!r}, which has no temperature, "
                    f"but found tau={tau!r}"
                )
            if not callable(tau):
                check_positive(tau, "tau")
        self.tau = tau
        self.generator = generator
        # The step lives in a tensor, incremented in place: a Python int attribute would be
        # a constant to torch.compile, and every training step would recompile the module.
        self.register_buffer("_steps", torch.zeros((), dtype=torch.long), persistent=False)

    @property
    def step(self) -> int:
        """Training forward passes so far: the argument of a ``tau`` schedule."""
        return int(self._steps)

    @step.setter
    def step(self, value: int) -> None:
        self._steps.fill_(check_int(value, "step", low=0))

    def reset_parameters(self) -> None:
        """The step count back to 0 (no parameters; for deferred initialisation:
        ``torch.device("meta")``, ``to_empty``, then this)."""
        self._steps.zero_()

    def current_estimator(self) -> _estimators.Estimator:
        """The estimator with the temperature of the current step."""
        if self.tau is None:
            return self.estimator
        tau = self.tau(self.step) if callable(self.tau) else self.tau
        return dataclasses.replace(self.estimator, tau=check_positive(tau, "tau"))  # type: ignore[type-var]

    def _advance(self) -> _estimators.Estimator:
        estimator = self.current_estimator()
        if self.training:
            self._steps.add_(1)
        return estimator

    def _draw(self, logits: Tensor | None, probs: Tensor | None) -> Tensor:
        """The sample with the estimator of the current step (advancing the step)."""
        raise NotImplementedError

    @compiler_disabled
    def _draw_with_scheduled_tau(self, logits: Tensor | None, probs: Tensor | None) -> Tensor:
        """:meth:`_draw` outside compiled graphs, for a callable ``tau``: the estimators
        branch on the temperature as a Python number, so a graph that took it in would be
        recompiled whenever the schedule moves it (every step, until the recompile
        limit)."""
        return self._draw(logits, probs)

    def _sample(self, logits: Tensor | None, probs: Tensor | None) -> Tensor:
        _one_of(logits, probs)  # before the step advances
        if callable(self.tau) and torch.compiler.is_compiling():
            return self._draw_with_scheduled_tau(logits, probs)
        return self._draw(logits, probs)

    def _checkpoint_settings(self) -> dict[str, Any]:
        """The temperature schedule the stored step counts along (its repr; a callable
        without a stable repr, such as a lambda, is not stored). The estimator is not state:
        a checkpoint loads into a unit with another estimator."""
        tau = self.tau
        if tau is None or isinstance(tau, (int, float, Anneal)):
            return {"tau": repr(tau)}
        return {}

    def get_extra_state(self) -> dict[str, Any]:
        return {"step": self.step}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.step = int(state.get("step", 0))

    def extra_repr(self) -> str:
        text = f"estimator={self.estimator!r}"
        return text if self.tau is None else f"{text}, tau={self.tau!r}"


class Bernoulli(_StochasticUnit):
    """:func:`hardgrad.bernoulli` as a module: a stochastic binary unit.

    ``tau`` (a number, :func:`anneal`, or any callable of the step) overrides the
    estimator's temperature; the step counts forward passes in training mode and is saved
    in the ``state_dict``. ``unit(logits)`` or ``unit(probs=p)``: probabilities (e.g. from
    a hard sigmoid, exactly 0 and 1 included) get the gradient, as in
    :func:`hardgrad.bernoulli`.

    Example:
        >>> import torch, hardgrad as hg
        >>> unit = hg.nn.Bernoulli(estimator="st_gumbel", tau=hg.nn.anneal(1.0, 0.5, 10))
        >>> unit
        Bernoulli(estimator=STGumbel(tau=1.0), tau=anneal(start=1.0, end=0.5, steps=10, kind='exponential'))
        >>> unit(torch.zeros(2, 3)).shape
        torch.Size([2, 3])
        >>> unit.step, unit.current_estimator()
        (1, STGumbel(tau=0.9330329915368074))
    """

    def __init__(
        self,
        estimator: str | _estimators.Estimator = "st",
        *,
        tau: TemperatureLike = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(estimator, tau, generator)

    def forward(self, logits: Tensor | None = None, *, probs: Tensor | None = None) -> Tensor:
        """A sample for ``logits`` (log-odds) or, keyword only, ``probs`` (probabilities in
        [0, 1]): exactly one of them, as in :func:`hardgrad.bernoulli`."""
        return self._sample(logits, probs)

    def _draw(self, logits: Tensor | None, probs: Tensor | None) -> Tensor:
        return stochastic.bernoulli(
            logits, probs=probs, estimator=self._advance(), generator=self.generator
        )


class Categorical(_StochasticUnit):
    """:func:`hardgrad.categorical` as a module: a one-hot stochastic unit along ``dim``.

    ``unit(logits)`` or ``unit(probs=q)`` with category probabilities along ``dim``.

    Example:
        >>> import torch, hardgrad as hg
        >>> unit = hg.nn.Categorical(estimator=hg.estimators.GumbelRao(k=4), tau=0.5)
        >>> unit(torch.zeros(2, 5)).sum(-1)
        tensor([1., 1.])
        >>> unit(probs=torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0]]))
        tensor([[0., 0., 1., 0., 0.]])
    """

    def __init__(
        self,
        estimator: str | _estimators.Estimator = "st",
        *,
        dim: int = -1,
        tau: TemperatureLike = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(estimator, tau, generator)
        self.dim = check_int(dim, "dim")

    def forward(self, logits: Tensor | None = None, *, probs: Tensor | None = None) -> Tensor:
        """A one-hot sample for ``logits`` or, keyword only, ``probs`` (category
        probabilities along ``dim``): exactly one of them, as in
        :func:`hardgrad.categorical`."""
        return self._sample(logits, probs)

    def _draw(self, logits: Tensor | None, probs: Tensor | None) -> Tensor:
        return stochastic.categorical(
            logits, probs=probs, dim=self.dim, estimator=self._advance(), generator=self.generator
        )

    def extra_repr(self) -> str:
        return f"dim={self.dim}, {super().extra_repr()}"
