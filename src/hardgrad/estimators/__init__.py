"""Gradient estimators for discrete random variables, one registry for all of them.

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

from . import _forward_mode  # noqa: F401  (registers the samplers' forward-mode twins)
from ._base import ESTIMATORS, Estimator, get, gumbel_noise, resolve
from ._pathwise import GST, ST, GumbelRao, GumbelSoftmax, ReinMax, STGumbel, STIdentity
from ._problem import Problem
from ._relax import REBAR, RELAX
from ._score import (
    ARM,
    RLOO,
    DisARM,
    Exact,
    Reinforce,
    ScoreFunctionEstimator,
    attach_gradient,
    attach_parameter_gradient,
)

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
