"""Gradient estimators for discrete random variables, one registry for all of them.

Papers, one module per family: straight-through (Bengio et al. 2013,
https://arxiv.org/abs/1308.3432), Gumbel-softmax and its straight-through form (Jang et al.
2017, https://arxiv.org/abs/1611.01144; Maddison et al. 2017,
https://arxiv.org/abs/1611.00712), Gumbel-Rao (Paulus et al. 2021,
https://arxiv.org/abs/2010.04838), ReinMax (Liu et al. 2023,
https://arxiv.org/abs/2304.08612), GST (https://arxiv.org/abs/2206.07235), REINFORCE
(Williams 1992, https://doi.org/10.1007/BF00992696) and RLOO (Kool et al. 2019,
https://openreview.net/forum?id=r1lgTGL5DE), ARM (Yin & Zhou 2019,
https://arxiv.org/abs/1807.11143), DisARM (Dong et al. 2020,
https://arxiv.org/abs/2006.10680), REBAR (Tucker et al. 2017,
https://arxiv.org/abs/1703.07370), RELAX (Grathwohl et al. 2018,
https://arxiv.org/abs/1711.00123).

Each estimator is a class that carries its settings (``tau``, ``k``); a registry name
stands for the default instance. Pathwise estimators (the sample's backward carries the
estimate) are used by :func:`hardgrad.bernoulli` and :func:`hardgrad.categorical`, and by
:func:`hardgrad.expectation`; the score-function family (REINFORCE, RLOO, ARM, DisARM,
REBAR, RELAX) and exact enumeration need the objective, so they work through
:func:`hardgrad.expectation` only.

>>> import hardgrad as hg
>>> hg.estimators.ESTIMATORS.names()
('st', 'st_identity', 'gumbel_softmax', 'st_gumbel', 'gumbel_rao', 'reinmax', 'gst', 'reinforce', 'rloo', 'arm', 'disarm', 'exact', 'rebar', 'relax')
"""

from ._base import ESTIMATORS, Estimator, ScoreFunctionEstimator, get, resolve
from ._noise import gumbel_noise
from ._problem import Problem
from ._score import attach_gradient, attach_parameter_gradient

# isort: off
# The families register themselves on import, so this order is the registry's
# (ESTIMATORS.names(), the docs table, the CLI): pathwise first, then score-function.
from ._straight_through import ST, STIdentity
from ._gumbel_softmax import GumbelSoftmax, STGumbel
from ._gumbel_rao import GumbelRao
from ._reinmax import ReinMax
from ._gst import GST
from ._reinforce import RLOO, Reinforce
from ._arm import ARM, DisARM
from ._exact import Exact
from ._relax import REBAR, RELAX
from . import _forward_mode  # noqa: F401  (registers the samplers' forward-mode twins)
# isort: on

__all__ = [
    "ARM",
    "ESTIMATORS",
    "GST",
    "REBAR",
    "RELAX",
    "RLOO",
    "ST",
    "DisARM",
    "Estimator",
    "Exact",
    "GumbelRao",
    "GumbelSoftmax",
    "Problem",
    "ReinMax",
    "Reinforce",
    "STGumbel",
    "STIdentity",
    "ScoreFunctionEstimator",
    "attach_gradient",
    "attach_parameter_gradient",
    "get",
    "gumbel_noise",
    "resolve",
]
