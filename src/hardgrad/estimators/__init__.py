"""Gradient estimators for discrete random variables, one registry for all of them.

Each estimator is a class that carries its settings (``tau``, ``k``); a registry name
stands for the default instance. Pathwise estimators (the sample's backward carries the
estimate) are used by :func:`hardgrad.bernoulli` and :func:`hardgrad.categorical`.

>>> import hardgrad as hg
>>> hg.estimators.ESTIMATORS.names()
('st', 'st_identity', 'gumbel_softmax', 'st_gumbel', 'gumbel_rao', 'reinmax', 'gst')
"""

from ._base import ESTIMATORS, Estimator, get, gumbel_noise, resolve
from ._pathwise import GST, ST, GumbelRao, GumbelSoftmax, ReinMax, STGumbel, STIdentity

__all__ = [
    "ESTIMATORS",
    "GST",
    "ST",
    "Estimator",
    "GumbelRao",
    "GumbelSoftmax",
    "ReinMax",
    "STGumbel",
    "STIdentity",
    "get",
    "gumbel_noise",
    "resolve",
]
