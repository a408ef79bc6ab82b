r"""The ``poly`` benchmark: ReinMax's polynomial programming (Liu et al. 2023, sec. 6).

The problem: ``V = 128`` binary variables :math:`z_i \sim \operatorname{Bern}(\sigma(\theta_i))`
and

.. math:: L_p(\theta) = E\Big[\tfrac1V \sum_i |z_i - t|^p\Big], \qquad t = 0.45,
          \quad p \in \{1.5, 2, 3\}.

The loss is separable, so its exact value follows from the probabilities
:math:`\pi_i = \sigma(\theta_i)` in closed form,
:math:`L_p = \tfrac1V \sum_i [\pi_i (1-t)^p + (1-\pi_i) t^p]`, minimised at :math:`\pi = 0`
with :math:`L_p^* = t^p` (0.301869, 0.2025, 0.091125). Every curve and every number in
the tables is this exact loss of the current probabilities, not a Monte-Carlo value.

**Training.** :math:`\theta` starts at ``init_logit`` (0: :math:`\pi = 1/2`) and Adam
(``lr``) follows each estimator through :func:`hardgrad.expectation`, with ``f`` returning
the per-run loss :math:`\tfrac1V\sum_i |z_i - t|^p` (one value per run: score-function
estimators see the whole 128-variable loss, as in the paper, not one term per variable).
The batch of 64 is ``num_samples``: each step spends a budget of ``batch`` evaluations of
``f`` at the current :math:`\theta` and averages them, so estimators are compared at equal
evaluations: pathwise estimators, REINFORCE and RLOO draw 64 samples, ARM and DisARM 32
antithetic pairs, REBAR and RELAX (3 evaluations per sample) ``64 // 3 = 21`` draws (63
evaluations). The tables report the evaluations each one used.

Seeds are independent rows of one logits tensor: :math:`\theta` has shape
``(P, seeds, V)`` and ``f`` returns ``(n, P, seeds)``, so every power and seed is its own run
(Adam is elementwise, and each row's estimate depends only on its own samples). Stateful
estimators (``reinforce(ema)``, ``rebar``, ``relax``, ``relax(mlp)``) are run once per
power, their parameters in the same Adam as :math:`\theta` and shared by that power's seeds
(as they would be across a batch): a moving-average baseline or a control variate
shared across powers would mix losses of different scales.

``exact`` is not run: exact enumeration needs :math:`2^{128}` configurations per run.
The closed-form gradient :math:`\partial L_p/\partial\theta_i = \pi_i(1-\pi_i)((1-t)^p -
t^p)/V` is run instead as the reference, labelled ``closed-form``.

**Reported.** Per estimator and power: the final exact loss (mean, spread over seeds), its
relative gap to :math:`L_p^*`, the first recorded step at which the loss is within 1 % of
:math:`L_p^*` (per seed; "not reached" otherwise), and the wall time. Straight-through's
mean gradient :math:`\pi(p(1-t)^{p-1}) - (1-\pi)p\,t^{p-1}` (times :math:`\sigma'/V`)
vanishes at :math:`\pi^\circ = 1/(1 + ((1-t)/t)^{p-1})`, away from the optimum; the notes
compare its final loss with the loss there. Plot: ``poly_curves.png``.

**--quick.** 400 steps at lr 2e-2 (20 times fewer steps at 20 times the learning rate,
so that Adam can move :math:`\theta` as far as in the full run), 2 seeds, a batch of 16
evaluations per step (REBAR/RELAX: 5 draws, 15 evaluations) and without ``relax(mlp)``, to
stay near 30 s on two idle cores (28 s measured; Gumbel-Rao's 10 conditional draws and REBAR/RELAX's inner
gradients dominate).

**Wall time.** The full run took 2228 s on two idle cores (``docs/results/poly/``):
Gumbel-Rao (10 conditional draws per sample) 1243 s of it, REBAR/RELAX 135-205 s each,
every other estimator 14-110 s. Leave ``gumbel_rao`` out (``estimators``) for a run of
about 16 minutes.

**torchrun.** ``poly`` has no data: every rank runs the whole benchmark with its own
sampling seeds (:func:`hardgrad.bench._distributed.rank_seed`); stateful estimators
average their state across ranks as they always do; only rank 0 reports.
"""

from ._config import REFERENCE, PolyConfig, default_config
from ._config import STATEFUL as STATEFUL
from ._problem import exact_loss, optimum, st_stall_probability
from ._run import VARIANTS, RunNet, num_samples_for, run

__all__ = [
    "REFERENCE",
    "VARIANTS",
    "PolyConfig",
    "RunNet",
    "default_config",
    "exact_loss",
    "num_samples_for",
    "optimum",
    "run",
    "st_stall_probability",
]
