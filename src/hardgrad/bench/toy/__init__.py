r"""The ``toy`` benchmark: every estimator on the Bernoulli toy, against closed forms.

The problem: :math:`L(\phi) = E[(b - t)^2]`, :math:`b \sim \operatorname{Bern}(p)`,
:math:`p = \sigma(\phi)`, so :math:`f(1) - f(0) = 1 - 2t` and the exact gradient is
:math:`\nabla_\phi L = p(1-p)(1-2t)`. For :math:`t < 1/2` the loss is minimised at
:math:`p = 0`; near :math:`t = 1/2` the signal :math:`1 - 2t` is tiny, which is what makes
the problem hard for noisy estimators (Tucker et al. 2017; Grathwohl et al. 2018).

**Table.** For each target ``t`` and logit ``phi``, every estimator registered in
:data:`hardgrad.estimators.ESTIMATORS` that supports Bernoulli variables (plus a few
labelled variants, such as ``reinforce(ema)``) is run once on ``M`` replicas: logits of
shape ``(M,)`` all equal to ``phi`` and ``f = lambda b: (b - t)**2`` returning ``(n, M)``,
so ``logits.grad`` holds ``M`` independent estimates. Each estimator uses its default
``num_samples``; the table shows the resulting evaluations of ``f``. Measured mean and
variance (with standard errors) are set against closed forms, all derived for this toy
(:math:`g_b` is the estimate given the sample :math:`b`, :math:`n` the samples averaged):

* exact: mean :math:`p(1-p)(1-2t)`, variance 0;
* ``st`` (:math:`\tau`): :math:`g_b = 2(b - t)\,\sigma'(\phi/\tau)/\tau`, mean
  :math:`2(p - t)p(1-p)` at :math:`\tau = 1`, variance :math:`4p^3(1-p)^3` there;
* ``st_identity``: :math:`g_b = 2(b - t)`;
* ``reinmax`` (:math:`\tau`): :math:`g_b = 2(b-t)\,(2r_b(1-r_b) - \sigma'(\phi)/2)`,
  :math:`r_b = (\sigma(\phi/\tau) + b)/2`; at :math:`\tau = 1`, :math:`g_1 = (1-p)(1-t)`,
  :math:`g_0 = -pt`: unbiased on this quadratic;
* ``gst`` (:math:`\tau`, gap :math:`\kappa`): :math:`g_b = 2(b-t)\,\sigma'(\Delta_b/\tau)/\tau`
  with :math:`\Delta_b` the gap between the two gapped logits of ``[0, phi]``;
* two-point estimators (all the above): mean :math:`p g_1 + (1-p) g_0`, variance
  :math:`p(1-p)(g_1 - g_0)^2`, divided by :math:`n`;
* ``st_gumbel``, ``gumbel_rao`` (``k`` conditional draws) and ``gumbel_softmax``: one
  logistic variable :math:`d = \phi + \text{Logistic}(0, 1)`, :math:`b = 1[d > 0]`;
  moments of :math:`2(b - t)\sigma'(d/\tau)/\tau` (Gumbel-Rao: conditional on :math:`b`,
  the average of ``k`` draws) and of :math:`2(\sigma(d/\tau) - t)\sigma'(d/\tau)/\tau` by
  Simpson quadrature; at :math:`\phi = 0`, :math:`\tau = 1` ST-Gumbel's mean is
  :math:`(1-2t)/6`;
* ``reinforce`` with a constant baseline :math:`\beta` (0, or the ``ema`` state after a
  warm-up): :math:`E[g^2] = p(1-p)^2 (f_1 - \beta)^2 + (1-p)p^2 (f_0 - \beta)^2`, variance
  :math:`(E[g^2] - g^2)/n`; with :math:`\beta = 0` this is
  :math:`p(1-t)^4(1-p)^2 + (1-p)t^4p^2 - g^2`;
* ``rloo`` and ``reinforce(optimal)`` with two samples: both are
  :math:`\tfrac12 (f_1 - f_2)(b_1 - b_2) = \tfrac12(1-2t)\,1[b_1 \ne b_2]`, variance
  :math:`(1-2t)^2 q(1-q)/4`, :math:`q = 2p(1-p)`;
* ``arm``, one pair: :math:`\hat g = (1-2t)\,|u - \tfrac12|\,1[|u - \tfrac12| > a]`,
  :math:`a = |p - \tfrac12|`, variance
  :math:`(1-2t)^2 (\tfrac1{12} - \tfrac23 a^3 - (\tfrac14 - a^2)^2)` (:math:`(1-2t)^2/48` at 0);
* ``disarm``, one pair: :math:`\hat g = \tfrac12(1-2t)\sigma(|\phi|)\,1[b \ne \tilde b]`,
  variance :math:`\tfrac14(1-2t)^2\sigma(|\phi|)^2 r(1-r)`, :math:`r = 2\sigma(-|\phi|)`
  (0 at :math:`\phi = 0`); with several pairs, divided by their number.

REBAR and RELAX have no closed-form variance (it depends on the learned control variate;
they are measured at their initial parameters); their mean is the exact gradient, as for
every estimator declared unbiased. A check passes when the relative error is at most 5 %;
a closed-form variance of 0 needs a measured variance of 0 to rounding. A check that misses
5 % by less than four standard errors is reported as *unresolved* (the run's ``M`` cannot
tell), not as a failure (four, so that a full run's ~200 checks raise a false failure
about once in a hundred runs).

Wall time on two idle cores: 87-111 s for the full run (``docs/results/toy/``), 22 s
with ``--quick``.

**Curves.** At :math:`t = 0.499`, ``phi`` starts at 0 and Adam (lr 0.01) follows each
estimator for a few thousand steps, ``seeds`` runs at once as ``seeds`` independent logits
(a stateful estimator's parameters, in the same optimizer, are shared by the runs, as they
would be across a batch). The exact gradient is the reference. Unbiased estimators should
head to :math:`p = 0`; straight-through's mean :math:`2(p - t)p(1-p)` vanishes at
:math:`p = t`, so it stalls there. Plots: ``toy_curves.png`` and ``toy_variance.png``.
"""

from ._closed_form import ClosedForm, check_moment, closed_form
from ._config import RESOLVE_Z as RESOLVE_Z
from ._config import TOLERANCE as TOLERANCE
from ._config import ToyConfig, default_config
from ._run import VARIANTS, ElementwiseMLP, run

__all__ = [
    "VARIANTS",
    "ClosedForm",
    "ElementwiseMLP",
    "ToyConfig",
    "check_moment",
    "closed_form",
    "default_config",
    "run",
]
