r"""Combinatorial solvers as layers: a chosen gradient through ``y = solver(theta)``.

Papers:

* Perturbed optimizers and the Fenchel-Young loss: Berthet et al. (2020),
  https://arxiv.org/abs/2002.08676.
* Implicit maximum-likelihood estimation (I-MLE) and Sum-of-Gamma noise: Niepert et al.
  (2021), https://arxiv.org/abs/2106.01798.
* Blackbox differentiation of combinatorial solvers: Vlastelica et al. (2020),
  https://arxiv.org/abs/1912.02175.
* The identity (straight-through) and negative-identity backward with projections:
  Sahoo et al. (2023), https://arxiv.org/abs/2205.15213.

Convention: a *solver* is any function ``solver(theta) -> y`` that maps a batch of scores
``theta`` of shape ``(N, *event)`` to the solutions ``y`` of the same shape, where ``y`` is
a maximiser of the linear objective :math:`\langle \theta, y \rangle` over a discrete set
(one-hot vectors, k-subsets, paths on a grid, permutation matrices ...). Each factory here
(:func:`perturbed`, :func:`imle`, :func:`blackbox`, :func:`identity_solver`) returns a
function of ``theta`` whose forward calls the solver on a batch (all samples at once, one
call) and whose backward is the chosen estimator. For a solver that *minimises* a cost
:math:`\langle c, y\rangle` (Dijkstra), pass ``minimize=True`` and the costs: the layer
then works with :math:`\theta = -c` (and the gradient reaches ``c`` through the negation).

The first dimension of ``theta`` is the batch; all others are the solution's dimensions
(inner products :math:`\langle\cdot,\cdot\rangle` sum over them). A 1-D ``theta`` of
shape ``(n,)`` is one instance: the solver sees it as a batch of one, ``(1, n)``, and the
layer returns shape ``(n,)`` (a scalar Fenchel-Young loss). Noise is drawn from
``generator`` on ``theta``'s device (float32 for half types); the solver is called on
tensors of ``theta``'s dtype; no autograd ``Function`` class is created per call.

The package holds one module per method: ``_perturbed`` (:func:`perturbed` and the
Fenchel-Young loss), ``_imle`` (:func:`imle`), ``_blackbox`` (:func:`blackbox`) and
``_identity`` (:func:`identity_solver`), beside ``_noise`` (Gumbel, normal, Gamma and
Sum-of-Gamma noise) and ``_base`` (the checked solver call and the layers' shared base).
"""

from __future__ import annotations

from ._blackbox import BlackboxSolver, blackbox
from ._identity import IdentitySolver, identity_solver
from ._imle import IMLE_NOISES, IMLESolver, imle
from ._noise import gamma_noise, sum_of_gamma_noise
from ._perturbed import PERTURBED_NOISES, PerturbedSolver, perturbed

__all__ = [
    "IMLE_NOISES",
    "PERTURBED_NOISES",
    "BlackboxSolver",
    "IMLESolver",
    "IdentitySolver",
    "PerturbedSolver",
    "blackbox",
    "gamma_noise",
    "identity_solver",
    "imle",
    "perturbed",
    "sum_of_gamma_noise",
]
