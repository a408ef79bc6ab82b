r"""The ``shortest-path`` benchmark: learning to predict costs for Dijkstra on a grid.

The set-up of PyEPO's shortest-path problem (Tang & Khalil 2022,
https://arxiv.org/abs/2206.14234), on vertex costs: each instance has a feature vector
:math:`x \in R^p` (standard normal) and true costs on a :math:`k\times k` grid,

.. math::

    c_j = \Big[\tfrac{1}{3.5^{\deg}}\big(\tfrac{(Bx)_j}{\sqrt p} + 3\big)^{\deg} + 1\Big]
    \cdot \varepsilon_j, \qquad B_{jl} \sim \operatorname{Bernoulli}(1/2), \quad
    \varepsilon_j \sim U[1 - \bar\varepsilon, 1 + \bar\varepsilon],

so the map from features to costs is a polynomial of degree ``deg`` that a linear model
cannot fit. A path goes from the top-left to the bottom-right cell moving right or down and
pays the cost of every cell it visits; :func:`grid_shortest_path` finds the cheapest one with
Dijkstra's algorithm (SciPy's ``csgraph.dijkstra`` on one graph holding the whole batch).

A small network (``p``-``hidden``-:math:`k^2`, ReLU) predicts the costs
:math:`\hat c = f(x)`; the path is :math:`y(\hat c)`, and every method trains on the
Hamming loss :math:`\langle y, 1 - y^*\rangle + \langle 1 - y, y^*\rangle` to the true
shortest path :math:`y^* = y(c)` (Vlastelica et al. 2020), except the Fenchel-Young row,
which uses its own loss with the same target, and the two-stage row, which fits
:math:`\hat c` to :math:`c` by mean squared error and never calls the solver in training.
The gradient through the solver: :func:`hardgrad.perturbed` (normal noise),
:func:`hardgrad.imle` (Sum-of-Gamma noise; all paths have :math:`2k-1` cells),
:func:`hardgrad.blackbox` and :func:`hardgrad.identity_solver` (negative identity, plain
and with the standardising projection of Sahoo et al. 2023). Hyperparameters (sigma,
lambda, tau) were picked from a small sweep on seeds 0-1 of the full setting: perturbed
sigma in {0.25, 0.5, 1, 2}; I-MLE lambda in {1, 5, 20}, tau in {0.3, 1, 3}; blackbox
lambda in {1, 5, 20}; the best of each is the default. Reported on the test set: the normalised regret
:math:`\sum_i c_i^\top (y(\hat c_i) - y^*_i) / \sum_i c_i^\top y^*_i`, the share of
instances whose predicted path is optimal, and the time per training step.
"""

from ._config import METHODS, ShortestPathConfig, default_config
from ._run import run
from ._solver import grid_shortest_path
from ._train import make_data as make_data
from ._train import train_and_evaluate as train_and_evaluate

__all__ = ["METHODS", "ShortestPathConfig", "default_config", "grid_shortest_path", "run"]
