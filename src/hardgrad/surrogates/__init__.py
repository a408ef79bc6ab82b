r"""Surrogate gradients: the smooth functions whose derivative a hard op's backward uses.

Papers: the straight-through estimator, Bengio et al. (2013),
https://arxiv.org/abs/1308.3432, and its clipped form, Hubara et al. (2016),
https://arxiv.org/abs/1602.02830; surrogate gradients for spiking networks, Zenke & Ganguli
(2018), https://doi.org/10.1162/neco_a_01086, and Zenke & Vogels (2021),
https://doi.org/10.1162/neco_a_01367; ApproxSign, Liu et al. (2018),
https://arxiv.org/abs/1808.00278; SwishSign, Darabi et al. (2018),
https://arxiv.org/abs/1812.11800. Each class cites its own.

A hard operation :math:`h` (a step, a sign, a staircase, a clamp) keeps its exact forward
value; with a surrogate :math:`s` its backward multiplies the incoming gradient by
:math:`s'(x)` instead of :math:`h'(x)` (which is zero or undefined):

.. math::

    y = h(x), \qquad \frac{\partial L}{\partial x} = \frac{\partial L}{\partial y}\, s'(x).

Each surrogate documents :meth:`Surrogate.function` (:math:`s`) and
:meth:`Surrogate.derivative` (:math:`s'`). The derivative is used as it is, without
rescaling: surrogates that approximate a sign (range :math:`[-1, 1]`, e.g. ``"clipped"``,
``"tanh"``, ``"approx_sign"``, ``"swish"``) integrate to 2, those that approximate the
Heaviside step (range :math:`[0, 1]`, e.g. ``"sigmoid"``, ``"atan"``, ``"triangle"``)
integrate to 1.

Every registered surrogate computes :math:`g\, s'(x)` in a form that neither cancels nor
overflows, float16/bfloat16 in float32 rounded once, within a few ulps of the exact value
over the whole real line; each class states its bound (guide: "Numerical accuracy").

Every op accepts the surrogates that make sense for it. The families are
``"staircase"`` (round, floor, ceil, trunc), ``"step"`` (sign, binarize, heaviside) and
``"clamp"`` (clamp, quantize); :attr:`Surrogate.applies_to` says which a surrogate fits.

Write your own by subclassing :class:`Surrogate`:

>>> import torch, hardgrad as hg
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Gaussian(hg.surrogates.Surrogate):
...     '''s(x) = Phi(x / sigma), s'(x) = exp(-x^2 / (2 sigma^2)) / (sigma sqrt(2 pi)).'''
...     sigma: float = 1.0
...     def function(self, x):
...         return 0.5 * (1 + torch.erf(x / (self.sigma * 2 ** 0.5)))
...     def derivative(self, x):
...         return torch.exp(-0.5 * (x / self.sigma) ** 2) / (self.sigma * (2 * torch.pi) ** 0.5)
>>> x = torch.tensor([-1.0, 0.5], requires_grad=True)
>>> hg.heaviside(x, surrogate=Gaussian(sigma=0.5)).sum().backward()
>>> x.grad
tensor([0.1080, 0.4839])
"""

from __future__ import annotations

from ._base import _SURROGATES, SURROGATES, Surrogate, get, resolve
from ._base import FAMILIES as FAMILIES  # importable from here, as before; not in __all__

# The catalogue, imported in this order on purpose: importing a module registers its
# surrogates, and the registry keeps registration order (the CLI's choices, the docs tables).
# isort: off
from ._straight_through import Clipped, Identity, Masked
from ._smooth import ATan, FastSigmoid, Sigmoid, Tanh
from ._piecewise import ApproxSign, Triangle
from ._swish import Swish

# isort: on

__all__ = [
    "SURROGATES",
    "ATan",
    "ApproxSign",
    "Clipped",
    "FastSigmoid",
    "Identity",
    "Masked",
    "Sigmoid",
    "Surrogate",
    "Swish",
    "Tanh",
    "Triangle",
    "get",
    "resolve",
]

# The default instances are made now, at import, rather than on first use: their
# constructors round constants to every dtype with small tensors, which Dynamo cannot trace
# (``float(tensor)``), so a first use inside ``torch.compile`` broke the graph there, and a
# compiled ``hg.quantize`` kept running as five pieces (2.4 ms for all of them, once).
for _name in _SURROGATES:
    _SURROGATES.default(_name)
del _name
